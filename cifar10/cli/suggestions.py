"""The folders the programs suggest in their errors and closing lines: an
``--eval_dir`` or ``--export_dir`` that goes with a run (runs/a/eval for runs/a/train,
/tmp/cifar10_train-eval for /tmp/cifar10_train), other folders beside a given one, and
a --train_dir in place of a folder of data; each numbered past those already there that
are not free for it: a suggestion never names a folder of somebody else's.

No TensorFlow here.
"""

from __future__ import annotations

import os
import re
from typing import Callable

from cifar10.cli import whose
from cifar10.core.config import EvalConfig, TrainConfig, flag_default

# Folder names of a run's layout, runs/a/train beside runs/a/eval: the evaluator's
# folder of runs/a/train is runs/a/eval.  Other names keep theirs: the evaluator's
# folder of /tmp/cifar10_train is /tmp/cifar10_train-eval.
_LAYOUT_NAMES = ("train", "eval", "export")


def eval_dir_for(run_dir: str) -> str:
    """An --eval_dir for the run in ``run_dir``: one that is not there yet, empty, or
    holds the evaluator's results of this run alone (``beside``)."""
    def fits(folder: str) -> bool:
        scored = whose.scored_run(folder)
        return not whose.trainer_files(folder) and (
            whose.is_empty_folder(folder) or scored is not None and whose.same(scored, run_dir))

    return beside(run_dir, "eval", fits)


def eval_dir_to_suggest(train_dir: str,
                        default_train_dir: str = flag_default(TrainConfig, "train_dir"),
                        default_eval_dir: str = flag_default(EvalConfig, "eval_dir")
                        ) -> str | None:
    """The --eval_dir the trainer's closing line's evaluation command names: none (the
    evaluator's default) for the default --train_dir when the default --eval_dir holds
    no training run and no other run's results, else one of the run's own
    (``eval_dir_for``: runs/a/eval for runs/a/train)."""
    if whose.same(train_dir, default_train_dir) and not whose.trainer_files(default_eval_dir):
        scored = whose.scored_run(default_eval_dir)
        if scored is None or whose.same(scored, train_dir):
            return None
    return eval_dir_for(train_dir)


# What cifar10-export writes in its folder: <step>/, and .<step>-incomplete-* while it writes.
_EXPORT_NAME = re.compile(r"[0-9]+|\.[0-9]+-incomplete-[A-Za-z0-9_]+")


def export_dir_for(run_dir: str) -> str:
    """An --export_dir for the run in ``run_dir``: one that is not there yet, or a
    folder of exports alone (``beside``)."""
    return beside(run_dir, "export", _holds_exports_alone)


def _holds_exports_alone(folder: str) -> bool:
    """Whether ``folder`` is a folder that holds nothing but what cifar10-export writes
    (numbered version folders, the scratch folders of exports), or nothing at all."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return all(_EXPORT_NAME.fullmatch(name) for name in names)


# The longest file name Linux's file systems take, in bytes (NAME_MAX).
_NAME_MAX = 255


def beside(directory: str, name: str, fits: Callable[[str], bool]) -> str:
    """A folder for ``name`` ('eval', 'train', 'export') that goes with ``directory``:
    beside it where it is named as runs/a/train or runs/a/eval are (runs/a/<name>), else
    its name and ``-<name>`` (/tmp/cifar10_train-eval); numbered (-2, -3, ...) where that is
    ``directory`` itself, or a file or folder already there that ``fits`` refuses."""
    path = os.path.abspath(directory)
    if os.path.basename(path) in _LAYOUT_NAMES:
        base = os.path.join(os.path.dirname(path), name)
    else:
        # Cut to fit the file system's longest name (255 bytes), room left for a number.
        stem = os.path.basename(path)
        while stem and len(os.fsencode(f"{stem}-{name}-99")) > _NAME_MAX:
            stem = stem[:-1]
        base = os.path.join(os.path.dirname(path), f"{stem}-{name}")
    return _numbered(base, directory, fits)


# The trainer's default --train_dir, the base of the one suggested in place of a folder
# of data (``train_dir_instead``).
DEFAULT_TRAIN_DIR = flag_default(TrainConfig, "train_dir")


def train_dir_instead(train_dir: str) -> str:
    """A --train_dir to suggest in place of ``train_dir`` (a folder of data, which a run
    does not go beside): the trainer's default, /tmp/cifar10_train, where it is free (not
    there yet, or an empty folder), else the first of /tmp/cifar10_train-2, -3, ... that
    is; never one that holds a run, or anything else, to resume or write over."""
    return _numbered(DEFAULT_TRAIN_DIR, train_dir, whose.is_empty_folder)


def _numbered(base: str, directory: str, fits: Callable[[str], bool]) -> str:
    """``base``, or the first of ``base``-2, -3, ... that is not ``directory`` and is not
    there yet or ``fits``."""
    suggested, number = base, 1
    while whose.same(suggested, directory) or (os.path.lexists(suggested)
                                               and not fits(suggested)):
        number += 1
        suggested = f"{base}-{number}"
    return suggested
