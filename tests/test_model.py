"""Tests of cifar10.model: variables, initialisers, the forward pass and the loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from cifar10 import model as model_lib
from cifar10.lrn import reference_lrn

SHAPES = {
    "conv1/weights": [5, 5, 3, 64], "conv1/biases": [64],
    "conv2/weights": [5, 5, 64, 64], "conv2/biases": [64],
    "local3/weights": [2304, 384], "local3/biases": [384],
    "local4/weights": [384, 192], "local4/biases": [192],
    "softmax_linear/weights": [192, 10], "softmax_linear/biases": [10],
}
STDDEV = {"conv1": 5e-2, "conv2": 5e-2, "local3": 0.04, "local4": 0.04,
          "softmax_linear": 1 / 192.0}
BIAS = {"conv1": 0.0, "conv2": 0.1, "local3": 0.1, "local4": 0.1, "softmax_linear": 0.0}
# Standard deviation of a normal truncated at +-2 standard deviations, in units of
# the untruncated one: sqrt(1 - 2 * 2 * pdf(2) / (cdf(2) - cdf(-2))).
TRUNCATED_STD_FACTOR = 0.8796


def _images(n: int, seed: int = 0) -> tf.Tensor:
    return tf.random.stateless_normal([n, 24, 24, 3], seed=(seed, 17))


def _by_name(model: model_lib.Model) -> dict[str, tf.Variable]:
    return {v.name.split(":")[0]: v for v in model.parameters()}


# Variables


def test_parameter_count():
    # conv1           5*5*3*64 + 64  =   4,800 +  64 =     4,864
    # conv2          5*5*64*64 + 64  = 102,400 +  64 =   102,464
    # local3  (6*6*64)*384 + 384     = 884,736 + 384 =   885,120
    # local4         384*192 + 192   =  73,728 + 192 =    73,920
    # softmax_linear  192*10 + 10    =   1,920 +  10 =     1,930
    #                                          total = 1,068,298
    model = model_lib.Model()
    assert sum(int(np.prod(v.shape)) for v in model.parameters()) == 1_068_298
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == 1_068_298
    assert len(model.trainable_variables) == 10


def test_variable_names_and_shapes():
    model = model_lib.Model()
    got = [(v.name.split(":")[0], v.shape.as_list()) for v in model.parameters()]
    assert got == list(SHAPES.items())
    assert all(v.dtype == tf.float32 and v.trainable for v in model.parameters())


def test_untrainable_copy():
    model = model_lib.Model(trainable=False)
    assert len(model.parameters()) == 10
    assert not any(v.trainable for v in model.parameters())
    assert model.trainable_variables == ()


def test_checkpoint_keys(tmp_path):
    model = model_lib.Model()
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "model.ckpt"))
    keys = dict(tf.train.list_variables(path))
    for name, shape in SHAPES.items():
        assert keys[f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"] == shape
    model_keys = {k for k in keys if k.startswith("model/")}
    assert model_keys == {f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE" for name in SHAPES}


def test_checkpoint_restores_into_a_fresh_model(tmp_path):
    saved = model_lib.Model(seed=1)
    path = tf.train.Checkpoint(model=saved).save(str(tmp_path / "model.ckpt"))
    restored = model_lib.Model(seed=2)
    tf.train.Checkpoint(model=restored).restore(path).assert_existing_objects_matched()
    for a, b in zip(saved.parameters(), restored.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# Initialisers


@pytest.mark.parametrize("layer", list(BIAS))
def test_bias_initialiser(layer):
    biases = _by_name(model_lib.Model())[f"{layer}/biases"].numpy()
    np.testing.assert_array_equal(biases, np.full(biases.shape, BIAS[layer], np.float32))


@pytest.mark.parametrize("layer", list(STDDEV))
def test_weights_are_truncated_normal(layer):
    weights = _by_name(model_lib.Model(seed=4))[f"{layer}/weights"].numpy().ravel()
    stddev = STDDEV[layer]
    assert np.abs(weights).max() <= 2 * stddev * (1 + 1e-6)
    assert np.abs(weights).max() > 1.8 * stddev  # the tails are there, up to the cut
    expected_std = stddev * TRUNCATED_STD_FACTOR
    assert weights.std() == pytest.approx(expected_std, rel=0.05)
    assert abs(weights.mean()) < 4 * expected_std / math.sqrt(weights.size)


def test_same_seed_same_weights():
    a, b, c = model_lib.Model(seed=7), model_lib.Model(seed=7), model_lib.Model(seed=8)
    for va, vb, vc in zip(a.parameters(), b.parameters(), c.parameters()):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
        if "weights" in va.name:
            assert not np.allclose(va.numpy(), vc.numpy())
    # Layers of one model do not share the random stream.
    w = _by_name(a)
    assert not np.allclose(w["conv2/weights"].numpy().ravel()[:100],
                           w["conv1/weights"].numpy().ravel()[:100])


# Forward pass


@pytest.mark.parametrize("n", [1, 7])
def test_logits_and_activation_shapes(n):
    model = model_lib.Model()
    images = _images(n)
    logits = model(images)
    assert logits.dtype == tf.float32 and logits.shape == (n, 10)
    acts = model.activations(images)
    assert {k: v.shape.as_list() for k, v in acts.items()} == {
        "conv1": [n, 24, 24, 64], "conv2": [n, 12, 12, 64], "local3": [n, 384],
        "local4": [n, 192], "softmax_linear": [n, 10]}
    assert all(v.dtype == tf.float32 for v in acts.values())
    np.testing.assert_array_equal(acts["softmax_linear"].numpy(), logits.numpy())
    for name in ("conv1", "conv2", "local3", "local4"):  # ReLU outputs
        assert acts[name].numpy().min() >= 0


def _lrn(x):
    return tf.nn.lrn(x, depth_radius=4, bias=1.0, alpha=0.001 / 9, beta=0.75)


def _pool(x):
    return tf.nn.max_pool2d(x, ksize=3, strides=2, padding="SAME")


def _by_hand(model, images, norm1_after_pool1=True, norm2_before_pool2=True):
    """The tutorial's forward pass written with tf.nn ops; returns (conv2, local3, logits)."""
    v = _by_name(model)

    def conv(x, scope):
        x = tf.nn.conv2d(x, v[f"{scope}/weights"], strides=1, padding="SAME")
        return tf.nn.relu(tf.nn.bias_add(x, v[f"{scope}/biases"]))

    def dense(x, scope):
        return tf.matmul(x, v[f"{scope}/weights"]) + v[f"{scope}/biases"]

    x = conv(images, "conv1")
    x = _lrn(_pool(x)) if norm1_after_pool1 else _pool(_lrn(x))
    conv2 = conv(x, "conv2")
    x = _pool(_lrn(conv2)) if norm2_before_pool2 else _lrn(_pool(conv2))
    x = tf.reshape(x, [images.shape[0], 6 * 6 * 64])
    local3 = tf.nn.relu(dense(x, "local3"))
    local4 = tf.nn.relu(dense(local3, "local4"))
    return conv2.numpy(), local3.numpy(), dense(local4, "softmax_linear").numpy()


