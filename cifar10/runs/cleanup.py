"""Removing what the trainer wrote in a run directory, and only that: the leftovers
of saves cut short, a checkpoint's files, every file of a run (``--fresh_start``).

Files are matched by the exact names TensorFlow and the trainer give them, so a
user's file that merely starts like one (``model.ckpt-best.txt``,
``checkpoint.txt``, a folder of their own) stays.  A folder is removed only when it
is a save's temporary folder; an event file only when its first summaries are the
trainer's (an evaluator pointed at the run directory by an older version wrote
event files of the same names there).  The lock file stays too: it is held while
these run.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from typing import Iterator

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


# Summary tags only the trainer writes, and the evaluator's result: the first of
# them in an event file tells whose it is.  The settings table (``run_config``),
# which both write first, is the trainer's when it has a train_dir row.
_TRAINER_TAGS = {"learning_rate", "total_loss", "examples_per_sec", "train_step",
                 "_hparams_/session_start_info"}
_EVALUATOR_TAGS = {"Precision @ 1"}
_TRAINER_CONFIG_ROW = b"| train_dir |"


def own_files(directory: str) -> list[str]:
    """The names in ``directory`` that the trainer writes (matched exactly), sorted.

    A folder of one of these names is the trainer's only if it is a save's temporary
    folder; an event file only if ``trainers_events`` says so.
    """
    exact = {STATE_FILE, *_RECORDS}
    patterns = (INDEX_FILE, DATA_FILE, _EVENTS, *_LEFTOVERS)
    names = []
    for name in listdir(directory):
        path = os.path.join(directory, name)
        if not (name in exact or any(p.fullmatch(name) for p in patterns)):
            continue
        if os.path.isdir(path) and not TEMP_DIR.fullmatch(name):
            continue  # a user's folder that merely has the name of a file of the trainer's
        if _EVENTS.fullmatch(name) and not trainers_events(path):
            continue
        names.append(name)
    return sorted(names)


def trainers_events(path: str, records: int = 16) -> bool:
    """Whether the event file ``path`` is the trainer's: the first summary tag among its
    first ``records`` records that only one program writes is the trainer's.  One
    that holds no summary (a start cut short) counts as the trainer's, since nothing
    is lost with it; one that cannot be read, or another program's, does not.
    """
    try:
        for tags in _summary_tags(path, records):
            for tag, text in tags:
                if tag == "run_config":
                    return _TRAINER_CONFIG_ROW in text
                if tag in _TRAINER_TAGS or tag in _EVALUATOR_TAGS:
                    return tag in _TRAINER_TAGS
    except (OSError, ValueError):
        return False
    return os.path.getsize(path) < 1024  # nothing but the file's version record


def _summary_tags(path: str, records: int) -> Iterator[list[tuple[str, bytes]]]:
    """The (tag, text) of each summary value of the first ``records`` records of an
    event file (TFRecord framing: length, its CRC, the data, its CRC).

    Raises:
      OSError, ValueError: the file cannot be read, or holds no event where one should be.
    """
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2  # protobuf only, no TensorFlow

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        for _ in range(records):
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            if length > size - f.tell():
                raise ValueError(f"{path}: a record runs past the end of the file")
            try:
                event = event_pb2.Event.FromString(f.read(length))
            except DecodeError as e:
                raise ValueError(f"{path}: not an event file") from e
            f.read(4)
            yield [(v.tag, v.tensor.string_val[0] if v.tensor.string_val else b"")
                   for v in event.summary.value]


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
    Only a save's temporary folder is removed with what it holds.

    Raises:
      Cifar10Error: it cannot be removed.
    """
    path = os.path.join(directory, name)
    try:
        if TEMP_DIR.fullmatch(name) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError as e:
        raise io_error("cannot remove", path, e,
                       "a folder of that name is not the trainer's file: move it away") from e
    except OSError as e:
        raise io_error("cannot remove", path, e) from e
