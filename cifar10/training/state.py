"""What a training run's checkpoints hold (``TrainState``), and ``--use_fp16``'s
dynamic loss scale (``DynamicLossScale``), which they do not.

The names of the checkpointed objects (``model``, ``averages``, ``step``,
``examples_seen``, ``loss_averages``) are the keys of every checkpoint written:
renaming one would keep earlier runs from resuming and the evaluator from
restoring them.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from cifar10.core.config import INITIAL_LOSS_SCALE
from cifar10.data import fileformat as ff
from cifar10.model import Model


class TrainState(tf.Module):
    """Everything a checkpoint holds: weights, their averages, step, loss averages."""

    def __init__(self, seed: int, compute_dtype: tf.DType, num_classes: int = ff.NUM_CLASSES,
                 lrn: Callable[..., tf.Tensor] | None = None,
                 relu_pool: Callable[..., tf.Tensor] | None = None,
                 relu_lrn: Callable[..., tf.Tensor] | None = None):
        super().__init__(name="train_state")
        self.model = Model(seed=seed, compute_dtype=compute_dtype, num_classes=num_classes,
                           lrn=lrn, relu_pool=relu_pool, relu_lrn=relu_lrn)
        # The averages live in a second, untrained copy of the model, so that the
        # evaluator restores them with tf.train.Checkpoint(averages=Model()).
        self.averages = Model(seed=seed, compute_dtype=compute_dtype, trainable=False,
                              num_classes=num_classes)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # Examples trained on over all replicas and workers: the learning rate
        # counts these, so a run resumed with another replica count keeps its
        # schedule (step x global batch would not).
        self.examples_seen = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name="examples_seen")
        self.loss_averages = {
            name: tf.Variable(0.0, trainable=False, name=f"{name}_avg")
            for name in ("cross_entropy", "total_loss")
        }

    def checkpoint(self) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(model=self.model, averages=self.averages, step=self.step,
                                   examples_seen=self.examples_seen,
                                   loss_averages=self.loss_averages)


class DynamicLossScale(tf.Module):
    """``--use_fp16``'s loss scale, which keeps float16 gradients clear of underflow.

    A step whose summed gradients are not all finite is skipped (no update, no
    moving-average change, no examples counted) and halves the scale, to no less
    than 1; ``growth_steps`` finite steps in a row double it.  Not checkpointed:
    a resumed run starts again from ``INITIAL_LOSS_SCALE`` and finds its level
    within a few steps.  Create it under the strategy's scope.
    """

    def __init__(self, growth_steps: int):
        super().__init__(name="loss_scale")
        self.growth_steps = growth_steps
        self.scale = tf.Variable(INITIAL_LOSS_SCALE, trainable=False, name="scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="good_steps")
        self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps")

    def update(self, finite: tf.Tensor) -> None:
        """After a step: ``finite`` says whether its gradients were all finite."""
        good = tf.where(finite, self.good_steps + 1, tf.constant(0, tf.int64))
        grow = good >= self.growth_steps
        self.scale.assign(tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                                   tf.maximum(self.scale / 2.0, 1.0)))
        self.good_steps.assign(tf.where(grow, tf.zeros_like(good), good))
        self.skipped.assign_add(1 - tf.cast(finite, tf.int64))
