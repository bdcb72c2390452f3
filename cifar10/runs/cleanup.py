"""Removing what the trainer wrote in a run directory, and only that: the leftovers
of saves cut short (with the files of a checkpoint whose save was cut short as they
were put in place), a checkpoint's files, every file of a run (``--fresh_start``).

Files are matched by the exact names TensorFlow and the trainer give them, so a
user's file that merely starts like one (``model.ckpt-best.txt``,
``checkpoint.txt``, a folder of their own) stays.  A file of a checkpoint's name is
the trainer's only when it is one: a ``.index`` that ends as TensorFlow's table does,
and the ``.data`` shards of such an index (or the files of a save cut short as they
were put in place); ``--fresh_start`` refuses, removing nothing, where another file
has such a name (``foreign_checkpoint_files``).  A folder is removed only when it
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

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, io_error, listed
from cifar10.runs import records
from cifar10.runs.checkpoint_files import (CLASSES_FILE, COMPLETE_FILE, DATA_FILE, INDEX_FILE,
                                          PREFIX, TEMP_DIR, listdir)
from cifar10.runs.statefile import STATE_FILE, TEMP_FILE as STATE_TEMP_FILE

# TensorFlow's event file names: events.out.tfevents.<time>.<host>.<pid>.<n>.v2
_EVENTS = re.compile(r"events\.out\.tfevents\.\d+\..+\.\d+\.\d+\.v2")
# The trainer's own small files besides checkpoints: each is written under a temporary
# name of its own first (<name>.tmp<32 hex digits>: atomic.temp_name); a user's
# <name>.tmp is not one.
_RECORDS = (COMPLETE_FILE, CLASSES_FILE, records.FLAGS_FILE, records.ENVIRONMENT_FILE)
_RECORD_TEMP_FILE = re.compile(
    f"({'|'.join(re.escape(name) for name in _RECORDS)}){atomic.TEMP_SUFFIX}")
# What a save or a record cut short leaves: never a file a finished write leaves.
_LEFTOVERS = (TEMP_DIR, STATE_TEMP_FILE, _RECORD_TEMP_FILE)

# TensorFlow saves a checkpoint in steps: each shard's data and index into the save's
# temporary folder (model.ckpt-<step>_temp/part-00000-of-00001.*), the data files
# moved into place, the checkpoint's .index written in place, and only then the
# shards' index files and the folder removed.  A kill between those steps leaves
# a shard's index in the folder, and the checkpoint's own files half there: a
# .index that is missing or half written, which looks complete by its name and
# does not read.
_SHARD_INDEX = re.compile(r"part-\d{5}-of-\d{5}\.index")
# How a whole .index ends: the magic number of TensorFlow's table format, the last
# bytes its writer writes.
_TABLE_MAGIC = struct.pack("<Q", 0xdb4775248b80fb57)


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
    patterns = (_EVENTS, *_LEFTOVERS)
    foreign = set(foreign_checkpoint_files(directory))
    names = []
    for name in listdir(directory):
        path = os.path.join(directory, name)
        checkpoints_file = _checkpoint_step(name) is not None
        if not (name in exact or checkpoints_file or any(p.fullmatch(name) for p in patterns)):
            continue
        if name in foreign:
            continue
        if os.path.isdir(path) and not TEMP_DIR.fullmatch(name):
            continue  # a user's folder that merely has the name of a file of the trainer's
        if _EVENTS.fullmatch(name) and not trainers_events(path):
            continue
        names.append(name)
    return sorted(names)


def foreign_checkpoint_files(directory: str) -> list[str]:
    """The files in ``directory`` with the name of a checkpoint's ``.index`` or ``.data``
    file that the trainer did not write, sorted: a ``.index`` that does not end as
    TensorFlow's table does (``echo hi > model.ckpt-99.index``), a ``.data`` shard
    whose checkpoint has no such ``.index``.  The files of a save cut short as they
    were put in place (``cut_short_steps``) are the trainer's.

    The check reads 8 bytes of each .index and imports no TensorFlow: a .index that
    TensorFlow wrote whole ends with the table's magic number, and nothing else does
    by chance.
    """
    names = listdir(directory)
    cut_short = set(cut_short_steps(directory))
    whole = {step for step in {_checkpoint_step(n) for n in names if INDEX_FILE.fullmatch(n)}
             if _whole_index(os.path.join(directory, f"{PREFIX}-{step}.index"))}
    foreign = []
    for name in names:
        step = _checkpoint_step(name)
        if (step is not None and step not in whole | cut_short
                and not os.path.isdir(os.path.join(directory, name))):
            foreign.append(name)
    return sorted(foreign)


def _checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint's .index or .data file of that name; None for another name."""
    match = INDEX_FILE.fullmatch(name) or DATA_FILE.fullmatch(name)
    return int(match[1]) if match else None


