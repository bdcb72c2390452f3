"""The tutorial's local response normalization from TensorFlow's ops: ``reference_lrn``
(``tf.nn.lrn``) and ``fast_lrn``, the model's where the compiled kernels are not."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from cifar10.core.config import LRN_ALPHA, LRN_BETA, LRN_BIAS, LRN_DEPTH_RADIUS


def reference_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """``tf.nn.lrn`` with the tutorial's settings in float32; the output in ``dtype``
    (default: the input's)."""
    y = tf.nn.lrn(tf.cast(x, tf.float32), depth_radius=LRN_DEPTH_RADIUS, bias=LRN_BIAS,
                  alpha=LRN_ALPHA, beta=LRN_BETA)
    return tf.cast(y, dtype or x.dtype)


def fast_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """``reference_lrn`` from ops that oneDNN runs fast: the window's sum of squares is
    one banded matmul, and the gradient is written out.  In float32 whatever the input (a
    float16 sum of squares can overflow); the output in ``dtype`` (default: the input's)."""
    return tf.cast(_lrn_float32(tf.cast(x, tf.float32)), dtype or x.dtype)


def _window_sums(t: tf.Tensor, weight: float) -> tf.Tensor:
    """``weight`` times the sum of ``t`` over the channels within depth_radius of each."""
    channels = np.arange(t.shape[-1])
    band = weight * (np.abs(channels[:, None] - channels[None, :]) <= LRN_DEPTH_RADIUS)
    flat = tf.reshape(t, [-1, t.shape[-1]])
    return tf.reshape(tf.matmul(flat, band.astype(np.float32)), tf.shape(t))


@tf.custom_gradient
def _lrn_float32(x: tf.Tensor):
    assert LRN_BETA == 0.75  # the rsqrt form below is d ** -0.75
    # x * x, not tf.square: TFLite has no int8 SQUARE, so int8 exports would keep LRN float.
    d = LRN_BIAS + _window_sums(x * x, LRN_ALPHA)
    scale = tf.math.rsqrt(d) * tf.math.rsqrt(tf.sqrt(d))  # d ** -beta
    y = x * scale

    def grad(upstream):
        # y_i = x_i d_i^-b, d_i = bias + alpha sum_{j in window(i)} x_j^2, so
        # dL/dx_j = g_j d_j^-b - 2 alpha b x_j sum_{i in window(j)} g_i x_i d_i^(-b-1)
        # (the window is symmetric: the same band sums both ways); x_i d_i^(-b-1) = y_i / d_i.
        inner = _window_sums(upstream * y / d, 2.0 * LRN_ALPHA * LRN_BETA)
        return upstream * scale - x * inner

    return y, grad
