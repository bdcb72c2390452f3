"""The tutorial's convnet: ``inference`` (images -> logits) and its loss.

Layers, in order, as the tutorial's ``cifar10.inference``:

    conv1 (5x5x3x64, ReLU) -> pool1 (3x3/2) -> norm1 (LRN)
    conv2 (5x5x64x64, ReLU) -> norm2 (LRN) -> pool2 (3x3/2)
    local3 (2304->384, ReLU) -> local4 (384->192, ReLU) -> softmax_linear (192->10)

1,068,298 trainable parameters.  Variables are named by scope as in the
original (``conv1/weights``, ``conv1/biases``, ... ``softmax_linear/biases``),
and a ``tf.train.Checkpoint(model=model)`` stores them under the same paths.
The model reads no flags: everything it needs is a constructor argument.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import tensorflow as tf

from cifar10 import precision
from cifar10.data import fileformat as ff
from cifar10.lrn import fast_lrn


class _Layer(tf.Module):
    """The ``weights`` and ``biases`` of one scope of the model."""

    def __init__(self, name: str, *, shape: list[int], stddev: float, bias: float,
                 wd: float, seed: tuple[int, int], trainable: bool):
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
      seed: seed of the truncated-normal initialisers; the same seed gives the
        same initial weights.
      compute_dtype: ``tf.float32``, or ``tf.float16`` or ``tf.bfloat16`` for
        mixed precision: convolutions and matmuls in that type, the other layers
        as ``cifar10.precision`` chooses for it; variables, logits and loss in
        float32.
      trainable: False for a copy that holds moving averages, not trained weights.
      lrn: the LRN implementation, a function (x, dtype) -> LRN(x) in dtype:
        ``fast_lrn`` (default) or ``reference_lrn`` of ``cifar10.lrn``, or the compiled kernel's
        ``cifar10.kernels.lrn.compiled_lrn``; all compute the same function.
      relu_pool: None (default): conv1 adds its bias and takes its ReLU, and pool1
        is TensorFlow's max pooling.  Or a function (z, bias, dtype) ->
        max_pool(relu(z + bias)) in dtype, the compiled kernel's
        ``cifar10.kernels.pool.compiled_relu_pool``: conv1 is then the convolution
        alone, and pool1 adds conv1's bias and takes the ReLU, which computes the
        same function (and lets conv1 run in bfloat16 on CPUs with AMX,
        ``cifar10.precision``).
      relu_lrn: None (default), or a function (z, bias, dtype) -> LRN(relu(z + bias))
        in dtype, the compiled kernel's ``cifar10.kernels.lrn.compiled_bias_relu_lrn``:
        conv2 is then the convolution alone, and norm2 adds its bias and takes the
        ReLU in float32 as it reads conv2's output.
      num_classes: the logits, one per class of the data (the tutorial's 10 for
        CIFAR-10); only the last layer's shape depends on it.
    """

    def __init__(self, seed: int = 0, compute_dtype: tf.DType = tf.float32,
                 trainable: bool = True, lrn: Callable[..., tf.Tensor] | None = None,
                 num_classes: int = ff.NUM_CLASSES,
                 relu_pool: Callable[..., tf.Tensor] | None = None,
                 relu_lrn: Callable[..., tf.Tensor] | None = None):
        super().__init__(name="cifar10")
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.stage_dtypes = precision.stage_dtypes(self.compute_dtype,
                                                   relu_pool=relu_pool is not None)
        self.num_classes = num_classes
        self._lrn = lrn or fast_lrn
        self._relu_pool, self._relu_lrn = relu_pool, relu_lrn
        # The tutorial's layers: weights drawn from a truncated normal of `stddev`,
        # biases set to `bias`, L2 weight decay `wd` (0: none).
        layer = functools.partial(_Layer, trainable=trainable)
        self.conv1 = layer("conv1", shape=[5, 5, ff.NUM_CHANNELS, 64], stddev=5e-2, bias=0.0,
                           wd=0.0, seed=(seed, 1))
        self.conv2 = layer("conv2", shape=[5, 5, 64, 64], stddev=5e-2, bias=0.1, wd=0.0,
                           seed=(seed, 2))
        self.local3 = layer("local3", shape=[6 * 6 * 64, 384], stddev=0.04, bias=0.1, wd=0.004,
                            seed=(seed, 3))
        self.local4 = layer("local4", shape=[384, 192], stddev=0.04, bias=0.1, wd=0.004,
                            seed=(seed, 4))
        self.softmax_linear = layer("softmax_linear", shape=[192, num_classes],
                                    stddev=1 / 192.0, bias=0.0, wd=0.0, seed=(seed, 5))
        self.layers = [self.conv1, self.conv2, self.local3, self.local4, self.softmax_linear]

    def parameters(self) -> list[tf.Variable]:
        """The variables in layer order (weights, biases), trainable or not."""
        return [v for layer in self.layers for v in (layer.weights, layer.biases)]

    def _param(self, layer: _Layer, variable: tf.Variable) -> tf.Tensor:
        return tf.cast(variable, self.stage_dtypes[layer.name])

    def stages(self) -> list[tuple[str, Callable[[tf.Tensor], tf.Tensor]]]:
        """The model's steps in order: (name, function of the previous step's output).

        Each casts its input to its own precision (``precision.stage_dtypes``); the
        last gives float32 logits.
        """
        def conv(layer, bias_relu=True):
            def apply(x):
                y = tf.nn.conv2d(x, self._param(layer, layer.weights), 1, "SAME")
                if not bias_relu:  # the stage after adds the bias, takes the ReLU
                    return y
                return tf.nn.relu(_add_bias(y, self._param(layer, layer.biases)))
            return apply

        def local(layer, relu=True):
            def apply(x):
                w, b = self._param(layer, layer.weights), self._param(layer, layer.biases)
                y = tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), w) + b
                return tf.nn.relu(y) if relu else tf.cast(y, tf.float32)
            return apply

        def pool(x):
            return tf.nn.max_pool2d(x, ksize=3, strides=2, padding="SAME")

        def own(name, apply):  # a stage computing in its own precision
            return name, _on_input_cast(apply, self.stage_dtypes[name])

        def lrn(name, next_stage):
            # LRN computes in float32 from its input as it comes and hands its output
            # on in the next stage's type: the compiled kernel casts in its own pass.
            return name, lambda x: self._lrn(x, self.stage_dtypes[next_stage])

        def conv_then(layer, after, fused, out_dtype):
            # The convolution and the stage after it.  With a compiled kernel `fused`,
            # that stage takes the convolution's output as it comes and adds its bias
            # and takes its ReLU (in float32), its output in out_dtype.
            if fused is None:
                return [own(layer.name, conv(layer)), after]
            return [own(layer.name, conv(layer, bias_relu=False)),
                    (after[0], lambda z: fused(z, layer.biases, out_dtype))]

        return [*conv_then(self.conv1, own("pool1", pool), self._relu_pool,
                           self.stage_dtypes["pool1"]),
                lrn("norm1", "conv2"),
                # norm2 comes before pool2, as the original
                *conv_then(self.conv2, lrn("norm2", "pool2"), self._relu_lrn,
                           self.stage_dtypes["pool2"]),
                own("pool2", pool), own("local3", local(self.local3)),
                own("local4", local(self.local4)),
                own("softmax_linear", local(self.softmax_linear, relu=False))]

    def stage_outputs(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """Runs the model; returns the output of every stage.

        Args:
          images: float [batch, 24, 24, 3] standardised images.

        Returns:
          {stage name: its output}, in the order of ``stages()``; each in the dtype
          ``precision.stage_dtypes`` gives the stage, but LRN's (norm1, norm2), which
          compute in theirs and hand on in the next stage's, and 'softmax_linear':
          float32 logits [batch, num_classes].  With ``relu_pool`` ('relu_lrn'),
          'conv1' ('conv2') is the convolution before its bias and ReLU, which pool1
          (norm2) applies.
        """
        x = images
        out = {}
        for name, apply in self.stages():
            x = out[name] = apply(x)
        return out

    def activations(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """Runs the model; returns the output of each named layer.

        Returns:
          {'conv1', 'conv2', 'local3', 'local4': activations in the layer's
          precision (conv1's with ``relu_pool`` and conv2's with ``relu_lrn`` in
          float32, as pool1 and norm2 compute them), 'softmax_linear': float32
          logits [batch, num_classes]}.
        """
        outputs = self.stage_outputs(images)
        acts = {layer.name: outputs[layer.name] for layer in self.layers}
        # Where the stage after a convolution applied its bias and ReLU, in float32
        # (computed only where asked for, such as a step that writes summaries).
        for layer, fused in ((self.conv1, self._relu_pool), (self.conv2, self._relu_lrn)):
            if fused is not None:
                acts[layer.name] = tf.nn.relu(tf.cast(acts[layer.name], tf.float32)
                                              + layer.biases)
        return acts

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        """``inference``: float32 logits [batch, num_classes] of standardised images."""
        return self.activations(images)["softmax_linear"]

    def weight_losses(self) -> dict[str, tf.Tensor]:
        """``wd * l2_loss(weights)`` of each layer with weight decay, by the layer's name
        (the terms the original summarised as 'local3/weight_loss')."""
        return {layer.name: layer.wd * tf.nn.l2_loss(layer.weights)
                for layer in self.layers if layer.wd}

    def weight_decay(self) -> tf.Tensor:
        """Sum of ``weight_losses`` over the layers with weight decay."""
        return tf.add_n(list(self.weight_losses().values()))

    def loss(self, logits: tf.Tensor, labels: tf.Tensor, global_batch: int | None = None,
             num_replicas: int = 1) -> LossParts:
        """Cross-entropy of ``logits`` against ``labels`` plus weight decay.

        With the defaults, the mean cross-entropy of the batch plus the weight
        decay.  A replica of a synchronous step passes the global batch and the
        number of replicas: its ``total`` is its share, and the shares of all
        replicas sum to the mean cross-entropy of the global batch plus the
        weight decay once, so that summing the replicas' gradients gives the
        gradient of that loss.
        """
        xent = tf.reduce_sum(cross_entropy(logits, labels))
        xent /= tf.cast(global_batch or tf.shape(labels)[0], tf.float32)
        wd = self.weight_decay()
        return LossParts(total=xent + wd / num_replicas, cross_entropy=xent, weight_decay=wd)


def _on_input_cast(apply: Callable[[tf.Tensor], tf.Tensor], dtype: tf.DType
                   ) -> Callable[[tf.Tensor], tf.Tensor]:
    """``apply`` on its input cast to ``dtype`` (no op where it is already)."""
    return lambda x: apply(tf.cast(x, dtype))


@tf.custom_gradient
def _add_bias(y: tf.Tensor, bias: tf.Tensor):
    """``y + bias`` (bias over the last axis), whose bias gradient is a matmul.

    Not tf.nn.bias_add: TensorFlow's CPU graph rewrite fuses the gradient of
    bias_add into oneDNN's Conv2DBackpropFilterWithBias, which took about twice as
    long as the plain filter gradient plus a separate bias sum.  And the bias sum
    as a row of ones times the gradient: Eigen's sum over the batch, rows and
    columns of conv1's gradient took longer than oneDNN's matmul (a step 4% less
    CPU time in float32 and in bfloat16; docs/performance.md).  The forward ``+``
    still fuses with the convolution and its ReLU.
    """
    def grad(upstream):
        rows = tf.reshape(upstream, [-1, upstream.shape[-1]])
        ones = tf.ones([1, tf.shape(rows)[0]], rows.dtype)
        return upstream, tf.reshape(tf.matmul(ones, rows), [-1])
    return y + bias, grad


def cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Per-example sparse softmax cross-entropy, float32 [batch]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32))
