"""The folders the programs write to, each kept to its own program: the evaluator's
``--eval_dir`` is not a training run's directory, and the trainer's ``--train_dir``
is neither an evaluator's folder nor a data folder; and every program's folder flags
name folders (``refuse_folders_that_are_not``, as the flags are parsed).  Without these checks one
program would write its records among the other's, and ``--fresh_start`` would
remove files of the same names that the trainer did not write (``runs.cleanup``).

Checked before TensorFlow loads: no TensorFlow here.
"""

from __future__ import annotations

import os

from absl import flags
from absl import logging

from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.runs import checkpoint_files
from cifar10.runs import lock
from cifar10.runs import records

# Files that make a folder a data folder (CIFAR-10's, CIFAR-100's, cifar10-prepare's).
_DATA_FILES = (*ff.TRAIN_FILES, *ff.TEST_FILES, ff.META_FILE, *ff.CIFAR100_FILES.values())


def refuse_training_dir(eval_dir: str, checkpoint_dir: str) -> None:
    """Raises Cifar10Error when ``eval_dir`` is a training run's directory (the run
    scored, or another): the evaluator would write into the trainer's records."""
    trainer_files = [lock.LOCK_FILE] if os.path.exists(os.path.join(eval_dir, lock.LOCK_FILE)) \
        else []
    if records.recorded_flags(eval_dir, "cifar10-train") is not None:
        trainer_files.append(records.FLAGS_FILE)
    same = os.path.realpath(eval_dir) == os.path.realpath(checkpoint_dir)
    if same or trainer_files:
        what = "the run it scores" if same else f"a training run ({', '.join(trainer_files)})"
        raise Cifar10Error(
            f"--eval_dir={eval_dir} is the directory of {what}, where cifar10-train keeps its "
            f"checkpoints and records: choose a directory of the evaluator's own, such as "
            f"{_beside(eval_dir, 'eval')}")


def warn_of_another_runs_results(eval_dir: str, run_dir: str) -> None:
    """A warning when the evaluator's latest start in ``eval_dir`` scored another run
    than ``run_dir``: the results of both would share results.jsonl and TensorBoard's
    curves (the default --eval_dir, /tmp/cifar10_eval, is every run's)."""
    recorded = records.recorded_flags(eval_dir, "cifar10-eval")
    if not recorded:
        return
    scored = checkpoint_files.run_folder(recorded.get("checkpoint"),
                                         recorded.get("checkpoint_dir"))
    if scored and os.path.realpath(scored) != os.path.realpath(run_dir):
        logging.warning("--eval_dir=%s holds the results of another run (%s): this run's go "
                        "beside them, on the same TensorBoard curves; pass --eval_dir=%s to "
                        "keep them apart", eval_dir, scored, _beside(run_dir, "eval"))


def refuse_foreign_train_dir(train_dir: str) -> None:
    """Raises Cifar10Error when ``train_dir`` is an evaluator's folder (its flags.txt
    records a cifar10-eval start, and there is no sign of a training run: no
    cifar10-train start, no checkpoint, no trainer's lock; a run an older evaluator
    also wrote into still resumes) or holds CIFAR-format data."""
    if (records.recorded_flags(train_dir, "cifar10-eval") is not None
            and records.recorded_flags(train_dir, "cifar10-train") is None
            and not checkpoint_files.holds_checkpoints(train_dir)
            and not os.path.exists(os.path.join(train_dir, lock.LOCK_FILE))):
        raise Cifar10Error(
            f"--train_dir={train_dir} is an evaluator's folder (its {records.FLAGS_FILE} "
            f"records cifar10-eval): choose a directory of the run's own, such as "
            f"{_beside(train_dir, 'train')}")
    data = sorted(name for name in _DATA_FILES if os.path.isfile(os.path.join(train_dir, name)))
    if data:
        raise Cifar10Error(
            f"--train_dir={train_dir} holds data files ({', '.join(data[:2])}"
            f"{', ...' if len(data) > 2 else ''}): choose a directory for the run's "
            f"checkpoints and records, outside the data, such as /tmp/cifar10_train")


def _beside(directory: str, name: str) -> str:
    """``name`` in the folder that holds ``directory`` (``name``-2 where that is
    ``directory`` itself)."""
    suggested = os.path.join(os.path.dirname(os.path.abspath(directory)), name)
    if os.path.realpath(suggested) == os.path.realpath(directory):
        suggested += "-2"
    return suggested


# The folder flags; the programs write into the first three (making them if need be).
_OUTPUT_FOLDERS = ("train_dir", "eval_dir", "export_dir")
_FOLDERS = (*_OUTPUT_FOLDERS, "checkpoint_dir", "data_dir", "image_dir")


def refuse_folders_that_are_not(flag_values: flags.FlagValues) -> None:
    """A folder flag given as '' (which would mean the current directory), or an
    output folder that is a file, is a flag error naming it."""
    for name in _FOLDERS:
        value = flag_values[name].value if name in flag_values else None
        if value == "":
            default = flag_values[name].default
            raise flags.ValidationError(
                f"--{name} is empty: name a folder{f' (default: {default})' if default else ''}")
        if name in _OUTPUT_FOLDERS and value and os.path.exists(value) \
                and not os.path.isdir(value):
            raise flags.ValidationError(f"--{name}={value} is a file, not a folder: name a "
                                        f"folder for its output")
