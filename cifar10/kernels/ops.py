"""The compiled ops (``load``): one library of this package's C++ kernels, built for
this machine on first use (``build``) and loaded once per process.

The library holds Cifar10Lrn / Cifar10LrnGrad and Cifar10BiasReluLrn /
Cifar10BiasReluLrnGrad (``lrn_op.cc``, ``lrn_rows.cc``), and Cifar10BiasReluPool /
Cifar10BiasReluPoolGrad (``pool_op.cc``, ``pool_rows.cc``).
"""

from __future__ import annotations

import threading
from typing import Callable

import tensorflow as tf

from cifar10.core.errors import first_line
from cifar10.kernels import build

NAME = "cifar10_kernels"
NATIVE_SOURCES = ["lrn_rows.cc", "pool_rows.cc"]  # no TensorFlow header: -march=native
TF_SOURCES = ["lrn_op.cc", "pool_op.cc"]

# The types the kernels read and write themselves; others are cast to and from float32.
NATIVE_TYPES = (tf.float32, tf.bfloat16)

_loaded: dict[str, object] = {}  # 'ops' or 'error': this process's one attempt
_loading = threading.Lock()


@tf.autograph.experimental.do_not_convert  # called as the ops' functions are traced
def load():
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
    path = None
    try:
        path = build.library(NAME, NATIVE_SOURCES, TF_SOURCES)
        _loaded["ops"] = tf.load_op_library(str(path))
    except build.KernelBuildError as error:
        _loaded["error"] = error
    except (tf.errors.OpError, OSError) as error:
        _loaded["error"] = build.KernelBuildError(
            f"cannot load the compiled kernels {path} ({first_line(error)}); delete the "
            "file to have it built again")


def in_native_types(kernel: Callable[..., tf.Tensor], x: tf.Tensor, dtype: tf.DType | None,
                    *args) -> tf.Tensor:
    """``kernel(x, *args, out)``, its output in ``dtype`` (default: x's).

    x is handed over as it is where the kernels read its type, else cast to float32;
    ``out`` is ``dtype`` where the kernels write it, else float32, cast afterwards.
    """
    dtype = tf.as_dtype(dtype or x.dtype)
    inner = x if x.dtype in NATIVE_TYPES else tf.cast(x, tf.float32)
    y = kernel(inner, *args, dtype if dtype in NATIVE_TYPES else tf.float32)
    return tf.cast(y, dtype)
