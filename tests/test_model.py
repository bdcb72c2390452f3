"""cifar10.model: variables, initialisers, the forward pass, the loss, each layer's
precision (with the compiled kernels: test_kernels.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from cifar10 import model as model_lib
from cifar10.core import machine
from cifar10.kernels.layers import compiled_lrn, compiled_relu_pool
from cifar10.lrn import fast_lrn, reference_lrn

SHAPES = {
    "conv1/weights": [5, 5, 3, 64], "conv1/biases": [64],
    "conv2/weights": [5, 5, 64, 64], "conv2/biases": [64],
    "local3/weights": [2304, 384], "local3/biases": [384],
    "local4/weights": [384, 192], "local4/biases": [192],
    "softmax_linear/weights": [192, 10], "softmax_linear/biases": [10],
}
# (stddev of the weights' truncated normal, initial bias) of each layer.
INIT = {"conv1": (5e-2, 0.0), "conv2": (5e-2, 0.1), "local3": (0.04, 0.1),
        "local4": (0.04, 0.1), "softmax_linear": (1 / 192.0, 0.0)}
# Standard deviation of a normal truncated at +-2 standard deviations, in units of
# the untruncated one: sqrt(1 - 2 * 2 * pdf(2) / (cdf(2) - cdf(-2))).
TRUNCATED_STD_FACTOR = 0.8796
F32, BF16 = tf.float32, tf.bfloat16
# Each stage's output type under --use_bf16 (LRN hands on in the next stage's type).
BF16_STAGES = {"conv1": F32, "pool1": F32, "norm1": BF16, "conv2": BF16, "norm2": F32,
               "pool2": F32, "local3": BF16, "local4": BF16, "softmax_linear": F32}


def _images(n: int, seed: int = 0) -> tf.Tensor:
    return tf.random.stateless_normal([n, 24, 24, 3], seed=(seed, 17))


def _by_name(model: model_lib.Model) -> dict[str, tf.Variable]:
    return {v.name.split(":")[0]: v for v in model.parameters()}


@pytest.mark.parametrize("trainable", [True, False])
def test_variables_names_shapes_and_count(trainable):
    model = model_lib.Model(trainable=trainable)
    got = [(v.name.split(":")[0], v.shape.as_list()) for v in model.parameters()]
    assert got == list(SHAPES.items())
    assert sum(int(np.prod(v.shape)) for v in model.parameters()) == 1_068_298
    assert all(v.dtype == tf.float32 and v.trainable == trainable for v in model.parameters())
    assert len(model.trainable_variables) == (10 if trainable else 0)


def test_checkpoint_keys_and_restore_into_a_fresh_model(tmp_path):
    saved = model_lib.Model(seed=1)
    path = tf.train.Checkpoint(model=saved).save(str(tmp_path / "model.ckpt"))
    keys = {k: shape for k, shape in tf.train.list_variables(path) if k.startswith("model/")}
    assert keys == {f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE": shape
                    for name, shape in SHAPES.items()}
    restored = model_lib.Model(seed=2)
    tf.train.Checkpoint(model=restored).restore(path).assert_existing_objects_matched()
    for a, b in zip(saved.parameters(), restored.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("layer", list(INIT))
def test_initialisers(layer):
    stddev, bias = INIT[layer]
    variables = _by_name(model_lib.Model(seed=4))
    biases = variables[f"{layer}/biases"].numpy()
    np.testing.assert_array_equal(biases, np.full(biases.shape, bias, np.float32))
    weights = variables[f"{layer}/weights"].numpy().ravel()
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
    np.testing.assert_array_equal(acts["softmax_linear"].numpy(), logits.numpy())
    for name in ("conv1", "conv2", "local3", "local4"):  # ReLU outputs
        assert acts[name].dtype == tf.float32 and acts[name].numpy().min() >= 0


def _by_hand(model, images, norm1_after_pool1=True, norm2_before_pool2=True):
    """The tutorial's forward pass written with tf.nn ops; returns (conv2, local3, logits)."""
    v = _by_name(model)

    def conv(x, scope):
        x = tf.nn.conv2d(x, v[f"{scope}/weights"], strides=1, padding="SAME")
        return tf.nn.relu(tf.nn.bias_add(x, v[f"{scope}/biases"]))

    def dense(x, scope):
        return tf.matmul(x, v[f"{scope}/weights"]) + v[f"{scope}/biases"]

    def pool(x):
        return tf.nn.max_pool2d(x, ksize=3, strides=2, padding="SAME")

    x = conv(images, "conv1")
    x = reference_lrn(pool(x)) if norm1_after_pool1 else pool(reference_lrn(x))
    conv2 = conv(x, "conv2")
    x = pool(reference_lrn(conv2)) if norm2_before_pool2 else reference_lrn(pool(conv2))
    local3 = tf.nn.relu(dense(tf.reshape(x, [images.shape[0], 6 * 6 * 64]), "local3"))
    local4 = tf.nn.relu(dense(local3, "local4"))
    return conv2.numpy(), local3.numpy(), dense(local4, "softmax_linear").numpy()


