"""``train``: checks that every worker was started alike, takes the run directory (lock,
restore), records the start and runs the loops.  It reads no flags."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from fractions import Fraction
from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core.config import TrainConfig, compute_dtype, marked
from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.distribute import devices, workers
from cifar10.runs import records
from cifar10.runs.best import BestCheckpoint
from cifar10.runs.layout import Checkpoint
from cifar10.runs.rundir import RunDirectory
from cifar10.training.engine import Trainer
from cifar10.training.loops import LoopController, op_determinism
from cifar10.training.progress import StepReport, TrainResult
from cifar10.training.validation import Validation


@dataclasses.dataclass(frozen=True)
class TrainData:
    """The data a run trains on."""

    files: Sequence[str]  # validated training .bin files
    examples_per_epoch: int  # records in ``files`` (for the LR schedule)
    # In label order; recorded in train_dir for cifar10-predict and cifar10-export.
    class_names: Sequence[str] = ff.CLASS_NAMES
    test_files: Sequence[str] = ()  # the test split: needed where --eval_every_steps

    @property
    def directory(self) -> str:
        return os.path.dirname(self.files[0])


@dataclasses.dataclass(frozen=True)
class Invocation:
    """What the program that calls ``train`` records of itself."""

    command: Sequence[str] = ()  # the command line, for the start's environment record
    flags_text: str | None = None  # its flags in flagfile format, for flags.txt; None: none
    # More settings to show with the config in TensorBoard (e.g. the data directory).
    settings: dict = dataclasses.field(default_factory=dict)


def train(config: TrainConfig, strategy: tf.distribute.Strategy, data: TrainData,
          stop_event: threading.Event | None = None, print_fn: Callable[[str], None] = print,
          on_report: Callable[[StepReport], None] | None = None,
          invocation: Invocation | None = None,
          on_training_start: Callable[[], bool] | None = None) -> TrainResult:
    """Trains from the newest checkpoint that restores (``fresh_start``: from step 0)
    until ``config.max_steps`` or ``stop_event``, saving every ``checkpoint_steps``, at the
    end and when stopped.  Every worker calls it; only the chief writes.

    Args:
      stop_event: set to save and return after the current loop (before training: at once).
      on_report: gets each logged step's figures.
      on_training_start: called where training starts: whether a stop was asked for.

    Raises:
      StoppedBeforeTraining, DivergedError, Cifar10Error.
    """
    with op_determinism(config.deterministic), \
            workers.Coordinator(strategy, stop_event) as cluster:
        # The workers' first meetings: a worker lost in one is one line (``starting``).
        workers.check_same_settings(cluster, shared_settings(config, data))
        with cluster.starting():
            trainer = Trainer(config, strategy, data.examples_per_epoch, len(data.class_names))
        with RunDirectory(config.train_dir, trainer.state.checkpoint(), config.keep_checkpoints,
                          save_dir=cluster.save_dir, fresh_start=config.fresh_start,
                          print_fn=print_fn) as run_dir:
            run_dir.record_class_names(data.class_names)
            with cluster.starting():
                restored = run_dir.restore()
                start = restored.step if restored else 0
                workers.check_same_start(cluster, start, run_dir.directory)
            # From here on, max_steps is where this run stops (--max_epochs' step if sooner).
            stop = stop_step(config, start, trainer)
            by_epochs = stop < config.max_steps
            config = trainer.config = dataclasses.replace(config, max_steps=stop)
            if restored and start >= config.max_steps:
                return _already_complete(config, cluster, run_dir, restored, print_fn,
                                         by_epochs)
            # A stop asked for by now stops every worker with nothing trained or recorded.
            asked = (on_training_start or cluster.stop_event.is_set)()
            with cluster.starting():
                workers.stop_if_asked_before_training(cluster, asked)
            invocation = invocation or Invocation()
            if restored:
                print_fn(f"Resuming from {restored.path} at step {start}.")
            if cluster.is_chief:
                _record(trainer, data, start, restored is not None, invocation)
            where = (f"checkpoints and summaries in {config.train_dir}" if cluster.is_chief
                     else f"this is {cluster.task}: the chief writes checkpoints and "
                          f"summaries to {config.train_dir}")
            print_fn(f"Training on {trainer.examples_per_epoch} examples from "
                     f"{data.directory} with {trainer.num_replicas} replica(s)"
                     f"{devices.placement(trainer.strategy)}, global batch "
                     f"{trainer.global_batch}"
                     + (f", to step {stop} (--max_epochs={config.max_epochs:.15g})" if by_epochs
                        else "") + f"; {where}.")
            settings = {**dataclasses.asdict(config), "precision": compute_dtype(config),
                        "num_replicas": trainer.num_replicas,
                        "global_batch": trainer.global_batch, "start_step": start,
                        "examples_per_epoch": data.examples_per_epoch,
                        "tensorflow": tf.__version__, "classes": ", ".join(data.class_names),
                        **invocation.settings}
            run_dir.unmark_complete()
            validation = None
            if config.eval_every_steps:
                best = None
                if cluster.is_chief:
                    best = BestCheckpoint(config.train_dir, trainer.state.checkpoint(), start)
                validation = Validation(trainer, data.test_files, best, print_fn)
            loops = LoopController(trainer, cluster, run_dir, start, print_fn, on_report,
                                   validation)
            step = loops.run(data.files, settings)
            if step == config.max_steps:
                run_dir.mark_complete(step)
            return TrainResult(start_step=start, step=step, complete=step == config.max_steps,
                               last_checkpoint=run_dir.saved_path(),
                               train_dir=config.train_dir, is_chief=cluster.is_chief,
                               task=cluster.task, fresh_start=config.fresh_start,
                               best=validation.kept() if validation else None,
                               **loops.meter.figures())


def _already_complete(config: TrainConfig, cluster: workers.Coordinator,
                      run_dir: RunDirectory, restored: Checkpoint,
                      print_fn: Callable[[str], None], by_epochs: bool) -> TrainResult:
    """A run restored at ``max_steps``: says so and trains nothing.  One past it is
    refused: a completeness marker would make the evaluator and Slurm take it for done."""
    step = restored.step
    if step > config.max_steps:
        raise Cifar10Error(
            f"--max_steps={config.max_steps} is below the run's step {step} "
            f"({restored.path}): pass a --max_steps above {step} to train it further, "
            f"or --fresh_start (or another --train_dir) for a new run")
    limit = (f"max_epochs={config.max_epochs:.15g}" if by_epochs
             else f"max_steps={config.max_steps}")
    print_fn(f"Training in {config.train_dir} is already complete at step {step} "
             f"({limit}); nothing to do. Raise --{limit.split('=')[0]} to "
             f"train further or pass --fresh_start to start over.")
    run_dir.mark_complete(step)
    return TrainResult(start_step=step, step=step, complete=True,
                       last_checkpoint=restored.path, train_dir=config.train_dir,
                       is_chief=cluster.is_chief, task=cluster.task)


def stop_step(config: TrainConfig, start: int, trainer: Trainer) -> int:
    """``max_steps``, or the first step whose examples seen reach ``max_epochs`` epochs
    where that comes sooner: counted on from ``start`` (the restored examples seen), a
    global batch a step, so that every worker finds the same."""
    if config.max_epochs is None:
        return config.max_steps
    # The epochs as given (0.7, not 0.69999...), so that a whole number of examples is.
    left = (Fraction(str(config.max_epochs)) * trainer.examples_per_epoch
            - int(trainer.state.examples_seen.numpy()))
    return min(config.max_steps, start + max(0, math.ceil(left / trainer.global_batch)))


def shared_settings(config: TrainConfig, data: TrainData) -> dict[str, object]:
    """What every worker must be started with alike: TrainConfig's ``shared`` fields and
    the data, as {the setting as the error names it ('--batch_size=8'): its value}."""
    shown = {}
    for name in marked("shared"):
        value = getattr(config, name)
        text = (",".join(map(str, value)) if isinstance(value, tuple) else
                str(value).lower() if isinstance(value, bool) else str(value))
        shown[f"no --{name}" if value is None else f"--{name}={text}"] = value
    shown[f"training data of {data.examples_per_epoch} records"] = data.examples_per_epoch
    names = list(data.class_names)
    shown[f"{len(names)} classes ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
          ] = names
    return shown


def _record(trainer: Trainer, data: TrainData, start: int, resumed: bool,
            invocation: Invocation) -> None:
    """Appends this start to the run's flags.txt and environment.jsonl, with its trained
    settings (``records.TRAINED_SETTINGS``); on resume, then a notice per change."""
    cfg, train_dir = trainer.config, trainer.config.train_dir
    settings = {name: getattr(cfg, name) for name in marked("trained")}
    settings.update(global_batch=trainer.global_batch, num_replicas=trainer.num_replicas,
                    num_workers=devices.num_workers(trainer.strategy),
                    precision=compute_dtype(cfg), data_dir=os.path.abspath(data.directory),
                    num_classes=len(data.class_names),
                    examples_per_epoch=trainer.examples_per_epoch, max_steps=cfg.max_steps,
                    max_epochs=cfg.max_epochs)
    before = records.last_settings(train_dir) if resumed else None
    changed = records.changes(before, settings)
    record = records.environment(
        "cifar10-train", invocation.command,
        devices.describe(trainer.strategy.extended.worker_devices), tf.__version__)
    record.update(kernels={"kernel": trainer.kernels.kernel,
                           "reason": trainer.kernels.reason},
                  start_step=start, num_replicas=trainer.num_replicas,
                  num_workers=settings["num_workers"], settings=settings, changes=changed)
    records.record_start(train_dir, record, invocation.flags_text)
    # Said once recorded: a notice says "(recorded in environment.jsonl)".
    for line in records.describe_changes(changed, start, train_dir, before, settings):
        logging.warning(line, extra={"notice": True})
