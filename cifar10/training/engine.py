"""The step engine (``Trainer``): synchronous data-parallel SGD under a ``tf.distribute``
strategy, up to ``steps_per_loop`` steps per call into TensorFlow.  The global step counts
updates done: ``model.ckpt-1000`` holds step 1000, where a resumed run goes on."""

from __future__ import annotations

import functools
from typing import Iterator

import tensorflow as tf

from cifar10.core.config import TrainConfig, compute_dtype
from cifar10.data import fileformat as ff
from cifar10.data import pipeline as data
from cifar10.distribute import devices
from cifar10.kernels.layers import KernelChoice, choose
from cifar10.training.step import DynamicLossScale, ReplicatedStep, TrainState


class Trainer:
    """Builds the state and the replicated step under ``strategy`` (one replica per
    device), and runs it.  ``kernels``: the model's layer functions (default: as
    ``config.kernels`` chooses them).  Op determinism is the caller's (``loops``)."""

    def __init__(self, config: TrainConfig, strategy: tf.distribute.Strategy,
                 examples_per_epoch: int = ff.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
                 num_classes: int = ff.NUM_CLASSES,
                 kernels: KernelChoice | None = None):
        config.check()
        self.config, self.strategy = config, strategy
        self.examples_per_epoch = examples_per_epoch
        self.input_options = devices.input_options(strategy)  # how batches reach the replicas
        self.kernels = kernels or choose(config.kernels, strategy.extended.worker_devices,
                                         config.xla)
        with strategy.scope():
            self.state = TrainState(config.seed, tf.as_dtype(compute_dtype(config)),
                                    num_classes, lrn=self.kernels.lrn,
                                    relu_pool=self.kernels.relu_pool,
                                    relu_lrn=self.kernels.relu_lrn)
            self.loss_scale = (DynamicLossScale(config.loss_scale_growth_steps)
                               if config.use_fp16 else None)
        self.train_step = ReplicatedStep(self.state, strategy, config, examples_per_epoch,
                                         self.loss_scale)
        self.num_replicas = self.train_step.num_replicas
        self.global_batch = self.train_step.global_batch
        self.variables = self.train_step.variables
        # {(with_summaries, alone): function}: a loop of steps, or one step alone.
        self._fns = {(s, alone): tf.function(functools.partial(
            self._alone if alone else self._loop, with_summaries=s))
            for s in (False, True) for alone in (False, True)}
        self._built: set[tuple[bool, bool]] = set()  # the keys of those traced

    def dataset(self, train_files: list[str], start_step: int = 0
                ) -> tf.distribute.DistributedDataset:
        """The training batches, distributed.  A resumed run seeds its input with its
        start step; a ``deterministic`` one rebuilds the first order, skipping steps done."""
        cfg = self.config
        if cfg.deterministic:
            seed, skip_steps = cfg.seed % (2**31 - 1), start_step
        else:
            seed, skip_steps = (cfg.seed * 1_000_003 + start_step) % (2**31 - 1), 0

        def pipeline(ctx):
            # A pipeline feeds one replica, or each of its worker's replicas in turn.
            per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            return data.train_dataset(train_files, cfg.batch_size, seed=seed,
                                      shuffle_buffer=cfg.shuffle_buffer, input_context=ctx,
                                      skip_batches=skip_steps * per_step)

        return self.strategy.distribute_datasets_from_function(pipeline, self.input_options)

    def step(self, iterator: Iterator, with_summaries: bool = False) -> dict[str, tf.Tensor]:
        """One synchronous update on the next batch: its {'cross_entropy', 'total_loss'}."""
        return self.run_steps(iterator, 1, with_summaries)[0]

    def run_steps(self, iterator: Iterator, num_steps: int, with_summaries: bool = False,
                  alone: bool = False) -> tuple[dict[str, tf.Tensor], int]:
        """Runs ``num_steps`` updates in one call (the last writes the summaries with
        ``with_summaries``), stopping after a diverged step; returns (the last step's
        losses, the diverged step or 0).  ``alone``: one step without a TensorFlow loop,
        for the profiler (which takes a loop's iterations for its steps)."""
        if alone:
            if num_steps != 1:
                raise ValueError(f"a step alone is one step, not {num_steps}")
            losses, diverged = self._fns[with_summaries, True](iterator)
        else:
            losses, diverged = self._fns[with_summaries, False](
                iterator, tf.constant(num_steps, tf.int32))
        self._built.add((with_summaries, alone))
        return losses, int(diverged)

    def prepare(self, iterator: Iterator, with_summaries: bool = False,
                alone: bool = False) -> None:
        """Builds ``run_steps``' function before its first call (a loop by a call of no
        steps), so that no rate counts the tracing.  Every worker must prepare the same
        functions in the same order."""
        if (with_summaries, alone) in self._built:
            return
        if alone:
            self._fns[with_summaries, True].get_concrete_function(iterator)
        else:
            self.run_steps(iterator, 0, with_summaries)
        self._built.add((with_summaries, alone))

    def _diverged(self, total_loss: tf.Tensor) -> tf.Tensor:
        """A loss that is not finite, unless ``--use_fp16``'s loss scale skipped the step
        and can still go down (then the halved scale is tried next)."""
        bad = tf.logical_not(tf.math.is_finite(total_loss))
        if self.loss_scale is not None:
            bad = tf.logical_and(bad, self.loss_scale.scale.read_value() <= 1.0)
        return bad

    def _loop(self, iterator, num_steps, with_summaries):
        zero = tf.constant(0.0)
        losses = {"cross_entropy": zero, "total_loss": zero}
        diverged = tf.constant(0, tf.int64)
        for _ in tf.range(num_steps - 1 if with_summaries else num_steps):
            losses = self.train_step(iterator, with_summaries=False)
            if self._diverged(losses["total_loss"]):
                diverged = self.state.step.read_value()
                break
        # The scope "/": the tf.cond's own would prefix the summaries' tags.
        if with_summaries and num_steps > 0 and diverged == 0:
            with tf.name_scope("/"):
                losses = self.train_step(iterator, with_summaries=True)
            if self._diverged(losses["total_loss"]):
                diverged = self.state.step.read_value()
        return losses, diverged

    def _alone(self, iterator, with_summaries):
        losses = self.train_step(iterator, with_summaries)
        diverged = tf.where(self._diverged(losses["total_loss"]), self.state.step.read_value(),
                            tf.constant(0, tf.int64))
        return losses, diverged
