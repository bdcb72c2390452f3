"""What the programs write: their warnings in their own format, progress lines, a long
wait's lines, commands to run next, and TensorFlow's C++ log lines filtered out of
descriptor 2 by a forked process (``TF_CPP_MIN_LOG_LEVEL`` does not reach absl's
logging).  No TensorFlow."""

from __future__ import annotations

import io
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import time
from typing import Callable, Mapping, TextIO

# A C++ log line's head, as absl writes it and as TensorFlow 2.16 did.
_HEAD = re.compile(rb"(?:([IWEF])\d{4} +\d+:\d+:\d+\.\d+ +\d+"
                   rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF])) [^ \]]+:\d+\] ")
_PREINIT = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# Lines of a crash, always passed on even right after a dropped message.
_CRASH = (b"terminate called", b"Fatal Python error", b"Check failed", b"*** ",
          b"Segmentation fault", b"Aborted")
LEVELS = b"IWEF"  # the levels of C++ log lines, as TF_CPP_MIN_LOG_LEVEL counts them


def tensorflow_lines_wanted(environ: Mapping[str, str], asked: bool) -> bool:
    """Whether all of TensorFlow's log lines are asked for: ``asked`` on the command line,
    or ``TF_CPP_MIN_LOG_LEVEL`` 0 or not a level."""
    return asked or ("TF_CPP_MIN_LOG_LEVEL" in environ and min_level(environ) is None)


def min_level(environ: Mapping[str, str]) -> int | None:
    """The lowest C++ log level shown (of ``LEVELS``) by ``TF_CPP_MIN_LOG_LEVEL``, 3 by
    default; None: all."""
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


class NativeLineFilter:
    """Drops C++ log lines below ``keep_from`` (an index of ``LEVELS``), with their
    continuation lines, from a byte stream; passes on everything else."""

    def __init__(self, keep_from: int = 3):
        self._partial = b""
        self._in_dropped = False  # the last line began or continued a dropped message
        self._kept = LEVELS[keep_from:]

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to pass on of ``chunk``, the stream's next."""
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        return b"".join(line + b"\n" for line in lines if self._keep(line))

    def close(self) -> bytes:
        """Ends the stream: a last unfinished line if it is kept."""
        line, self._partial = self._partial, b""
        return line if line and self._keep(line) else b""

    def _keep(self, line: bytes) -> bool:
        head = _HEAD.match(line)
        if head:
            self._in_dropped = (head.group(1) or head.group(2)) not in self._kept
        elif line.startswith(_PREINIT):  # absl's own warning
            self._in_dropped = b"W" not in self._kept
        elif line.startswith(_CRASH):
            self._in_dropped = False
        # Any other line continues the message before it (a message may span lines).
        return not self._in_dropped


def _forward(read_fd: int, write_fd: int, keep_from: int) -> None:
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
    """Keeps native log lines below ``keep_from`` (``min_level``) off stderr, through a
    forked filter; Python and absl write to a copy of descriptor 2.  Call it once,
    before TensorFlow loads and while the process has one thread."""
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
    """Warnings as ``<program>: warning: <message>`` (``error``, ``notice`` with
    ``extra={"notice": True}``); lower levels as ``fallback``."""

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
    """Progress of ``total`` units (None: not known) on ``stream``: on a terminal one line
    rewritten; elsewhere a line at each tenth (or ``unsized_step``) and at the end.
    ``describe(done, seconds)`` gives the line."""

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
        """After the last unit (or a failure): ends the line, or in a log shows ``done``."""
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


def runnable(program: str, argv0: str | None = None) -> str:
    """``program`` (another cifar10-* program) as the user's shell runs it: its name where
    PATH finds the one beside this program (``argv0``, default ``sys.argv[0]``; beside
    the file it links to where it is a link that has none beside it), else the path of
    that one (a venv not activated), relative where ``argv0`` is."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if not os.path.dirname(argv0) and not os.path.isfile(argv0):
        return program  # not started as a console script: the name is the best guess
    for started in (argv0, os.path.realpath(argv0)):
        beside = os.path.join(os.path.dirname(started) or os.curdir, program)
        if os.path.isfile(beside):
            break
    else:
        return program
    found = shutil.which(program)
    if found and os.path.samefile(found, beside):
        return program
    return shlex.quote(beside)


WAIT_LINE_SECS = 300.0  # how often a long wait says how long it has lasted


class WaitLines:
    """The lines of an evaluator's wait (for a run to start, for its first checkpoint):
    ``first`` as it begins, then every ``WAIT_LINE_SECS`` by ``clock`` how long it lasts."""

    def __init__(self, print_fn: Callable[[str], None], eval_timeout: float | None,
                 clock: Callable[[], float] = time.monotonic):
        self.print_fn, self.clock = print_fn, clock
        self.ends = ("--eval_timeout ends the wait" if eval_timeout is None
                     else f"at most --eval_timeout={eval_timeout:g} seconds")
        self.began: float | None = None
        self.said = 0  # the WAIT_LINE_SECS said of this wait

    def waiting(self, first: str, still: str) -> None:
        """At each look that finds nothing: ``first`` once, later '<still> after 10 min;
        waiting (...).'"""
        now = self.clock()
        if self.began is None:
            self.began, self.said = now, 0
            self.print_fn(first)
        elif now - self.began >= (self.said + 1) * WAIT_LINE_SECS:
            self.said = int((now - self.began) // WAIT_LINE_SECS)
            minutes = int((now - self.began) // 60)
            waited = (f"{minutes} min" if minutes < 60
                      else f"{minutes // 60} h {minutes % 60:02d} min")
            self.print_fn(f"{still} after {waited}; waiting ({self.ends}).")

    def over(self) -> None:
        """The wait ended (what it waited for came): a next one begins with ``first``."""
        self.began = None
