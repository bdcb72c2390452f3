"""The tutorial's local response normalization (norm1, norm2) from TensorFlow's ops.

``reference_lrn`` is ``tf.nn.lrn`` with the tutorial's settings; ``fast_lrn``
computes the same function from ops that run faster on a CPU, and is what the
model uses where the compiled kernels (``cifar10.kernels.lrn``) are not: on GPUs,
under XLA, in exported models and in the evaluator.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from cifar10.core.config import LRN_ALPHA, LRN_BETA, LRN_BIAS, LRN_DEPTH_RADIUS


def reference_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """The tutorial's LRN with ``tf.nn.lrn`` (depth_radius 4, bias 1, alpha 0.001/9, beta
    0.75), in float32; the output in ``dtype`` (default: the input's)."""
    y = tf.nn.lrn(tf.cast(x, tf.float32), depth_radius=LRN_DEPTH_RADIUS, bias=LRN_BIAS,
                  alpha=LRN_ALPHA, beta=LRN_BETA)
    return tf.cast(y, dtype or x.dtype)


def _window_matrix(depth: int) -> np.ndarray:
    # band[i, j] = 1 when channel i is within depth_radius of channel j.
    channels = np.arange(depth)
    return (np.abs(channels[:, None] - channels[None, :]) <= LRN_DEPTH_RADIUS).astype(np.float32)


def fast_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """The same function as ``reference_lrn``, built from ops that oneDNN runs fast.

    ``tf.nn.lrn`` with depth_radius 4 falls back to Eigen's kernel on CPU (oneDNN's
    rewrite takes depth_radius 2 only), and its forward + backward cost about 3x
    this formulation: the channel-window sum of squares is one matmul with a
    banded matrix, d^-0.75 is rsqrt(d) * rsqrt(sqrt(d)), and the gradient is
    written out (below) so that it takes a few passes over the tensor instead of
    the dozen that automatic differentiation of the forward ops would.
    Computed in float32 whatever the input dtype (a float16 sum of squares can
    overflow); the output in ``dtype`` (default: the input's).
    """
    return tf.cast(_lrn_float32(tf.cast(x, tf.float32)), dtype or x.dtype)


def _window_sums(t: tf.Tensor, weight: float) -> tf.Tensor:
    """``weight`` times the sum of ``t`` over the channels within depth_radius of each channel."""
    depth = t.shape[-1]
    flat = tf.reshape(t, [-1, depth])
    band = (weight * _window_matrix(depth)).astype(np.float32)
    return tf.reshape(tf.matmul(flat, band), tf.shape(t))


@tf.custom_gradient
def _lrn_float32(x: tf.Tensor):
    assert LRN_BETA == 0.75  # the rsqrt form below is d ** -0.75
    # The constant factors ride in the banded matrix: one pass less over the tensor.
    d = LRN_BIAS + _window_sums(tf.square(x), LRN_ALPHA)
    scale = tf.math.rsqrt(d) * tf.math.rsqrt(tf.sqrt(d))  # d ** -beta
    y = x * scale

    def grad(upstream):
        # y_i = x_i * d_i^-b with d_i = bias + alpha * sum_{j in window(i)} x_j^2, so
        # dL/dx_j = g_j d_j^-b - 2 alpha b x_j sum_{i in window(j)} g_i x_i d_i^(-b-1)
        # (the window is symmetric, so the same banded matrix sums both ways), and
        # x_i d_i^(-b-1) = y_i / d_i.
        inner = _window_sums(upstream * y / d, 2.0 * LRN_ALPHA * LRN_BETA)
        return upstream * scale - x * inner

    return y, grad
