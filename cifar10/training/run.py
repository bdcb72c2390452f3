"""What a training run is given, and what it says and records when it starts.

``train`` is given its data (``TrainData``) and what the program that calls it
records of itself (``Invocation``).  At each start that trains (``begin``) the
run says where it resumes and where it trains, and the chief appends the start to
the run's flags.txt and environment.jsonl (``records``), with one notice per
trained setting that changed since the start before.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core.config import TrainConfig, compute_dtype
from cifar10.data import fileformat as ff
from cifar10.distribute import devices
from cifar10.distribute.coordination import Coordinator
from cifar10.runs import records
from cifar10.runs.checkpoints import Checkpoint
from cifar10.training.engine import Trainer


@dataclasses.dataclass(frozen=True)
class TrainData:
    """The data a run trains on."""

    files: Sequence[str]  # validated training .bin files
    examples_per_epoch: int  # records in ``files`` (for the LR schedule)
    # In label order; recorded in train_dir for cifar10-predict and cifar10-export.
    class_names: Sequence[str] = ff.CLASS_NAMES

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


def begin(trainer: Trainer, cluster: Coordinator, data: TrainData,
          restored: Checkpoint | None, invocation: Invocation,
          print_fn: Callable[[str], None]) -> dict:
    """A start that trains from ``restored`` (None: step 0): says where it resumes,
    records the start (the chief), says where it trains.

    Returns:
      The settings to show in TensorBoard with the run's config.
    """
    start = restored.step if restored else 0
    if restored:
        print_fn(f"Resuming from {restored.path} at step {start}.")
    if cluster.is_chief:
        _record(trainer, data, start, restored is not None, invocation)
    where = (f"checkpoints and summaries in {trainer.config.train_dir}" if cluster.is_chief
             else f"this is {cluster.task}: the chief writes checkpoints and summaries to "
                  f"{trainer.config.train_dir}")
    print_fn(f"Training on {trainer.examples_per_epoch} examples from {data.directory} with "
             f"{trainer.num_replicas} replica(s), global batch {trainer.global_batch}; "
             f"{where}.")
    return {**dataclasses.asdict(trainer.config), **trainer.settings(), "start_step": start,
            "classes": ", ".join(data.class_names), **invocation.settings}


# TrainConfig's flags that every worker of a run must be given alike: what the step
# and the loops depend on (the schedule, the precision, where loops end and so which
# functions run; --max_steps: how many).  Not --train_dir (one shared folder may be
# mounted at different paths), --keep_checkpoints (only the chief saves) or --kernels
# (each worker chooses for its own devices; both compute the same function).
SHARED_FLAGS = ("batch_size", "max_steps", "steps_per_loop", "log_frequency", "summary_steps",
                "checkpoint_steps", "use_fp16", "use_bf16", "xla", "deterministic", "seed")


def shared_settings(config: TrainConfig, data: TrainData) -> dict[str, object]:
    """What every worker of a multi-worker run must be started with alike
    (``settings_check.check_same_settings``): {the setting with its value here, as the
    error names it ('--batch_size=8'): the value}, in one order."""
    shown = {f"--{name}={_flag_value(getattr(config, name))}": getattr(config, name)
             for name in SHARED_FLAGS}
    profile = config.profile_steps
    shown["--profile_steps=" + ",".join(map(str, profile)) if profile
          else "no --profile_steps"] = profile
    shown[f"initial_learning_rate {config.initial_learning_rate:g}"] = (
        config.initial_learning_rate)
    shown[f"loss_scale_growth_steps {config.loss_scale_growth_steps}"] = (
        config.loss_scale_growth_steps)
    shown[f"training data of {data.examples_per_epoch} records"] = data.examples_per_epoch
    names = list(data.class_names)
    shown[f"{len(names)} classes ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
          ] = names
    return shown


def _flag_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _trained_settings(trainer: Trainer, data: TrainData) -> dict:
    """The settings of a start that change what is trained (``records``), and the
    class count and step limit."""
    cfg = trainer.config
    return {"batch_size": cfg.batch_size, "global_batch": trainer.global_batch,
            "num_replicas": trainer.num_replicas,
            "num_workers": devices.num_workers(trainer.strategy),
            "precision": compute_dtype(cfg), "data_dir": os.path.abspath(data.directory),
            "num_classes": len(data.class_names),
            "examples_per_epoch": trainer.examples_per_epoch,
            "initial_learning_rate": cfg.initial_learning_rate, "seed": cfg.seed,
            "deterministic": cfg.deterministic, "xla": cfg.xla, "max_steps": cfg.max_steps}


def _record(trainer: Trainer, data: TrainData, start: int, resumed: bool,
            invocation: Invocation) -> None:
    """Appends this start to the run's flags.txt and environment.jsonl; on resume,
    then one notice per trained setting that changed since the start before."""
    train_dir = trainer.config.train_dir
    settings = _trained_settings(trainer, data)
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
