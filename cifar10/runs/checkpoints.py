"""The run directory of a training run: its files, and everything done to them.

What it owns: the names of the files the trainer writes in ``train_dir``, finding
its checkpoints, restoring and saving them, the state file, the complete marker,
the lock that keeps one trainer per directory, and ``fresh_start``.  The trainer,
the evaluator and the programs go through it; no other module knows the names.

A run directory holds:

* ``model.ckpt-<step>.index`` and ``model.ckpt-<step>.data-<i>-of-<n>``: the
  checkpoint after ``<step>`` updates.  TensorFlow writes them in a
  ``model.ckpt-<step>_temp/`` folder first and moves them into place at the end.
* ``checkpoint``: the state file naming the latest checkpoint, kept for
  TensorFlow's own tools (``tf.train.latest_checkpoint``).  Nothing here trusts it
  alone: the checkpoints are the files on disk.
* ``training_complete.json``: written when the run reaches its ``max_steps``.
* ``class_names.txt``: the names of the classes the run trains on, one per line
  in label order (the data's ``batches.meta.txt``), for cifar10-predict and
  cifar10-export.
* ``events.out.tfevents.*.v2``: the training summaries.
* ``cifar10-train.lock``: held (``flock``) by the trainer that uses the directory.

Every file of a user's that merely starts like these names is left alone: the
patterns below match exactly what TensorFlow and this trainer write.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import re
import shutil
import socket
import time
import uuid
from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core import atomic
from cifar10.data import pipeline as data
from cifar10.data import fileformat as ff
from cifar10.runs import records as runrecord
from cifar10.core.config import WEIGHTS
from cifar10.core.errors import Cifar10Error, first_line, io_error, io_advice, listed
from cifar10.model import Model

PREFIX = "model.ckpt"
STATE_FILE = "checkpoint"
COMPLETE_FILE = "training_complete.json"
CLASSES_FILE = "class_names.txt"
LOCK_FILE = "cifar10-train.lock"

# What reading a missing, partial or foreign checkpoint raises: OpErrors for most
# damage, IndexError for a truncated .data file, AssertionError/ValueError when
# the objects do not match.
READ_ERRORS = (tf.errors.OpError, AssertionError, ValueError, IndexError)

_NAME = re.compile(r"model\.ckpt-(\d+)")
_INDEX = re.compile(r"model\.ckpt-(\d+)\.index")
_DATA = re.compile(r"model\.ckpt-(\d+)\.data-(\d{5})-of-(\d{5})")
_TEMP_DIR = re.compile(r"model\.ckpt-(\d+)_temp")
# TensorFlow's event file names: events.out.tfevents.<time>.<host>.<pid>.<n>.v2
_EVENTS = re.compile(r"events\.out\.tfevents\.\d+\..+\.\d+\.\d+\.v2")
# Temporary names of the atomic writes of the state file (this module's and
# TensorFlow's), of the complete marker and of the class names.
# The trainer's own small files besides checkpoints: each is written as <name>.tmp first.
_RECORDS = (COMPLETE_FILE, CLASSES_FILE, runrecord.FLAGS_FILE, runrecord.ENVIRONMENT_FILE)
_STATE_TMP = re.compile(r"checkpoint\.tmp[0-9a-f]{32}")
_MARKER_TMP = re.compile(f"({'|'.join(re.escape(name) for name in _RECORDS)})\\.tmp")
_STATE_LINE = re.compile(r'^model_checkpoint_path:\s*"([^"]*)"\s*$', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a run: ``path`` is the prefix ``<dir>/model.ckpt-<step>``."""

    step: int
    path: str

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def checkpoint_path(directory: str, step: int) -> str:
    """The prefix of the checkpoint after ``step`` updates."""
    return os.path.join(directory, f"{PREFIX}-{step}")


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise io_error("cannot read the directory", directory, e) from e


