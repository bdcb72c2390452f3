"""The data a run was trained on, as its flags.txt recorded it: cifar10-eval takes
the data flags left unset from it; cifar10-train refuses another kind of data or a
download for a run trained on another --data_dir; cifar10-predict refuses CIFAR-format
data given for images.  No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from typing import Callable, Sequence

from absl import flags
from absl import logging

from cifar10.cli import flags as cifar10_flags
from cifar10.cli.flags import pasted
from cifar10.core import logs
from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.data import getdata
from cifar10.data import imagefiles
from cifar10.runs import layout
from cifar10.runs import records

DATA_FLAGS = ("dataset", "label", "synthetic_data", "data_dir", "synthetic_records",
              "data_url", "data_md5")


@dataclasses.dataclass
class Followed:
    source: str  # the run's flags.txt
    taken: dict[str, str]  # {flag: value as recorded} of the flags taken from it

    def describe(self) -> str:
        """'--data_dir=/x --synthetic_data, from runs/a/flags.txt', or '' if none."""
        if not self.taken:
            return ""
        shown = " ".join(as_flag(name, value) for name, value in self.taken.items())
        return f"{shown}, from {self.source}"


def follow_run(flag_values: flags.FlagValues, run_dir: str, program: str) -> Followed | None:
    """Sets each data flag left unset to the value the run in ``run_dir`` recorded
    (a flag given keeps its value, with a notice where it differs); None: no record."""
    recorded = records.recorded_flags(run_dir)
    source = os.path.join(layout.run_of(run_dir), records.FLAGS_FILE)
    taken: dict[str, str] = {}
    for name in DATA_FLAGS if recorded else ():
        if name not in recorded or name not in flag_values:
            continue
        flag = flag_values[name]
        try:
            value = flag.parser.parse(recorded[name])
        except (ValueError, flags.Error):
            logging.warning("%s records --%s=%s, which %s does not take; using %s.",
                            source, name, recorded[name], program, _shown(name, flag.value))
            continue
        if flag.present:
            if not equal(name, flag.value, value):
                logging.warning("%s differs from the run it scores (%s in %s); using %s.",
                                as_flag(name, flag.value), as_flag(name, value), source,
                                _shown(name, flag.value), extra={"notice": True})
        elif flag.value != value:
            flag.value = value
            taken[name] = recorded[name]
    broken = cifar10_flags.broken_data_rule(flag_values)
    if broken:
        raise Cifar10Error(broken + (f" (the run's data flags are in {source})"
                                     if recorded else ""))
    return Followed(source, taken) if recorded is not None else None


def equal(name: str, value, other) -> bool:
    """Whether two values of flag ``name`` are the same; for --data_dir, the same folder."""
    if name == "data_dir" and value and other:
        return os.path.realpath(value) == os.path.realpath(other)
    return value == other


def as_flag(name: str, value) -> str:
    """A value (parsed, or as flags.txt writes it) as a flag: --name=value, --name, --noname."""
    if isinstance(value, bool) or value in ("true", "false"):
        return f"--{name}" if value in (True, "true") else f"--no{name}"
    return f"--{name}={value}"


def _shown(name: str, value) -> str:
    return as_flag(name, value) if value is not None else f"--{name}'s default"


def wait_for_run(run_dir: str, timeout: float | None, print_fn: Callable[[str], None],
                 poll_secs: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """Waits until ``run_dir`` holds a training run (a recorded start or a checkpoint)."""
    start, lines = clock(), logs.WaitLines(print_fn, timeout, clock)
    while (records.recorded_flags(run_dir) is None
           and not layout.holds_checkpoints(run_dir)):
        if timeout is not None and clock() - start > timeout:
            raise Cifar10Error(
                f"no training run started in {run_dir} within --eval_timeout={timeout:g} "
                f"seconds: check --checkpoint_dir, or start cifar10-train --train_dir={run_dir}")
        lines.waiting(f"No training run in {run_dir} yet; waiting for cifar10-train to start "
                      f"there, to evaluate on the data it trains on.",
                      f"Still no training run in {run_dir}")
        sleep(poll_secs)


def _kind(values: dict) -> tuple[str, ...]:
    if str(values.get("synthetic_data", "false")).lower() == "true":
        return ("--synthetic_data",)
    if values.get("dataset", "cifar10") == "cifar100":
        return ("--dataset=cifar100", f"--label={values.get('label', 'fine')}")
    return ()


def _kind_name(kind: tuple[str, ...]) -> str:
    if kind == ("--synthetic_data",):
        return "generated data (--synthetic_data)"
    if kind:
        return f"CIFAR-100's {kind[1].split('=')[1]} labels ({' '.join(kind)})"
    return "CIFAR-10 or data of its format (no --synthetic_data or --dataset)"


def refuse_other_kind_of_data(flag_values: flags.FlagValues, run_dir: str) -> None:
    """Refuses to go on with the run in ``run_dir`` on another kind of data."""
    if not layout.holds_checkpoints(run_dir):
        return
    recorded = records.recorded_flags(run_dir) or {}
    if "synthetic_data" not in recorded and "dataset" not in recorded:
        if records.last_record(run_dir) is None:  # (else the run's resume compares classes)
            logging.warning("--train_dir=%s holds checkpoints, but neither its %s nor its %s "
                            "records the data the run was trained on: this start's data is "
                            "not checked against the run's", run_dir, records.FLAGS_FILE,
                            records.ENVIRONMENT_FILE)
        return
    now = _kind({name: flag_values[name].value
                 for name in ("synthetic_data", "dataset", "label") if name in flag_values})
    before = _kind(recorded)
    if now != before:
        raise Cifar10Error(
            f"--train_dir={run_dir} holds a run trained on {_kind_name(before)}, and this "
            f"start would go on with it on {_kind_name(now)}: pass "
            f"{' '.join(before) or 'no --synthetic_data or --dataset'} to go on with the run, "
            f"or --fresh_start (or another --train_dir) for a new run")


def download_refusal(flag_values: flags.FlagValues, run_dir: str) -> str:
    """The error for a download of data the run in ``run_dir`` was not trained on, or ''."""
    recorded = records.recorded_flags(run_dir)
    if (recorded is None or "data_dir" not in recorded or flag_values["data_dir"].present
            or not layout.holds_checkpoints(run_dir)):
        return ""
    theirs, ours = recorded["data_dir"], flag_values["data_dir"].value
    if os.path.realpath(theirs) == os.path.realpath(ours):
        return ""
    source = os.path.join(run_dir, records.FLAGS_FILE)
    title = ff.ARCHIVES[flag_values["dataset"].value].title
    return (f"the run in --train_dir={run_dir} was trained on --data_dir={theirs} ({source}), "
            f"and this start, not given --data_dir, would download {title} into {ours} "
            f"instead: pass {pasted('data_dir', theirs)} (or {pasted('flagfile', source)}) to go "
            f"on with the run's data, or {pasted('data_dir', ours)} to download {title} there")


# The record files by name, with the size of their records (CIFAR-100's hold two labels).
_RECORD_FILES = {**{name: ff.RECORD_BYTES for name in (*ff.TRAIN_FILES, *ff.TEST_FILES)},
                 **{name: ff.RECORD_BYTES + 1 for name in ff.CIFAR100_FILES.values()}}
_TRAINING_FILES = (*ff.TRAIN_FILES, ff.CIFAR100_FILES["train"])
# The data folders the programs make; their --data_dir is the folder above.
_DATA_FOLDER_NAMES = (ff.BATCHES_DIRNAME, ff.CIFAR100.folder, *ff.CIFAR100_BATCHES_DIRS.values())


def refuse_cifar_data(paths: Sequence[str], model_flag: str) -> None:
    """Refuses CIFAR-format data among cifar10-predict's ``paths``, naming cifar10-eval."""
    for path in paths:
        if path == imagefiles.STDIN:
            continue
        split, folder = "", None
        if os.path.isdir(path):
            if getdata.is_data_folder(path) and not imagefiles.holds_images(path):
                folder, what = path, "a folder of CIFAR-format data, not of images"
        elif _is_record_file(path):
            folder = os.path.dirname(path) or "."
            what = "CIFAR-format data (records of labelled 32x32 images), not an image"
            split = " --eval_data=train_eval" if os.path.basename(path) in _TRAINING_FILES else ""
        if folder is None:
            continue
        folder = os.path.normpath(folder)
        if os.path.basename(os.path.abspath(folder)) in _DATA_FOLDER_NAMES:
            folder = os.path.normpath(os.path.join(folder, os.pardir))
        name, _, value = model_flag.partition("=")
        raise Cifar10Error(f"{path} is {what}: score the model on it with cifar10-eval "
                           f"{name}={shlex.quote(value)} --data_dir={shlex.quote(folder)}"
                           f"{split} --run_once")


def _is_record_file(path: str) -> bool:
    record_bytes = _RECORD_FILES.get(os.path.basename(path))
    try:
        size = os.path.getsize(path) if record_bytes and os.path.isfile(path) else 0
    except OSError:
        return False
    return size > 0 and size % record_bytes == 0
