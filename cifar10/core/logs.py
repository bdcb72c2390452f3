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

# A C++ log line's head, as absl writes it (``I0000 00:00:1795575350.065948  1850
# port.cc:153] ...``) and as TensorFlow 2.16 did (``2026-11-25 02:59:20.839188: I ...] ``).
_HEAD = re.compile(rb"(?:([IWEF])\d{4} +\d+:\d+:\d+\.\d+ +\d+"
                   rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF])) [^ \]]+:\d+\] ")
_PREINIT = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# Lines of a crash, always passed on even right after a dropped message.
_CRASH = (b"terminate called", b"Fatal Python error", b"Check failed", b"*** ",
          b"Segmentation fault", b"Aborted")
LEVELS = b"IWEF"  # the levels of C++ log lines, as TF_CPP_MIN_LOG_LEVEL counts them


def tensorflow_lines_wanted(environ: Mapping[str, str], asked: bool) -> bool:
    """Whether the user asked for all of TensorFlow's log lines: ``asked`` on the
    command line (``--verbosity``, the placement log), or ``TF_CPP_MIN_LOG_LEVEL`` set
    to 0 or to what is not a level."""
    return asked or ("TF_CPP_MIN_LOG_LEVEL" in environ and min_level(environ) is None)


def min_level(environ: Mapping[str, str]) -> int | None:
    """The lowest level of C++ log line shown (an index of ``LEVELS``): 3 (fatal only)
    unless ``TF_CPP_MIN_LOG_LEVEL`` is 1 or 2; None where it is 0 or not a number."""
    value = environ.get("TF_CPP_MIN_LOG_LEVEL")
    if value is None:
        return LEVELS.index(b"F")
    value = value.strip()
    if not value.isdigit() or int(value) == 0:
        return None
    return min(int(value), LEVELS.index(b"F"))


def python_level(environ: Mapping[str, str]) -> str:
    """TensorFlow's Python logger's level: warnings with ``TF_CPP_MIN_LOG_LEVEL=1``, else errors."""
    return "WARNING" if min_level(environ) == LEVELS.index(b"W") else "ERROR"


def _severity(line: bytes) -> bytes | None:
    """The level letter (I, W, E, F) of a C++ log line's head, else None."""
    head = _HEAD.match(line)
    return (head.group(1) or head.group(2)) if head else None


class NativeLineFilter:
    """Drops C++ log lines below ``keep_from`` (an index of ``LEVELS``), with their
    continuation lines, from a byte stream; passes on everything else."""

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
        # Any other line continues the message before it (a message may span lines).
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
    """Keeps native log lines below ``keep_from`` (``min_level``; None: none) off
    stderr for the rest of this process, through a forked filtering process; Python's
    ``sys.stderr`` and absl's handler write to a copy of descriptor 2.  Call it once,
    before TensorFlow loads and while the process has no other thread."""
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
            # It ends when the pipe closes (the program ended), not on the group's Ctrl-C.
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
    """Warnings as ``<program>: warning: <message>`` (``error``; ``notice`` for one logged
    with ``extra={"notice": True}``), like the one-line errors; lower levels as ``fallback``."""

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
    """Progress of ``total`` units of work (None: not known) on ``stream`` (stderr): on a
    terminal one line rewritten in place; elsewhere a line at the start, at each tenth
    (each ``unsized_step`` units without a total) and at the end.  ``describe`` gives
    the line for (units done, seconds since the start)."""

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
        """Shows that ``done`` units are done."""
        self._done = done
        line = self.describe(done, time.monotonic() - self._start)
        mark = 10 * done // self.total if self.total else done // self.unsized_step
        if self.rewrite:
            # Spaces over a longer line before (a dumb terminal shows escape codes).
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        elif mark != self._mark or done == self.total:
            self._write_line(done, line)
            self._mark = mark
        self.stream.flush()

    def end(self, done: int | None = None) -> None:
        """After the last unit (or a failure): ends the terminal's line, or in a log shows
        where it stopped (``done``, default the last shown), unless already shown."""
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
