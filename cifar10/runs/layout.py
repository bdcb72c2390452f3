"""A run directory's files, found by their names alone (no TensorFlow, so that a
program checks what it was given before TensorFlow loads): the checkpoints, TensorFlow's
state file ``checkpoint``, and the trainer's lock."""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import re
import socket
import time
from typing import Sequence

from absl import logging

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, io_error, listed

PREFIX = "model.ckpt"
# The exact names TensorFlow gives a checkpoint (group 1 is its step) and its files.
CHECKPOINT_NAME = re.compile(r"model\.ckpt-(\d+)")
INDEX_FILE = re.compile(r"model\.ckpt-(\d+)\.index")
DATA_FILE = re.compile(r"model\.ckpt-(\d+)\.data-(\d{5})-of-(\d{5})")
TEMP_DIR = re.compile(r"model\.ckpt-(\d+)_temp")
COMPLETE_FILE = "training_complete.json"  # the mark of a run that reached --max_steps
CLASSES_FILE = "class_names.txt"  # the class names it trains on, in label order
STATE_FILE = "checkpoint"
STATE_TEMP_FILE = re.compile(r"checkpoint" + atomic.TEMP_SUFFIX)
LOCK_FILE = "cifar10-train.lock"
BEST_DIR = "best"  # in a run folder: its checkpoint of the best validation precision
BEST_FILE = "best.json"  # in best/: which checkpoint is kept there, and its figures


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a run: ``path`` is the prefix ``<dir>/model.ckpt-<step>``."""

    step: int
    path: str

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"{PREFIX}-{step}")


def run_of(folder: str) -> str:
    """The run folder whose own files (class names, flags, completeness) go with the
    checkpoints in ``folder``: for a trainer's best/ (marked by its ``BEST_FILE``) its
    run folder, else ``folder``."""
    if (os.path.basename(os.path.normpath(folder)) == BEST_DIR
            and os.path.isfile(os.path.join(folder, BEST_FILE))):
        return os.path.dirname(os.path.normpath(folder)) or "."
    return folder


def listdir(directory: str) -> list[str]:
    """The names in ``directory``; none when it does not exist (Cifar10Error where it
    cannot be read)."""
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise io_error("cannot read the directory", directory, e) from e


def scan(directory: str) -> tuple[list[int], dict[int, str]]:
    """(the steps of the complete checkpoints, sorted; {step: what is missing} of the rest)."""
    names = set(listdir(directory))
    shards: dict[int, list[re.Match]] = {}
    for match in filter(None, map(DATA_FILE.fullmatch, names)):
        shards.setdefault(int(match[1]), []).append(match)
    indexed = {int(m[1]) for m in map(INDEX_FILE.fullmatch, names) if m}
    complete, incomplete = [], {}
    for step in sorted(indexed | set(shards)):
        counts = {int(m[3]) for m in shards.get(step, [])}
        if step not in indexed:
            incomplete[step] = "no .index file"
        elif not counts:
            incomplete[step] = "no .data file"
        elif len(counts) != 1 or len(shards[step]) != counts.pop():
            incomplete[step] = "some .data files are missing"
        else:
            complete.append(step)
    return complete, incomplete


def holds_checkpoints(directory: str) -> bool:
    """Whether ``directory`` holds a checkpoint's files, whole or not."""
    return any(scan(directory))


def find(directory: str) -> list[Checkpoint]:
    """The complete checkpoints in ``directory``, oldest first (not the state file's)."""
    return [Checkpoint(step, checkpoint_path(directory, step)) for step in scan(directory)[0]]


def latest(directory: str) -> Checkpoint | None:
    """The newest complete checkpoint in ``directory``, or None."""
    found = find(directory)
    return found[-1] if found else None