def test_layer_order_pool1_norm1_conv2_norm2_pool2():
    # Scaled up so that LRN is not almost the identity and the order matters.
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


def test_loss_matches_numpy_and_the_replicas_shares_sum_to_it():
    model = model_lib.Model(seed=5)
    model.softmax_linear.weights.assign(model.softmax_linear.weights * 50.0)  # spread logits
    labels = np.array([0, 3, 9, 3, 7, 1, 2, 2], np.int32)
    images = _images(8, seed=2)
    logits = model(images)
    parts = model.loss(logits, tf.constant(labels, tf.int64))
    assert all(t.dtype == tf.float32 and t.shape == () for t in parts)
    logits64 = logits.numpy().astype(np.float64)
    shifted = logits64 - logits64.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert np.ptp(log_probs) > 0.5  # not all ln(1/10): the labels matter
    xent = -log_probs[np.arange(8), labels].mean()
    # Weight decay on local3 and local4 only: 0.004 * l2_loss(w).
    v = _by_name(model)
    wd = 0.004 * sum(np.sum(v[f"{s}/weights"].numpy().astype(np.float64) ** 2) / 2
                     for s in ("local3", "local4"))
    assert float(parts.cross_entropy) == pytest.approx(xent, rel=1e-5)
    assert float(parts.weight_decay) == pytest.approx(wd, rel=1e-5)
    assert float(parts.total) == pytest.approx(xent + wd, rel=1e-5)
    shares = [model.loss(model(images[i:i + 4]), labels[i:i + 4], global_batch=8,
                         num_replicas=2) for i in (0, 4)]
    assert float(shares[0].total + shares[1].total) == pytest.approx(float(parts.total),
                                                                     rel=1e-5)
    assert [float(p.weight_decay) for p in shares] == [float(parts.weight_decay)] * 2


# (compute type, the compiled pool1 or TensorFlow's, whether the CPU has AMX)
SETTINGS = [(tf.float32, None, False), (tf.float16, None, False), (BF16, None, True),
            (BF16, compiled_relu_pool, True), (BF16, compiled_relu_pool, False)]


@pytest.mark.parametrize("dtype, relu_pool, amx", SETTINGS)
def test_each_stage_computes_in_the_policys_precision(dtype, relu_pool, amx, monkeypatch):
    monkeypatch.setattr(machine, "has_amx", lambda: amx)
    model = model_lib.Model(seed=1, compute_dtype=dtype, relu_pool=relu_pool)
    outputs = model.stage_outputs(_images(2))
    expected = dict.fromkeys(model_lib.STAGES, dtype) | {"softmax_linear": tf.float32}
    if dtype == tf.bfloat16:
        # conv1 in bfloat16 where the compiled pool1 reads it on a CPU with AMX.
        expected = BF16_STAGES | ({"conv1": BF16} if relu_pool and amx else {})
    assert {name: t.dtype for name, t in outputs.items()} == expected
    # conv1's activation (the summaries'): with the kernel, its bias and ReLU in float32.
    conv1 = model.activations(_images(2))["conv1"]
    assert conv1.dtype == (tf.float32 if relu_pool else expected["conv1"])


