"""The layer functions a training run uses (``choose``): the compiled kernels
(``compiled_lrn``, ``compiled_relu_pool``, ``compiled_bias_relu_lrn``) or
TensorFlow's ops.

The kernels exist for CPUs only, and XLA cannot compile them: ``choose`` takes
them where a run's replicas are CPUs and ``--xla`` is off, and TensorFlow's ops
otherwise, or where the kernels cannot be built (no C++ compiler).  Exported
models and the evaluator use TensorFlow's ops, so that a SavedModel loads
anywhere; the two agree to float32 rounding (tests/test_kernels.py).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import tensorflow as tf

from cifar10.core.config import KERNEL_CHOICES
from cifar10.core.errors import Cifar10Error
from cifar10.kernels import build, ops
from cifar10.kernels.lrn import compiled_bias_relu_lrn, compiled_lrn
from cifar10.kernels.pool import compiled_relu_pool
from cifar10.lrn import fast_lrn


class KernelChoice(NamedTuple):
    """The layer functions of a run (``cifar10.model.Model``'s ``lrn``, ``relu_pool``
    and ``relu_lrn``), 'compiled' or 'tensorflow', and why."""
    lrn: Callable[..., tf.Tensor]  # (x, dtype=None) -> LRN(x)
    relu_pool: Callable[..., tf.Tensor] | None  # (z, bias, dtype=None); None: TF's ops
    relu_lrn: Callable[..., tf.Tensor] | None  # (z, bias, dtype=None); None: TF's ops
    kernel: str
    reason: str


def tensorflow_ops(reason: str) -> KernelChoice:
    """TensorFlow's ops, for ``reason``."""
    return KernelChoice(fast_lrn, None, None, "tensorflow", reason)


def choose(kernels: str, device_names: Sequence[str], xla: bool) -> KernelChoice:
    """The layer functions a training run uses.

    Args:
      kernels: 'auto' (the compiled kernels where they can run and be built, else
        TensorFlow's ops), 'compiled' (the kernels, or an error) or 'tensorflow'.
      device_names: the replicas' devices (a strategy's ``extended.worker_devices``).
      xla: the replicas' passes are compiled with XLA.

    Raises:
      Cifar10Error: 'compiled' where they cannot run or be built; an unknown choice.
    """
    if kernels not in KERNEL_CHOICES:
        raise Cifar10Error(f"--kernels must be one of {', '.join(KERNEL_CHOICES)}, "
                           f"got {kernels!r}")
    if kernels == "tensorflow":
        return tensorflow_ops("--kernels=tensorflow")
    on_gpu = any(tf.DeviceSpec.from_string(name).device_type == "GPU" for name in device_names)
    unfit = ("the replicas are GPUs and the kernels are for CPUs" if on_gpu else
             "XLA cannot compile the kernels (--xla)" if xla else "")
    if unfit and kernels == "compiled":
        raise Cifar10Error(f"--kernels=compiled cannot run here: {unfit}; use --kernels=auto")
    if unfit:
        return tensorflow_ops(unfit)
    try:
        ops.load()
    except build.KernelBuildError as error:
        if kernels == "compiled":
            raise Cifar10Error(f"--kernels=compiled: {error}; or use --kernels=auto, "
                               "which falls back to TensorFlow's ops") from None
        return tensorflow_ops(str(error))
    return KernelChoice(compiled_lrn, compiled_relu_pool, compiled_bias_relu_lrn, "compiled",
                        "CPU replicas")
