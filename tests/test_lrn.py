"""cifar10.lrn: the tutorial's LRN from TensorFlow's ops (the compiled kernel's tests
are in test_kernels.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cifar10.lrn import fast_lrn, reference_lrn


@pytest.mark.parametrize("scale", [0.1, 3.0, 100.0])
def test_fast_lrn_equals_tf_nn_lrn_in_values_and_gradients(scale):
    x = tf.random.stateless_normal([4, 12, 12, 64], seed=(1, 2)) * scale
    upstream = tf.random.stateless_normal([4, 12, 12, 64], seed=(3, 4))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ref = reference_lrn(x)
        fast = fast_lrn(x)
        ref_loss = tf.reduce_sum(ref * upstream)
        fast_loss = tf.reduce_sum(fast * upstream)
    np.testing.assert_allclose(fast.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(tape.gradient(fast_loss, x).numpy(),
                               tape.gradient(ref_loss, x).numpy(), rtol=1e-4, atol=1e-5)
    # The normalisation really acts at this scale (not just the identity).
    assert scale < 1 or np.abs(ref.numpy() - x.numpy()).max() > 0.01 * scale


def test_fast_lrn_keeps_the_input_dtype():
    x = tf.random.stateless_normal([2, 6, 6, 64], seed=(5, 6))
    out = fast_lrn(tf.cast(x, tf.float16))
    assert out.dtype == tf.float16
    np.testing.assert_allclose(out.numpy(), reference_lrn(x).numpy(), atol=2e-3)