def subfolders_with_checkpoints(directory: str) -> list[str]:
    """The folders directly in ``directory`` that hold a complete checkpoint, sorted;
    none where something cannot be read (a hint must not become an error)."""
    try:
        folders = [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    except OSError:
        return []
    found = []
    for folder in folders:
        try:
            if os.path.isdir(folder) and latest(folder):
                found.append(folder)
        except Cifar10Error:
            pass
    return found


# A file of a checkpoint: group 1 is the checkpoint's prefix.
_FILE_OF_CHECKPOINT = re.compile(r"(.+)\.(?:index|data-\d{5}-of-\d{5})")
_EXAMPLE = f"runs/a/train/{PREFIX}-1000"


def given(value: str) -> str:
    """The prefix of the checkpoint ``--checkpoint=value`` names (the prefix, or one of
    its files, as shell completion gives); Cifar10Error, saying what to pass, where it
    names no complete checkpoint."""
    shown = f"--checkpoint {value}"
    if os.path.isdir(value):
        newest = latest(value)
        if newest is None:
            raise Cifar10Error(f"{shown} is a folder and holds no checkpoints: pass a "
                               f"checkpoint, such as {_EXAMPLE}, or "
                               f"--checkpoint_dir=<a training run> for its newest")
        raise Cifar10Error(f"{shown} is a folder: pass --checkpoint_dir={value} for its "
                           f"newest checkpoint, or --checkpoint={newest.path}")
    match = _FILE_OF_CHECKPOINT.fullmatch(value)
    prefix = match[1] if match and not os.path.isfile(value + ".index") else value
    folder = os.path.dirname(prefix)
    name = CHECKPOINT_NAME.fullmatch(os.path.basename(prefix))
    missing = scan(folder or ".")[1].get(int(name[1])) if name else None
    if missing:
        raise Cifar10Error(f"{shown} is incomplete ({missing}): pass another checkpoint; "
                           f"{_holds(folder)}")
    if os.path.basename(prefix) == "variables" and is_saved_model(os.path.dirname(folder)):
        raise Cifar10Error(f"{shown} is the variables of an export (a SavedModel), not a "
                           f"training checkpoint: pass a checkpoint of the run it was "
                           f"exported from, such as {_EXAMPLE}, or "
                           f"--checkpoint_dir=<that run> for its newest")
    if os.path.isfile(prefix + ".index"):
        return prefix
    if os.path.lexists(value):
        raise Cifar10Error(f"{shown} is not a TensorFlow checkpoint (a checkpoint is named by "
                           f"the prefix of its .index and .data files, such as "
                           f"{_EXAMPLE}); {_holds(folder)}")
    if folder and not os.path.isdir(folder):
        raise Cifar10Error(f"{shown} does not exist: there is no folder {folder}")
    raise Cifar10Error(f"{shown} does not exist; {_holds(folder)}")


def _holds(folder: str) -> str:
    """'runs/a holds model.ckpt-10, model.ckpt-20' (its complete checkpoints)."""
    found = [checkpoint.name for checkpoint in find(folder or ".")]
    where = folder or "the current folder"
    return f"{where} holds {listed(found)}" if found else f"{where} holds no checkpoints"


def is_saved_model(folder: str) -> bool:
    """Whether ``folder`` is a SavedModel (an export's version folder)."""
    return any(os.path.isfile(os.path.join(folder, name))
               for name in ("saved_model.pb", "saved_model.pbtxt"))


def run_folder(checkpoint: str | None, checkpoint_dir: str | None) -> str | None:
    """The folder of the run cifar10-eval scores: ``checkpoint``'s, else ``checkpoint_dir``."""
    if checkpoint:
        return os.path.dirname(checkpoint) or "."
    return checkpoint_dir


def not_in_checkpoint_dir(value: str, checkpoint_dir: str) -> str | None:
    """Why ``--checkpoint=value`` does not go with ``--checkpoint_dir`` (it is in another
    run's folder); None when it is in that folder, or names no checkpoint."""
    try:
        checkpoint = given(value)
    except Cifar10Error:
        return None
    folder = os.path.dirname(checkpoint) or "."
    if os.path.realpath(folder) == os.path.realpath(checkpoint_dir):
        return None
    return (f"--checkpoint {value} is not in --checkpoint_dir {checkpoint_dir}: give only "
            f"--checkpoint to use it, or a --checkpoint_dir that holds it "
            f"(--checkpoint_dir={folder})")


# --- the state file: TensorFlow's record of the latest checkpoint, a hint only --------

_LATEST_LINE = re.compile(r'^model_checkpoint_path:\s*"([^"]*)"\s*$', re.MULTILINE)
_warned: set[str] = set()  # state files found to be folders, each warned about once


def named_step(directory: str, steps_on_disk: set[int]) -> tuple[int | None, str]:
    """(the step the state file names, or None; what is wrong with it, or '');
    ``steps_on_disk``: the steps that have files, complete or not."""
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None, f"the state file {path} is missing"
    except OSError as e:
        return None, f"the state file {path} cannot be read ({e.strerror})"
    if not text.strip():
        return None, f"the state file {path} is empty"
    match = _LATEST_LINE.search(text)
    named = match and CHECKPOINT_NAME.fullmatch(os.path.basename(match[1]))
    if not named:
        return None, f"the state file {path} cannot be parsed"
    step = int(named[1])
    if step not in steps_on_disk:
        return step, f"the state file names {PREFIX}-{step}, which is gone"
    return step, ""


def write_state(directory: str, checkpoints: Sequence[Checkpoint]) -> None:
    """Writes the state file for TensorFlow's tools, the last of ``checkpoints`` the
    latest, in relative paths (a run directory can be moved); a folder of that name is
    left alone, with one warning."""
    path = os.path.join(directory, STATE_FILE)
    if os.path.isdir(path):
        if path not in _warned:
            _warned.add(path)
            logging.warning("%s is a folder, not TensorFlow's state file: it is left alone "
                            "and the run goes on without a state file (tf.train."
                            "latest_checkpoint will not find its checkpoints); move the "
                            "folder away to have the state file written again.", path)
        return
    lines = [f'model_checkpoint_path: "{checkpoints[-1].name}"']
    lines += [f'all_model_checkpoint_paths: "{c.name}"' for c in checkpoints]
    try:
        atomic.write_text(path, "\n".join(lines) + "\n")
    except OSError as e:
        raise io_error("cannot write", path, e) from e


# --- the lock: one trainer per run directory ------------------------------------------
# An flock belongs to the open file: the kernel releases it when the process ends in
# any way, so no stale lock remains.  The file stays; it says who holds it.


class TrainerLock:
    """The lock of the run directory ``directory`` (its ``--train_dir``)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Takes the lock (Cifar10Error where another trainer holds it); on a file
        system without locks, warns and goes on."""
        refuse_a_folder_for_the_file(self.directory)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise io_error("cannot write in --train_dir", self.directory, e) from e
        try:
            for attempt in range(6):  # another start's refuse_if_held holds it an instant
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 5:
                        raise
                    time.sleep(0.1)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise _in_use(self.directory, holder) from None
        except OSError as e:
            logging.warning("cannot lock %s (%s): make sure no other trainer uses %s.",
                            self.path, e.strerror, self.directory)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                     "started": time.time()}).encode())
        except OSError as e:
            os.close(fd)
            raise io_error("cannot write", self.path, e) from e
        self._fd = fd

    def release(self) -> None:
        """Releases the lock, if held (the file stays)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def refuse_if_held(directory: str) -> None:
    """Raises Cifar10Error, as ``TrainerLock.acquire`` would, when another trainer holds
    the lock now (before the data is fetched and TensorFlow loads)."""
    refuse_a_folder_for_the_file(directory)
    holder = held_by(directory)
    if holder is not None:
        raise _in_use(directory, holder)


def refuse_a_folder_for_the_file(directory: str) -> None:
    """Raises Cifar10Error when ``directory``'s lock file is a folder (not the trainer's)."""
    path = os.path.join(directory, LOCK_FILE)
    if os.path.isdir(path):
        raise Cifar10Error(f"{path} is a folder, not cifar10-train's lock file: move that "
                           f"folder away (the trainer keeps its lock in a file of that name "
                           f"in --train_dir)")


def held_by(directory: str) -> str | None:
    """Who holds the trainer's lock of ``directory`` now ('PID 123 on host h, started
    ...'), or None (also where it cannot be told)."""
    try:
        fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        pass  # no locks on this file system: acquire() warns
    finally:
        os.close(fd)
    return None


def _in_use(directory: str, holder: str) -> Cifar10Error:
    return Cifar10Error(f"--train_dir {directory} is in use by another trainer ({holder}); "
                        f"wait for it to finish or stop it, or choose another --train_dir")


def _holder(fd: int) -> str:
    """'PID 123 on host h, started 2026-11-23 10:00:00' from the lock file, if it says."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = json.loads(os.read(fd, 4096).decode())
        started = datetime.datetime.fromtimestamp(holder["started"]).strftime("%Y-%m-%d %H:%M:%S")
        return f"PID {holder['pid']} on host {holder['host']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "it did not say which"
