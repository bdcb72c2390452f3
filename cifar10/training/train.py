"""The trainer as a library: synchronous data-parallel SGD of the tutorial model.

What it owns: the train step under a ``tf.distribute`` strategy, the learning-rate
schedule, the exponential moving averages, and the training loop that resumes,
steps, logs and saves.  The run directory (checkpoints, lock, markers) is
``checkpoints``'s; what several workers need is ``coordination``'s.  It reads no
flags: ``train_main`` builds a ``TrainConfig`` (``config``).

The training it does:
* one replica per device, each on its own batch of ``batch_size`` examples;
  gradients are combined across replicas into one synchronous update, the
  average of the replicas' gradients;
* plain gradient descent, learning rate 0.1 x 0.1^floor(epochs / 350), with
  epochs counted from the examples seen, whatever the number of replicas;
* moving averages of every trainable variable, decay 0.9999 with the step as
  ``num_updates``, saved in every checkpoint for the evaluator.

The global step counts updates done: the checkpoint after 1,000 updates is
``model.ckpt-1000`` and holds step 1000, which is where a resumed run goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import time
from typing import Callable, Iterator, Sequence

from absl import logging
import tensorflow as tf

from cifar10.runs import checkpoints
from cifar10.distribute import coordination
from cifar10.data import pipeline as data
from cifar10.distribute import devices
from cifar10.data import fileformat as ff
from cifar10.training import profiling
from cifar10.runs import records as runrecord
from cifar10.runs import summaries
from cifar10.core.config import (INITIAL_LEARNING_RATE, INITIAL_LOSS_SCALE,
                            LEARNING_RATE_DECAY_FACTOR, LOSS_AVERAGE_DECAY,
                            MOVING_AVERAGE_DECAY, NUM_EPOCHS_PER_DECAY, TrainConfig,
                            compute_dtype)
from cifar10.core.errors import DivergedError
from cifar10.model import Model
from cifar10.training.progress import StepReport, TrainResult

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


class TrainState(tf.Module):
    """Everything a checkpoint holds: weights, their averages, step, loss averages."""

    def __init__(self, seed: int, compute_dtype: tf.DType, num_classes: int = ff.NUM_CLASSES):
        super().__init__(name="train_state")
        self.model = Model(seed=seed, compute_dtype=compute_dtype, num_classes=num_classes)
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


class Trainer:
    """Builds the state and the distributed train step under ``strategy``.

    Args:
      config: the run's settings.
      strategy: one replica per device; ``devices.make_strategy`` makes one.
      examples_per_epoch: examples in the training set (for the LR schedule).
      num_classes: classes of the data: the model's outputs.
    """

    def __init__(self, config: TrainConfig, strategy: tf.distribute.Strategy,
                 examples_per_epoch: int = ff.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
                 num_classes: int = ff.NUM_CLASSES):
        config.check()
        if config.deterministic:
            # Process-wide: every op from here on runs deterministically (or raises).
            tf.config.experimental.enable_op_determinism()
        self.config = config
        self.strategy = strategy
        self.num_replicas = strategy.num_replicas_in_sync
        self.global_batch = config.batch_size * self.num_replicas
        self.examples_per_epoch = examples_per_epoch
        self.input_options = input_options(strategy)  # how batches reach the replicas
        with strategy.scope():
            self.state = TrainState(config.seed, tf.as_dtype(compute_dtype(config)),
                                    num_classes)
            self.loss_scale = (DynamicLossScale(config.loss_scale_growth_steps)
                               if config.use_fp16 else None)
        self.variables = self.state.model.parameters()
        # XLA compiles the per-replica forward and backward pass; the cross-replica
        # update (merge_call) stays outside the compiled cluster.
        self._gradients_fn = (tf.function(self._gradients, jit_compile=True) if config.xla
                              else self._gradients)
        self._loop_fns = {
            False: tf.function(lambda it, n: self._loop(it, n, with_summaries=False)),
            True: tf.function(lambda it, n: self._loop(it, n, with_summaries=True)),
        }
        # One step without a TensorFlow loop, for the profiler's window (run_steps).
        self._alone_fns = {
            False: tf.function(lambda it: self._alone(it, with_summaries=False)),
            True: tf.function(lambda it: self._alone(it, with_summaries=True)),
        }
        self._built: set[tuple[bool, bool]] = set()  # (with_summaries, alone) of those traced

    def dataset(self, train_files: list[str], start_step: int = 0
                ) -> tf.distribute.DistributedDataset:
        """The training batches, distributed over the replicas.

        The input position is not checkpointed (it would mean saving the shuffle
        buffer); instead a resumed run seeds its input with the step it starts
        at, so that it does not replay the order the run began with.  A
        ``deterministic`` run instead rebuilds the order it began with and skips
        the batches of the steps already done, so that it goes on exactly as an
        uninterrupted run would (with the same batch size and replicas).
        """
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

    def settings(self) -> dict:
        """What the run's config does not say: replicas, global batch, data, TensorFlow."""
        return {"num_replicas": self.num_replicas, "global_batch": self.global_batch,
                "examples_per_epoch": self.examples_per_epoch, "tensorflow": tf.__version__}

    def _apply(self, strategy, grads):
        """Cross-replica part of a step: sum gradients, SGD update, averages, step.

        Returns:
          (the summed gradients, the learning rate this update used).
        """
        pairs = list(zip(grads, self.variables))
        reduced = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, pairs)
        lr = learning_rate(self.state.examples_seen, self.examples_per_epoch,
                           self.config.initial_learning_rate)
        if self.loss_scale is None:
            def descend(v, g):
                return v.assign_sub(lr * g)
            kept, examples = 1.0, self.global_batch
        else:  # a step with non-finite gradients changes no weight and no average
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in reduced])

            def descend(v, g):
                return v.assign_sub(lr * tf.where(finite, g, tf.zeros_like(g)))
            kept = tf.cast(finite, tf.float32)
            examples = self.global_batch * tf.cast(finite, tf.int64)
            self.loss_scale.update(finite)
        for var, grad in zip(self.variables, reduced):
            strategy.extended.update(var, descend, args=(grad,))
        self.state.step.assign_add(1)
        self.state.examples_seen.assign_add(examples)
        rate = (1.0 - moving_average_decay(self.state.step)) * kept
        for avg, var in zip(self.state.averages.parameters(), self.variables):
            strategy.extended.update(avg, lambda a, v: a.assign_sub(rate * (a - v)), args=(var,))
        return reduced, lr

    def _gradients(self, images, labels):
        """Forward and backward pass of one replica: (grads, xent, wd, activations)."""
        model = self.state.model
        with tf.GradientTape() as tape:
            acts = model.activations(images)
            # This replica's share of the loss: gradients are SUMMED over replicas
            # (in _apply), which gives the gradient of the global batch's loss.
            parts = model.loss(acts["softmax_linear"], labels, self.global_batch,
                               self.num_replicas)
            scale = 1.0 if self.loss_scale is None else self.loss_scale.scale.read_value()
            scaled = parts.total * scale
        grads = tape.gradient(scaled, self.variables)
        if self.loss_scale is not None:
            grads = [g / scale for g in grads]
        return grads, parts.cross_entropy, parts.weight_decay, acts

    def _replica_step(self, images, labels, with_summaries):
        grads, xent, wd, acts = self._gradients_fn(images, labels)
        ctx = tf.distribute.get_replica_context()
        reduced, lr = ctx.merge_call(self._apply, args=(grads,))
        out = {"cross_entropy": xent, "weight_decay": wd}
        if with_summaries:
            out.update(activations=acts, gradients=reduced, images=images, learning_rate=lr)
        return out

    def _distributed_step(self, iterator, with_summaries):
        images, labels = next(iterator)
        out = self.strategy.run(self._replica_step, args=(images, labels, with_summaries))
        sum_ = tf.distribute.ReduceOp.SUM
        xent = self.strategy.reduce(sum_, out["cross_entropy"], axis=None)
        wd = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, out["weight_decay"], axis=None)
        losses = {"cross_entropy": xent, "total_loss": xent + wd}
        first = self.state.step == 1
        for name, value in losses.items():
            avg = self.state.loss_averages[name]
            new = tf.where(first, value, LOSS_AVERAGE_DECAY * avg
                           + (1.0 - LOSS_AVERAGE_DECAY) * value)
            if self.loss_scale is not None:  # a skipped step leaves the averages alone
                new = tf.where(tf.math.is_finite(value), new, avg)
            avg.assign(new)
        if with_summaries:
            local = lambda x: self.strategy.experimental_local_results(x)[0]  # noqa: E731
            summaries.write_train_summaries(
                step=self.state.step, learning_rate=local(out["learning_rate"]), losses=losses,
                loss_averages=self.state.loss_averages,
                activations={k: local(v) for k, v in out["activations"].items()},
                variables=self.variables, gradients=[local(g) for g in out["gradients"]],
                images=local(out["images"]))
        return losses

    def skipped_for_fp16(self) -> bool:
        """After a step with a non-finite loss: it was skipped by the dynamic loss
        scale, which can still go down (else the run has diverged)."""
        return self.loss_scale is not None and bool(self._scale_can_fall())

    def _scale_can_fall(self) -> tf.Tensor:
        return self.loss_scale.scale.read_value() > 1.0

    def step(self, iterator: Iterator, with_summaries: bool = False) -> dict[str, tf.Tensor]:
        """Runs one synchronous update on the next batch of ``iterator`` (a loop of one
        step: ``run_steps``).

        Returns:
          {'cross_entropy', 'total_loss'}: the step's losses over the global batch.
        """
        return self.run_steps(iterator, 1, with_summaries)[0]

    def run_steps(self, iterator: Iterator, num_steps: int, with_summaries: bool = False,
                  alone: bool = False) -> tuple[dict[str, tf.Tensor], int]:
        """Runs ``num_steps`` updates in one call into TensorFlow (a loop).

        The loop stops early after a step whose loss is not finite (unless
        ``--use_fp16``'s loss scale skipped it and can still go down).  With
        ``with_summaries`` its last step writes the training summaries.

        ``alone`` runs one step (``num_steps`` must be 1) in a function without a
        TensorFlow loop, the same step: the profiler takes the iterations of a
        traced loop for the steps of its overview, and then drops the step marks
        of the calls (``profiling``), finding none.

        Returns:
          (the losses of the last step run, as ``step``'s; the step whose loss was
          not finite, or 0).
        """
        if alone:
            if num_steps != 1:
                raise ValueError(f"a step alone is one step, not {num_steps}")
            losses, diverged = self._alone_fns[with_summaries](iterator)
        else:
            losses, diverged = self._loop_fns[with_summaries](
                iterator, tf.constant(num_steps, tf.int32))
        self._built.add((with_summaries, alone))
        return losses, int(diverged)

    def prepare(self, iterator: Iterator, with_summaries: bool = False,
                alone: bool = False) -> None:
        """Builds the function of ``run_steps(iterator, ..., with_summaries, alone)``
        before its first call, if not built yet, so that the time of that call is
        its steps' time, not the tracing's (seconds; more with the summaries of
        several replicas).

        The loop without summaries is also set up in TensorFlow's runtime, by a call
        of no steps; the others are traced only: a call would run a step.  Every
        worker of a multi-worker run must prepare the same functions in the same order.
        """
        if (with_summaries, alone) in self._built:
            return
        if not (with_summaries or alone):
            self.run_steps(iterator, 0)
        elif alone:
            self._alone_fns[with_summaries].get_concrete_function(iterator)
        else:
            self._loop_fns[True].get_concrete_function(iterator,
                                                       tf.TensorSpec([], tf.int32))
        self._built.add((with_summaries, alone))

    def _diverged(self, total_loss: tf.Tensor) -> tf.Tensor:
        """After a step: whether its loss says the run diverged: not finite, and not
        a step ``skipped_for_fp16``."""
        bad = tf.logical_not(tf.math.is_finite(total_loss))
        if self.loss_scale is not None:
            bad = tf.logical_and(bad, tf.logical_not(self._scale_can_fall()))
        return bad

    def _loop(self, iterator, num_steps, with_summaries):
        zero = tf.constant(0.0)
        losses = {"cross_entropy": zero, "total_loss": zero}
        diverged = tf.constant(0, tf.int64)
        for _ in tf.range(num_steps - 1 if with_summaries else num_steps):
            losses = self._distributed_step(iterator, with_summaries=False)
            if self._diverged(losses["total_loss"]):
                diverged = self.state.step.read_value()
                break
        if with_summaries:
            # The last step writes the summaries, unless the loop stopped on a
            # diverged step (no tf.cond here: it would prefix the summaries' tags).
            going = tf.equal(diverged, 0)
            with tf.summary.record_if(going):
                last = self._distributed_step(iterator, with_summaries=True)
            diverged = tf.where(tf.logical_and(going, self._diverged(last["total_loss"])),
                                self.state.step.read_value(), diverged)
            losses = {k: tf.where(going, last[k], v) for k, v in losses.items()}
        return losses, diverged

    def _alone(self, iterator, with_summaries):
        losses = self._distributed_step(iterator, with_summaries)
        diverged = tf.where(self._diverged(losses["total_loss"]), self.state.step.read_value(),
                            tf.constant(0, tf.int64))
        return losses, diverged


