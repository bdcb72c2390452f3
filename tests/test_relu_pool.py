"""The compiled kernel of conv1's bias and ReLU with pool1 (cifar10.kernels.pool): the
same function as TensorFlow's ops, and the model with it the same as without."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import model_pairs

from cifar10.core import cpu
from cifar10.kernels.lrn import compiled_lrn
from cifar10.kernels.pool import compiled_relu_pool


def tf_relu_pool(z, bias, dtype=None):
    """What the kernel computes, from TensorFlow's ops, in float32."""
    y = tf.nn.max_pool2d(tf.nn.relu(tf.cast(z, tf.float32) + bias), 3, 2, "SAME")
    return tf.cast(y, dtype or z.dtype)


def values_and_gradients(function, z, bias, dtype=None):
    with tf.GradientTape() as tape:
        tape.watch([z, bias])
        y = function(z, bias, dtype)
        # A weighted sum, so that every output's gradient differs.
        weights = tf.cos(tf.range(tf.size(y), dtype=tf.float32))
        loss = tf.reduce_sum(tf.reshape(tf.cast(y, tf.float32), [-1]) * weights)
    dz, dbias = tape.gradient(loss, [z, bias])
    return y, dz, dbias


@pytest.mark.parametrize("shape", [[4, 24, 24, 64], [3, 7, 5, 3], [2, 6, 6, 100],
                                   [2, 1, 1, 1]])
def test_the_kernel_computes_tensorflows_bias_relu_and_max_pool(shape):
    # conv1's shape; odd sizes (SAME pads the last row and column) and fewer channels
    # than a vector; a depth of whole vectors and a rest; a single value.
    z = tf.random.stateless_normal(shape, seed=(1, len(shape)))
    bias = 0.3 * tf.random.stateless_normal(shape[-1:], seed=(2, 3))
    y, dz, dbias = values_and_gradients(compiled_relu_pool, z, bias)
    y_ref, dz_ref, dbias_ref = values_and_gradients(tf_relu_pool, z, bias)
    assert y.shape == [shape[0], (shape[1] + 1) // 2, (shape[2] + 1) // 2, shape[3]]
    assert y.dtype == dz.dtype == dbias.dtype == tf.float32
    # The same values to the bit: adding the bias after the maximum keeps its order.
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(dz, dz_ref)  # each input's one to four gradients
    # Sums of up to 576 gradients of about 1, added in another order.
    np.testing.assert_allclose(dbias, dbias_ref, rtol=1e-5, atol=5e-5)
    assert np.count_nonzero(y) > 0


def test_ties_send_the_gradient_to_the_first_maximum_as_tensorflow_does():
    z = np.zeros([1, 6, 6, 16], np.float32)
    z[0, :3, :3] = 2.0  # nine equal maxima in the first window
    z[0, 4, 4] = z[0, 4, 5] = 5.0  # two in the next row's
    z = tf.constant(z)
    bias = tf.zeros([16])
    _, dz, _ = values_and_gradients(compiled_relu_pool, z, bias)
    _, dz_ref, _ = values_and_gradients(tf_relu_pool, z, bias)
    np.testing.assert_array_equal(dz, dz_ref)
    assert np.argwhere(dz.numpy()[0, :, :, 0]).tolist() == [[0, 0], [0, 2], [2, 0], [4, 4]]


def test_where_the_relu_gives_zero_no_gradient_flows_to_z_or_the_bias():
    z = tf.fill([1, 4, 4, 16], -1.0)
    bias = tf.concat([tf.fill([8], 1.0), tf.fill([8], 2.0)], 0)  # -1 + 1 is exactly 0
    y, dz, dbias = values_and_gradients(compiled_relu_pool, z, bias)
    assert np.all(y[..., :8] == 0) and np.all(y[..., 8:] == 1)
    assert np.all(dz[..., :8] == 0) and np.all(dbias[:8] == 0)
    assert np.count_nonzero(dz[..., 8:]) == 4 * 8 and np.all(dbias[8:] != 0)


@pytest.mark.parametrize("dtypes", [(tf.bfloat16, tf.float32), (tf.bfloat16, tf.bfloat16),
                                    (tf.float32, tf.bfloat16), (tf.float16, tf.float16)])
def test_the_kernel_reads_and_writes_the_types_it_is_given(dtypes):
    # Under --use_bf16 conv1 hands its bfloat16 output on as it is: the kernel pools it
    # and adds the bias in float32, and gives conv1 a bfloat16 gradient, the float32
    # sum rounded once.
    in_dtype, out_dtype = dtypes
    z = tf.cast(tf.random.stateless_normal([2, 8, 8, 64], seed=(5, 6)), in_dtype)
    bias = 0.3 * tf.random.stateless_normal([64], seed=(7, 8))
    y, dz, dbias = values_and_gradients(compiled_relu_pool, z, bias, out_dtype)
    y_ref, dz_ref, dbias_ref = values_and_gradients(tf_relu_pool, tf.cast(z, tf.float32),
                                                    bias, tf.float32)
    assert (y.dtype, dz.dtype, dbias.dtype) == (out_dtype, in_dtype, tf.float32)
    np.testing.assert_array_equal(y, tf.cast(y_ref, out_dtype))
    if out_dtype == tf.float32:  # the same gradient arrives: the same sums, rounded once
        np.testing.assert_array_equal(dz, tf.cast(dz_ref, in_dtype))
        np.testing.assert_allclose(dbias, dbias_ref, rtol=1e-5, atol=5e-5)


def test_the_op_says_what_it_takes():
    with pytest.raises(tf.errors.InvalidArgumentError, match="one bias per channel"):
        compiled_relu_pool(tf.ones([1, 4, 4, 8]), tf.ones([7]))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"z must be \[batch, rows, columns, channels\], at least one "
                             r"channel and under 2\^31 values an image"):
        compiled_relu_pool(tf.ones([1, 2, 2, 0]), tf.ones([0]))


def test_a_nan_is_passed_over_wherever_it_is_in_its_window():
    z = np.ones([1, 2, 2, 1], np.float32)
    for place in ((0, 0), (1, 1)):  # the window's first value, and its last
        z_nan = z.copy()
        z_nan[0, place[0], place[1], 0] = np.nan
        y, dz, _ = values_and_gradients(compiled_relu_pool, tf.constant(z_nan), tf.zeros([1]))
        assert float(y[0, 0, 0, 0]) == 1.0 and float(tf.reduce_sum(dz)) != 0.0


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_a_model_with_the_kernels_computes_the_model_without_them(dtype, monkeypatch):
    monkeypatch.setattr(cpu, "has_amx", lambda: True)  # conv1 in bfloat16 with the kernel
    ops, kernel = (model_pairs.run(compute_dtype=dtype, lrn=compiled_lrn, relu_pool=relu_pool)
                   for relu_pool in (None, compiled_relu_pool))
    if dtype == tf.float32:  # the same function, to float32's rounding
        model_pairs.assert_same_function(kernel, ops, "conv1")  # the summaries' to the bit
    else:  # conv1 in bfloat16 with the kernel, float32 without: bfloat16's tolerance
        assert kernel.activations["conv1"].dtype == ops.activations["conv1"].dtype == tf.float32
        model_pairs.assert_bfloat16_agreement(kernel, ops)