def _scan(directory: str) -> tuple[list[int], dict[int, str]]:
    """(the steps of the complete checkpoints, sorted; {step: what is missing} of the rest)."""
    names = set(_listdir(directory))
    shards: dict[int, list[re.Match]] = {}
    for match in filter(None, map(_DATA.fullmatch, names)):
        shards.setdefault(int(match[1]), []).append(match)
    indexed = {int(m[1]) for m in map(_INDEX.fullmatch, names) if m}
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


def find(directory: str) -> list[Checkpoint]:
    """The complete checkpoints in ``directory`` (index and every data file), oldest first.

    The state file is not consulted: a checkpoint is its files.
    """
    return [Checkpoint(step, checkpoint_path(directory, step)) for step in _scan(directory)[0]]


def latest(directory: str) -> Checkpoint | None:
    """The newest complete checkpoint in ``directory``, or None."""
    found = find(directory)
    return found[-1] if found else None


# The last layer's biases: one per class, so their shape tells a run's class count.
_OUTPUTS_KEY = "model/softmax_linear/biases/.ATTRIBUTES/VARIABLE_VALUE"


def num_outputs(checkpoint: str) -> int:
    """The number of classes (logits) of the model in ``checkpoint``.

    Raises:
      One of ``READ_ERRORS``: the checkpoint cannot be read or holds no model of
        this trainer's.
    """
    shapes = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
    if _OUTPUTS_KEY not in shapes:
        raise ValueError(f"{checkpoint} holds no cifar10 model (no softmax_linear layer)")
    return int(shapes[_OUTPUTS_KEY][0])