class _Progress:
    """Times the steps of a run: prints each report's line (``StepReport``), writes its
    examples_per_sec summary, hands it to ``on_report``, and gives the run's figures
    at its end (``figures``).

    The clock of the rates starts when the steps begin (``steps_begin``) and stops
    while a step function is built (``clock_stopped``), so that no rate includes
    tracing.  The time left is the remaining steps at the pace since the run's first
    line (that line's own step starts the input pipeline: no measure of the rest).
    """

    def __init__(self, trainer: Trainer, start: int, print_fn, on_report):
        self.trainer, self.print_fn, self.on_report = trainer, print_fn, on_report
        self.start_step = self.step = start
        self.began = time.monotonic()  # the run's wall time counts from here
        self.start_epoch = self._epoch()
        self.clock = self.ended = self.began  # when the steps began and ended
        self.last = self.began  # when the last report was done
        self.steps = 0  # steps since the last report
        self.first: tuple[float, int] | None = None  # (time, step) of the first report
        self.loss: float | None = None
        self.skipped = 0  # steps skipped for non-finite gradients (--use_fp16), so far

    def _epoch(self) -> float:
        return int(self.trainer.state.examples_seen.numpy()) / self.trainer.examples_per_epoch

    def steps_begin(self) -> None:
        """The steps begin: their clock starts."""
        self.clock = self.last = time.monotonic()

    @contextlib.contextmanager
    def clock_stopped(self):
        """A context whose time no rate counts (building a step function)."""
        began = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - began
            self.clock, self.last = self.clock + spent, self.last + spent
            if self.first:
                self.first = (self.first[0] + spent, self.first[1])

    def _loss_scale(self, step: int) -> None:
        """--use_fp16: says how many steps were skipped since the last line, if any."""
        scale = self.trainer.loss_scale
        skipped, value = int(scale.skipped.numpy()), float(scale.scale.numpy())
        if skipped > self.skipped:
            self.print_fn(f"{skipped - self.skipped} step(s) had non-finite gradients and were "
                          f"skipped since the last line; loss scale now {value:g}.")
        self.skipped = skipped
        tf.summary.scalar("loss_scale", value, step=step)
        tf.summary.scalar("skipped_steps", skipped, step=step)

    def _seconds_left(self, step: int, now: float) -> float | None:
        max_steps = self.trainer.config.max_steps
        if self.first is None:
            self.first = (now, step)
        first_time, first_step = self.first
        if step == first_step or step >= max_steps:
            return None
        return (max_steps - step) * (now - first_time) / (step - first_step)

    def steps_done(self, step: int, count: int, loss: float, log: bool) -> None:
        """``count`` more steps are done, the last of them ``step`` with ``loss``."""
        self.steps += count
        self.step, self.loss = step, loss
        if not log:
            return
        now = time.monotonic()
        duration = now - self.last
        trainer = self.trainer
        before = trainer.state.examples_seen - trainer.global_batch  # this update's rate
        report = StepReport(
            step=step, loss=loss,
            examples_per_sec=self.steps * trainer.global_batch / duration,
            sec_per_batch=duration / self.steps / trainer.num_replicas,
            learning_rate=float(learning_rate(before, trainer.examples_per_epoch,
                                              trainer.config.initial_learning_rate)),
            max_steps=trainer.config.max_steps, epoch=self._epoch(),
            seconds_left=self._seconds_left(step, now))
        self.print_fn(report.line())
        tf.summary.scalar("examples_per_sec", report.examples_per_sec, step=step)
        if trainer.loss_scale is not None:
            self._loss_scale(step)
        if self.on_report:
            self.on_report(report)
        self.last, self.steps = time.monotonic(), 0

    def steps_end(self) -> None:
        """The steps are over and saved: their clock stops."""
        self.ended = time.monotonic()

    def figures(self) -> dict:
        """The run's figures, as ``TrainResult``'s fields, once the steps ended."""
        steps = self.step - self.start_step
        return {"seconds": time.monotonic() - self.began, "start_epoch": self.start_epoch,
                "epoch": self._epoch(), "loss": self.loss,
                "examples_per_sec": (steps * self.trainer.global_batch
                                     / max(self.ended - self.clock, 1e-9))}