def trainers_events(path: str, records: int = 16) -> bool:
    """Whether the event file ``path`` is the trainer's: the first summary tag among its
    first ``records`` records that only one program writes is the trainer's.  One
    that holds no summary at all and is under 1 KiB (a start cut short before its
    first summary) counts as the trainer's, since nothing is lost with it; one that
    cannot be read, another program's, or one whose summaries have only tags neither
    program is known by (``accuracy`` of a script of the user's), does not.
    """
    summaries = False
    try:
        for tags in _summary_tags(path, records):
            for tag, text in tags:
                if tag == "run_config":
                    return _TRAINER_CONFIG_ROW in text
                if tag in _TRAINER_TAGS or tag in _EVALUATOR_TAGS:
                    return tag in _TRAINER_TAGS
                summaries = True
    except (OSError, ValueError):
        return False
    # Nothing but the file's version record (and, of a start cut short, no summary).
    return not summaries and os.path.getsize(path) < 1024


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
    """Removes the temporary folders and files of saves that were cut short, and the
    files of each checkpoint whose save was cut short as they were moved into place
    (``cut_short_steps``).

    Returns:
      The names removed, sorted.
    """
    removed = {name for name in own_files(directory)
               if any(p.fullmatch(name) for p in _LEFTOVERS)}
    for step in cut_short_steps(directory):
        removed.update(checkpoint_files(directory, step))
    for name in sorted(removed):
        delete(directory, name)
    return sorted(removed)


def cut_short_steps(directory: str) -> list[int]:
    """The steps whose save was cut short once TensorFlow began to put the checkpoint's
    files in place: the save's temporary folder still holds a shard's .index, and the
    checkpoint's .index is missing or not whole (a kill after it was written whole
    leaves it, and the checkpoint reads).  Sorted."""
    steps = []
    for name in listdir(directory):
        match = TEMP_DIR.fullmatch(name)
        if match and _holds_shard_index(os.path.join(directory, name)) and not _whole_index(
                os.path.join(directory, f"{PREFIX}-{match[1]}.index")):
            steps.append(int(match[1]))
    return sorted(steps)


def _holds_shard_index(folder: str) -> bool:
    try:
        return any(_SHARD_INDEX.fullmatch(name) for name in os.listdir(folder))
    except OSError:  # not a folder, or gone
        return False


def _whole_index(path: str) -> bool:
    """Whether the .index file ``path`` ends as a whole one does (``_TABLE_MAGIC``)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() < len(_TABLE_MAGIC):
                return False
            f.seek(-len(_TABLE_MAGIC), os.SEEK_END)
            return f.read() == _TABLE_MAGIC
    except OSError:
        return False


def unfinished_checkpoints(names: list[str]) -> list[str]:
    """The checkpoints ('model.ckpt-9') whose .index or .data files are among ``names``,
    by step."""
    steps = {int(match[1]) for match in (INDEX_FILE.fullmatch(name) or DATA_FILE.fullmatch(name)
                                         for name in names) if match}
    return [f"{PREFIX}-{step}" for step in sorted(steps)]


def remove_run(directory: str) -> int:
    """``--fresh_start``: removes every file the trainer writes; returns how many.

    Matched by exact patterns (checkpoints, leftovers of interrupted saves, the
    state file, event files, the complete marker, the class names, the records);
    the lock file (held), the directory and anything else stay.

    Raises:
      Cifar10Error: a file has a checkpoint's name and is not the trainer's
        (``foreign_checkpoint_files``); nothing is removed.  Left in place, the new
        run would take it for a checkpoint of its own, and stop on it.
    """
    if foreign := foreign_checkpoint_files(directory):
        one = len(foreign) == 1
        it, has, names = ("it", "has", "a checkpoint's name") if one else (
            "them", "have", "checkpoints' names")
        raise Cifar10Error(
            f"{listed(foreign)} in {directory} {has} {names} but "
            f"{'is not a checkpoint' if one else 'are not checkpoints'} the trainer wrote "
            f"(no whole TensorFlow .index), and --fresh_start removes only the trainer's "
            f"files; the new run would take {it} for a checkpoint: move {it} out of "
            f"{directory} and start again (nothing was removed), or choose another "
            f"--train_dir")
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
