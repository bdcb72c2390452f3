"""LRN as one compiled CPU kernel each way (``compiled_lrn``), and the choice of LRN
for a training run (``choose``).

``cifar10.model.fast_lrn`` computes LRN from TensorFlow ops: a square, a banded
matmul, two square roots, products and quotients, each a pass over the tensor,
and as many again for the gradient.  The kernels of ``lrn_rows.cc`` compute the
same function in one pass each way, in float32 whatever the input's type (the
same rule as ``fast_lrn``), and under ``--use_bf16`` read and write bfloat16
themselves, where TensorFlow's casts took a pass each (about 1 ms a cast).  Measured on a 2-core Xeon with AMX, forward and
backward of norm1 took 3.4 instead of 6.2 ms (docs/performance.md).

The kernels exist for CPUs only, and XLA cannot compile them: ``choose`` takes
them where a run's replicas are CPUs and ``--xla`` is off, and TensorFlow's ops
otherwise, or where the kernel cannot be built (no C++ compiler).  Exported
models and the evaluator use TensorFlow's ops, so that a SavedModel loads
anywhere; the two agree to float32 rounding (tests/test_kernels.py).
"""

from __future__ import annotations

import threading
from typing import Callable, NamedTuple, Sequence

import tensorflow as tf

from cifar10.core.config import LRN_ALPHA, LRN_BETA, LRN_BIAS, LRN_DEPTH_RADIUS, LRN_KERNELS
from cifar10.core.errors import Cifar10Error, first_line
from cifar10.kernels import build
from cifar10.model import fast_lrn

_ATTRS = dict(depth_radius=LRN_DEPTH_RADIUS, bias=LRN_BIAS, alpha=LRN_ALPHA)
_loaded: dict[str, object] = {}  # 'ops' or 'error': this process's one attempt
_loading = threading.Lock()


class LrnChoice(NamedTuple):
    """The LRN a run uses: the function, 'compiled' or 'tensorflow', and why."""
    function: Callable[..., tf.Tensor]  # (x, dtype=None) -> LRN(x)
    kernel: str
    reason: str


def load_ops():
    """The compiled ops' module, built on first use (once per process).

    Raises:
      KernelBuildError: it cannot be built or loaded here.
    """
    with _loading:  # MirroredStrategy traces its replicas in threads of their own
        if "ops" not in _loaded and "error" not in _loaded:
            _load()
    if "error" in _loaded:
        raise _loaded["error"]
    return _loaded["ops"]


def _load() -> None:
    assert LRN_BETA == 0.75  # the kernels compute d ** -0.75
    path = None
    try:
        path = build.library("cifar10_lrn", ["lrn_rows.cc"], ["lrn_op.cc"])
        _loaded["ops"] = tf.load_op_library(str(path))
    except build.KernelBuildError as error:
        _loaded["error"] = error
    except (tf.errors.OpError, OSError) as error:
        _loaded["error"] = build.KernelBuildError(
            f"cannot load the compiled LRN kernel {path} ({first_line(error)}); delete it "
            "to have it built again")


def compiled_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """The tutorial's LRN (as ``fast_lrn``) from the compiled kernels, CPU only:
    computed in float32, the output in ``dtype`` (default: the input's).

    float32 and bfloat16 inputs and outputs are read and written by the kernels
    themselves (no cast of their own); float16 is cast to and from float32.
    """
    dtype = tf.as_dtype(dtype or x.dtype)
    native = (tf.float32, tf.bfloat16)
    inner = x if x.dtype in native else tf.cast(x, tf.float32)
    y = _lrn(inner, dtype if dtype in native else tf.float32)
    return tf.cast(y, dtype)


def _lrn(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    ops = load_ops()

    @tf.custom_gradient
    def lrn(x):
        def grad(upstream):
            return ops.cifar10_lrn_grad(x, upstream, **_ATTRS)

        return ops.cifar10_lrn(x, Tout=dtype, **_ATTRS), grad

    return lrn(x)


def choose(kernel: str, device_names: Sequence[str], xla: bool) -> LrnChoice:
    """The LRN a training run uses.

    Args:
      kernel: 'auto' (the compiled kernel where it can run and be built, else
        TensorFlow's ops), 'compiled' (the kernel, or an error) or 'tensorflow'.
      device_names: the replicas' devices (a strategy's ``extended.worker_devices``).
      xla: the replicas' passes are compiled with XLA.

    Raises:
      Cifar10Error: 'compiled' where it cannot run or be built; an unknown choice.
    """
    if kernel not in LRN_KERNELS:
        raise Cifar10Error(f"--lrn_kernel must be one of {', '.join(LRN_KERNELS)}, got {kernel!r}")
    if kernel == "tensorflow":
        return LrnChoice(fast_lrn, "tensorflow", "--lrn_kernel=tensorflow")
    on_gpu = any(tf.DeviceSpec.from_string(name).device_type == "GPU" for name in device_names)
    unfit = ("the replicas are GPUs and the kernel is for CPUs" if on_gpu else
             "XLA cannot compile the kernel (--xla)" if xla else "")
    if unfit and kernel == "compiled":
        raise Cifar10Error(f"--lrn_kernel=compiled cannot run here: {unfit}; "
                           "use --lrn_kernel=auto")
    if unfit:
        return LrnChoice(fast_lrn, "tensorflow", unfit)
    try:
        load_ops()
    except build.KernelBuildError as error:
        if kernel == "compiled":
            raise Cifar10Error(f"--lrn_kernel=compiled: {error}; or use --lrn_kernel=auto, "
                               "which falls back to TensorFlow's ops") from None
        return LrnChoice(fast_lrn, "tensorflow", str(error))
    return LrnChoice(compiled_lrn, "compiled", "CPU replicas")
