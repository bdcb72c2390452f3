"""The step engine (``Trainer``): synchronous data-parallel SGD under a ``tf.distribute``
strategy, up to ``steps_per_loop`` steps per call into TensorFlow.  The global step counts
updates done: ``model.ckpt-1000`` holds step 1000, where a resumed run goes on."""

from __future__ import annotations

import functools
from typing import Iterator

import numpy as np
import tensorflow as tf

from cifar10.core.config import TrainConfig, compute_dtype
from cifar10.data import fileformat as ff
from cifar10.data import pipeline as data
from cifar10.distribute import devices
from cifar10.kernels.layers import KernelChoice, choose
from cifar10.training.step import DynamicLossScale, ReplicatedStep, TrainState

# What each step of a call leaves for the host, in its row's order: the step, its losses,
# the examples seen after it; with --use_fp16, the loss scale and the steps skipped.
FIGURES = ("step", "total_loss", "cross_entropy", "examples_seen", "loss_scale",
           "skipped_steps")


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
                                    relu_lrn=self.kernels.relu_lrn,
                                    weight_decay=config.weight_decay)
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
        self.replay_batches = 0  # skipped by the last dataset's pipelines before their first

    def dataset(self, train_files: list[str], start_step: int = 0
                ) -> tf.distribute.DistributedDataset:
        """The training batches, distributed.  A resumed run seeds its input with its
        start step; a ``deterministic`` one rebuilds the first order, skipping steps done
        (``replay_batches``, in the first step's call)."""
        cfg, self.replay_batches = self.config, 0
        if cfg.deterministic:
            seed, skip_steps = cfg.seed % (2**31 - 1), start_step
        else:
            seed, skip_steps = (cfg.seed * 1_000_003 + start_step) % (2**31 - 1), 0

        # MirroredStrategy's pipelines all run here (one per CPU replica, or one for the
        # GPUs); a multi-worker strategy's context counts one per worker.
        local = isinstance(self.strategy, tf.distribute.MirroredStrategy)

        def pipeline(ctx):
            # A pipeline feeds one replica, or each of its worker's replicas in turn.
            per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            self.replay_batches += skip_steps * per_step
            return data.train_dataset(train_files, cfg.batch_size, seed=seed,
                                      shuffle_buffer=cfg.shuffle_buffer, input_context=ctx,
                                      skip_batches=skip_steps * per_step,
                                      deterministic=cfg.deterministic,
                                      local_pipelines=ctx.num_input_pipelines if local else 1)

        return self.strategy.distribute_datasets_from_function(pipeline, self.input_options)

    def step(self, iterator: Iterator, with_summaries: bool = False) -> dict[str, float]:
        """One synchronous update on the next batch: its figures (``FIGURES``)."""
        figures, _ = self.run_steps(iterator, 1, with_summaries)
        return {name: values[0] for name, values in figures.items()}

    def run_steps(self, iterator: Iterator, num_steps: int, with_summaries: bool = False,
                  alone: bool = False) -> tuple[dict[str, np.ndarray], int]:
        """Runs ``num_steps`` updates in one call (the last writes the summaries with
        ``with_summaries``), each whatever the steps before it gave; returns (each step's
        figures, {name in ``FIGURES``: array}, read once the call ends; the first step
        whose loss diverged, or 0).  ``alone``: one step without a TensorFlow loop, for the
        profiler (which takes a loop's iterations for its steps)."""
        if alone:
            if num_steps != 1:
                raise ValueError(f"a step alone is one step, not {num_steps}")
            rows = self._fns[with_summaries, True](iterator)
        else:
            rows = self._fns[with_summaries, False](iterator, tf.constant(num_steps, tf.int32))
        figures, bad = dict(zip(FIGURES, rows.numpy().T)), self._diverged(rows).numpy()
        return figures, int(figures["step"][bad][0]) if bad.any() else 0

    def prepare(self, iterator: Iterator, with_summaries: bool = False,
                alone: bool = False) -> None:
        """Builds ``run_steps``' function before its first call (a loop by a call of no
        steps), so that no rate counts the tracing.  Every worker must prepare the same
        functions in the same order."""
        if self._fns[with_summaries, alone].experimental_get_tracing_count():
            return
        if alone:
            self._fns[with_summaries, True].get_concrete_function(iterator)
        else:
            self.run_steps(iterator, 0, with_summaries)

    def _diverged(self, rows: tf.Tensor) -> tf.Tensor:
        """Whether each row's step diverged: a loss that is not finite, unless
        --use_fp16's loss scale skipped the step and can still go down (then the halved
        scale is tried next)."""
        bad = ~tf.math.is_finite(rows[:, FIGURES.index("total_loss")])
        if self.loss_scale is not None:
            bad &= rows[:, FIGURES.index("loss_scale")] <= 1.0
        return bad

    def _record(self, rows: tf.TensorArray, i, losses: dict[str, tf.Tensor]
                ) -> tf.TensorArray:
        """Row ``i`` of the call's figures: the step's losses and the counts after it."""
        values = [self.state.step, losses["total_loss"], losses["cross_entropy"],
                  self.state.examples_seen]
        if self.loss_scale is not None:
            values += [self.loss_scale.scale, self.loss_scale.skipped]
        return rows.write(i, tf.stack([tf.cast(v, tf.float64) for v in values]))

    def _rows(self, num_steps) -> tf.TensorArray:
        width = len(FIGURES) - (2 if self.loss_scale is None else 0)
        return tf.TensorArray(tf.float64, size=num_steps, element_shape=[width])

    def _loop(self, iterator, num_steps, with_summaries):
        # Whether a step runs depends on the step count only: a step's value read by the
        # loop would make each step wait for the one before it to reach the host.
        rows = self._rows(num_steps)
        for i in tf.range(num_steps - 1 if with_summaries else num_steps):
            rows = self._record(rows, i, self.train_step(iterator))
        # The scope "/": the tf.cond's own would prefix the summaries' tags.  No summaries
        # after a step that diverged (the run ends with the call).
        if with_summaries and num_steps > 0:
            ran = rows.gather(tf.range(num_steps - 1))
            with tf.name_scope("/"), tf.summary.record_if(
                    ~tf.reduce_any(self._diverged(ran))):
                rows = self._record(rows, num_steps - 1,
                                    self.train_step(iterator, with_summaries=True))
        return rows.stack()

    def _alone(self, iterator, with_summaries):
        return self._record(self._rows(1), 0, self.train_step(iterator, with_summaries)).stack()