def train(config: TrainConfig, strategy: tf.distribute.Strategy, train_files: list[str],
          examples_per_epoch: int, stop_event: threading.Event | None = None,
          print_fn=print, run_info: dict | None = None,
          class_names: Sequence[str] = ff.CLASS_NAMES,
          on_report: Callable[[StepReport], None] | None = None,
          flags_text: str | None = None, command: Sequence[str] = ()) -> TrainResult:
    """Trains until ``config.max_steps`` or until ``stop_event`` is set.

    Takes the lock of ``config.train_dir`` (one trainer per directory), with
    ``fresh_start`` removes the earlier run's files, then resumes from the newest
    checkpoint that restores.  Saves a checkpoint every ``checkpoint_steps``
    steps, at ``max_steps`` and when stopped; never from a diverged state.

    Under a multi-worker strategy every worker calls this; only the chief writes
    to ``train_dir`` (``coordination.Coordinator``), and ``stop_event`` on any
    worker makes all of them save at one step and return.

    Args:
      config: the run's settings.
      strategy: the distribution strategy (``devices.make_strategy``).
      train_files: validated training ``.bin`` files.
      examples_per_epoch: records in ``train_files`` (for the LR schedule).
      stop_event: set (e.g. by a signal handler) to save and return after the
        current step.
      print_fn: where the progress lines and notices go.
      run_info: more settings to record with the config in TensorBoard (e.g. the
        command line and data directory).
      class_names: the data's class names in label order, recorded in
        ``train_dir`` for cifar10-predict and cifar10-export.
      on_report: called with the figures of each logged step (``StepReport``),
        after its progress line is printed.
      flags_text: the program's flags in flagfile format, recorded per start in
        ``train_dir``'s flags.txt (``runrecord``); None records no flags.
      command: the command line, for the start's environment record.

    Raises:
      DivergedError: the loss became NaN or infinite.
      Cifar10Error: the run directory cannot be used (in use, unwritable, full,
        no checkpoint restores), or training failed (e.g. another worker was lost).
    """
    cfg = config
    trainer = Trainer(cfg, strategy, examples_per_epoch, num_classes=len(class_names))
    with coordination.Coordinator(strategy, stop_event) as cluster:
        cluster.refuse_fresh_start(cfg.fresh_start, cfg.train_dir)
        run_dir = checkpoints.RunDirectory(cfg.train_dir, trainer.state.checkpoint(),
                                           cfg.keep_checkpoints, save_dir=cluster.save_dir,
                                           fresh_start=cfg.fresh_start, print_fn=print_fn)
        with run_dir:
            run_dir.record_class_names(class_names)
            return _resume_and_train(trainer, run_dir, cluster, train_files, class_names,
                                     print_fn, run_info, on_report, flags_text, command)


