"""LRN as one compiled CPU kernel each way (``compiled_lrn``).

``cifar10.model.fast_lrn`` computes LRN from TensorFlow ops: a square, a banded
matmul, two square roots, products and quotients, each a pass over the tensor,
and as many again for the gradient.  The kernels of ``lrn_rows.cc`` compute the
same function in one pass each way, in float32 whatever the input's type (the
same rule as ``fast_lrn``), and under ``--use_bf16`` read and write bfloat16
themselves, where TensorFlow's casts took a pass each (about 1 ms a cast).
Measured on a 2-core Xeon with AMX, forward and backward of norm1 took 2.75 ms
(3.4 before the rows went into vector registers) instead of 6.2 ms
(docs/performance.md).  ``cifar10.kernels.choice`` decides
where a run uses it.
"""

from __future__ import annotations

import tensorflow as tf

from cifar10.core.config import LRN_ALPHA, LRN_BETA, LRN_BIAS, LRN_DEPTH_RADIUS
from cifar10.kernels import ops

_ATTRS = dict(depth_radius=LRN_DEPTH_RADIUS, bias=LRN_BIAS, alpha=LRN_ALPHA)


def compiled_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """The tutorial's LRN (as ``fast_lrn``) from the compiled kernels, CPU only:
    computed in float32, the output in ``dtype`` (default: the input's).

    float32 and bfloat16 inputs and outputs are read and written by the kernels
    themselves (no cast of their own); float16 is cast to and from float32.
    """
    return ops.in_native_types(_lrn, x, dtype)


def _lrn(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    assert LRN_BETA == 0.75  # the kernels compute d ** -0.75
    module = ops.load()

    @tf.custom_gradient
    def lrn(x):
        def grad(upstream):
            return module.cifar10_lrn_grad(x, upstream, **_ATTRS)

        return module.cifar10_lrn(x, Tout=dtype, **_ATTRS), grad

    return lrn(x)
