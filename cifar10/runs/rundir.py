"""The trainer's handle on its run directory: opening it (lock, cleanup), restoring,
saving, and the small files that say what the run is (complete marker, class names)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Callable, Sequence

import tensorflow as tf
from absl import logging

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, io_advice, io_error, listed
from cifar10.runs import checkpoints, cleanup, layout
from cifar10.runs.checkpoints import READ_ERRORS, num_outputs, recorded_class_names
from cifar10.runs.layout import (CLASSES_FILE, COMPLETE_FILE, PREFIX, Checkpoint, TrainerLock,
                                 checkpoint_path, latest)


class RunDirectory:
    """The trainer's handle on its ``directory``: entering creates it, takes the lock,
    and removes the leftovers of writes cut short (with ``fresh_start``, every file of
    the earlier run).  A worker that is not the chief restores from it but saves into
    ``save_dir``, and takes no lock and writes no state file or marker."""

    def __init__(self, directory: str, checkpoint: tf.train.Checkpoint, keep: int,
                 save_dir: str | None = None, fresh_start: bool = False,
                 print_fn: Callable[[str], None] = print,
                 warn: Callable[[str], None] | None = None):
        self.directory = directory
        self.fresh_start = fresh_start
        self.checkpoint = checkpoint
        self.keep = keep
        self.is_chief = save_dir is None
        self.save_dir = save_dir or directory
        self.print_fn = print_fn
        self.warn = warn  # None: checkpoints.restore's own, the program's warnings
        self.saved_step: int | None = None  # the step of the last checkpoint restored or saved
        self._lock = TrainerLock(directory)

    def __enter__(self) -> "RunDirectory":
        if self.is_chief:
            try:
                self._open()
            except BaseException:  # __exit__ is not called: the lock is let go here
                self._lock.release()
                raise
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def _open(self) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            raise io_error("cannot create --train_dir", self.directory, e,
                           io_advice(e) or "choose a directory you can write") from e
        self._lock.acquire()
        if self.fresh_start:
            removed = cleanup.remove_run(self.directory)
            files = "file" if removed == 1 else "files"
            self.print_fn(f"Fresh start: removed {removed} {files} of the earlier run from "
                          f"{self.directory}.")
        elif removed := cleanup.remove_leftovers(self.directory):
            steps = sorted(set(map(cleanup.checkpoint_step, removed)) - {None})
            named = (f" (the unfinished checkpoint{'s' if len(steps) > 1 else ''} "
                     f"{', '.join(f'{PREFIX}-{step}' for step in steps)})" if steps else "")
            self.print_fn(f"Removed what an interrupted save left in {self.directory}: "
                          f"{', '.join(removed)}{named}.")

    def restore(self) -> Checkpoint | None:
        restored = checkpoints.restore(self.directory, self.checkpoint, self.print_fn,
                                       rewrite_state=self.is_chief, warn=self.warn)
        if restored:
            self.saved_step = restored.step
        return restored

    def saved_path(self) -> str | None:
        """The prefix of the checkpoint a restart resumes from, or None: the chief's last
        restored or saved (a newer one that did not restore is none of the run's); on
        another worker, the chief's newest whole one (the chief may have died saving)."""
        if not self.is_chief:
            cut_short = cleanup.cut_short_steps(self.directory)
            kept = [c for c in layout.find(self.directory) if c.step not in cut_short]
            return kept[-1].path if kept else None
        if self.saved_step is None:
            return None
        return checkpoint_path(self.directory, self.saved_step)

    def describe_latest(self, label: str = "the last checkpoint") -> str:
        """'<label> is <path>' (``saved_path``), or that none was written yet."""
        path = self.saved_path()
        return f"{label} is {path}" if path else "no checkpoint was written yet"

    def save(self, step: int) -> None:
        """Saves the checkpoint of ``step`` and drops the older ones beyond ``keep`` (a
        later one, of an earlier run that went further, stays); a save that fails is a
        Cifar10Error and leaves nothing behind."""
        if step == self.saved_step:
            return
        try:
            self.checkpoint.write(checkpoint_path(self.save_dir, step))
        except (OSError, tf.errors.OpError) as e:
            _remove_partial(self.save_dir, step)
            advice = "; ".join(filter(None, [io_advice(e), self.describe_latest()]))
            raise io_error(f"cannot write checkpoint {PREFIX}-{step} in", self.save_dir, e,
                           advice) from e
        self.saved_step = step
        kept = _drop_beyond(self.save_dir, step, self.keep)
        if self.is_chief:
            layout.write_state(self.directory, kept)

    def mark_complete(self, step: int) -> None:
        """Records that the run reached its ``max_steps`` at ``step`` (the chief does)."""
        if self.is_chief:
            _write(os.path.join(self.directory, COMPLETE_FILE),
                   json.dumps({"step": step, "time": time.time()}))

    def unmark_complete(self) -> None:
        """The run goes on: it is no longer complete (the chief removes the marker)."""
        if self.is_chief:
            cleanup.delete(self.directory, COMPLETE_FILE)

    def record_class_names(self, names: Sequence[str]) -> None:
        """Records the names of the classes the run trains on (the chief does);
        Cifar10Error where the run recorded others, or its model has another count."""
        newest = latest(self.directory)
        try:
            outputs = num_outputs(newest.path) if newest else len(names)
        except READ_ERRORS:
            outputs = len(names)  # restoring says what is wrong with it
        if outputs != len(names):
            raise Cifar10Error(
                f"the run in {self.directory} has a model of {outputs} classes "
                f"({newest.name}) and --data_dir holds {len(names)} ({listed(names)}): "
                f"train it on the data it started with, or choose another --train_dir")
        if not self.is_chief:
            return
        path = os.path.join(self.directory, CLASSES_FILE)
        # With a checkpoint, the model's classes are the data's (checked above): a
        # file of another count is damaged, as is one that cannot be read.
        recorded, problem = recorded_class_names(self.directory, len(names) if newest else None)
        if recorded is None:
            if problem and os.path.isdir(path):
                logging.warning("%s %s: the run goes on without recording its class names "
                                "(cifar10-predict and cifar10-export read them); move the "
                                "folder away to have them recorded.", path, problem)
                return
            if problem and os.path.exists(path):
                logging.warning("%s %s: it is written again with --data_dir's class names "
                                "(%s).", path, problem, listed(list(names)))
            _write(path, "".join(f"{name}\n" for name in names))
            return
        if recorded != tuple(names):
            raise Cifar10Error(
                f"the run in {self.directory} was trained on the classes "
                f"({listed(recorded)}) and --data_dir holds ({listed(names)}): train it "
                f"on the data it started with, or choose another --train_dir")


def _drop_beyond(directory: str, step: int, keep: int) -> list[Checkpoint]:
    """Removes the checkpoints older than the ``keep`` newest up to ``step`` (complete or
    not: a prune cut short); returns those kept."""
    complete, incomplete = layout.scan(directory)
    kept = [Checkpoint(s, checkpoint_path(directory, s)) for s in complete if s <= step][-keep:]
    foreign = set(cleanup.foreign_checkpoint_files(directory))
    for old in sorted(set(complete) | set(incomplete)):
        if old < kept[0].step:
            for name in cleanup.checkpoint_files(directory, old):
                if name not in foreign:
                    cleanup.delete(directory, name)
    return kept


def _remove_partial(directory: str, step: int) -> None:
    """Removes what a failed save of ``step`` left, keeping the save's error to report."""
    for name in cleanup.checkpoint_files(directory, step):
        with contextlib.suppress(Cifar10Error):
            cleanup.delete(directory, name)


def _write(path: str, text: str) -> None:
    """Writes one of the run's small files (``atomic.write_text``)."""
    try:
        atomic.write_text(path, text)
    except OSError as e:
        raise io_error("cannot write", path, e) from e
