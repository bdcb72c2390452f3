"""How cifar10-train is asked to stop: SIGINT and SIGTERM, and a standard output
that was closed.

The first SIGINT or SIGTERM sets the stop event: the trainer finishes the loop of
steps under way, saves a checkpoint and returns; before training started it stops
there, with nothing trained or saved.  Where training starts is the trainer's to
say: it calls ``training_starts`` (``controller.train``'s ``on_training_start``),
which reads the stop event and marks the start in one step under the lock the signal
watcher takes to set the event and choose its line, so that the line of the first
signal ("training has not started", or "saving a checkpoint") is what the trainer
does.  A second signal ends the process at once with exit status 130, after one line on
stderr naming the last checkpoint complete on disk (``last_good_checkpoint``);
nothing is saved, so nothing is half written by it.  Once the trainer has returned
(the ``with`` block ended without an error: its checkpoint saved), SIGINT and
SIGTERM are ignored until the process ends, with exit status 0 (or 141, below); once
it has failed (the block ended with an error), they are ignored as well, so that the
error stays the last line printed and its exit status (1) the process's.

The signals are watched by a thread that reads the signal wake-up descriptor
(``signal.set_wakeup_fd``): a Python signal handler runs only when the main
thread comes back from TensorFlow, up to a whole loop of steps later, and two
signals that come meanwhile would be seen as one.

A standard output that was closed (``| head``, or ``| tee`` that Ctrl-C ended) is
a stop request too: standard output is pointed at /dev/null, so that no later
line fails, the trainer saves as for a signal, and the program ends with one
line on stderr (``closed_line``) and exit status 141 (``process.STDOUT_CLOSED``).
So is one that cannot be written (a full disk, EIO): the same, with the error's
line and status 1 (``stdout_lost``, ``stdout_status``).
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
    """The newest complete checkpoint of ``directory`` whose save is over (it has no
    ``model.ckpt-<step>_temp/`` folder: TensorFlow removes it after writing the
    ``.index`` file last) and that is the run's (``_the_runs``), or None."""
    complete = layout.find(directory)
    # Listed after the checkpoints: a save that ends in between is over, and complete.
    saving = {int(m[1]) for m in map(layout.TEMP_DIR.fullmatch,
                                     layout.listdir(directory)) if m}
    good = [c for c in complete if c.step not in saving and _the_runs(directory, c)]
    return good[-1].path if good else None


def _the_runs(directory: str, checkpoint: layout.Checkpoint) -> bool:
    """Whether ``checkpoint`` is one the run restored or saved, not a newer one that did
    not restore, left in place (``resume``): the trainer rewrote the state file to name
    the one it restored, and rewrites it after each save.  A checkpoint newer than the
    one the state file names is the run's only if saved since the file was written (the
    save just done, before the file is rewritten)."""
    named, _ = layout.named_step(directory, {checkpoint.step})
    if named is None or checkpoint.step <= named:
        return True
    try:
        state = os.stat(os.path.join(directory, layout.STATE_FILE)).st_mtime_ns
        return os.stat(checkpoint.path + ".index").st_mtime_ns >= state
    except OSError:
        return True  # (gone meanwhile: the newest by name, as without a state file)


class StopRequests:
    """The stop requests of a training run in ``train_dir``, while in its ``with`` block.

    ``event`` is set by the first SIGINT or SIGTERM and when standard output is
    closed; ``training_starts`` is the trainer's ``on_training_start``; ``print``
    writes a line to standard output, and notices there that it was closed.  Enter
    it in the main thread (signal handlers are set there).  Left, with or without an
    error, it leaves SIGINT and SIGTERM ignored: the program that entered it ends
    (an in-process caller puts its handlers back itself).
    """

    def __init__(self, program: str, train_dir: str, stdout=None, stderr=None,
                 task: str | None = None):
        """``task``: this worker's name in a multi-worker run where it is not the chief
        ('worker 1'), which saves no checkpoint; None for the chief."""
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
        # The Python handler runs later, in the main thread, and only makes sure the
        # event is set (without the lock: it may run inside training_starts, which
        # holds it); each signal is counted and answered by the watcher's thread.
        self._watcher.start(lambda *_: self.event.set())
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # Training returned (its checkpoint is saved: the stop asked for, or the run
        # complete) or failed (its error is on its way to the one line that says it):
        # either way only the process's end is left.  A signal from then on is ignored,
        # so that the status stays the one promised (0, or the error's 1) and the last
        # line the one that says how it ended: the previous handlers would make it an
        # interrupt (a KeyboardInterrupt in the error's way out, or in TensorFlow's
        # clean-up: a traceback), and Python's own end puts back the default action
        # (killed, 143) while TensorFlow is still torn down.  Ignored (SIG_IGN), the
        # signals stay ignored through that end.  (``StoppedBeforeTraining``, a stop
        # request that came before training, is that signal's answer: status 130.)
        self._watcher.ignore_signals()

    def training_starts(self) -> bool:
        """Marks that training starts now, unless a stop was asked for already;
        returns whether one was (then training does not start).

        The event is read and the mark made under the lock that the first signal
        takes to set the event and read the mark: a signal is either before (the
        trainer sees the event and stops with nothing trained; the line says
        training has not started) or after (the trainer trains its first loop and
        saves; the line promises that).  A Python handler's ``event.set`` that
        comes first is read here as a stop, and its signal's line, which comes
        after, finds no mark.
        """
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
        """The exit status of a run stopped by its standard output: a closed pipe's
        (``process.STDOUT_CLOSED``), or an error's (1) where a write failed."""
        return 1 if self.stdout_error else process.STDOUT_CLOSED

    def stdout_lost(self) -> str:
        """What happened to standard output, for the run's last line: 'standard output
        was closed', or 'error: cannot write to standard output (<cause>)'."""
        if self.stdout_error:
            return f"error: {process.stdout_error_said(self.stdout_error)}"
        return "standard output was closed"

    def closed_line(self, ended: str) -> str:
        """The last line of a run whose standard output was closed or failed, ``ended``
        being the first line of its summary ('Stopped at step 110; saved ...')."""
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
    """What the line of a second signal says of the checkpoints of ``train_dir``, on
    the chief (``task`` None) or on another worker (``task``), which saves none."""
    if task:
        return f"this is {task}: the chief saves the checkpoints in {train_dir}"
    try:
        last = last_good_checkpoint(train_dir)
    except Exception:  # noqa: BLE001 - the process ends at once all the same
        return f"the checkpoints are in {train_dir}"
    return f"the last checkpoint is {last}" if last else "no checkpoint was saved yet"


class _SignalWatcher:
    """SIGINT and SIGTERM passed to ``on_signal``, each as it comes, by a thread that
    reads the signal wake-up descriptor (``signal.set_wakeup_fd``), not by a Python
    handler (see the module's docstring)."""

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