def _resume_and_train(trainer: Trainer, run_dir: checkpoints.RunDirectory,
                      cluster: coordination.Coordinator, train_files: list[str],
                      class_names: Sequence[str], print_fn, run_info, on_report,
                      flags_text, command) -> TrainResult:
    """``train`` once the run directory is locked: restores, records the start,
    trains, marks the run complete."""
    cfg = trainer.config
    restored = run_dir.restore()
    start = restored.step if restored else 0
    cluster.check_same_start(start, cfg.train_dir)
    if start >= cfg.max_steps:
        print_fn(f"Training in {cfg.train_dir} is already complete at step {start} "
                 f"(max_steps={cfg.max_steps}); nothing to do. Raise --max_steps to "
                 f"train further or pass --fresh_start to start over.")
        run_dir.mark_complete(start)
        return TrainResult(start_step=start, step=start, complete=True,
                           last_checkpoint=restored.path, train_dir=cfg.train_dir,
                           is_chief=cluster.is_chief, task=cluster.task)
    if restored:
        print_fn(f"Resuming from {restored.path} at step {start}.")
    if run_dir.is_chief:
        _record_start(trainer, cfg.train_dir, train_files, class_names, start,
                      resumed=restored is not None, flags_text=flags_text, command=command)
    print_fn(_start_line(trainer, cluster, cfg.train_dir, train_files))
    run_dir.unmark_complete()
    settings = {**dataclasses.asdict(cfg), **trainer.settings(), "start_step": start,
                "classes": ", ".join(class_names), **(run_info or {})}
    progress = _Progress(trainer, start, print_fn, on_report)
    step = _train_loop(trainer, run_dir, cluster, train_files, start, settings, print_fn,
                       progress)
    complete = step == cfg.max_steps
    if complete:
        run_dir.mark_complete(step)
    return TrainResult(start_step=start, step=step, complete=complete,
                       last_checkpoint=run_dir.latest_path(), train_dir=cfg.train_dir,
                       is_chief=cluster.is_chief, task=cluster.task, **progress.figures())