def load_model(checkpoint: str, weights: str = "averages",
               compute_dtype: tf.DType = tf.float32) -> tuple[Model, int]:
    """A model holding the ``weights`` of ``checkpoint``, and the checkpoint's step.

    Args:
      checkpoint: a checkpoint prefix (``Checkpoint.path``).
      weights: 'averages' (the moving averages) or 'raw' (the trained weights).
      compute_dtype: the model's compute type.

    Raises:
      ValueError: ``weights`` is not 'averages' or 'raw'.
      One of ``READ_ERRORS``: the checkpoint is missing, partial or not one of
        this trainer's.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    model = Model(compute_dtype=compute_dtype, trainable=False,
                  num_classes=num_outputs(checkpoint))
    step = tf.Variable(0, dtype=tf.int64)
    # The trainer stores the averages in a second copy of the model under
    # 'averages': restoring that copy into `model` gives the averaged weights.
    key = "averages" if weights == "averages" else "model"
    ckpt = tf.train.Checkpoint(step=step, **{key: model})
    ckpt.read(checkpoint).assert_existing_objects_matched().expect_partial()
    return model, int(step.numpy())


def read_model(checkpoint: str, weights: str = "averages") -> tuple[Model, int]:
    """``load_model``, with a checkpoint that cannot be read as one ``Cifar10Error`` line."""
    try:
        return load_model(checkpoint, weights)
    except READ_ERRORS as e:
        raise Cifar10Error(f"cannot read checkpoint {checkpoint}: {first_line(e)}") from e


# --- the state file and the complete marker ----------------------------------


def _state_problem(directory: str, steps_on_disk: set[int]) -> tuple[int | None, str]:
    """(the step the state file names, or None; what is wrong with it, or '')."""
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
    match = _STATE_LINE.search(text)
    named = match and _NAME.fullmatch(os.path.basename(match[1]))
    if not named:
        return None, f"the state file {path} cannot be parsed"
    step = int(named[1])
    if step not in steps_on_disk:
        return step, f"the state file names {PREFIX}-{step}, which is gone"
    return step, ""


def _write_state(directory: str, checkpoints: list[Checkpoint]) -> None:
    """Writes the state file: the last of ``checkpoints`` is the latest, all are listed.

    Paths are relative, as TensorFlow's CheckpointManager writes them, so that a
    run directory can be moved.  Written to a temporary file and renamed.
    """
    lines = [f'model_checkpoint_path: "{checkpoints[-1].name}"']
    lines += [f'all_model_checkpoint_paths: "{c.name}"' for c in checkpoints]
    path = os.path.join(directory, STATE_FILE)
    _write_atomically(path, f"{path}.tmp{uuid.uuid4().hex}", "\n".join(lines) + "\n")


def _write_atomically(path: str, tmp: str, text: str) -> None:
    try:
        atomic.write_text(path, text, tmp)
    except OSError as e:
        raise io_error("cannot write", path, e) from e


def completed_step(directory: str) -> int | None:
    """The step at which the run in ``directory`` was marked complete, or None."""
    try:
        with open(os.path.join(directory, COMPLETE_FILE)) as f:
            step = json.load(f)["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) else None


# --- the trainer's side --------------------------------------------------------


def _own_files(directory: str) -> list[str]:
    """The names in ``directory`` that this trainer writes (matched exactly), sorted."""
    exact = {STATE_FILE, *_RECORDS}
    patterns = (_INDEX, _DATA, _TEMP_DIR, _EVENTS, _STATE_TMP, _MARKER_TMP)
    return sorted(name for name in _listdir(directory)
                  if name in exact or any(p.fullmatch(name) for p in patterns))


class RunDirectory:
    """The trainer's handle on its ``train_dir``: lock, restore, save, markers.

    Use as a context manager: entering creates the directory, takes the lock, and
    removes the leftovers of interrupted saves, or with ``fresh_start`` every file
    of the earlier run; leaving releases the lock.

    Under a multi-worker strategy only the chief writes ``train_dir``; every
    other worker restores from it but saves into ``save_dir`` (its own scratch
    directory), takes no lock and writes no state file or marker.

    Args:
      directory: the run's ``train_dir``.
      checkpoint: the objects a checkpoint holds (``TrainState.checkpoint()``).
      keep: how many checkpoints to keep.
      save_dir: where a non-chief worker saves; None for the chief.
      fresh_start: remove the earlier run's files on entering (chief only).
      print_fn: where notices go.
    """

    def __init__(self, directory: str, checkpoint: tf.train.Checkpoint, keep: int,
                 save_dir: str | None = None, fresh_start: bool = False,
                 print_fn: Callable[[str], None] = print):
        self.directory = directory
        self.fresh_start = fresh_start
        self.checkpoint = checkpoint
        self.keep = keep
        self.is_chief = save_dir is None
        self.save_dir = save_dir or directory
        self.print_fn = print_fn
        self.saved_step: int | None = None  # the step of the last checkpoint restored or saved
        self._lock_fd: int | None = None

    # -- opening and closing --

    def __enter__(self) -> "RunDirectory":
        if self.is_chief:
            try:
                os.makedirs(self.directory, exist_ok=True)
            except OSError as e:
                raise io_error("cannot create --train_dir", self.directory, e,
                               io_advice(e) or "choose a directory you can write") from e
            self._lock()
            if self.fresh_start:
                removed = self._clear()
                self.print_fn(f"Fresh start: removed {removed} files of the earlier run from "
                              f"{self.directory}.")
            else:
                self._remove_leftovers()
        return self

    def __exit__(self, *exc) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _lock(self) -> None:
        """Takes the directory's lock, or raises naming the trainer that holds it.

        ``flock`` locks belong to the open file: the kernel releases them when the
        process ends in any way, kill -9 included, so a stale lock cannot remain.
        The file itself stays (removing it would let two processes lock two files).
        """
        path = os.path.join(self.directory, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise io_error("cannot write in --train_dir", self.directory, e) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise Cifar10Error(
                f"--train_dir {self.directory} is in use by another trainer ({holder}); wait "
                f"for it to finish or stop it, or choose another --train_dir") from None
        except OSError as e:  # a file system without locks (some network mounts)
            logging.warning("cannot lock %s (%s): make sure no other trainer uses %s.",
                            path, e.strerror, self.directory)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                     "started": time.time()}).encode())
        except OSError as e:
            os.close(fd)
            raise io_error("cannot write", path, e) from e
        self._lock_fd = fd

    def _remove_leftovers(self) -> None:
        """Removes the temporary folders and files of saves that were cut short."""
        removed = []
        for name in _own_files(self.directory):
            if _TEMP_DIR.fullmatch(name) or _STATE_TMP.fullmatch(name) \
                    or _MARKER_TMP.fullmatch(name):
                _delete(self.directory, name)
                removed.append(name)
        if removed:
            self.print_fn(f"Removed what an interrupted save left in {self.directory}: "
                          f"{', '.join(removed)}.")

    def _clear(self) -> int:
        """``fresh_start``: removes every file this trainer writes; returns how many.

        Matched by exact patterns (checkpoints, leftovers of interrupted saves,
        the state file, event files, the complete marker, the class names); the
        lock file (held), the directory and anything else stay.
        """
        names = _own_files(self.directory)
        for name in names:
            _delete(self.directory, name)
        return len(names)

    # -- restoring --

    def restore(self) -> Checkpoint | None:
        """Restores the newest checkpoint that restores completely.

        The state file is a hint: when it is missing, empty, unparsable, or names a
        checkpoint that is gone or does not restore, the newest checkpoint on disk
        that restores is used, one line says which and why, and the chief rewrites
        the state file.

        Returns:
          The checkpoint restored; None when the directory holds no checkpoint.

        Raises:
          Cifar10Error: the directory holds checkpoints and none restores.
        """
        complete, incomplete = _scan(self.directory)
        named, problem = _state_problem(self.directory, set(complete) | set(incomplete))
        if not complete and not incomplete:
            if named is not None:  # every checkpoint of an earlier run was deleted
                self.print_fn(f"Starting from step 0: no checkpoint is left in "
                              f"{self.directory} ({problem}).")
            return None
        reasons = [problem] if problem else []
        restored = None
        for step in reversed(complete):
            candidate = Checkpoint(step, checkpoint_path(self.directory, step))
            try:
                self.checkpoint.read(candidate.path).assert_existing_objects_matched()
            except READ_ERRORS as e:
                reasons.append(f"{candidate.name} does not restore ({first_line(e)})")
                continue
            restored = candidate
            break
        newest = restored.step if restored else -1
        reasons += [f"{PREFIX}-{s} is incomplete ({why})"
                    for s, why in sorted(incomplete.items(), reverse=True) if s > newest]
        if restored is None:
            raise Cifar10Error(
                f"no checkpoint in {self.directory} can be restored: {'; '.join(reasons)}. "
                f"To keep them and start a new run, move them aside or choose another "
                f"--train_dir; --fresh_start deletes them and starts over")
        if named is not None and named < restored.step:
            reasons.append(f"the state file names {PREFIX}-{named}, an older one")
        if reasons:
            self.print_fn(f"Using {restored.path}, the newest checkpoint that restores: "
                          f"{'; '.join(reasons)}.")
            if self.is_chief:
                _write_state(self.directory, [Checkpoint(s, checkpoint_path(self.directory, s))
                                             for s in complete if s <= restored.step])
        self.saved_step = restored.step
        return restored

    # -- saving --

    def latest_path(self) -> str | None:
        """The prefix of the newest complete checkpoint of the run directory, or None."""
        found = latest(self.directory)
        return found.path if found else None

    def describe_latest(self, label: str = "the last checkpoint") -> str:
        """'<label> is <path>', or that no checkpoint exists yet (for error lines)."""
        path = self.latest_path()
        return f"{label} is {path}" if path else "no checkpoint was written yet"

    def save(self, step: int) -> None:
        """Saves the checkpoint of ``step`` and drops the ones beyond ``keep``.

        TensorFlow writes into ``model.ckpt-<step>_temp/`` and moves the files into
        place at the end; a save that fails leaves nothing behind.  Checkpoints
        with a later step than ``step`` (left by an earlier run that went further
        before its newer checkpoints were lost) are not touched.

        Raises:
          Cifar10Error: the checkpoint cannot be written (disk full, read-only, ...).
        """
        if step == self.saved_step:
            return
        prefix = checkpoint_path(self.save_dir, step)
        try:
            self.checkpoint.write(prefix)
        except (OSError, tf.errors.OpError) as e:
            self._remove_partial(step)
            advice = "; ".join(filter(None, [io_advice(e), self.describe_latest()]))
            raise io_error(f"cannot write checkpoint {PREFIX}-{step} in", self.save_dir, e,
                           advice) from e
        self.saved_step = step
        found = find(self.save_dir)
        kept = [c for c in found if c.step <= step][-self.keep:]
        for old in found:
            if old.step < kept[0].step:
                for name in _files_of(self.save_dir, old.step):
                    _delete(self.save_dir, name)
        if self.is_chief:
            _write_state(self.directory, kept)

    def _remove_partial(self, step: int) -> None:
        """Removes what a failed save of ``step`` left, keeping the original error."""
        for name in _files_of(self.save_dir, step):
            try:
                _delete(self.save_dir, name)
            except Cifar10Error:
                pass

    # -- markers --

    def mark_complete(self, step: int) -> None:
        """Records that the run reached its ``max_steps`` at ``step`` (the chief does)."""
        if self.is_chief:
            path = os.path.join(self.directory, COMPLETE_FILE)
            _write_atomically(path, path + ".tmp",
                              json.dumps({"step": step, "time": time.time()}))

    def unmark_complete(self) -> None:
        """The run goes on: it is no longer complete (the chief removes the marker)."""
        if self.is_chief:
            _delete(self.directory, COMPLETE_FILE)

    def record_class_names(self, names: Sequence[str]) -> None:
        """Records the names of the classes the run trains on (the chief does).

        Raises:
          Cifar10Error: the run recorded other names (it was trained on other data),
            or its newest checkpoint has a model of another number of classes.
        """
        newest = latest(self.directory)
        try:
            outputs = num_outputs(newest.path) if newest else len(names)
        except READ_ERRORS:
            outputs = len(names)  # restore() says what is wrong with it
        if outputs != len(names):
            raise Cifar10Error(
                f"the run in {self.directory} has a model of {outputs} classes "
                f"({newest.name}) and --data_dir holds {len(names)} ({listed(names)}): "
                f"train it on the data it started with, or choose another --train_dir")
        if not self.is_chief:
            return
        path = os.path.join(self.directory, CLASSES_FILE)
        if not os.path.exists(path):
            _write_atomically(path, path + ".tmp", "".join(f"{name}\n" for name in names))
            return
        recorded = data.read_class_names(path)
        if recorded != tuple(names):
            raise Cifar10Error(
                f"the run in {self.directory} was trained on the classes "
                f"({listed(recorded)}) and --data_dir holds ({listed(names)}): train it "
                f"on the data it started with, or choose another --train_dir")


def class_names(directory: str) -> tuple[str, ...]:
    """The class names a run recorded in ``directory``; CIFAR-10's if it recorded none.

    Raises:
      DataError: the file is unreadable or malformed.
    """
    return data.read_class_names(os.path.join(directory, CLASSES_FILE),
                                 default=ff.CLASS_NAMES)


def _files_of(directory: str, step: int) -> list[str]:
    """The names of the files (and temporary folder) of the checkpoint of ``step``."""
    names = []
    for name in _listdir(directory):
        match = _INDEX.fullmatch(name) or _DATA.fullmatch(name) or _TEMP_DIR.fullmatch(name)
        if match and int(match[1]) == step:
            names.append(name)
    return names


def _delete(directory: str, name: str) -> None:
    """Removes a file or temporary folder of this trainer's; a missing one is fine."""
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


def _read_holder(fd: int) -> str:
    """'PID 123 on host h, started 2026-11-23 10:00:00' from the lock file, if it says."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = json.loads(os.read(fd, 4096).decode())
        started = datetime.datetime.fromtimestamp(holder["started"]).strftime("%Y-%m-%d %H:%M:%S")
        return f"PID {holder['pid']} on host {holder['host']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "it did not say which"
