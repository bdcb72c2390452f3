"""How cifar10-train is asked to stop: SIGINT, SIGTERM, or a standard output closed or
unwritable.  The first request sets the stop event (the trainer saves and returns); a
second signal ends the process at once (status 130), naming the last checkpoint.
Signals are read by a thread from the wake-up descriptor: a Python handler runs only
when the main thread is back from TensorFlow, and would see two signals as one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

from cifar10.cli import process
from cifar10.runs import layout

INTERRUPTED = 130

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

def last_good_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint of the run in ``directory`` whose save is over."""
    complete = layout.find(directory)
    # Listed after the checkpoints: a save that ends in between is over, and complete.
    saving = {int(m[1]) for m in map(layout.TEMP_DIR.fullmatch,
                                     layout.listdir(directory)) if m}
    good = [c for c in complete if c.step not in saving and _the_runs(directory, c)]
    return good[-1].path if good else None


def _the_runs(directory: str, checkpoint: layout.Checkpoint) -> bool:
    """Whether the run restored or saved ``checkpoint``: one newer than the state file
    names is the run's only if saved since that file was written."""
    named, _ = layout.named_step(directory, {checkpoint.step})
    if named is None or checkpoint.step <= named:
        return True
    try:
        state = os.stat(os.path.join(directory, layout.STATE_FILE)).st_mtime_ns
        return os.stat(checkpoint.path + ".index").st_mtime_ns >= state
    except OSError:
        return True  # (gone meanwhile: the newest by name, as without a state file)


class StopRequests:
    """The stop requests of a run in ``train_dir``, in its ``with`` block (entered in the main
    thread); ``task``: this worker's name ('worker 1') where it is not the chief."""

    def __init__(self, program: str, train_dir: str, stdout=None, stderr=None,
                 task: str | None = None):
        self.program, self.train_dir, self.task = program, train_dir, task
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.event = threading.Event()
        self.stdout_closed = False  # closed, or a write to it failed (``stdout_error``)
        self.stdout_error: OSError | None = None  # that failure, unless a closed pipe
        self.training_started = False  # (``training_starts``; under ``_lock``)
        self._signals = 0
        self._lock = threading.Lock()
        self._watcher = _SignalWatcher(self._signal)

    def __enter__(self) -> "StopRequests":
        # (No lock in the Python handler: it may run inside training_starts.)
        self._watcher.start(lambda *_: self.event.set())
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # Training returned or failed: a signal would turn that end into an interrupt or
        # a traceback, so SIG_IGN from here to the process's end.
        self._watcher.ignore_signals()

    def training_starts(self) -> bool:
        """Marks that training starts, unless a stop was asked for already; returns
        whether one was.  Under the first signal's lock, so that its line is true."""
        with self._lock:
            asked = self.event.is_set()
            self.training_started = not asked
            return asked

    def print(self, line: str) -> None:
        """Writes ``line`` to stdout; one closed or unwritable is a stop request."""
        if self.stdout_closed:
            return
        try:
            self.stdout.write(line + "\n")
            self.stdout.flush()
        except OSError as e:
            self._stdout_went_away(None if isinstance(e, BrokenPipeError) else e)

    @property
    def stdout_status(self) -> int:
        return 1 if self.stdout_error else process.STDOUT_CLOSED

    def stdout_lost(self) -> str:
        if self.stdout_error:
            return f"error: {process.stdout_error_said(self.stdout_error)}"
        return "standard output was closed"

    def closed_line(self, ended: str) -> str:
        """The last line of a run whose stdout went away; ``ended``: its summary's first."""
        return f"{self.program}: {self.stdout_lost()}; {ended[:1].lower()}{ended[1:]}"

    def say(self, line: str) -> None:
        try:
            self.stderr.write(line + "\n")
            self.stderr.flush()
        except (OSError, ValueError):
            pass

    def _stdout_went_away(self, error: OSError | None) -> None:
        with self._lock:
            if self.stdout_closed:
                return
            self.stdout_closed, self.stdout_error = True, error
            process.stdout_to_devnull(self.stdout)
        self.event.set()

    def _signal(self, signum: signal.Signals) -> None:
        # Lines are written by threads of their own: a full pipe must not keep this one
        # from seeing the next signal.
        self._signals += 1
        if self._signals == 1:
            with self._lock:  # one step with the event: see training_starts
                self.event.set()
                started = self.training_started
            doing = ("finishing the current steps and saving a checkpoint"
                     if started else "stopping; training has not started")
            _in_background(self.print,
                           f"Received {signum.name}: {doing} (send it again to stop at once).")
            return
        line = (f"{self.program}: interrupted at once; "
                f"{_last_checkpoint_said(self.train_dir, self.task)}")
        _in_background(self.say, line).join(timeout=1)
        os._exit(INTERRUPTED)


def _last_checkpoint_said(train_dir: str, task: str | None) -> str:
    if task:
        return f"this is {task}: the chief saves the checkpoints in {train_dir}"
    try:
        last = last_good_checkpoint(train_dir)
    except Exception:  # noqa: BLE001 - the process ends at once all the same
        return f"the checkpoints are in {train_dir}"
    return f"the last checkpoint is {last}" if last else "no checkpoint was saved yet"


class _SignalWatcher:
    """SIGINT and SIGTERM passed to ``on_signal`` by a thread reading the wake-up fd."""

    def __init__(self, on_signal: Callable[[signal.Signals], None]):
        self._on_signal = on_signal
        self._previous: dict = {}
        self._previous_wakeup = -1
        self._write_fd: int | None = None

    def start(self, handler: Callable[..., None]) -> None:
        """Starts watching (in the main thread), ``handler`` the Python handler."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._write_fd = write_fd
        # The wake-up fd first, so that no signal goes uncounted; a Python handler makes
        # the C handler write each signal's number to it.
        self._previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._previous = {signum: signal.signal(signum, handler) for signum in _SIGNALS}
        threading.Thread(target=self._watch, args=(read_fd,), name="stop-requests",
                         daemon=True).start()

    def ignore_signals(self) -> None:
        """Leaves both signals ignored until the process ends; stops watching."""
        for signum in self._previous:
            signal.signal(signum, signal.SIG_IGN)
        signal.set_wakeup_fd(self._previous_wakeup)
        os.close(self._write_fd)  # the watching thread reads the end and returns

    def _watch(self, read_fd: int) -> None:
        try:
            while data := os.read(read_fd, 64):
                for signum in data:
                    if signum in _SIGNALS:
                        self._on_signal(signal.Signals(signum))
        finally:
            os.close(read_fd)


def _in_background(function, *args) -> threading.Thread:
    thread = threading.Thread(target=function, args=args, daemon=True)
    thread.start()
    return thread

