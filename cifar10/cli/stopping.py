"""How cifar10-train is asked to stop: SIGINT or SIGTERM, or a standard output that
was closed or cannot be written.

The first request sets the stop event: the trainer finishes the steps under way,
saves and returns (before training started: stops, nothing trained).  A second
signal ends the process at once (status 130) after one line naming the last complete
checkpoint.  Once the trainer returned or failed, signals are ignored, so that its
last line and status (0, 1, 141) stay the process's.  The signals are read by a
thread from the wake-up descriptor (``signal.set_wakeup_fd``): a Python handler runs
only when the main thread comes back from TensorFlow, and two signals meanwhile would
be seen as one.  A closed standard output is pointed at /dev/null, so no later write
fails; the run ends with one line on stderr and status 141 (a failed write: 1).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

from cifar10.cli import process
from cifar10.runs import layout

# The exit status of a run stopped at once by a second signal, as of any interrupted program.
INTERRUPTED = 130

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

def last_good_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint of ``directory`` whose save is over (no
    ``model.ckpt-<step>_temp/`` left) and that is the run's (``_the_runs``), or None."""
    complete = layout.find(directory)
    # Listed after the checkpoints: a save that ends in between is over, and complete.
    saving = {int(m[1]) for m in map(layout.TEMP_DIR.fullmatch,
                                     layout.listdir(directory)) if m}
    good = [c for c in complete if c.step not in saving and _the_runs(directory, c)]
    return good[-1].path if good else None


def _the_runs(directory: str, checkpoint: layout.Checkpoint) -> bool:
    """Whether ``checkpoint`` is one the run restored or saved, not a newer one that did
    not restore: newer than the state file names, it is the run's only if saved since
    that file was written (the save just done)."""
    named, _ = layout.named_step(directory, {checkpoint.step})
    if named is None or checkpoint.step <= named:
        return True
    try:
        state = os.stat(os.path.join(directory, layout.STATE_FILE)).st_mtime_ns
        return os.stat(checkpoint.path + ".index").st_mtime_ns >= state
    except OSError:
        return True  # (gone meanwhile: the newest by name, as without a state file)


class StopRequests:
    """The stop requests of a training run in ``train_dir``, in its ``with`` block
    (entered in the main thread; left, it leaves SIGINT and SIGTERM ignored).

    ``event`` is set by the first signal or a closed standard output;
    ``training_starts`` is the trainer's ``on_training_start``; ``print`` writes a
    line to standard output and notices there that it was closed.
    """

    def __init__(self, program: str, train_dir: str, stdout=None, stderr=None,
                 task: str | None = None):
        """``task``: this worker's name ('worker 1') where it is not the chief."""
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
        # The Python handler only sets the event (without the lock: it may run inside
        # training_starts); the watcher's thread counts and answers each signal.
        self._watcher.start(lambda *_: self.event.set())
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # Training returned (saved) or failed (its error is on its way out): a signal
        # from here on would turn that end into an interrupt or a traceback, and
        # Python's own end restores the default action (killed) while TensorFlow is
        # torn down.  SIG_IGN stays through that end.
        self._watcher.ignore_signals()

    def training_starts(self) -> bool:
        """Marks that training starts now, unless a stop was asked for already;
        returns whether one was.  Under the lock the first signal takes to set the
        event and read the mark, so that its line ("training has not started", or
        "saving a checkpoint") is what the trainer does."""
        with self._lock:
            asked = self.event.is_set()
            self.training_started = not asked
            return asked

    def print(self, line: str) -> None:
        """Writes ``line`` to standard output; a closed one, or one that cannot be
        written (a full disk, EIO), is a stop request."""
        if self.stdout_closed:
            return
        try:
            self.stdout.write(line + "\n")
            self.stdout.flush()
        except OSError as e:
            self._stdout_went_away(None if isinstance(e, BrokenPipeError) else e)

    @property
    def stdout_status(self) -> int:
        """A closed pipe's status (``process.STDOUT_CLOSED``), or 1 where a write failed."""
        return 1 if self.stdout_error else process.STDOUT_CLOSED

    def stdout_lost(self) -> str:
        """'standard output was closed', or 'error: cannot write to standard output (...)'."""
        if self.stdout_error:
            return f"error: {process.stdout_error_said(self.stdout_error)}"
        return "standard output was closed"

    def closed_line(self, ended: str) -> str:
        """The last line of a run whose standard output went away; ``ended``: the first
        line of its summary ('Stopped at step 110; saved ...')."""
        return f"{self.program}: {self.stdout_lost()}; {ended[:1].lower()}{ended[1:]}"

    def say(self, line: str) -> None:
        """Writes ``line`` to stderr, if it can still be written."""
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
            # Every later write, buffered lines included, goes nowhere instead of failing.
            process.stdout_to_devnull(self.stdout)
        self.event.set()

    def _signal(self, signum: signal.Signals) -> None:
        # The lines are written by threads of their own: a reader that does not read
        # (a full pipe) must not keep this one from seeing the next signal.
        self._signals += 1
        if self._signals == 1:
            with self._lock:  # one step with the event: see training_starts
                self.event.set()
                started = self.training_started
            # Before training started it says what is so, and promises nothing: a stop
            # seen before training saves nothing.
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
    """What a second signal's line says of the checkpoints of ``train_dir``."""
    if task:
        return f"this is {task}: the chief saves the checkpoints in {train_dir}"
    try:
        last = last_good_checkpoint(train_dir)
    except Exception:  # noqa: BLE001 - the process ends at once all the same
        return f"the checkpoints are in {train_dir}"
    return f"the last checkpoint is {last}" if last else "no checkpoint was saved yet"


class _SignalWatcher:
    """SIGINT and SIGTERM passed to ``on_signal`` as they come, by a thread that reads
    the wake-up descriptor (see the module's docstring)."""

    def __init__(self, on_signal: Callable[[signal.Signals], None]):
        self._on_signal = on_signal
        self._previous: dict = {}
        self._previous_wakeup = -1
        self._write_fd: int | None = None

    def start(self, handler: Callable[..., None]) -> None:
        """Starts watching (in the main thread: signal handlers are set there), with
        ``handler`` as the Python handler of both signals."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._write_fd = write_fd
        # The wake-up descriptor first, so that no signal is handled without being
        # counted; then a Python handler, so that the C handler writes each signal's
        # number to it.
        self._previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._previous = {signum: signal.signal(signum, handler) for signum in _SIGNALS}
        threading.Thread(target=self._watch, args=(read_fd,), name="stop-requests",
                         daemon=True).start()

    def ignore_signals(self) -> None:
        """Leaves both signals ignored (SIG_IGN) until the process ends, and stops
        watching."""
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

