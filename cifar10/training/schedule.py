"""The tutorial's schedules, as small pure functions: the learning rate by the
examples trained on, and the decay of the weights' moving averages by the step.

The constants (0.1, decay by 0.1 every 350 epochs, 0.9999) are ``config``'s.
"""

from __future__ import annotations

import tensorflow as tf

from cifar10.core.config import (INITIAL_LEARNING_RATE, LEARNING_RATE_DECAY_FACTOR,
                                 MOVING_AVERAGE_DECAY, NUM_EPOCHS_PER_DECAY)


def learning_rate(examples, examples_per_epoch: int,
                  initial: float = INITIAL_LEARNING_RATE) -> tf.Tensor:
    """The learning rate once ``examples`` examples have been trained on.

    Staircase decay by 0.1 every 350 epochs of ``examples_per_epoch``, counted
    in examples so that it does not depend on the number of replicas.
    """
    examples = tf.cast(examples, tf.int64)
    decays = examples // (NUM_EPOCHS_PER_DECAY * examples_per_epoch)
    return initial * tf.pow(LEARNING_RATE_DECAY_FACTOR, tf.cast(decays, tf.float32))


def moving_average_decay(step) -> tf.Tensor:
    """Decay of the weight averages after update ``step`` (num_updates = step)."""
    step = tf.cast(step, tf.float32)
    return tf.minimum(MOVING_AVERAGE_DECAY, (1.0 + step) / (10.0 + step))
