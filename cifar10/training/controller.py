"""The controller: runs the step engine in a run directory, from its newest
checkpoint to ``max_steps`` or a stop.

``train`` takes the run directory (lock, restore; ``rundir``), decides whether
training starts (a stop asked for before it ends the run there, with nothing
trained; the caller's ``on_training_start`` reads that stop request in one step with
its own mark that training started), says where it resumes and records the start
(``run``), then runs the trainer's loops of up to ``steps_per_loop`` steps
(``loops``: where each ends, and what acts there).  A ``deterministic`` run takes
TensorFlow's op determinism for its own time (``determinism``).  It reads no flags:
``train_main`` builds a ``TrainConfig``.
"""

from __future__ import annotations

import threading
from typing import Callable

import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import coordination
from cifar10.distribute import settings_check
from cifar10.distribute import start_checks
from cifar10.runs import checkpoints
from cifar10.runs.rundir import RunDirectory
from cifar10.training import run
from cifar10.training.determinism import op_determinism
from cifar10.training.engine import Trainer
from cifar10.training.loops import LoopController
from cifar10.training.progress import StepReport, TrainResult
from cifar10.training.run import Invocation, TrainData


def train(config: TrainConfig, strategy: tf.distribute.Strategy, data: TrainData,
          stop_event: threading.Event | None = None, print_fn: Callable[[str], None] = print,
          on_report: Callable[[StepReport], None] | None = None,
          invocation: Invocation | None = None,
          on_training_start: Callable[[], bool] | None = None) -> TrainResult:
    """Trains until ``config.max_steps`` or until ``stop_event`` is set.

    Takes the lock of ``config.train_dir``, with ``fresh_start`` removes the earlier
    run's files, resumes from the newest checkpoint that restores, saves every
    ``checkpoint_steps`` steps, at ``max_steps`` and when stopped; never from a
    diverged state.  Every worker of a multi-worker strategy calls this; only the
    chief writes to ``train_dir``, and ``stop_event`` on any stops all at one step.

    Args:
      config, strategy, data: the run's settings, its strategy
        (``devices.make_strategy``), its training files, record count and classes.
      stop_event: set (e.g. by a signal handler) to save and return after the
        current loop of steps (before training starts: to stop at once).
      print_fn, on_report: where the progress lines and notices go; what is called
        with each logged step's figures (``StepReport``), after its line.
      invocation: the command line and flags, recorded per start (``records``).
      on_training_start: called once where training starts, before anything is
        recorded or run: whether a stop was asked for by then
        (``_stop_if_asked_before_training``).  None: ``stop_event.is_set``.

    Raises:
      StoppedBeforeTraining: a stop before training started, here or on another worker.
      DivergedError: the loss, or the weights, became NaN or infinite.
      Cifar10Error: the run directory cannot be used, or training failed.
    """
    with op_determinism(config.deterministic), \
            coordination.Coordinator(strategy, stop_event) as cluster:
        trainer = _trainer(config, strategy, data, cluster)
        with _run_directory(trainer, cluster, print_fn) as run_dir:
            restored = _restore(run_dir, cluster, data)
            if restored and restored.step >= config.max_steps:
                return _already_complete(config, cluster, run_dir, restored, print_fn)
            _stop_if_asked_before_training(cluster, on_training_start)
            settings = run.begin(trainer, cluster, data, restored,
                                 invocation or Invocation(), print_fn)
            return _run_loops(trainer, cluster, run_dir, restored, data.files, settings,
                              print_fn, on_report)


def _trainer(config: TrainConfig, strategy: tf.distribute.Strategy, data: TrainData,
             cluster: coordination.Coordinator) -> Trainer:
    """The step engine, its variables built on every worker (the chief's initial
    values broadcast) once the workers found they were started with the same
    settings (``settings_check``): their first meetings, where a worker lost (e.g. a
    chief that refused train_dir) is one line (``cluster.starting``), as in the
    others before the loop."""
    settings_check.check_same_settings(cluster, run.shared_settings(config, data))
    with cluster.starting():
        return Trainer(config, strategy, data.examples_per_epoch, len(data.class_names))


def _run_directory(trainer: Trainer, cluster: coordination.Coordinator,
                   print_fn: Callable[[str], None]) -> RunDirectory:
    """The run's directory, as this worker uses it (``coordination``)."""
    cfg = trainer.config
    cluster.refuse_fresh_start(cfg.fresh_start, cfg.train_dir)
    return RunDirectory(cfg.train_dir, trainer.state.checkpoint(), cfg.keep_checkpoints,
                        save_dir=cluster.save_dir, fresh_start=cfg.fresh_start,
                        print_fn=print_fn)


def _restore(run_dir: RunDirectory, cluster: coordination.Coordinator,
             data: TrainData) -> checkpoints.Checkpoint | None:
    """The checkpoint the run goes on from (None: it starts at step 0), the same step
    on every worker; the run's class names recorded first."""
    run_dir.record_class_names(data.class_names)
    with cluster.starting():
        restored = run_dir.restore()
        start_checks.check_same_start(cluster, restored.step if restored else 0,
                                      run_dir.directory)
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
                                   training_starts: Callable[[], bool] | None) -> None:
    """A stop asked for before training starts (Ctrl-C while the job forms) stops
    every worker here, with nothing trained, recorded or saved: as a program
    interrupted before its work began, not a save after a first step.

    ``training_starts`` (``train``'s ``on_training_start``; None:
    ``stop_event.is_set``) says whether this worker's stop was asked for, read in
    one step with the caller's own mark that training started (by which, say, a
    signal handler chooses what it promises).  That value, not a later read of the
    stop event, goes into the workers' agreement, so that each stop falls on one
    side of the edge: before it, nothing is trained (``StoppedBeforeTraining``);
    after it, the run saves after its loop of steps."""
    asked = (training_starts or cluster.stop_event.is_set)()
    with cluster.starting():
        start_checks.stop_if_asked_before_training(cluster, asked)


def _run_loops(trainer: Trainer, cluster: coordination.Coordinator, run_dir: RunDirectory,
               restored: checkpoints.Checkpoint | None, files, settings: dict,
               print_fn: Callable[[str], None],
               on_report: Callable[[StepReport], None] | None) -> TrainResult:
    """Trains on ``files`` from the restored step (0 without one) to ``max_steps`` or
    a stop (``LoopController``); the run's result, its directory marked complete
    where it reached ``max_steps``.  ``settings`` are shown in TensorBoard."""
    config, start = trainer.config, restored.step if restored else 0
    run_dir.unmark_complete()
    loops = LoopController(trainer, cluster, run_dir, start, print_fn, on_report)
    step = loops.run(files, settings)
    complete = step == config.max_steps
    if complete:
        run_dir.mark_complete(step)
    return TrainResult(start_step=start, step=step, complete=complete,
                       last_checkpoint=run_dir.saved_path(),
                       train_dir=config.train_dir, is_chief=cluster.is_chief,
                       task=cluster.task, fresh_start=config.fresh_start,
                       **loops.meter.figures())