@pytest.mark.parametrize("lrn", [fast_lrn, compiled_lrn])
def test_lrn_under_bf16_computes_in_float32_and_rounds_once_to_the_next_stages_type(lrn):
    model = model_lib.Model(seed=1, compute_dtype=tf.bfloat16, lrn=lrn)
    outputs = model.stage_outputs(_images(2))
    for name, before, after in (("norm1", "pool1", BF16), ("norm2", "conv2", F32)):
        expected = tf.cast(reference_lrn(tf.cast(outputs[before], tf.float32)), after)
        assert outputs[name].dtype == after
        got, want = (np.asarray(tf.cast(t, tf.float32)) for t in (outputs[name], expected))
        if after == tf.bfloat16:
            # Equal but where float32 roundings fall either side of a bfloat16 one.
            assert np.mean(got == want) > 0.99, name
        np.testing.assert_allclose(got, want, rtol=1e-2 if after == BF16 else 1e-5, atol=1e-6)


def _loss_and_gradients(model, images, labels):
    with tf.GradientTape() as tape:
        loss = model.loss(model(images), labels).total
    return float(loss), tape.gradient(loss, model.parameters())


@pytest.mark.parametrize("dtype, relu_pool, amx", SETTINGS[1:])
def test_a_mixed_precision_step_agrees_with_a_float32_step(dtype, relu_pool, amx,
                                                           monkeypatch):
    monkeypatch.setattr(machine, "has_amx", lambda: amx)
    # bfloat16's gradients move by up to 15% of their norm; a layer in a type that cannot
    # hold its values, or a wrong gradient, is far outside these bounds.
    n = 4 if dtype == tf.float16 else 16  # float16 is slow on CPUs
    images, labels = _images(n, seed=4), tf.range(n) % 10
    loss32, grads32 = _loss_and_gradients(model_lib.Model(seed=3), images, labels)
    mixed = model_lib.Model(seed=3, compute_dtype=dtype, relu_pool=relu_pool)
    loss16, grads16 = _loss_and_gradients(mixed, images, labels)
    assert loss16 == pytest.approx(loss32, rel=1e-3)
    for g16, g32 in zip(grads16, grads32):
        assert g16.dtype == tf.float32
        a, b = g16.numpy().ravel(), g32.numpy().ravel()
        assert np.linalg.norm(a - b) < 0.25 * np.linalg.norm(b)
        assert a @ b > 0.97 * np.linalg.norm(a) * np.linalg.norm(b)


@pytest.mark.parametrize("relu_pool, has_amx, pool1_in_float32, dtype, value", [
    (None, True, True, F32, 1 + 3 / 256),  # why pool1 and pool2 stay float32 ...
    (None, True, False, F32, 1.0),  # ... bfloat16 pooling would lose the 3/256
    # The compiled pool1 adds up in float32; before a bfloat16 conv1 it rounds once, to even.
    (compiled_relu_pool, True, True, BF16, 1.015625),
    (compiled_relu_pool, False, True, F32, 1 + 3 / 256),
])
def test_the_pooling_gradient_under_bf16_where_windows_overlap(
        relu_pool, has_amx, pool1_in_float32, dtype, value, monkeypatch):
    monkeypatch.setattr(machine, "has_amx", lambda: has_amx)
    if not pool1_in_float32:
        monkeypatch.setattr(model_lib, "BFLOAT16_IN_FLOAT32",
                            model_lib.BFLOAT16_IN_FLOAT32 - {"pool1"})
    # pool1's gradient at the maximum of four overlapping windows, arriving 1 at one and
    # 1/256 at three: 1 + 3/256 in float32, which bfloat16 adds up to 1.0.
    model = model_lib.Model(compute_dtype=tf.bfloat16, relu_pool=relu_pool)
    x = np.zeros([1, 24, 24, 64], np.float32)
    x[0, 2, 2, :] = 1.0
    upstream = np.zeros([1, 12, 12, 64], np.float32)
    upstream[0, :2, :2, :] = 1 / 256
    upstream[0, 0, 0, :] = 1.0
    x = tf.constant(x, model.stage_dtypes["conv1"])  # as conv1 hands it on
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dict(model.stages())["pool1"](x)
    grad = tape.gradient(y, x, output_gradients=tf.cast(upstream, y.dtype))
    assert grad.dtype == dtype
    got = np.asarray(tf.cast(grad, tf.float32))
    np.testing.assert_array_equal(got[0, 2, 2], np.full(64, value, np.float32))
    assert np.count_nonzero(got) == 64  # nothing else moved
