"""``--step_timeout_secs``' watchdog (``Watchdog``): a call of steps into TensorFlow
that does not return in time (a hung collective cannot be interrupted) ends the process
with one error line, status 1, the last checkpoint kept."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Callable

from absl import logging


class Watchdog:
    """``--step_timeout_secs``: a call of steps that does not return in time (a hung
    collective cannot be interrupted) ends the process with ``line``'s error, status 1.
    A call of k steps may take the timeout plus k times ``SLACK`` times the slowest step
    after the first call (one step that warms up), which may take the timeout plus
    ``REPLAY_SECS`` per batch a deterministic resume replays in it.  A pause of the
    process (SIGSTOP) does not count.  One thread watches, inside ``with``."""

    SLACK = 10
    REPLAY_SECS = 1e-3  # per batch replayed (0.1 ms measured on a 2-core host)

    def __init__(self, timeout: float, line: Callable[[int, int, float], str],
                 replay_batches: int = 0):
        self.timeout, self.line, self.replay_batches = timeout, line, replay_batches
        self.calls, self.slowest = 0, 0.0  # calls timed; seconds per step after the first
        self._call: tuple[int, int, float] | None = None  # (done, end, limit) running
        self._closed, self._changed = False, threading.Condition()

    def limit(self, steps: int) -> float:
        """The seconds the next call, of ``steps`` steps, may take."""
        if not self.calls:
            return self.timeout + self.replay_batches * self.REPLAY_SECS
        return self.timeout + steps * self.SLACK * self.slowest

    def timed(self, steps: int, seconds: float) -> None:
        """A call of ``steps`` steps took ``seconds``."""
        if self.calls:
            self.slowest = max(self.slowest, seconds / steps)
        self.calls += 1

    @contextlib.contextmanager
    def watching(self, done: int, end: int):
        """Watches a call of the steps ``done`` + 1 to ``end``."""
        self._set((done, end, self.limit(end - done)))
        began = time.monotonic()
        try:
            yield
        finally:
            self._set(None)
        self.timed(end - done, time.monotonic() - began)

    def __enter__(self) -> "Watchdog":
        threading.Thread(target=self._watch, name="step-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self._set(None)

    def _set(self, call: tuple[int, int, float] | None) -> None:
        with self._changed:
            self._call = call
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            while not self._closed:
                call = self._call
                if call is None:
                    self._changed.wait()
                    continue
                done, end, limit = call
                tick = min(1.0, limit / 10)
                waited, before = 0.0, time.monotonic()
                while self._call is call and waited < limit:
                    self._changed.wait(tick)
                    now = time.monotonic()
                    waited += min(now - before, 2 * tick)  # longer: the process was paused
                    before = now
                if self._call is call:  # the call cannot return while this holds the lock
                    logging.error(self.line(done, end, limit))
                    try:  # (not stdout: a reader that stopped reading would keep the process)
                        sys.stderr.flush()
                    except (OSError, ValueError):
                        pass
                    os._exit(1)