def trained_settings(trainer: Trainer, train_files: list[str],
                     class_names: Sequence[str]) -> dict:
    """The settings of a start that change what is trained (``runrecord``), and the
    class count and step limit."""
    cfg = trainer.config
    return {"batch_size": cfg.batch_size, "global_batch": trainer.global_batch,
            "num_replicas": trainer.num_replicas,
            "num_workers": devices.num_workers(trainer.strategy),
            "precision": compute_dtype(cfg),
            "data_dir": os.path.abspath(os.path.dirname(train_files[0])),
            "num_classes": len(class_names), "examples_per_epoch": trainer.examples_per_epoch,
            "initial_learning_rate": cfg.initial_learning_rate, "seed": cfg.seed,
            "deterministic": cfg.deterministic, "xla": cfg.xla, "max_steps": cfg.max_steps}


def _record_start(trainer: Trainer, train_dir: str, train_files: list[str],
                  class_names: Sequence[str], start: int, resumed: bool,
                  flags_text: str | None, command: Sequence[str]) -> None:
    """Appends this start to the run's flags.txt and environment.jsonl; on resume,
    one notice per trained setting that changed since the start before."""
    settings = trained_settings(trainer, train_files, class_names)
    before = runrecord.last_record(train_dir) if resumed else None
    changed = runrecord.changes(before and before.get("settings"), settings)
    for change in changed:
        logging.warning(runrecord.describe_change(change, start, train_dir), extra={"notice": True})
    record = runrecord.environment(
        "cifar10-train", command, devices.describe(trainer.strategy.extended.worker_devices),
        tf.__version__)
    record.update(start_step=start, num_replicas=trainer.num_replicas,
                  num_workers=settings["num_workers"], settings=settings, changes=changed)
    runrecord.record_start(train_dir, record, flags_text)


