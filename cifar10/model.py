"""The tutorial's convnet: ``Model`` (images -> logits), its loss, and the precision
each layer computes in (``stage_dtypes``).

    conv1 (5x5x3x64, ReLU) -> pool1 (3x3/2) -> norm1 (LRN)
    conv2 (5x5x64x64, ReLU) -> norm2 (LRN) -> pool2 (3x3/2)
    local3 (2304->384, ReLU) -> local4 (384->192, ReLU) -> softmax_linear (192->10)

1,068,298 parameters, named by scope as in the original (``conv1/weights``, ...).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import tensorflow as tf

from cifar10.core import machine
from cifar10.core.config import WEIGHT_DECAY
from cifar10.data import fileformat as ff
from cifar10.lrn import fast_lrn

STAGES = ("conv1", "pool1", "norm1", "conv2", "norm2", "pool2", "local3", "local4",
          "softmax_linear")

# The stages that stay float32 under bfloat16 (docs/training.md; each layer's time in
# both: scripts/benchmark.py's figure (k)): max pooling's gradient is inexact in
# bfloat16 where windows overlap, and conv1 and LRN gain nothing (conv1 does beside
# the compiled pool1 on a CPU with AMX).
BFLOAT16_IN_FLOAT32 = {"conv1", "pool1", "norm1", "norm2", "pool2"}


def stage_dtypes(compute_dtype: tf.DType, relu_pool: bool = False) -> dict[str, tf.DType]:
    """{stage: the dtype it computes in}: every stage in ``compute_dtype``, but under
    bfloat16 ``BFLOAT16_IN_FLOAT32`` (conv1 not where ``relu_pool`` follows it with AMX)."""
    compute_dtype = tf.as_dtype(compute_dtype)
    dtypes = dict.fromkeys(STAGES, compute_dtype)
    if compute_dtype == tf.bfloat16:
        conv1_in_bfloat16 = relu_pool and machine.has_amx()
        dtypes.update((name, tf.float32) for name in BFLOAT16_IN_FLOAT32
                      if not (conv1_in_bfloat16 and name == "conv1"))
    return dtypes


class _Layer(tf.Module):
    """The ``weights`` and ``biases`` of one scope, and its weight decay ``wd`` (None:
    none; 0: a term of 0)."""

    def __init__(self, name: str, shape: list[int], stddev: float, bias: float,
                 wd: float | None,
                 seed: tuple[int, int], trainable: bool):
        super().__init__(name=name)
        self.wd = wd
        with self.name_scope:  # names the variables '<scope>/weights', '<scope>/biases'
            self.weights = tf.Variable(
                tf.random.stateless_truncated_normal(shape, seed=seed, stddev=stddev),
                name="weights", trainable=trainable)
            self.biases = tf.Variable(tf.fill([shape[-1]], float(bias)), name="biases",
                                      trainable=trainable)


class LossParts(NamedTuple):
    """The terms of the training loss (float32 scalars)."""

    total: tf.Tensor  # cross_entropy + weight_decay / num_replicas
    cross_entropy: tf.Tensor  # summed over the batch, divided by the global batch
    weight_decay: tf.Tensor  # sum of wd * l2_loss(w)


class Model(tf.Module):
    """The CIFAR-10 tutorial model.

    Args:
      compute_dtype: float32, or float16 / bfloat16 for mixed precision (each stage in
        ``stage_dtypes``' type); variables, logits and loss stay float32.
      trainable: False for a copy that holds moving averages.
      lrn: (x, dtype) -> LRN(x) in dtype: ``fast_lrn`` (default), ``reference_lrn`` or
        ``kernels.layers.compiled_lrn``; all compute the same function.
      relu_pool, relu_lrn: None (TensorFlow's ops), or the compiled kernels
        (z, bias, dtype) -> max_pool(relu(z + bias)) and LRN(relu(z + bias)): conv1
        (conv2) is then the convolution alone.
      weight_decay: of local3's and local4's weights (L2), in the training loss.
    """

    def __init__(self, seed: int = 0, compute_dtype: tf.DType = tf.float32,
                 trainable: bool = True, lrn: Callable[..., tf.Tensor] | None = None,
                 num_classes: int = ff.NUM_CLASSES,
                 relu_pool: Callable[..., tf.Tensor] | None = None,
                 relu_lrn: Callable[..., tf.Tensor] | None = None,
                 weight_decay: float = WEIGHT_DECAY):
        super().__init__(name="cifar10")
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.stage_dtypes = stage_dtypes(self.compute_dtype, relu_pool=relu_pool is not None)
        self.num_classes = num_classes
        self._lrn = lrn or fast_lrn
        self._relu_pool, self._relu_lrn = relu_pool, relu_lrn
        # (name, shape, stddev of the truncated normal, initial bias, L2 weight decay)
        self.layers = [
            _Layer(name, shape, stddev, bias, wd, (seed, i), trainable)
            for i, (name, shape, stddev, bias, wd) in enumerate([
                ("conv1", [5, 5, ff.NUM_CHANNELS, 64], 5e-2, 0.0, None),
                ("conv2", [5, 5, 64, 64], 5e-2, 0.1, None),
                ("local3", [6 * 6 * 64, 384], 0.04, 0.1, weight_decay),
                ("local4", [384, 192], 0.04, 0.1, weight_decay),
                ("softmax_linear", [192, num_classes], 1 / 192.0, 0.0, None)], start=1)]
        self.conv1, self.conv2, self.local3, self.local4, self.softmax_linear = self.layers

    def parameters(self) -> list[tf.Variable]:
        """The variables in layer order (weights, biases), trainable or not."""
        return [v for layer in self.layers for v in (layer.weights, layer.biases)]

    def stages(self) -> list[tuple[str, Callable[[tf.Tensor], tf.Tensor]]]:
        """(name, function of the previous output) in ``STAGES`` order; each casts its
        input to its ``stage_dtypes`` type, but LRN and a fused pool1 or norm2."""
        dtypes = self.stage_dtypes

        def cast(layer, *tensors):
            return [tf.cast(t, dtypes[layer.name]) for t in tensors]

        def conv(layer, fused):  # fused: the stage after adds the bias, takes the ReLU
            def apply(x):
                y = tf.nn.conv2d(*cast(layer, x, layer.weights), 1, "SAME")
                return y if fused else tf.nn.relu(_add_bias(y, *cast(layer, layer.biases)))
            return layer.name, apply

        def local(layer, relu=True):
            def apply(x):
                x, w, b = cast(layer, x, layer.weights, layer.biases)
                y = tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), w) + b
                return tf.nn.relu(y) if relu else tf.cast(y, tf.float32)
            return layer.name, apply

        def pool(name):
            return name, lambda x: tf.nn.max_pool2d(tf.cast(x, dtypes[name]), 3, 2, "SAME")

        def lrn(name, next_stage):
            return name, lambda x: self._lrn(x, dtypes[next_stage])

        def after(layer, fused, stage, out):  # `stage`, or `fused` adding layer's bias
            if fused is None:
                return stage
            return stage[0], lambda z: fused(z, layer.biases, dtypes[out])

        return [conv(self.conv1, self._relu_pool),
                after(self.conv1, self._relu_pool, pool("pool1"), "pool1"),
                lrn("norm1", "conv2"),
                conv(self.conv2, self._relu_lrn),
                after(self.conv2, self._relu_lrn, lrn("norm2", "pool2"), "pool2"),
                pool("pool2"), local(self.local3), local(self.local4),
                local(self.softmax_linear, relu=False)]

    def stage_outputs(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """{stage: its output} of standardised images [batch, 24, 24, 3]; the last,
        'softmax_linear', float32 logits [batch, num_classes]."""
        x, out = images, {}
        for name, apply in self.stages():
            with tf.name_scope(name):  # the layers by name in TensorBoard's graph
                x = out[name] = apply(x)
        return out

    def activations(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """{layer name: its output} (the summaries' activations); a fused conv1 or conv2
        with its bias and ReLU applied here in float32, as pool1 and norm2 do."""
        outputs = self.stage_outputs(images)
        acts = {layer.name: outputs[layer.name] for layer in self.layers}
        for layer, fused in ((self.conv1, self._relu_pool), (self.conv2, self._relu_lrn)):
            if fused is not None:
                acts[layer.name] = tf.nn.relu(tf.cast(acts[layer.name], tf.float32)
                                              + layer.biases)
        return acts

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        """``inference``: float32 logits [batch, num_classes] of standardised images."""
        return self.activations(images)["softmax_linear"]

    def weight_losses(self) -> dict[str, tf.Tensor]:
        """{layer name: wd * l2_loss(weights)} of the layers with weight decay."""
        return {layer.name: layer.wd * tf.nn.l2_loss(layer.weights)
                for layer in self.layers if layer.wd is not None}

    def loss(self, logits: tf.Tensor, labels: tf.Tensor, global_batch: int | None = None,
             num_replicas: int = 1) -> LossParts:
        """Mean cross-entropy of the (global) batch plus the weight decay; with the
        number of replicas, the replicas' ``total``s sum to that loss."""
        xent = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32)))
        xent /= tf.cast(global_batch or tf.shape(labels)[0], tf.float32)
        wd = tf.add_n(list(self.weight_losses().values()))
        return LossParts(total=xent + wd / num_replicas, cross_entropy=xent, weight_decay=wd)


@tf.custom_gradient
def _add_bias(y: tf.Tensor, bias: tf.Tensor):
    """``y + bias``, whose bias gradient is a matmul of a row of ones: faster than
    tf.nn.bias_add's (which oneDNN fuses into a slower Conv2DBackpropFilterWithBias)."""
    def grad(upstream):
        rows = tf.reshape(upstream, [-1, upstream.shape[-1]])
        ones = tf.ones([1, tf.shape(rows)[0]], rows.dtype)
        return upstream, tf.reshape(tf.matmul(ones, rows), [-1])
    return y + bias, grad
