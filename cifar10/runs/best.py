"""best/ in a run folder: the checkpoint of the best validation precision, kept apart
from the run's own (never pruned) and replaced only by a better one.

best/ is an ordinary checkpoint folder (``model.ckpt-<step>`` and TensorFlow's state
file) that every program reads; ``best.json`` in it names the kept checkpoint and its
figures (a null step before the first).  It is also best/'s mark: the trainer writes it
first as it makes best/, and saves into or cleans a best/ only where it is there
(``layout.run_of`` too), so that a user's folder of that name is never touched.  A new
best is written beside the kept one, then ``best.json`` is replaced (the switch), then
the state file, then the old files are removed: best/ holds a whole best checkpoint at
every moment, and the next start removes what a kill left.
"""

from __future__ import annotations

import dataclasses
import json
import math
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
        if record["step"] is None:
            return None
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
    one's (on a tie the older stays).  The chief makes one as the run starts at
    ``start_step``: it makes and marks best/, or reads the best of the run's earlier
    starts, forgets one of a later step (a trajectory the run no longer has, as
    ``MetricsFile`` drops its rows) and removes what a kill left in best/.  A best/
    without the mark is a user's: it stays as it is and no best is kept (one warning).

    Failing to write best/ (a full disk, permissions) is a warning and the run goes
    on: its own checkpoints are the user's work, best/ a convenience (the next save of
    the run's checkpoints says what is wrong, as an error)."""

    def __init__(self, train_dir: str, checkpoint: tf.train.Checkpoint, start_step: int):
        self.directory: str | None = os.path.join(train_dir, BEST_DIR)
        self.checkpoint = checkpoint
        self.best: Best | None = None
        try:
            if not os.path.isfile(os.path.join(self.directory, BEST_FILE)):
                if os.path.lexists(self.directory) and not (
                        os.path.isdir(self.directory) and not os.listdir(self.directory)):
                    logging.warning("%s is not the trainer's (it has no %s): it is left as it "
                                    "is and the run keeps no best checkpoint; move it away to "
                                    "have one kept.", self.directory, BEST_FILE)
                    self.directory = None
                    return
                os.makedirs(self.directory, exist_ok=True)
                self._record(None)
            self.best = read(self.directory)
            cleanup.remove_leftovers(self.directory)
            if self.best and self.best.step > start_step:
                forgotten, self.best = self.best, None
                self._record(None)  # (the switch: then its files go)
                for name in [layout.STATE_FILE, *cleanup.checkpoint_files(self.directory,
                                                                          forgotten.step)]:
                    cleanup.delete(self.directory, name)
            elif self.best:
                self._drop_all_but(self.best)
                named, _ = layout.named_step(self.directory, {self.best.step})
                if named != self.best.step:
                    layout.write_state(self.directory, [Checkpoint(self.best.step,
                                                                   self.best.path)])
        except (OSError, Cifar10Error) as e:
            logging.warning("%s; the run goes on.", first_line(e))

    def offer(self, step: int, precision: float, loss: float | None) -> bool:
        """Keeps the checkpoint of ``step`` as the best where ``precision`` is higher
        than the kept one's (and it and ``loss`` are numbers); whether it is kept now."""
        if (not self.directory or not math.isfinite(precision)
                or not math.isfinite(1.0 if loss is None else loss)
                or self.best and precision <= self.best.precision):
            return False
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
        try:
            self.checkpoint.write(new.path)
        except BaseException:
            for name in cleanup.checkpoint_files(self.directory, new.step):
                cleanup.delete(self.directory, name)
            raise
        self._record(new)
        self.best = new  # (from here on, a kill leaves ``new`` the best)
        layout.write_state(self.directory, [Checkpoint(new.step, new.path)])
        self._drop_all_but(new)

    def _record(self, best: Best | None) -> None:
        atomic.write_text(os.path.join(self.directory, BEST_FILE), json.dumps(
            {"step": best.step, "precision": best.precision, "loss": best.loss,
             "checkpoint": os.path.basename(best.path)} if best else {"step": None}) + "\n")

    def _drop_all_but(self, kept: Best) -> None:
        """Removes the checkpoints in best/ other than ``kept``'s (a user's look-alikes
        stay: ``cleanup.foreign_checkpoint_files``)."""
        complete, incomplete = layout.scan(self.directory)
        foreign = set(cleanup.foreign_checkpoint_files(self.directory))
        for step in sorted((set(complete) | set(incomplete)) - {kept.step}):
            for name in cleanup.checkpoint_files(self.directory, step):
                if name not in foreign:
                    cleanup.delete(self.directory, name)
