"""TensorBoard summaries of training, with the original tutorial's tag names.

Tags written by ``write_train_summaries`` (no replica prefixes):
  learning_rate; cross_entropy, cross_entropy (raw), total_loss, total_loss (raw);
  <layer>/activations (histogram) and <layer>/sparsity for conv1, conv2, local3,
  local4, softmax_linear; a histogram of every variable (conv1/weights, ...) and
  of its gradient (conv1/weights/gradients); images (the first training images).
The trainer adds examples_per_sec from Python.
"""

from __future__ import annotations

import tensorflow as tf

MAX_IMAGES = 3  # as tf.summary.image's default in the original


def variable_tag(var: tf.Variable) -> str:
    """'conv1/weights' for the variable 'conv1/weights:0'."""
    return var.name.split(":")[0]


def displayable(images: tf.Tensor) -> tf.Tensor:
    """Rescales standardised images to [0, 1] per image for the image dashboard."""
    images = tf.cast(images, tf.float32)
    low = tf.reduce_min(images, axis=[1, 2, 3], keepdims=True)
    high = tf.reduce_max(images, axis=[1, 2, 3], keepdims=True)
    return (images - low) / tf.maximum(high - low, 1e-6)


def write_train_summaries(step, learning_rate, losses, loss_averages, activations,
                          variables, gradients, images) -> None:
    """Writes one step's summaries to the default writer (inside a tf.function)."""
    tf.summary.scalar("learning_rate", learning_rate, step=step)
    for name, value in losses.items():
        tf.summary.scalar(f"{name} (raw)", value, step=step)
        tf.summary.scalar(name, loss_averages[name], step=step)
    for layer, x in activations.items():
        tf.summary.histogram(f"{layer}/activations", x, step=step)
        tf.summary.scalar(f"{layer}/sparsity", tf.math.zero_fraction(x), step=step)
    for var, grad in zip(variables, gradients):
        tf.summary.histogram(variable_tag(var), var, step=step)
        tf.summary.histogram(f"{variable_tag(var)}/gradients", grad, step=step)
    tf.summary.image("images", displayable(images[:MAX_IMAGES]), step=step,
                     max_outputs=MAX_IMAGES)
