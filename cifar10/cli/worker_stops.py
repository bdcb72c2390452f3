"""How the workers of cifar10-launch's job stop: a signal passed on to each worker's
process group, the others stopped once one failed (or once nobody reads their
output), and their ends waited for and told (a status, or the signal that ended
one).  Nothing here loads TensorFlow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable, Sequence

# How often the launcher looks whether a worker has ended.
_POLL_SECS = 0.1
# How long the others may still run after a worker failed before the launcher stops
# them.  In training they see the lost worker at once (its connections reset) and
# end with their own error line; a SIGTERM in the middle of that would break into
# their last words (a KeyboardInterrupt in TensorFlow's clean-up).  Workers still
# waiting for each other to start would wait out their --worker_timeout_secs.
_STOP_OTHERS_AFTER_SECS = 5.0


def signal_group(process: subprocess.Popen, signum: int, signalled: set[int]) -> None:
    """``signum`` to ``process``'s process group, once to each of its processes, if the
    worker still runs; its pid is added to ``signalled``.

    The worker leads its own session (``workers._start_worker``), so that group is the
    worker and the processes it started, and never the launcher.  While the worker waits for
    the others to start, TensorFlow keeps it deaf to signals: its watchdog, in the
    group, hears the signal and ends it (``cifar10.distribute.resolver``).  In
    training the group is the worker alone.
    """
    if process.poll() is None:  # not reaped: its pid is still its group's id
        signalled.add(process.pid)
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:  # it and its group ended just now
            pass


def stop_once(processes: list[subprocess.Popen], closed: threading.Event,
              signalled: set[int]) -> None:
    """The first time ``closed`` is set: every running worker gets SIGTERM, as from
    Ctrl-C (it saves at one step and stops); a second SIGTERM would stop it at once,
    so the relays call this under their shared lock."""
    if not closed.is_set():
        closed.set()
        for process in list(processes):
            signal_group(process, signal.SIGTERM, signalled)


def stop_unsignalled(processes: Sequence[subprocess.Popen], signalled: set[int]) -> None:
    """SIGTERM to every running worker the launcher has not signalled yet: a worker
    failed, and the others cannot go on without it.  One still waiting for the others
    to start stops at once (not after its --worker_timeout_secs); one in training
    (which its lost connection would stop anyway) stops with its error that a worker
    was lost.  A worker already asked to stop (Ctrl-C, a closed output) is left to
    finish: a second signal would stop it without its checkpoint."""
    for process in processes:
        if process.pid not in signalled:
            signal_group(process, signal.SIGTERM, signalled)


def forward_signals(processes: list[subprocess.Popen], signalled: set[int],
                    stops: list[int]) -> dict:
    """SIGINT and SIGTERM passed on to every running worker of ``processes`` (the list
    as it is when the signal comes), to its process group, each appended to
    ``stops``; returns the handlers replaced."""

    def forward(signum, frame):
        stops.append(signum)
        for process in list(processes):
            signal_group(process, signum, signalled)

    return {signum: signal.signal(signum, forward) for signum in (signal.SIGINT,
                                                                  signal.SIGTERM)}


def wait(processes: Sequence[subprocess.Popen], on_failure: Callable[[], None] = lambda: None,
         grace_secs: float = _STOP_OTHERS_AFTER_SECS) -> list[tuple[int, int]]:
    """(index, return code) of each process, in the order they ended; calls
    ``on_failure`` once, if others still run ``grace_secs`` after the first process
    that ended with a non-zero status."""
    running, ended = dict(enumerate(processes)), []
    failed_at: float | None = None
    stopped = False
    while running:
        for index, process in list(running.items()):
            if process.poll() is not None:
                ended.append((index, process.returncode))
                del running[index]
                if process.returncode != 0 and failed_at is None:
                    failed_at = time.monotonic()
        if (running and not stopped and failed_at is not None
                and time.monotonic() - failed_at >= grace_secs):
            stopped = True
            on_failure()
        if running:
            time.sleep(_POLL_SECS)
    return ended


def ending(index: int, status: int) -> str:
    """How worker ``index`` ended with return code ``status``, as the launcher's error
    names it."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"worker {index} was ended by {name}"
    return f"worker {index} exited with status {status}"


def exit_status(status: int) -> int:
    """A return code as a shell reports it: 128 + the signal for a process it ended."""
    return 128 - status if status < 0 else status
