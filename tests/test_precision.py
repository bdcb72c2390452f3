"""Tests of cifar10.precision: the precision each layer computes in under --use_bf16."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cifar10 import model as model_lib
from cifar10 import precision
from cifar10.lrn import fast_lrn, reference_lrn
from cifar10.core import cpu
from cifar10.kernels.lrn import compiled_lrn
from cifar10.kernels.pool import compiled_relu_pool

# The type each stage's output is in under --use_bf16.  LRN (norm1, norm2) computes in
# float32 and hands its output on in the next stage's type (conv2's, pool2's).
BF16 = {"conv1": tf.float32, "pool1": tf.float32, "norm1": tf.bfloat16,
        "conv2": tf.bfloat16, "norm2": tf.float32, "pool2": tf.float32,
        "local3": tf.bfloat16, "local4": tf.bfloat16,
        "softmax_linear": tf.float32}  # the logits: float32 whatever the policy
# With the compiled pool1, which reads conv1's output as it comes, on a CPU with AMX:
# conv1 in bfloat16.
BF16_COMPILED_AMX = {**BF16, "conv1": tf.bfloat16}


def _images(n: int, seed: int = 0) -> tf.Tensor:
    return tf.random.stateless_normal([n, 24, 24, 3], seed=(seed, 17))


@pytest.fixture(params=[True, False], ids=["amx", "no-amx"])
def amx(request, monkeypatch):
    """The CPU has AMX, or not, whatever this one has."""
    monkeypatch.setattr(cpu, "has_amx", lambda: request.param)
    return request.param


@pytest.fixture
def with_amx(monkeypatch):
    monkeypatch.setattr(cpu, "has_amx", lambda: True)


@pytest.mark.parametrize("relu_pool", [None, compiled_relu_pool])
def test_each_layers_output_under_bf16_is_in_the_policys_precision(relu_pool, amx):
    expected = BF16_COMPILED_AMX if relu_pool and amx else BF16
    model = model_lib.Model(seed=1, compute_dtype=tf.bfloat16, relu_pool=relu_pool)
    outputs = model.stage_outputs(_images(2))
    assert list(outputs) == list(precision.STAGES)
    assert {name: t.dtype for name, t in outputs.items()} == expected
    # conv1's activation (the summaries'): with the kernel, its bias and ReLU in float32.
    conv1 = model.activations(_images(2))["conv1"]
    assert conv1.dtype == (tf.float32 if relu_pool else expected["conv1"])
    assert all(v.dtype == tf.float32 for v in model.parameters())  # checkpoints stay float32


@pytest.mark.parametrize("lrn", [fast_lrn, compiled_lrn])
def test_lrn_under_bf16_computes_in_float32_and_rounds_once_to_the_next_stages_type(lrn):
    model = model_lib.Model(seed=1, compute_dtype=tf.bfloat16, lrn=lrn)
    outputs = model.stage_outputs(_images(2))
    for name, before, after in (("norm1", "pool1", tf.bfloat16),
                                ("norm2", "conv2", tf.float32)):
        expected = tf.cast(reference_lrn(tf.cast(outputs[before], tf.float32)), after)
        assert outputs[name].dtype == after
        got, want = (np.asarray(tf.cast(t, tf.float32)) for t in (outputs[name], expected))
        if after == tf.bfloat16:
            # float32 arithmetic rounded once: equal but where the implementations'
            # float32 roundings fall either side of a bfloat16 rounding boundary.
            assert np.mean(got == want) > 0.99, name
        np.testing.assert_allclose(got, want, rtol=1e-2 if after == tf.bfloat16 else 1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
def test_float32_and_float16_run_every_layer_in_their_own_type(dtype):
    outputs = model_lib.Model(seed=1, compute_dtype=dtype).stage_outputs(_images(2))
    assert [t.dtype for t in outputs.values()] == [dtype] * 8 + [tf.float32]


def test_the_policy_gives_a_reason_for_every_layer_it_keeps_in_float32(amx):
    dtypes = precision.stage_dtypes(tf.bfloat16)
    in_float32 = {name for name, dtype in dtypes.items() if dtype == tf.float32}
    assert in_float32 == set(precision.BFLOAT16_IN_FLOAT32) == {"conv1", "pool1", "norm1",
                                                                 "norm2", "pool2"}
    assert all(reason.strip() for reason in precision.BFLOAT16_IN_FLOAT32.values())
    with_kernel = precision.stage_dtypes(tf.bfloat16, relu_pool=True)
    assert with_kernel == {**dtypes, "conv1": tf.bfloat16 if amx else tf.float32}


def _loss_and_gradients(model, images, labels):
    with tf.GradientTape() as tape:
        loss = model.loss(model(images), labels).total
    return float(loss), tape.gradient(loss, model.parameters())


@pytest.mark.parametrize("relu_pool", [None, compiled_relu_pool])
def test_a_bfloat16_step_agrees_with_a_float32_step_from_the_same_weights(relu_pool, amx):
    # bfloat16 keeps 8 significant bits: each rounding moves a value by up to 2^-9 of
    # itself. On these images the loss moved by under 1e-6 of itself; the gradients,
    # small at initialisation and summed over many rounded products, moved by 0.3%
    # (softmax_linear) to 15% (conv1, conv2) of their norm, in directions at cosine
    # 0.988 or more to float32's. A layer in a type that cannot hold its values
    # (a float16 sum of squares overflows) or a wrong gradient is far outside this.
    images, labels = _images(16, seed=4), tf.range(16) % 10
    loss32, grads32 = _loss_and_gradients(model_lib.Model(seed=3), images, labels)
    model16 = model_lib.Model(seed=3, compute_dtype=tf.bfloat16, relu_pool=relu_pool)
    loss16, grads16 = _loss_and_gradients(model16, images, labels)
    assert loss16 == pytest.approx(loss32, rel=1e-3)
    for g16, g32 in zip(grads16, grads32):
        assert g16.dtype == tf.float32
        a, b = g16.numpy().ravel(), g32.numpy().ravel()
        assert np.linalg.norm(a - b) < 0.25 * np.linalg.norm(b)
        assert a @ b > 0.97 * np.linalg.norm(a) * np.linalg.norm(b)


def _overlapping_pool_gradient(model):
    """pool1's gradient at a value that is the maximum of four overlapping windows.

    The input is 0 but 1 at (row 2, column 2), which the 3x3, stride-2 windows at
    output (0..1, 0..1) share; the gradient arriving from norm1 is 1 at output
    (0, 0) and 1/256 at the three others: 1 + 3/256 = 1.01171875 in float32, which
    bfloat16 (8 significant bits) cannot add up in that order: 1 + 1/256 rounds
    back to 1, three times.
    """
    pool = dict(model.stages())["pool1"]
    x = np.zeros([1, 24, 24, 64], np.float32)
    x[0, 2, 2, :] = 1.0
    upstream = np.zeros([1, 12, 12, 64], np.float32)
    upstream[0, :2, :2, :] = 1 / 256
    upstream[0, 0, 0, :] = 1.0
    x = tf.constant(x, model.stage_dtypes["conv1"])  # as conv1 hands it on
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = pool(x)
    return tape.gradient(y, x, output_gradients=tf.cast(upstream, y.dtype))


def test_the_pooling_gradient_under_bf16_adds_up_where_windows_overlap():
    grad = _overlapping_pool_gradient(model_lib.Model(compute_dtype=tf.bfloat16))
    assert grad.dtype == tf.float32  # conv1's type under --use_bf16
    np.testing.assert_array_equal(grad.numpy()[0, 2, 2], np.full(64, 1 + 3 / 256, np.float32))
    assert np.count_nonzero(grad.numpy()) == 64  # nothing else moved
    exact = _overlapping_pool_gradient(model_lib.Model())
    np.testing.assert_array_equal(grad.numpy(), exact.numpy())


def test_the_compiled_pool1_under_bf16_adds_up_in_float32_and_rounds_once_for_conv1(
        with_amx):
    # With AMX conv1 runs in bfloat16 before the compiled pool1: the gradient it
    # receives is bfloat16, the float32 sum rounded once: 1.01171875 lies halfway
    # between 1.0078125 and 1.015625, and rounds to the even one, not to bfloat16's 1.0.
    grad = _overlapping_pool_gradient(model_lib.Model(compute_dtype=tf.bfloat16,
                                                      relu_pool=compiled_relu_pool))
    assert grad.dtype == tf.bfloat16
    got = np.asarray(tf.cast(grad, tf.float32))
    np.testing.assert_array_equal(got[0, 2, 2], np.full(64, 1.015625, np.float32))
    assert np.count_nonzero(got) == 64
    exact = _overlapping_pool_gradient(model_lib.Model())
    np.testing.assert_array_equal(grad, tf.cast(exact, tf.bfloat16))


def test_the_compiled_pool1_without_amx_gives_float32_conv1_the_exact_gradient(monkeypatch):
    monkeypatch.setattr(cpu, "has_amx", lambda: False)
    grad = _overlapping_pool_gradient(model_lib.Model(compute_dtype=tf.bfloat16,
                                                      relu_pool=compiled_relu_pool))
    assert grad.dtype == tf.float32
    np.testing.assert_array_equal(grad, _overlapping_pool_gradient(model_lib.Model()))


def test_bfloat16_pooling_would_lose_the_overlapping_contributions(monkeypatch):
    # Why pool1 and pool2 stay float32: the same gradient in bfloat16 gives 1.0.
    monkeypatch.delitem(precision.BFLOAT16_IN_FLOAT32, "pool1")
    grad = _overlapping_pool_gradient(model_lib.Model(compute_dtype=tf.bfloat16))
    assert float(grad[0, 2, 2, 0]) == 1.0
