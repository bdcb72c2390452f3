"""Removing what the trainer wrote in a run directory, and only that: leftovers of
writes cut short, old checkpoints, every file of a run (``--fresh_start``).

Files are matched by their exact names, so a user's look-alike (``model.ckpt-best.txt``,
a folder) stays.  A ``.index`` is the trainer's only when it ends as TensorFlow's table
does (its ``.data`` shards go with it); an event file when its first summaries are.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import struct
from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, io_error, listed
from cifar10.runs import metrics, records
from cifar10.runs.layout import (BEST_DIR, BEST_FILE, CLASSES_FILE, COMPLETE_FILE, DATA_FILE,
                                 INDEX_FILE, PREFIX, STATE_FILE, STATE_TEMP_FILE, TEMP_DIR,
                                 listdir)

# TensorFlow's event file names: events.out.tfevents.<time>.<host>.<pid>.<n>.v2
_EVENTS = re.compile(r"events\.out\.tfevents\.\d+\..+\.\d+\.\d+\.v2")
# The trainer's small files, each written through <name>.tmp<32 hex digits> first.
_RECORDS = (COMPLETE_FILE, CLASSES_FILE, records.FLAGS_FILE, records.ENVIRONMENT_FILE)
_RECORD_TEMP_FILE = re.compile(
    f"({'|'.join(map(re.escape, (*_RECORDS, metrics.METRICS_FILE, BEST_FILE)))})"
    f"{atomic.TEMP_SUFFIX}")
_LEFTOVERS = (TEMP_DIR, STATE_TEMP_FILE, _RECORD_TEMP_FILE)
# TensorFlow saves each shard into model.ckpt-<step>_temp/, moves the data files into
# place, writes the .index in place, and only then removes the shard's index and the
# folder: a kill in between leaves that shard index, and a .index missing or half there.
_SHARD_INDEX = re.compile(r"part-\d{5}-of-\d{5}\.index")
# The last bytes of a whole .index: the magic number of TensorFlow's table format.
_TABLE_MAGIC = struct.pack("<Q", 0xdb4775248b80fb57)
# Summary tags only the trainer writes, and the evaluator's: the first in an event file
# tells whose it is; the settings table both write is the trainer's with a train_dir row
# (both write an HParams session too).  "train_step": older trainers' graph.
_TRAINER_TAGS = {"learning_rate", "total_loss", "examples_per_sec", "train_step"}
_EVALUATOR_TAGS = {"Precision @ 1"}
_TRAINER_CONFIG_ROW = b"| train_dir |"


def own_files(directory: str, best: bool = False) -> list[str]:
    """The names in ``directory`` that the trainer wrote, sorted (``best``: a run's
    best/, where its small files are the state file and ``BEST_FILE`` only)."""
    exact = {STATE_FILE, BEST_FILE} if best else {STATE_FILE, *_RECORDS, metrics.METRICS_FILE}
    foreign = set(foreign_checkpoint_files(directory))
    names = []
    for name in listdir(directory):
        path = os.path.join(directory, name)
        if not (name in exact or checkpoint_step(name) is not None
                or any(p.fullmatch(name) for p in (_EVENTS, *_LEFTOVERS))):
            continue
        if name in foreign or (os.path.isdir(path) and not TEMP_DIR.fullmatch(name)):
            continue
        if _EVENTS.fullmatch(name) and not trainers_events(path):
            continue
        if name == metrics.METRICS_FILE and not metrics.is_ours(path):
            continue
        names.append(name)
    return sorted(names)


def foreign_checkpoint_files(directory: str) -> list[str]:
    """The files with a checkpoint's name that the trainer did not write, sorted: a
    ``.index`` that is not whole and its ``.data`` shards, unless a save was cut short."""
    names = listdir(directory)
    indexed = {int(m[1]) for m in map(INDEX_FILE.fullmatch, names) if m}
    bad = {step for step in indexed
           if not _whole_index(os.path.join(directory, f"{PREFIX}-{step}.index"))}
    bad -= set(cut_short_steps(directory))
    return sorted(name for name in names if checkpoint_step(name) in bad
                  and not os.path.isdir(os.path.join(directory, name)))


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint's .index or .data file of that name, or None."""
    match = INDEX_FILE.fullmatch(name) or DATA_FILE.fullmatch(name)
    return int(match[1]) if match else None


