"""best/ in a run folder: the checkpoint of the best validation precision, kept apart
from the run's own (never pruned) and replaced only by a better one.

best/ is an ordinary checkpoint folder (``model.ckpt-<step>`` and TensorFlow's state
file) that every program reads; ``best.json`` in it names the kept checkpoint and its
figures.  A new best is written beside the kept one, then ``best.json`` is replaced
(the switch), then the state file, then the old files are removed: best/ holds a whole
best checkpoint at every moment, and the next start removes what a kill left.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf
from absl import logging

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, first_line
from cifar10.runs import cleanup, layout
from cifar10.runs.layout import BEST_DIR, BEST_FILE, Checkpoint, checkpoint_path

__all__ = ["BEST_DIR", "Best", "BestCheckpoint", "read"]


@dataclasses.dataclass(frozen=True)
class Best:
    """The kept best: its step, validation precision @ 1 and test loss, and its
    checkpoint's prefix ``<train_dir>/best/model.ckpt-<step>``."""

    step: int
    precision: float
    loss: float | None
    path: str


def read(directory: str) -> Best | None:
    """The best kept in ``directory`` (a best/ folder), or None: none, or its
    ``best.json`` is damaged or names a checkpoint that is not whole (one warning)."""
    path = os.path.join(directory, BEST_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        best = Best(int(record["step"]), float(record["precision"]),
                    None if record["loss"] is None else float(record["loss"]),
                    checkpoint_path(directory, int(record["step"])))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        logging.warning("%s cannot be read (%s): the run's best checkpoint is chosen "
                        "anew from its next validation.", path, first_line(e))
        return None
    if best.step not in layout.scan(directory)[0]:
        logging.warning("%s names %s, which is not whole: the run's best checkpoint is "
                        "chosen anew from its next validation.", path, best.path)
        return None
    return best


class BestCheckpoint:
    """The best checkpoint of the run in ``train_dir``: ``offer`` saves ``checkpoint``
    (the one the run saves) into best/ when its precision is higher than the kept
    one's (on a tie the older stays).  The chief makes one as the run starts, which
    reads the best of the run's earlier starts and removes what a kill left in best/.

    Failing to write best/ (a full disk, permissions) is a warning and the run goes
    on: its own checkpoints are the user's work, best/ a convenience (the next save of
    the run's checkpoints says what is wrong, as an error)."""

    def __init__(self, train_dir: str, checkpoint: tf.train.Checkpoint):
        self.directory = os.path.join(train_dir, BEST_DIR)
        self.checkpoint = checkpoint
        self.best: Best | None = None
        try:
            self.best = read(self.directory)
            cleanup.remove_leftovers(self.directory)
            if self.best:
                self._drop_all_but(self.best)
                named, _ = layout.named_step(self.directory, {self.best.step})
                if named != self.best.step:
                    layout.write_state(self.directory, [Checkpoint(self.best.step,
                                                                   self.best.path)])
        except Cifar10Error as e:
            logging.warning("%s; the run goes on.", e)

    def offer(self, step: int, precision: float, loss: float | None) -> bool:
        """Keeps the checkpoint of ``step`` as the best where ``precision`` is higher
        than the kept one's; whether it is kept now."""
        if self.best and (precision <= self.best.precision or step == self.best.step):
            return False  # (the same step again: its files are not written over)
        new = Best(step, float(precision), None if loss is None else float(loss),
                   checkpoint_path(self.directory, step))
        try:
            self._save(new)
        except (OSError, tf.errors.OpError, Cifar10Error) as e:
            logging.warning("cannot keep the checkpoint of step %d (precision @ 1 %.4f) as "
                            "the run's best in %s (%s); training goes on%s.", step, precision,
                            self.directory, first_line(e),
                            f", the best kept is {self.best.path}" if self.best else "")
        return self.best == new

    def _save(self, new: Best) -> None:
        os.makedirs(self.directory, exist_ok=True)
        try:
            self.checkpoint.write(new.path)
        except BaseException:
            for name in cleanup.checkpoint_files(self.directory, new.step):
                cleanup.delete(self.directory, name)
            raise
        atomic.write_text(os.path.join(self.directory, BEST_FILE), json.dumps(
            {"step": new.step, "precision": new.precision, "loss": new.loss,
             "checkpoint": os.path.basename(new.path)}) + "\n")
        self.best = new  # (from here on, a kill leaves ``new`` the best)
        layout.write_state(self.directory, [Checkpoint(new.step, new.path)])
        self._drop_all_but(new)

    def _drop_all_but(self, kept: Best) -> None:
        """Removes the checkpoints in best/ other than ``kept``'s (a user's look-alikes
        stay: ``cleanup.foreign_checkpoint_files``)."""
        complete, incomplete = layout.scan(self.directory)
        foreign = set(cleanup.foreign_checkpoint_files(self.directory))
        for step in sorted((set(complete) | set(incomplete)) - {kept.step}):
            for name in cleanup.checkpoint_files(self.directory, step):
                if name not in foreign:
                    cleanup.delete(self.directory, name)
