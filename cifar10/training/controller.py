"""The controller: runs the step engine in a run directory, from its newest
checkpoint to ``max_steps`` or a stop.

``train`` takes the run directory (lock, restore; ``rundir``), decides whether
training starts (a stop asked for before it ends the run there, with nothing
trained; the caller's ``on_training_start`` reads that stop request in one step with
its own mark that training started), says where it resumes and records the start
(``run``), then runs the trainer's loops of up to ``steps_per_loop`` steps
(``engine.Trainer.run_steps``).  A loop ends wherever the host has work
(``loop_end``), and there small objects act: the progress meter (lines, rates;
``meter``), the saver (checkpoints), the profiler's window (``profiling``) and the
workers' stop (``coordination``).  A NaN or infinite loss stops the run.  A
``deterministic`` run takes TensorFlow's op determinism for its own time
(``op_determinism``).  It reads no flags: ``train_main`` builds a ``TrainConfig``.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Callable, Iterator

import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import Cifar10Error, DivergedError
from cifar10.distribute import coordination
from cifar10.distribute import settings_check
from cifar10.runs import checkpoints
from cifar10.runs.rundir import RunDirectory
from cifar10.runs import summaries
from cifar10.training import profiling
from cifar10.training import run
from cifar10.training.engine import Trainer
from cifar10.training.meter import ProgressMeter
from cifar10.training.progress import StepReport, TrainResult
from cifar10.training.run import Invocation, TrainData


def train(config: TrainConfig, strategy: tf.distribute.Strategy, data: TrainData,
          stop_event: threading.Event | None = None,
          print_fn: Callable[[str], None] = print,
          on_report: Callable[[StepReport], None] | None = None,
          invocation: Invocation | None = None,
          on_training_start: Callable[[], bool] | None = None) -> TrainResult:
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
      data: the training files, their record count and class names.
      stop_event: set (e.g. by a signal handler) to save and return after the
        current loop of steps (before training starts: to stop at once).
      print_fn: where the progress lines and notices go.
      on_report: called with the figures of each logged step (``StepReport``),
        after its progress line is printed.
      invocation: the program's command line and flags, recorded per start in
        ``train_dir`` (``records``), and settings to show in TensorBoard.
      on_training_start: called once, where training starts: the run restored and not
        complete (never for a run already complete), before its start is recorded, its
        lines printed or a step run.  Returns whether a stop was asked for by then
        (``stop_event`` is set), read in one step with the caller's own mark that
        training started (by which, say, a signal handler chooses what it promises),
        so that each stop falls on one side of the edge: before it, nothing is trained
        (``StoppedBeforeTraining``); after it, the run saves after its loop of steps.
        None: ``stop_event.is_set``.

    Raises:
      StoppedBeforeTraining: ``stop_event`` was set, on this worker or another,
        before training started (a KeyboardInterrupt: nothing trained or saved).
      DivergedError: the loss, or the weights, became NaN or infinite.
      Cifar10Error: the run directory cannot be used (in use, unwritable, full,
        no checkpoint restores), or training failed (e.g. another worker was lost).
    """
    with op_determinism(config.deterministic), \
            coordination.Coordinator(strategy, stop_event) as cluster:
        settings_check.check_same_settings(cluster, run.shared_settings(config, data))
        trainer = _trainer(config, strategy, data, cluster)
        with _run_directory(trainer, cluster, print_fn) as run_dir:
            run_dir.record_class_names(data.class_names)
            restored = _restore(run_dir, cluster, config.train_dir)
            start = restored.step if restored else 0
            if start >= config.max_steps:
                return _already_complete(config, cluster, run_dir, restored, print_fn)
            _stop_if_asked_before_training(
                cluster, on_training_start or cluster.stop_event.is_set)
            settings = run.begin(trainer, cluster, data, restored,
                                 invocation or Invocation(), print_fn)
            run_dir.unmark_complete()
            loops = _Controller(trainer, cluster, run_dir, start, print_fn, on_report)
            step = loops.run(data.files, settings)
            return _ended(config, cluster, run_dir, loops, start, step)


@contextlib.contextmanager
def op_determinism(enabled: bool) -> Iterator[None]:
    """A context in which TensorFlow runs every op deterministically, or raises for
    an op that has no deterministic kernel, if ``enabled`` (``--deterministic``).

    TensorFlow's setting is the whole process's: it is turned on for the context
    only, and left at its end as it was found (on where the caller or
    ``TF_DETERMINISTIC_OPS=1`` turned it on), so that a deterministic run does not
    make what the process does next (another run, the benchmark's next figure)
    deterministic and slower.  With ``enabled`` False it is left as it is.
    """
    if not enabled:
        yield
        return
    was_on = _set_op_determinism(True)
    try:
        yield
    finally:
        _set_op_determinism(was_on)


