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
from typing import Callable

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
    scored, ``checkpoint_dir``, or another): the evaluator would write into the
    trainer's records.  The folder it suggests is one for the run scored."""
    trainer_files = _trainer_files(eval_dir)
    same = _same(eval_dir, checkpoint_dir)
    if same or trainer_files:
        what = "the run it scores" if same else f"a training run ({', '.join(trainer_files)})"
        raise Cifar10Error(
            f"--eval_dir={eval_dir} is the directory of {what}, where cifar10-train keeps its "
            f"checkpoints and records: choose a directory of the evaluator's own, such as "
            f"{eval_dir_for(checkpoint_dir)}")


def _trainer_files(directory: str) -> list[str]:
    """The files in ``directory`` that make it a training run's: the trainer's lock, a
    flags.txt that records a cifar10-train start."""
    found = [lock.LOCK_FILE] if os.path.exists(os.path.join(directory, lock.LOCK_FILE)) else []
    if records.recorded_flags(directory, "cifar10-train") is not None:
        found.append(records.FLAGS_FILE)
    return found


def warn_of_another_runs_results(eval_dir: str, run_dir: str) -> None:
    """A warning when the evaluator's latest start in ``eval_dir`` scored another run
    than ``run_dir``: the results of both would share results.jsonl and TensorBoard's
    curves (the default --eval_dir, /tmp/cifar10_eval, is every run's)."""
    scored = _scored_run(eval_dir)
    if scored and not _same(scored, run_dir):
        logging.warning("--eval_dir=%s holds the results of another run (%s): this run's go "
                        "beside them, on the same TensorBoard curves; pass --eval_dir=%s to "
                        "keep them apart", eval_dir, scored, eval_dir_for(run_dir))


def _scored_run(eval_dir: str) -> str | None:
    """The run that the evaluator's latest start in ``eval_dir`` scored, as it named it;
    None when no evaluator's start is recorded there."""
    recorded = records.recorded_flags(eval_dir, "cifar10-eval")
    if not recorded:
        return None
    return checkpoint_files.run_folder(recorded.get("checkpoint"), recorded.get("checkpoint_dir"))


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
            f"{_suggested(train_dir, 'train', _is_empty_folder)}")
    data = sorted(name for name in _DATA_FILES if os.path.isfile(os.path.join(train_dir, name)))
    if data:
        raise Cifar10Error(
            f"--train_dir={train_dir} holds data files ({', '.join(data[:2])}"
            f"{', ...' if len(data) > 2 else ''}): choose a directory for the run's "
            f"checkpoints and records, outside the data, such as /tmp/cifar10_train")


# Folder names of a run's layout, runs/a/train beside runs/a/eval: the evaluator's
# folder of runs/a/train is runs/a/eval.  Other names keep theirs: the evaluator's
# folder of /tmp/cifar10_train is /tmp/cifar10_train-eval.
_LAYOUT_NAMES = ("train", "eval")


def eval_dir_for(run_dir: str) -> str:
    """An --eval_dir for the run in ``run_dir``: one that is not there yet, empty, or
    holds the evaluator's results of this run alone (``_suggested``)."""
    def fits(folder: str) -> bool:
        scored = _scored_run(folder)
        return not _trainer_files(folder) and (
            _is_empty_folder(folder) or scored is not None and _same(scored, run_dir))

    return _suggested(run_dir, "eval", fits)


def _suggested(directory: str, name: str, fits: Callable[[str], bool]) -> str:
    """A folder for ``name`` ('eval', 'train') that goes with ``directory``: beside it
    where it is named as runs/a/train or runs/a/eval are (runs/a/<name>), else its name
    and ``-<name>`` (/tmp/cifar10_train-eval); numbered (-2, -3, ...) where that is
    ``directory`` itself, or a file or folder already there that ``fits`` refuses."""
    path = os.path.abspath(directory)
    if os.path.basename(path) in _LAYOUT_NAMES:
        base = os.path.join(os.path.dirname(path), name)
    else:
        base = f"{path}-{name}"
    suggested, number = base, 1
    while _same(suggested, directory) or (os.path.lexists(suggested) and not fits(suggested)):
        number += 1
        suggested = f"{base}-{number}"
    return suggested


def _is_empty_folder(path: str) -> bool:
    try:
        return os.path.isdir(path) and not os.listdir(path)
    except OSError:
        return False


def _same(path: str, other: str) -> bool:
    return os.path.realpath(path) == os.path.realpath(other)


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
