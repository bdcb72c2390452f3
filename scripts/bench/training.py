"""(a) the train step alone, (b) the input pipeline alone, (c) end-to-end training."""

from __future__ import annotations

import statistics
from typing import Callable

import tensorflow as tf

from bench import measure
from cifar10.data import pipeline as data
from cifar10.core.config import CROP_SIZE
from cifar10.distribute import devices
from cifar10.kernels.layers import KernelChoice
from cifar10.training.engine import Trainer


def step_alone(args, strategy: tf.distribute.Strategy, train_dir: str,
               kernels: KernelChoice | None = None) -> Callable[[], float]:
    """(a): warms up the train step on one in-memory batch.

    Args:
      kernels: the model's layer functions (default: as ``args.kernels`` chooses).

    Returns:
      A function that times one window of it: examples/sec.
    """
    trainer = Trainer(measure.train_config(args, train_dir), strategy, kernels=kernels)
    images = tf.random.stateless_normal([args.batch_size, CROP_SIZE, CROP_SIZE, 3],
                                        seed=(1, 2))
    labels = tf.random.stateless_uniform([args.batch_size], (3, 4), 0, 10, tf.int32)
    # Fed as training is fed: one pipeline per replica, no autotuning.
    batches = data.without_autotuning(tf.data.Dataset.from_tensors((images, labels)).repeat())
    it = iter(strategy.distribute_datasets_from_function(lambda ctx: batches,
                                                         devices.input_options(strategy)))

    def window(steps: int) -> None:
        for _ in range(steps):
            loss = trainer.step(it)["total_loss"]
        float(loss)  # wait for the last step

    window(args.warmup_steps)
    return lambda: measure.rate(lambda: window(args.window_steps),
                                args.window_steps * trainer.global_batch)


def input_alone(args, train_files: list[str]) -> float:
    """(b): examples/sec of the training input pipeline on CIFAR-format files."""
    it = iter(data.train_dataset(train_files, args.batch_size))  # fills its cache
    for _ in range(args.warmup_steps):
        next(it)
    steps = args.window_steps * 10  # a window of 30 batches is too short to time well

    def window() -> None:
        for _ in range(steps):
            next(it)

    return measure.median_rate(window, args.windows, steps * args.batch_size)


def end_to_end(args, strategy: tf.distribute.Strategy, train_files: list[str], count: int,
               train_dir: str, time_step: Callable[[], float]
               ) -> tuple[float, float, float]:
    """(c): examples/sec of cifar10.training.controller.train, and (a) between its windows.

    The first epoch (the shuffle buffer filling, the step traced) is the warm-up,
    timed on its own.  Then each steady-state window
    of training (a log line) is followed by one window of ``time_step``, run
    from the log callback while training waits: the two figures are measured
    in turns over the same minutes, so a virtual machine whose speed drifts
    does not bias one against the other.  The training window's clock starts
    after the callback returns; the input pipeline fills its few prefetch
    slots meanwhile, which saves training well under 1% of a window.

    Returns:
      (training steady state, training first epoch, step alone), each the median.
    """
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    warmup = max(args.warmup_steps, -(-count // global_batch))  # at least one epoch
    warmup = -(-warmup // args.window_steps) * args.window_steps  # whole windows
    steps = warmup + args.windows * args.window_steps
    config = measure.train_config(args, train_dir, max_steps=steps,
                                  log_frequency=args.window_steps, checkpoint_steps=steps)
    alone = []

    def in_turns(report) -> None:
        if report.step > warmup:
            alone.append(time_step())

    reports = measure.train_reports(config, strategy, train_files, count, in_turns)
    # The report of step n gives examples/sec over the window ending at n.
    steady = [r.examples_per_sec for r in reports if r.step > warmup]
    first_epoch = [r.examples_per_sec for r in reports if 1 < r.step <= warmup]
    return statistics.median(steady), statistics.median(first_epoch), statistics.median(alone)
