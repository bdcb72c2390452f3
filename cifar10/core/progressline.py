"""A progress line on stderr that reads well on a terminal and in a log file: on a
terminal one line rewritten in place (``\\r``) at each update; elsewhere (a log
file, a pipe) a line at the start, at each tenth of the work (each ``unsized_step``
units where the total is not known) and at the end, not a line per update.

The download of a data set's tarball and cifar10-prepare's conversion both show
their progress with it.  No TensorFlow.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


class ProgressLine:
    """Progress of ``total`` units of work (None: not known), shown on ``stream``.

    Args:
      describe: the line for (units done, seconds since the start), without ``\\r``
        or a line end.
      total: the units of work in all, or None.
      stream: where the lines go (stderr by default); a terminal when its
        ``isatty()`` says so.
      unsized_step: where ``total`` is None, a line on a log file every this many units.
    """

    def __init__(self, describe: Callable[[int, float], str], total: int | None,
                 stream: TextIO | None = None, unsized_step: int = 1):
        self.describe, self.total, self.unsized_step = describe, total, unsized_step
        self.stream = stream or sys.stderr
        try:
            self.rewrite = self.stream.isatty()
        except (AttributeError, ValueError):
            self.rewrite = False
        self._start = time.monotonic()
        self._mark: int | None = None  # the tenth (or step) last shown, in a log
        self._last: tuple[int, str] | None = None  # (done, line) last written, in a log
        self._done: int | None = None  # the units last shown; None before the first
        self._width = 0  # the length of the line last written on a terminal

    def show(self, done: int) -> None:
        """Shows that ``done`` units are done: rewritten on a terminal; in a log, a line
        when a new tenth (or step) is reached, or the total."""
        self._done = done
        line = self.describe(done, time.monotonic() - self._start)
        mark = 10 * done // self.total if self.total else done // self.unsized_step
        if self.rewrite:
            # Spaces over what a longer line before left (no escape code: a dumb
            # terminal shows those as they are).
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        elif mark != self._mark or done == self.total:
            self._write_line(done, line)
            self._mark = mark
        self.stream.flush()

    def end(self, done: int | None = None) -> None:
        """After the last unit (or a failure): the terminal's line ended, or in a log
        the figure it stopped at shown (unless its line is the last one written).
        ``done`` defaults to the units last shown; before any is shown, nothing."""
        done = self._done if done is None else done
        if done is None:
            return
        if self.rewrite:
            self.stream.write("\n")
        else:
            self._write_line(done, self.describe(done, time.monotonic() - self._start))
        self.stream.flush()

    def _write_line(self, done: int, line: str) -> None:
        if self._last is None or (done != self._last[0] and line != self._last[1]):
            self._last = (done, line)
            self.stream.write(line + "\n")
