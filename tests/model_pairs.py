"""A model with a compiled kernel against the same model without it, as the kernels'
tests compare them: the same seed and batch, the activations, loss and gradients."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from cifar10.model import Model


class Pass(NamedTuple):
    """One forward and backward pass of a model on ``batch()``."""
    activations: dict[str, tf.Tensor]
    loss: tf.Tensor
    gradients: list[tf.Tensor]
    stage_types: dict[str, tf.DType]  # each stage's output type


def batch() -> tuple[tf.Tensor, tf.Tensor]:
    """8 images and their labels, the same every call."""
    return (tf.random.stateless_normal([8, 24, 24, 3], seed=(1, 1)),
            tf.constant([0, 1, 2, 3, 4, 5, 6, 7]))


def run(**model_args) -> Pass:
    """A pass of ``Model(seed=3, **model_args)`` on ``batch()``."""
    images, labels = batch()
    model = Model(seed=3, **model_args)
    with tf.GradientTape() as tape:
        acts = model.activations(images)
        loss = model.loss(acts["softmax_linear"], labels).total
    types = {name: out.dtype for name, out in model.stage_outputs(images).items()}
    return Pass(acts, loss, tape.gradient(loss, model.parameters()), types)


def assert_same_function(kernel: Pass, ops: Pass, layer: str, atol: float = 0.0) -> None:
    """float32: the two passes compute the same function, to float32's rounding
    (``layer``'s activations, which the kernel computes, within ``atol``)."""
    np.testing.assert_allclose(kernel.activations[layer], ops.activations[layer],
                               rtol=1e-6 if atol else 0, atol=atol)
    np.testing.assert_allclose(kernel.loss, ops.loss, rtol=1e-6)
    for g_k, g_t in zip(kernel.gradients, ops.gradients):
        np.testing.assert_allclose(g_k, g_t, rtol=1e-4, atol=1e-6)


def assert_bfloat16_agreement(kernel: Pass, ops: Pass) -> None:
    """bfloat16: as two bfloat16 passes agree (the loss within 1%, each variable's
    gradient at a cosine above 0.97)."""
    np.testing.assert_allclose(kernel.loss, ops.loss, rtol=1e-2)
    for g_k, g_t in zip(kernel.gradients, ops.gradients):
        a, b = g_k.numpy().ravel(), g_t.numpy().ravel()
        assert a @ b > 0.97 * np.linalg.norm(a) * np.linalg.norm(b)