def _set_op_determinism(on: bool) -> bool:
    """Turns TensorFlow's op determinism on or off; returns whether it was on.

    TensorFlow's public API only turns it on
    (``tf.config.experimental.enable_op_determinism``); reading it and turning it
    off are in its private ``tensorflow.python.framework.config``
    (``is_op_determinism_enabled``, ``disable_op_determinism``, in every
    TensorFlow this package supports).  This is the one place that reaches there.
    """
    from tensorflow.python.framework import config as tf_config

    was_on = tf_config.is_op_determinism_enabled()
    if on:
        tf.config.experimental.enable_op_determinism()
    elif was_on:
        tf_config.disable_op_determinism()
    return was_on


def _trainer(config: TrainConfig, strategy: tf.distribute.Strategy, data: TrainData,
             cluster: coordination.Coordinator) -> Trainer:
    """The step engine, its variables built on every worker (the chief's initial
    values broadcast): the workers' first meeting, where a worker lost (e.g. a
    chief that refused train_dir) is one line (``cluster.starting``), as in the
    others before the loop."""
    with cluster.starting():
        return Trainer(config, strategy, data.examples_per_epoch, len(data.class_names))


def _run_directory(trainer: Trainer, cluster: coordination.Coordinator,
                   print_fn: Callable[[str], None]) -> RunDirectory:
    """The run's directory, as this worker uses it (``coordination``)."""
    cfg = trainer.config
    cluster.refuse_fresh_start(cfg.fresh_start, cfg.train_dir)
    return RunDirectory(cfg.train_dir, trainer.state.checkpoint(),
                                    cfg.keep_checkpoints, save_dir=cluster.save_dir,
                                    fresh_start=cfg.fresh_start, print_fn=print_fn)


def _restore(run_dir: RunDirectory, cluster: coordination.Coordinator,
             train_dir: str) -> checkpoints.Checkpoint | None:
    """The checkpoint the run goes on from (None: it starts at step 0), the same step
    on every worker."""
    with cluster.starting():
        restored = run_dir.restore()
        cluster.check_same_start(restored.step if restored else 0, train_dir)
    return restored


def _already_complete(config: TrainConfig, cluster: coordination.Coordinator,
                      run_dir: RunDirectory, restored: checkpoints.Checkpoint,
                      print_fn: Callable[[str], None]) -> TrainResult:
    """A run restored at ``max_steps``: says so, marks it complete and trains nothing.

    Raises:
      Cifar10Error: the run is past ``max_steps``: a --max_steps below the step of a
        run stopped on its way to a larger one is not its end, and a marker would
        make the evaluator and the Slurm script take it for finished.
    """
    step = restored.step
    if step > config.max_steps:
        raise Cifar10Error(
            f"--max_steps={config.max_steps} is below the run's step {step} "
            f"({restored.path}): pass a --max_steps above {step} to train it further, "
            f"or --fresh_start (or another --train_dir) for a new run")
    print_fn(f"Training in {config.train_dir} is already complete at step {step} "
             f"(max_steps={config.max_steps}); nothing to do. Raise --max_steps to "
             f"train further or pass --fresh_start to start over.")
    run_dir.mark_complete(step)
    return TrainResult(start_step=step, step=step, complete=True,
                       last_checkpoint=restored.path, train_dir=config.train_dir,
                       is_chief=cluster.is_chief, task=cluster.task)


def _stop_if_asked_before_training(cluster: coordination.Coordinator,
                                   training_starts: Callable[[], bool]) -> None:
    """A stop asked for before training starts (Ctrl-C while the job forms) stops
    every worker here, with nothing trained, recorded or saved: as a program
    interrupted before its work began, not a save after a first step.

    ``training_starts`` (``train``'s ``on_training_start``) says whether this
    worker's stop was asked for; that value, not a later read of the stop event,
    goes into the workers' agreement, so that a stop that comes once the caller
    marked the start is one in training, which saves."""
    asked = training_starts()
    with cluster.starting():
        cluster.stop_if_asked_before_training(asked)


def _ended(config: TrainConfig, cluster: coordination.Coordinator, run_dir: RunDirectory,
           loops: _Controller, start: int, step: int) -> TrainResult:
    """The run's result, its directory marked complete where it reached ``max_steps``."""
    complete = step == config.max_steps
    if complete:
        run_dir.mark_complete(step)
    return TrainResult(start_step=start, step=step, complete=complete,
                       last_checkpoint=run_dir.latest_path(),
                       train_dir=config.train_dir, is_chief=cluster.is_chief,
                       task=cluster.task, **loops.meter.figures())


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


