"""LRN as one compiled CPU kernel each way (``compiled_lrn``), and with the bias and
ReLU of the convolution before it (``compiled_bias_relu_lrn``).

``cifar10.lrn.fast_lrn`` computes LRN from TensorFlow ops: a square, a banded
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


def compiled_bias_relu_lrn(z: tf.Tensor, bias: tf.Tensor, dtype: tf.DType | None = None
                           ) -> tf.Tensor:
    """``compiled_lrn(relu(z + bias))``, z a convolution's output before its bias, CPU
    only: the bias added and the ReLU taken in float32 as the kernel reads z, the
    ReLU's gradient and the bias gradient (summed over the batch in a fixed order) in
    the same pass as LRN's gradient.  Where the convolution runs in bfloat16, no
    bfloat16 add, ReLU, ReLU gradient or bias sum is left to TensorFlow's slower
    bfloat16 kernels.

    Args:
      z: [batch, ..., channels] float32 or bfloat16 (float16 is cast to float32).
      bias: [channels], added in float32.
      dtype: the output's type (default: z's).
    """
    return ops.in_native_types(_bias_relu_lrn, z, dtype, tf.cast(bias, tf.float32))


def _bias_relu_lrn(z: tf.Tensor, bias: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    assert LRN_BETA == 0.75  # the kernels compute d ** -0.75
    module = ops.load()

    @tf.custom_gradient
    def bias_relu_lrn(z, bias):
        def grad(upstream):
            return tuple(module.cifar10_bias_relu_lrn_grad(z, bias, upstream, **_ATTRS))

        return module.cifar10_bias_relu_lrn(z, bias, Tout=dtype, **_ATTRS), grad

    return bias_relu_lrn(z, bias)
