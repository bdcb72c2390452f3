"""metrics.csv in a run folder: the run's history as data, one row per logged or validated
step (Keras' and Lightning's CSVLogger, timm's summary.csv), appended across resumes.
The chief writes it; it is flushed row by row, so that it reads while the run trains."""

from __future__ import annotations

import numbers
import os
from typing import Any, Mapping, Sequence

from absl import logging

from cifar10.core import atomic

METRICS_FILE = "metrics.csv"
COLUMNS = ("step", "epoch", "loss", "learning_rate", "examples_per_sec", "precision",
           "test_loss")
HEADER = ",".join(COLUMNS)


def is_ours(path: str) -> bool:
    """Whether the file ``path`` is a metrics file the trainer wrote (its header line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\r\n") == HEADER
    except OSError:
        return False


class MetricsFile:
    """``<train_dir>/metrics.csv`` opened for a run that starts at ``start_step``: the
    rows of later steps (of a run that went further before it resumed from an earlier
    checkpoint) are dropped, so that no step is there twice.  A file of another header
    is a user's: it is left alone and nothing is written (one warning), as where the
    file cannot be written; training goes on either way."""

    def __init__(self, train_dir: str, start_step: int):
        self.path = os.path.join(train_dir, METRICS_FILE)
        self.writable = False
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            text = ""
        except OSError as e:
            return self._warn(f"it cannot be read ({e.strerror})")
        lines = text.split("\n")
        if text and lines[0].rstrip("\r") != HEADER:
            return self._warn(f"it is not the trainer's (its first line is not {HEADER!r}): "
                              f"it is left alone; move it away to have the metrics written")
        kept, damaged = [HEADER], False
        for line in lines[1:-1]:  # (the last: '' after the final newline, or cut short)
            step = line.split(",", 1)[0]
            if step.isdigit() and line.count(",") == len(COLUMNS) - 1:
                if int(step) <= start_step:
                    kept.append(line.rstrip("\r"))
            else:
                damaged = True
        if damaged or (len(lines) > 1 and lines[-1]):
            logging.warning("%s: its damaged rows are left out (a line cut short, or not of "
                            "its columns).", self.path)
        try:
            atomic.write_text(self.path, "\n".join(kept) + "\n")
        except OSError as e:
            return self._warn(f"it cannot be written ({e.strerror})")
        self.writable = True

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Appends ``rows`` ({column: value}, a column left out is an empty cell) and
        flushes them."""
        if not self.writable:
            return
        text = "".join(",".join(_cell(row.get(name)) for name in COLUMNS) + "\n"
                       for row in rows)
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            self._warn(f"it cannot be written ({e.strerror})")

    def _warn(self, why: str) -> None:
        self.writable = False
        logging.warning("%s: %s; the run goes on without a metrics file.", self.path, why)


def _cell(value: Any) -> str:
    """A value as a cell: '' for None, a real number to 6 significant digits."""
    if value is None:
        return ""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.6g}"
