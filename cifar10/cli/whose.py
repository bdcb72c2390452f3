"""Whose a folder is, as the programs' folder checks (``outdirs``) and the folders they
suggest (``suggestions``) tell it: a training run's (its files), the run an
evaluator's folder scored, nobody's yet (empty).

No TensorFlow here.
"""

from __future__ import annotations

import os

from cifar10.core.errors import Cifar10Error
from cifar10.runs import layout
from cifar10.runs import records


def trainer_files(directory: str) -> list[str]:
    """The files in ``directory`` that make it a training run's: the trainer's lock, a
    flags.txt that records a cifar10-train start, checkpoint files."""
    found = [layout.LOCK_FILE] if os.path.exists(os.path.join(directory, layout.LOCK_FILE)) else []
    if records.recorded_flags(directory, "cifar10-train") is not None:
        found.append(records.FLAGS_FILE)
    if _holds_checkpoints(directory):
        found.append(f"{layout.PREFIX}-*")
    return found


def _holds_checkpoints(directory: str) -> bool:
    """Whether ``directory`` holds checkpoint files; False for a file, or a folder that
    cannot be read (the program's own write names it)."""
    try:
        return layout.holds_checkpoints(directory)
    except Cifar10Error:
        return False


def scored_run(eval_dir: str) -> str | None:
    """The run that the evaluator's latest start in ``eval_dir`` scored, as it named it;
    None when no evaluator's start is recorded there."""
    recorded = records.recorded_flags(eval_dir, "cifar10-eval")
    if not recorded:
        return None
    return layout.run_folder(recorded.get("checkpoint"), recorded.get("checkpoint_dir"))


def is_empty_folder(path: str) -> bool:
    """Whether ``path`` is a folder that holds nothing (False when it cannot be read)."""
    try:
        return os.path.isdir(path) and not os.listdir(path)
    except OSError:
        return False


def same(path: str, other: str) -> bool:
    """Whether two paths name the same file or folder (links followed)."""
    return os.path.realpath(path) == os.path.realpath(other)