def _start_line(trainer: Trainer, cluster: coordination.Coordinator, train_dir: str,
                train_files: list[str]) -> str:
    where = (f"checkpoints and summaries in {train_dir}" if cluster.is_chief else
             f"this is {cluster.task}: the chief writes checkpoints and summaries to {train_dir}")
    return (f"Training on {trainer.examples_per_epoch} examples from "
            f"{os.path.dirname(train_files[0])} with {trainer.num_replicas} replica(s), "
            f"global batch {trainer.global_batch}; {where}.")


def loop_end(done: int, start: int, config: TrainConfig) -> int:
    """The last step of the loop that follows step ``done`` in a run that started
    at ``start``: ``steps_per_loop`` steps on, or sooner where the host has work:
    the first step, a log line, summaries, a checkpoint, ``max_steps``, each edge
    of the profile window (a loop ends before its first step and at its last), and
    each step inside it (a loop of one step, which the profiler's trace marks)."""
    cfg = config
    def next_multiple(k):
        return (done // k + 1) * k
    ends = [done + cfg.steps_per_loop, cfg.max_steps, next_multiple(cfg.log_frequency),
            next_multiple(cfg.summary_steps), next_multiple(cfg.checkpoint_steps)]
    if done == start:
        ends.append(start + 1)
    if cfg.profile_steps:
        first, last = cfg.profile_steps
        ends += [step for step in (first - 1, last) if step > done]
        if first <= done + 1 <= last:
            ends.append(done + 1)
    return min(ends)


def _train_loop(trainer: Trainer, run_dir: checkpoints.RunDirectory,
                cluster: coordination.Coordinator, train_files: list[str], start: int,
                settings: dict, print_fn, progress: _Progress) -> int:
    """Steps from ``start`` to ``max_steps`` or a stop, in loops of up to
    ``steps_per_loop`` steps (``loop_end``); returns the step reached.

    The host reads the losses, checks for a stop and saves only where a loop
    ends, so a stop request is honoured within ``steps_per_loop`` steps.
    """
    cfg = trainer.config
    iterator = iter(trainer.dataset(train_files, start))
    save = functools.partial(_save, trainer, run_dir)
    cluster.watch(lambda: save(int(trainer.state.step.numpy())))
    done = start  # the last step completed
    logdir = cfg.train_dir if run_dir.is_chief else None  # the chief writes, the others not
    profile = profiling.StepWindow(cfg.profile_steps, logdir, start, print_fn)
    try:
        with summaries.file_writer(logdir):
            summaries.write_run_config(settings, step=start)
            # The first call records the step's graph for the Graphs dashboard.
            tf.summary.trace_on(graph=True, profiler=False)
            progress.steps_begin()
            while done < cfg.max_steps:
                end = loop_end(done, start, cfg)
                losses, diverged = _run_loop(trainer, iterator, done, end, profile, progress)
                if done == start:
                    tf.summary.trace_export("train_step", step=start)
                loss = float(losses["total_loss"])
                if diverged:
                    raise DivergedError(
                        f"Model diverged with loss = NaN at step {diverged} (loss {loss}); "
                        f"{run_dir.describe_latest('the last good checkpoint')}")
                profile.after(end)
                progress.steps_done(end, end - done, loss, log=end % cfg.log_frequency == 0
                                    or end in (start + 1, cfg.max_steps))
                done = end
                if end % cfg.checkpoint_steps == 0 or end == cfg.max_steps:
                    save(end)
                if cluster.should_stop():
                    break
            save(done)  # stopped between checkpoints: keep the work done
            progress.steps_end()
    except tf.errors.OpError as e:
        raise cluster.failure(e, done, run_dir.describe_latest()) from e
    finally:
        profile.close()
        # Stop the input pipeline here, not at some later garbage collection (the
        # traced step keeps this frame alive); see input_options for its cost.
        del iterator
    return done


def _run_loop(trainer: Trainer, iterator: Iterator, done: int, end: int,
              profile: profiling.StepWindow, progress: _Progress
              ) -> tuple[dict[str, tf.Tensor], int]:
    """Runs steps ``done + 1`` to ``end`` (``Trainer.run_steps``): a loop, or inside
    the profile window a step alone, marked with its number in the trace.

    A step function is built before its first call with the progress clock stopped
    (``Trainer.prepare``); the window's, before the profiler starts.  Every worker
    runs the window's steps alone, traced or not, so that all run the same functions.
    """
    every = trainer.config.summary_steps
    alone = profile.covers(end)
    kinds = [end % every == 0]
    if alone and not profile.covers(done):  # the window begins
        first, last = profile.window
        with_summaries = last // every - (first - 1) // every  # summary steps in it
        kinds = ([False] if with_summaries <= last - first else []) + (
            [True] if with_summaries else [])
    with progress.clock_stopped():
        for kind in kinds:
            trainer.prepare(iterator, with_summaries=kind, alone=alone)
    profile.before(done + 1)
    with profile.marker(end):
        return trainer.run_steps(iterator, end - done, with_summaries=end % every == 0,
                                 alone=alone)


def input_options(strategy: tf.distribute.Strategy, device_type: str | None = None
                  ) -> tf.distribute.InputOptions | None:
    """How the batches reach the replicas of ``strategy``, by the kind of its devices
    (``device_type``, 'GPU' or 'CPU', the kind of its first device by default).

    GPU replicas: one pipeline per worker, whose batches TensorFlow's multi-device
    iterator copies to each GPU ahead of the step (fetch to device), so that a step
    of a few milliseconds does not wait for its batch to cross the bus.

    CPU replicas (MirroredStrategy): one pipeline per replica, each reading its own
    shard of the records, and no device copy, the batch already being in host
    memory: measured on CPUs, that doubles the speed of small steps, and deleting
    the multi-device iterator can wait for up to a minute in TensorFlow 2.21.
    MultiWorkerMirroredStrategy takes one pipeline per worker, OneDeviceStrategy its
    default (None).
    """
    if device_type is None:
        try:
            first = strategy.extended.worker_devices[0]
        except (RuntimeError, NotImplementedError, AttributeError, IndexError):
            first = "/device:CPU:0"  # the default strategy has no device list
        device_type = tf.DeviceSpec.from_string(first).device_type or "CPU"
    if device_type == "GPU":
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_WORKER,
            experimental_fetch_to_device=True, experimental_per_replica_buffer_size=2)
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False)
    return None


def _save(trainer: Trainer, run_dir: checkpoints.RunDirectory, step: int) -> None:
    # A finite loss does not prove that the update it led to was finite; a
    # checkpoint is only written from weights that are all finite.
    if not all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in trainer.variables):
        raise DivergedError(
            f"Model diverged with loss = NaN: weights are not finite at step {step}; "
            f"{run_dir.describe_latest('the last good checkpoint')}")
    run_dir.save(step)
