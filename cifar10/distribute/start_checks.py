"""The workers' checks before training, each one collective: that they all restored
the same step (``check_same_start``), and whether any of them was asked to stop
before training started (``stop_if_asked_before_training``), so that all stop
together.  With one worker, the local answer alone.  (``settings_check`` checks that
they were started with the same settings.)
"""

from __future__ import annotations

import tensorflow as tf

from cifar10.core import errors
from cifar10.core.errors import Cifar10Error
from cifar10.distribute.coordination import Coordinator, mean_and_square


class StoppedBeforeTraining(errors.StoppedBeforeTraining):
    """A stop request that came before training started, on this worker or another:
    every worker stops at once, nothing trained or saved."""


def check_same_start(cluster: Coordinator, start: int, train_dir: str) -> None:
    """Stops every worker when they did not all restore the same step.

    Workers restore from what each sees as ``train_dir``; if that is not one
    shared directory, they would train different weights together.  The mean
    and the mean square of the restored steps over all replicas tell: equal
    steps have zero variance.
    """
    if not cluster.multi_worker:
        return
    mean, square = mean_and_square(cluster.strategy, tf.constant(float(start), tf.float64))
    if float(square) - float(mean) ** 2 > 0.5:
        raise Cifar10Error(
            f"the workers restored different steps (this one {start}, mean "
            f"{float(mean):g}): --train_dir {train_dir} must be one directory shared by "
            f"every worker")


def stop_if_asked_before_training(cluster: Coordinator, asked: bool) -> None:
    """Stops every worker, training nothing, when a stop was requested before
    training started on any of them (as ``check_same_start`` stops them all).

    All workers answer alike: each adds ``asked``, whether its own stop was
    requested, to one collective, so that a worker signalled a moment before or
    after another (the launcher signals them one after another) stops with the
    others, not in a first step they would wait in for it.  ``asked`` is the value
    of this worker's stop event that its caller read as it marked the start of
    training (``controller.train``'s ``on_training_start``), not read here again:
    a stop that comes after that mark is one in training, which saves.

    Raises:
      StoppedBeforeTraining: a stop was requested, here or on another worker.
    """
    if cluster.multi_worker:
        mean, _ = mean_and_square(cluster.strategy, tf.constant(float(asked), tf.float64))
        asked = float(mean) > 0
    if asked:
        raise StoppedBeforeTraining()
