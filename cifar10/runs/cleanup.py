"""Removing what the trainer wrote in a run directory, and only that: the leftovers
of saves cut short, a checkpoint's files, every file of a run (``--fresh_start``).

Files are matched by the exact names TensorFlow and the trainer give them, so a
user's file that merely starts like one (``model.ckpt-best.txt``,
``checkpoint.txt``, a folder of their own) stays.  The lock file stays too: it is
held while these run.
"""

from __future__ import annotations

import os
import re
import shutil

from cifar10.core.errors import io_error
from cifar10.runs import records
from cifar10.runs.checkpoints import (CLASSES_FILE, COMPLETE_FILE, DATA_FILE, INDEX_FILE,
                                      TEMP_DIR, listdir)
from cifar10.runs.statefile import STATE_FILE, TEMP_FILE as STATE_TEMP_FILE

# TensorFlow's event file names: events.out.tfevents.<time>.<host>.<pid>.<n>.v2
_EVENTS = re.compile(r"events\.out\.tfevents\.\d+\..+\.\d+\.\d+\.v2")
# The trainer's own small files besides checkpoints: each is written as <name>.tmp first.
_RECORDS = (COMPLETE_FILE, CLASSES_FILE, records.FLAGS_FILE, records.ENVIRONMENT_FILE)
_RECORD_TEMP_FILE = re.compile(f"({'|'.join(re.escape(name) for name in _RECORDS)})\\.tmp")
# What a save or a record cut short leaves: never a file a finished write leaves.
_LEFTOVERS = (TEMP_DIR, STATE_TEMP_FILE, _RECORD_TEMP_FILE)


def own_files(directory: str) -> list[str]:
    """The names in ``directory`` that the trainer writes (matched exactly), sorted."""
    exact = {STATE_FILE, *_RECORDS}
    patterns = (INDEX_FILE, DATA_FILE, _EVENTS, *_LEFTOVERS)
    return sorted(name for name in listdir(directory)
                  if name in exact or any(p.fullmatch(name) for p in patterns))


def remove_leftovers(directory: str) -> list[str]:
    """Removes the temporary folders and files of saves that were cut short.

    Returns:
      The names removed, sorted.
    """
    removed = [name for name in own_files(directory)
               if any(p.fullmatch(name) for p in _LEFTOVERS)]
    for name in removed:
        delete(directory, name)
    return removed


def remove_run(directory: str) -> int:
    """``--fresh_start``: removes every file the trainer writes; returns how many.

    Matched by exact patterns (checkpoints, leftovers of interrupted saves, the
    state file, event files, the complete marker, the class names, the records);
    the lock file (held), the directory and anything else stay.
    """
    names = own_files(directory)
    for name in names:
        delete(directory, name)
    return len(names)


def checkpoint_files(directory: str, step: int) -> list[str]:
    """The names of the files (and temporary folder) of the checkpoint of ``step``."""
    names = []
    for name in listdir(directory):
        match = INDEX_FILE.fullmatch(name) or DATA_FILE.fullmatch(name) \
            or TEMP_DIR.fullmatch(name)
        if match and int(match[1]) == step:
            names.append(name)
    return names


def delete(directory: str, name: str) -> None:
    """Removes a file or temporary folder of the trainer's; a missing one is fine.

    Raises:
      Cifar10Error: it cannot be removed.
    """
    path = os.path.join(directory, name)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise io_error("cannot remove", path, e) from e
