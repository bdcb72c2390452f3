"""What the programs write to stderr: their warnings in their own format, native
log lines filtered out, and progress lines.

TensorFlow's C++ runtime logs to file descriptor 2 (absl's pre-init warning, the
CUDA probe of a CPU machine, oneDNN notices), and ``TF_CPP_MIN_LOG_LEVEL`` does not
reach absl's own logging, so ``hide_native_lines`` filters the descriptor itself
through a forked process.  ``TF_CPP_MIN_LOG_LEVEL=0`` or ``--verbosity`` shows them all;
1 to 3 show that level and above, as TensorFlow means it.  No TensorFlow.
"""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import sys
import time
from typing import Callable, Mapping, TextIO

# One C++ log line's head, as absl writes it (TensorFlow 2.17 on)
# ``I0000 00:00:1795575350.065948    1850 port.cc:153] ...`` or
# ``W1125 02:55:53.531089    1870 util.cc:131] ...``, and as TensorFlow's own
# logger wrote it before (2.16): ``2026-11-25 02:59:20.839188: I path/port.cc:113] ...``.
_HEAD = re.compile(rb"(?:([IWEF])\d{4} +\d+:\d+:\d+\.\d+ +\d+"
                   rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF])) [^ \]]+:\d+\] ")
_PREINIT = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# Lines of a crash, always passed on even right after a dropped message.
_CRASH = (b"terminate called", b"Fatal Python error", b"Check failed", b"*** ",
          b"Segmentation fault", b"Aborted")


# The levels of C++ log lines, lowest first, as TF_CPP_MIN_LOG_LEVEL counts them.
LEVELS = b"IWEF"


def tensorflow_lines_wanted(environ: Mapping[str, str], asked: bool) -> bool:
    """Whether the user asked for all of TensorFlow's own log lines, unfiltered.

    Args:
      environ: the process environment (``TF_CPP_MIN_LOG_LEVEL=0``, or a value that
        is not a level, means the user chose TensorFlow's lines as it writes them;
        1 to 3 are filtered by level: ``min_level``).
      asked: the command line asked for them (absl's ``--verbosity``/``-v``, or
        TensorFlow's placement log).
    """
    return asked or ("TF_CPP_MIN_LOG_LEVEL" in environ and min_level(environ) is None)


def min_level(environ: Mapping[str, str]) -> int | None:
    """The lowest level of C++ log line shown (an index of ``LEVELS``): 3 (fatal lines
    only) unless ``TF_CPP_MIN_LOG_LEVEL`` is 1 or 2 (W or E lines and above), as
    TensorFlow counts it, which absl's own C++ logging does not read (3 and more:
    3); None where it is 0 or not a whole number (every line)."""
    value = environ.get("TF_CPP_MIN_LOG_LEVEL")
    if value is None:
        return LEVELS.index(b"F")
    value = value.strip()
    if not value.isdigit() or int(value) == 0:
        return None
    return min(int(value), LEVELS.index(b"F"))


def python_level(environ: Mapping[str, str]) -> str:
    """The level of TensorFlow's Python logger where its lines are not all asked for:
    its warnings with ``TF_CPP_MIN_LOG_LEVEL=1`` (which shows W lines), else errors."""
    return "WARNING" if min_level(environ) == LEVELS.index(b"W") else "ERROR"


def _severity(line: bytes) -> bytes | None:
    """The level letter (I, W, E, F) of a C++ log line's head, else None."""
    head = _HEAD.match(line)
    return (head.group(1) or head.group(2)) if head else None


class NativeLineFilter:
    """Drops C++ log lines below ``keep_from`` (an index of ``LEVELS``; default: I, W
    and E lines), with their continuation lines, from a byte stream; passes on
    everything else, fatal ``F`` lines included."""

    def __init__(self, keep_from: int = 3):
        self._partial = b""
        self._in_dropped = False  # the last line began or continued a dropped message
        self._kept = LEVELS[keep_from:]

    def feed(self, chunk: bytes) -> bytes:
        """Takes the next bytes of the stream; returns the bytes to pass on."""
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        return b"".join(line + b"\n" for line in lines if self._keep(line))

    def close(self) -> bytes:
        """Ends the stream; returns a last unfinished line if it is to be kept."""
        line, self._partial = self._partial, b""
        return line if line and self._keep(line) else b""

    def _keep(self, line: bytes) -> bool:
        severity = _severity(line)
        if severity is not None:
            self._in_dropped = severity not in self._kept
        elif line.startswith(_PREINIT):  # absl's own warning
            self._in_dropped = b"W" not in self._kept
        elif line.startswith(_CRASH):
            self._in_dropped = False
        # Any other line continues the message before it (a C++ message may span
        # lines: "This TensorFlow binary is optimized ...\nTo enable the following
        # instructions ...").
        return not self._in_dropped


def _forward(read_fd: int, write_fd: int, keep_from: int) -> None:
    """Copies ``read_fd`` to ``write_fd`` through a NativeLineFilter until end of file."""
    line_filter = NativeLineFilter(keep_from)
    writable = True
    while True:
        chunk = os.read(read_fd, 1 << 16)
        kept = line_filter.feed(chunk) if chunk else line_filter.close()
        while kept and writable:
            try:
                kept = kept[os.write(write_fd, kept):]
            except OSError:  # nobody reads stderr any more: keep draining the pipe
                writable = False
        if not chunk:
            return


def hide_native_lines(keep_from: int | None = 3) -> None:
    """Keeps native code's log lines below ``keep_from`` (``min_level``; None: none
    are hidden, and nothing is done) off stderr for the rest of this process.

    Call it once, early in a program's process (before TensorFlow loads, and while
    it has no other thread): it forks the filtering process.  Python's
    ``sys.stderr`` (and absl's handler) then write to a copy of the original
    descriptor 2, not through the filter.
    """
    if keep_from is None:
        return
    sys.stderr.flush()
    try:
        real_stderr = os.dup(2)
        read_fd, write_fd = os.pipe()
    except OSError:  # no stderr to filter (closed), or no descriptors left: leave it
        return
    if os.fork() == 0:  # the filtering process: it must never run the program's code
        try:
            # Ctrl-C reaches the whole process group: this process ends when the
            # program has ended and the pipe is closed, having passed on all of it.
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            os.close(write_fd)
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            os.closerange(3, read_fd)
            os.closerange(read_fd + 1, 1 << 16)
            _forward(read_fd, 2, keep_from)
        finally:
            os._exit(0)
    os.close(read_fd)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    sys.stderr = io.TextIOWrapper(io.FileIO(real_stderr, "w"), encoding=sys.stderr.encoding,
                                  errors=sys.stderr.errors, line_buffering=True,
                                  write_through=True)
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().python_handler.stream = sys.stderr


class ProgramFormatter(logging.Formatter):
    """Warnings as ``<program>: warning: <message>`` (errors ``...: error: ...``),
    like the programs' one-line errors; a warning logged with ``extra={"notice":
    True}`` (a change the user made, not a problem) as ``<program>: notice: ...``;
    lower levels as ``fallback`` formats them."""

    def __init__(self, program: str, fallback: logging.Formatter | None = None):
        super().__init__()
        self.program, self.fallback = program, fallback or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.ERROR:
            return f"{self.program}: error: {record.getMessage()}"
        if record.levelno >= logging.WARNING:
            kind = "notice" if getattr(record, "notice", False) else "warning"
            return f"{self.program}: {kind}: {record.getMessage()}"
        return self.fallback.format(record)


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
