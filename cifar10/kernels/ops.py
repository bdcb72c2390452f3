"""The compiled ops (``load``): one library of this package's C++ kernels, built for
this machine on first use (``build``) and loaded once per process.

The library holds Cifar10Lrn / Cifar10LrnGrad (``lrn_op.cc``, ``lrn_rows.cc``) and
Cifar10BiasReluPool / Cifar10BiasReluPoolGrad (``pool_op.cc``, ``pool_rows.cc``).
"""

from __future__ import annotations

import threading

import tensorflow as tf

from cifar10.core.errors import first_line
from cifar10.kernels import build

NAME = "cifar10_kernels"
NATIVE_SOURCES = ["lrn_rows.cc", "pool_rows.cc"]  # no TensorFlow header: -march=native
TF_SOURCES = ["lrn_op.cc", "pool_op.cc"]

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