def events(path: str):
    """The event file ``path``'s records, each a TensorBoard ``Event`` (protobuf only, no
    TensorFlow, which would take a GPU); ValueError where a record runs past the end."""
    from tensorboard.compat.proto import event_pb2

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        while len(header := f.read(12)) == 12:  # TFRecord: length, its CRC, data, its CRC
            (length,) = struct.unpack("<Q", header[:8])
            if length > size - f.tell():
                raise ValueError(f"a record of {path} runs past its end")
            event = event_pb2.Event.FromString(f.read(length))
            f.read(4)
            yield event


def trainers_events(path: str, records: int = 16) -> bool:
    """Whether the event file ``path`` is the trainer's: the first tag among its first
    ``records`` records that one program alone writes is the trainer's, or it holds no
    summary and is under 1 KiB (a start cut short)."""
    from google.protobuf.message import DecodeError

    summaries = False
    try:
        size = os.path.getsize(path)
        for _, event in zip(range(records), events(path)):
            for v in event.summary.value:
                if v.tag == "run_config":
                    return _TRAINER_CONFIG_ROW in (v.tensor.string_val or [b""])[0]
                if v.tag in _TRAINER_TAGS or v.tag in _EVALUATOR_TAGS:
                    return v.tag in _TRAINER_TAGS
                summaries = True
    except (OSError, ValueError, DecodeError):
        return False
    return not summaries and size < 1024


def remove_leftovers(directory: str) -> list[str]:
    """Removes the temporary folders and files of writes cut short, and the checkpoints
    whose save was cut short; returns the names removed, sorted."""
    removed = {name for name in own_files(directory)
               if any(p.fullmatch(name) for p in _LEFTOVERS)}
    for step in cut_short_steps(directory):
        removed.update(checkpoint_files(directory, step))
    for name in sorted(removed):
        delete(directory, name)
    return sorted(removed)


def cut_short_steps(directory: str) -> list[int]:
    """The steps whose save was cut short as TensorFlow put the files in place: the
    temporary folder still holds a shard's .index and the .index is not whole.  Sorted."""
    steps = []
    for name in listdir(directory):
        match = TEMP_DIR.fullmatch(name)
        if not match or _whole_index(os.path.join(directory, f"{PREFIX}-{match[1]}.index")):
            continue
        try:
            if any(_SHARD_INDEX.fullmatch(n) for n in os.listdir(os.path.join(directory, name))):
                steps.append(int(match[1]))
        except OSError:  # not a folder, or gone
            pass
    return sorted(steps)


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


def remove_run(directory: str) -> int:
    """``--fresh_start``: removes every file the trainer wrote (not its lock), its
    best/'s too (best/ itself where nothing else is left in it); returns how many.  Cifar10Error,
    removing nothing, where a file has a checkpoint's name and is not the trainer's (the
    new run would take it for its own checkpoint)."""
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
    best = os.path.join(directory, BEST_DIR)  # (a user's, without BEST_FILE, stays)
    marked = os.path.isfile(os.path.join(best, BEST_FILE)) and not os.path.islink(best)
    in_best = sorted(own_files(best, True) if marked else [], key=lambda n: n == BEST_FILE)
    for name in in_best:  # (BEST_FILE, the mark, last)
        delete(best, name)
    with contextlib.suppress(OSError):
        os.rmdir(best)  # (only where empty)
    names = own_files(directory)
    for name in names:
        delete(directory, name)
    return len(in_best) + len(names)


def checkpoint_files(directory: str, step: int) -> list[str]:
    """The names of the files and temporary folder of the checkpoint of ``step``, in
    the order to delete them: the ``.index`` last, so that a deletion cut short never
    leaves ``.data`` shards without it."""
    names = [name for name in listdir(directory)
             if (m := INDEX_FILE.fullmatch(name) or DATA_FILE.fullmatch(name)
                 or TEMP_DIR.fullmatch(name)) and int(m[1]) == step]
    return sorted(names, key=lambda name: name.endswith(".index"))


def delete(directory: str, name: str) -> None:
    """Removes a file or a save's temporary folder of the trainer's; a missing one is
    fine, one that cannot be removed a Cifar10Error."""
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
