"""How cifar10-launch's workers stop (cifar10.cli.worker_stops), with stand-in processes;
the real workers' stops are tested in test_launch.py."""

import signal

from cifar10.cli import worker_stops


class _Process:
    """A process that ends with ``returncode`` at its ``ends_at``-th poll."""

    def __init__(self, returncode, ends_at=1, pid=100):
        self.returncode, self._ends_at, self._polls, self.pid = None, ends_at, 0, pid
        self._code = returncode

    def poll(self):
        self._polls += 1
        if self._polls >= self._ends_at:
            self.returncode = self._code
        return self.returncode


def test_the_ends_are_told_in_the_order_the_workers_ended():
    ended = worker_stops.wait([_Process(0, ends_at=3), _Process(1, ends_at=1)], grace_secs=0)
    assert ended == [(1, 1), (0, 0)]


def test_the_others_are_stopped_once_when_they_outlive_a_failure_by_the_grace_time():
    calls = []
    ended = worker_stops.wait([_Process(2, ends_at=1), _Process(0, ends_at=4)],
                              on_failure=lambda: calls.append("stop"), grace_secs=0)
    assert calls == ["stop"] and ended == [(0, 2), (1, 0)]


def test_no_stop_when_every_worker_ended_well():
    calls = []
    worker_stops.wait([_Process(0, ends_at=2), _Process(0, ends_at=3)],
                      on_failure=lambda: calls.append("stop"), grace_secs=0)
    assert calls == []


def test_an_ending_is_a_status_or_the_signal_that_ended_the_worker():
    assert worker_stops.ending(1, 2) == "worker 1 exited with status 2"
    assert worker_stops.ending(0, -signal.SIGKILL) == "worker 0 was ended by SIGKILL"
    assert worker_stops.ending(0, -99) == "worker 0 was ended by signal 99"
    assert worker_stops.exit_status(-signal.SIGTERM) == 128 + signal.SIGTERM
    assert worker_stops.exit_status(3) == 3


def test_a_worker_already_signalled_is_not_signalled_again(monkeypatch):
    sent = []
    monkeypatch.setattr(worker_stops.os, "killpg", lambda pid, signum: sent.append(pid))
    running = [_Process(0, ends_at=99, pid=7), _Process(0, ends_at=99, pid=8)]
    signalled = {7}
    worker_stops.stop_unsignalled(running, signalled)
    assert sent == [8] and signalled == {7, 8}