class _Controller:
    """Runs ``trainer``'s loops from step ``start`` to ``max_steps`` or a stop, and
    acts where each ends: the progress meter, the saver, the profiler's window and
    the workers' stop.

    The host reads the losses, checks for a stop and saves only where a loop
    ends, so a stop request is honoured within ``steps_per_loop`` steps.
    """

    def __init__(self, trainer: Trainer, cluster: coordination.Coordinator,
                 run_dir: RunDirectory, start: int,
                 print_fn: Callable[[str], None],
                 on_report: Callable[[StepReport], None] | None):
        cfg = trainer.config
        self.trainer, self.cluster, self.run_dir = trainer, cluster, run_dir
        self.start = self.done = start  # the step the run started at; the last one done
        self.logdir = cfg.train_dir if cluster.is_chief else None  # the others write nothing
        self.meter = ProgressMeter(trainer, start, print_fn, on_report)
        self.saver = _Saver(trainer, run_dir)
        self.profile = profiling.StepWindow(cfg.profile_steps, self.logdir, start, print_fn)

    def run(self, files, settings: dict) -> int:
        """Steps on the batches of ``files`` until ``max_steps`` or a stop; returns the
        step reached.  ``settings`` are shown in TensorBoard with the run's config."""
        cfg, trainer = self.trainer.config, self.trainer
        iterator = iter(trainer.dataset(files, self.start))
        self.cluster.watch(lambda: self.saver.save(int(trainer.state.step.numpy())))
        try:
            with summaries.file_writer(self.logdir):
                summaries.write_run_config(settings, step=self.start)
                # The first call records the step's graph for the Graphs dashboard.
                tf.summary.trace_on(graph=True, profiler=False)
                self.meter.steps_begin()
                while self.done < cfg.max_steps:
                    end = loop_end(self.done, self.start, cfg)
                    alone = self._before_loop(iterator, end)
                    with self.profile.marker(end):
                        losses, diverged = trainer.run_steps(
                            iterator, end - self.done,
                            with_summaries=end % cfg.summary_steps == 0, alone=alone)
                    self._loop_ended(end, float(losses["total_loss"]), diverged)
                    if self.cluster.should_stop():
                        break
                self.saver.save(self.done)  # stopped between checkpoints: keep the work done
                self.meter.steps_end()
        except tf.errors.OpError as e:
            raise self.cluster.failure(e, self.done, self.run_dir.latest_path()) from e
        finally:
            self.profile.close()
            # Stop the input pipeline here, not at some later garbage collection (the
            # traced step keeps this frame alive); see devices.input_options for its cost.
            del iterator
        return self.done

    def _before_loop(self, iterator, end: int) -> bool:
        """Before the loop of steps ``done + 1`` to ``end``: builds its step function
        with the progress clock stopped (``Trainer.prepare``), and starts the
        profiler where its window begins.  Returns whether the loop is a step alone
        (inside the window, marked with its number in the trace).

        Every worker runs the window's steps alone, traced or not, so that all run the
        same functions; the window's are built before the profiler starts.
        """
        every = self.trainer.config.summary_steps
        alone = self.profile.covers(end)
        kinds = [end % every == 0]
        if alone and not self.profile.covers(self.done):  # the window begins
            first, last = self.profile.window
            with_summaries = last // every - (first - 1) // every  # summary steps in it
            kinds = ([False] if with_summaries <= last - first else []) + (
                [True] if with_summaries else [])
        with self.meter.clock_stopped():
            for kind in kinds:
                self.trainer.prepare(iterator, with_summaries=kind, alone=alone)
        self.profile.before(self.done + 1)
        return alone

    def _loop_ended(self, end: int, loss: float, diverged: int) -> None:
        """The loop up to step ``end`` ran: its loss is checked, then the profiler's
        window, the progress meter and the saver act."""
        if self.done == self.start:
            tf.summary.trace_export("train_step", step=self.start)
        if diverged:
            what = "with loss = NaN" if math.isnan(loss) else f"with an infinite loss ({loss})"
            raise DivergedError(f"Model diverged {what} at step {diverged}; "
                                f"{self.run_dir.describe_latest('the last good checkpoint')}")
        self.profile.after(end)
        self.meter.steps_done(end, end - self.done, loss)
        self.done = end
        self.saver.at_loop_end(end)


class _Saver:
    """Saves the run's checkpoints: every ``checkpoint_steps`` steps and at
    ``max_steps`` (``at_loop_end``), and when a run stops (``save``); never from
    weights that are not all finite."""

    def __init__(self, trainer: Trainer, run_dir: RunDirectory):
        self.trainer, self.run_dir = trainer, run_dir

    def at_loop_end(self, step: int) -> None:
        cfg = self.trainer.config
        if step % cfg.checkpoint_steps == 0 or step == cfg.max_steps:
            self.save(step)

    def save(self, step: int) -> None:
        # A finite loss does not prove that the update it led to was finite; a
        # checkpoint is only written from weights that are all finite.
        if not all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.trainer.variables):
            raise DivergedError(
                f"Model diverged: weights are not finite (NaN or infinite) at step {step}; "
                f"{self.run_dir.describe_latest('the last good checkpoint')}")
        self.run_dir.save(step)