def test_layer_order_pool1_norm1_conv2_norm2_pool2():
    """The model equals the hand-written pass, and not the passes with LRN moved.

    With the initial weights the activations are so small that LRN is almost the
    identity; the conv weights are scaled up so that the order of LRN and pooling
    changes the logits.
    """
    model = model_lib.Model(seed=3)
    for scope in ("conv1", "conv2"):
        weights = _by_name(model)[f"{scope}/weights"]
        weights.assign(weights * 30.0)
    images = _images(4, seed=1)
    acts = model.activations(images)
    conv2, local3, logits = _by_hand(model, images)
    assert np.abs(logits).max() > 0.1
    np.testing.assert_allclose(acts["conv2"].numpy(), conv2, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(acts["local3"].numpy(), local3, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(acts["softmax_linear"].numpy(), logits, atol=1e-5)
    for wrong in ({"norm1_after_pool1": False}, {"norm2_before_pool2": False}):
        _, _, wrong_logits = _by_hand(model, images, **wrong)
        assert np.abs(wrong_logits - logits).max() > 1e-2, wrong


# Loss


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def test_loss_matches_numpy():
    model = model_lib.Model(seed=5)
    model.softmax_linear.weights.assign(model.softmax_linear.weights * 50.0)  # spread logits
    labels = np.array([0, 3, 9, 3, 7, 1], np.int32)
    logits = model(_images(6, seed=2))
    parts = model.loss(logits, tf.constant(labels))
    assert isinstance(parts, model_lib.LossParts)
    assert all(t.dtype == tf.float32 and t.shape == () for t in parts)

    log_probs = _log_softmax(logits.numpy())
    assert np.ptp(log_probs) > 0.5  # not all ln(1/10): the labels matter
    xent = -log_probs[np.arange(6), labels].mean()
    v = _by_name(model)
    wd = 0.004 * (np.sum(v["local3/weights"].numpy().astype(np.float64) ** 2) / 2
                  + np.sum(v["local4/weights"].numpy().astype(np.float64) ** 2) / 2)
    assert float(parts.cross_entropy) == pytest.approx(xent, rel=1e-5)
    assert float(parts.weight_decay) == pytest.approx(wd, rel=1e-5)
    assert float(parts.total) == pytest.approx(xent + wd, rel=1e-5)
    assert float(model.weight_decay()) == pytest.approx(wd, rel=1e-5)
    # int64 labels give the same loss.
    same = model.loss(logits, tf.constant(labels, tf.int64))
    assert float(same.total) == pytest.approx(float(parts.total), rel=1e-6)


def test_the_replicas_shares_of_the_loss_sum_to_the_global_batchs_loss():
    model = model_lib.Model(seed=5)
    images, labels = _images(8, seed=3), tf.constant([0, 1, 2, 3, 4, 5, 6, 7])
    whole = model.loss(model(images), labels)
    shares = [model.loss(model(images[i:i + 4]), labels[i:i + 4], global_batch=8,
                         num_replicas=2) for i in (0, 4)]
    assert float(shares[0].total + shares[1].total) == pytest.approx(float(whole.total),
                                                                     rel=1e-5)
    assert float(shares[0].cross_entropy + shares[1].cross_entropy) == pytest.approx(
        float(whole.cross_entropy), rel=1e-5)
    assert [float(p.weight_decay) for p in shares] == [float(whole.weight_decay)] * 2


def test_loss_with_zero_weights():
    model = model_lib.Model()
    for v in model.parameters():
        v.assign(tf.zeros_like(v))
    logits = model(_images(3))
    np.testing.assert_array_equal(logits.numpy(), np.zeros((3, 10), np.float32))
    parts = model.loss(logits, tf.constant([0, 5, 9]))
    assert float(parts.cross_entropy) == pytest.approx(math.log(10), rel=1e-6)
    assert float(parts.weight_decay) == 0.0
    assert float(parts.total) == pytest.approx(math.log(10), rel=1e-6)


def test_weight_decay_only_on_local3_and_local4():
    model = model_lib.Model()
    before = float(model.weight_decay())
    for scope in ("conv1", "conv2", "softmax_linear"):
        weights = _by_name(model)[f"{scope}/weights"]
        weights.assign(weights * 10.0)
    assert float(model.weight_decay()) == pytest.approx(before, rel=1e-6)
    model.local4.weights.assign(model.local4.weights * 2.0)
    assert float(model.weight_decay()) > before


# Mixed precision


# float16 keeps 11 significant bits and bfloat16 8: each rounding moves a value by up
# to 2^-12 or 2^-9 of itself, and the logits of these images moved by 0.1% and 1.1% of
# the largest logit.
@pytest.mark.parametrize("dtype, tolerance", [(tf.float16, 0.005), (tf.bfloat16, 0.03)])
def test_mixed_precision_model(dtype, tolerance):
    images = _images(5, seed=3)
    m16 = model_lib.Model(seed=2, compute_dtype=dtype)
    m32 = model_lib.Model(seed=2)
    assert all(v.dtype == tf.float32 for v in m16.parameters())
    acts = m16.activations(images)
    for name in ("conv1", "conv2", "local3", "local4"):  # conv1 is float32 under bfloat16
        assert acts[name].dtype == (tf.float32 if (dtype, name) == (tf.bfloat16, "conv1")
                                    else dtype), name
    logits = m16(images)
    assert logits.dtype == tf.float32 and logits.shape == (5, 10)
    f32 = m32(images).numpy()
    np.testing.assert_allclose(logits.numpy(), f32, atol=tolerance * np.abs(f32).max())
    labels = tf.constant([1, 2, 3, 4, 5])
    with tf.GradientTape() as tape:
        parts = m16.loss(m16(images), labels)
    assert all(t.dtype == tf.float32 for t in parts)
    assert np.isfinite(float(parts.total))
    grads = tape.gradient(parts.total, m16.parameters())
    assert len(grads) == 10
    for v, g in zip(m16.parameters(), grads):
        assert g is not None and g.dtype == tf.float32, v.name
        assert np.all(np.isfinite(g.numpy())), v.name
    assert np.abs(grads[0].numpy()).max() > 0  # the gradient reaches conv1


def test_model_with_fast_lrn_equals_the_straightforward_model():
    images = tf.random.stateless_normal([8, 24, 24, 3], seed=(7, 8))
    labels = tf.constant([0, 1, 2, 3, 4, 5, 6, 7])
    fast = model_lib.Model(seed=3)
    reference = model_lib.Model(seed=3, lrn=reference_lrn)
    for v in fast.parameters():  # larger weights so that the LRNs matter
        v.assign(v * 20)
    for v_ref, v in zip(reference.parameters(), fast.parameters()):
        v_ref.assign(v)
    grads = []
    for m in (fast, reference):
        with tf.GradientTape() as tape:
            logits = m(images)
            loss = m.loss(logits, labels).total
        grads.append((logits.numpy(), tape.gradient(loss, m.parameters())))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-4, atol=1e-4)
    for g_fast, g_ref in zip(grads[0][1], grads[1][1]):
        # float32 sums in another order: compare to the scale of each gradient.
        scale = np.abs(g_ref.numpy()).max()
        np.testing.assert_allclose(g_fast.numpy(), g_ref.numpy(), rtol=1e-3, atol=1e-3 * scale)
