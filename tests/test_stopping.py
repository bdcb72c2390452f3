"""Stop requests around training's edges (cifar10.cli.stopping and the controller's
stop before training): signals while a failed run ends, a stop on one worker of two,
and a first signal just before or after the trainer marks where training starts
(the order driven by calling the watcher's and the mark's methods).  The signals a
user sends a whole trainer are test_train_main's."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cli import env
from conftest import mirrored
from test_train import small_config
from cifar10.cli import stopping
from cifar10.cli import launch
from cifar10.core.errors import StoppedBeforeTraining
from cifar10.runs import layout
from cifar10.runs.layout import LOCK_FILE
from cifar10.runs.rundir import RunDirectory
from cifar10.training import controller
from cifar10.training.controller import TrainData

# cifar10-train's way out of a failed run: its ``with StopRequests`` block ends with
# the error, and the program takes seconds more to end (TensorFlow's clean-up, here
# a sleep) before process.guarded prints the error line.
FAILING = """
import sys, time
from absl import flags
from cifar10.cli import flags as cifar10_flags, process, stopping
from cifar10.core.errors import Cifar10Error

def main(argv):
    try:
        with stopping.StopRequests("cifar10-train", flags.FLAGS.train_dir):
            raise Cifar10Error("training stopped at step 3: disk on fire; the last "
                               "checkpoint is x")
    finally:
        print("failed", flush=True)
        time.sleep(1.5)

process.run("cifar10-train", main, "doc", cifar10_flags.define_train_flags)
"""


def test_signals_while_a_failed_run_ends_leave_its_error_last_and_its_status_1(tmp_path):
    # As after a save (test_train_main's signals after the save): a scheduler's or
    # the launcher's SIGTERM, or a Ctrl-C, on the way out changes nothing.
    proc = subprocess.Popen([sys.executable, "-c", FAILING, f"--train_dir={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())
    try:
        assert proc.stdout.readline() == "failed\n", proc.stderr.read()
        deadline = time.time() + 30
        signals = (signal.SIGTERM, signal.SIGINT)
        while proc.poll() is None and time.time() < deadline:
            proc.send_signal(signals[int(time.time() * 50) % 2])
            time.sleep(0.02)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert "Traceback" not in err, err
    assert err.splitlines()[-1] == ("cifar10-train: error: training stopped at step 3: disk on "
                                    "fire; the last checkpoint is x")
    assert proc.returncode == 1, err


# One worker of a job of two (TF_CONFIG) whose stop request is set, when it is worker 1,
# before training (as when a signal reaches it a moment before the other).  (Once
# training started, a stop on one saves all at one step: test_multi_worker.)
STOP_ONE = """
import sys, threading
from cifar10.data import folder as datafolder
from cifar10.core.errors import StoppedBeforeTraining
from cifar10.distribute import devices
from cifar10.core.config import TrainConfig
from cifar10.training import controller
from cifar10.training.controller import TrainData

batches_dir, train_dir = sys.argv[1:3]
strategy = devices.make_strategy(1, kind="multi_worker", worker_timeout_secs=60)
stop = threading.Event()
if not devices.worker_role(strategy)[0]:
    stop.set()
files = datafolder.split_files(batches_dir, "train")
config = TrainConfig(train_dir=train_dir, batch_size=8, max_steps=100000, log_frequency=1)
try:
    result = controller.train(config, strategy, TrainData(files, datafolder.validate_files(files)),
                              stop_event=stop, print_fn=lambda line: None,
                              on_training_start=stop.is_set)
    print(f"saved at step {result.step}", flush=True)
except StoppedBeforeTraining as e:
    print(f"stopped: {e}", flush=True)
"""


def _two_workers_one_stopped(files, train_dir, tmp_path) -> list[tuple]:
    """(stdout, stderr, exit status) of each worker of a job of two (``STOP_ONE``)."""
    procs = [subprocess.Popen([sys.executable, "-c", STOP_ONE, os.path.dirname(files[0]),
                               str(train_dir)],
                              env=env(TF_CONFIG=config, TMPDIR=str(tmp_path)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for config in launch.tf_configs(launch.free_ports(2))]
    try:
        return [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            p.kill()


def test_a_stop_on_one_worker_before_training_stops_every_worker_before_training(
        learnable_files, tmp_path):
    files, _ = learnable_files
    train_dir = tmp_path / "train"
    for out, err, code in _two_workers_one_stopped(files, train_dir, tmp_path):
        assert (code, out) == (0, "stopped: before training started; nothing was trained\n"), err
    assert layout.find(str(train_dir)) == []


NOT_STARTED = ("Received SIGINT: stopping; training has not started (send it again to stop "
               "at once).")
SAVING = ("Received SIGINT: finishing the current steps and saving a checkpoint (send it "
          "again to stop at once).")


class _Written(io.StringIO):
    """A standard output that tells when a signal's line was written (by a thread of
    its own)."""

    def __init__(self):
        super().__init__()
        self.signalled = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if text.startswith("Received "):
            self.signalled.set()
        return written

    def signal_lines(self) -> list[str]:
        assert self.signalled.wait(10), "no signal's line was written"
        return [line for line in self.getvalue().splitlines() if line.startswith("Received ")]


def _unentered_stop_requests(tmp_path) -> tuple[stopping.StopRequests, _Written]:
    """A StopRequests whose signals a test delivers itself, by calling what the
    watching thread (``_signal``) and the Python handler (``event.set``) call, in an
    order of its choosing: not entered, it changes no handler of this process."""
    out = _Written()
    return stopping.StopRequests("cifar10-train", str(tmp_path), stdout=out), out


# Each order of a first signal (its watching thread's ``_signal``, and the Python
# handler's ``event.set``, which may come before it) and the trainer's mark.
@pytest.mark.parametrize("order, asked, said", [
    (("signal", "mark"), True, NOT_STARTED),
    (("mark", "signal"), False, SAVING),
    (("handler", "mark", "signal"), True, NOT_STARTED),
    (("mark", "handler", "signal"), False, SAVING),
    # A printed line that says training starts is only a line.
    (("print", "signal", "mark"), True, NOT_STARTED),
])
def test_the_first_signals_line_says_what_the_trainer_does_in_every_order(
        tmp_path, order, asked, said):
    stop, out = _unentered_stop_requests(tmp_path)
    did = {"signal": lambda: stop._signal(signal.SIGINT), "handler": stop.event.set,
           "mark": stop.training_starts,
           "print": lambda: stop.print("Training on 50000 examples from d with 1 replica(s), "
                                       "global batch 128; checkpoints and summaries in t.")}
    answers = {step: did[step]() for step in order}
    assert (answers["mark"], stop.training_started) == (asked, not asked)
    assert out.signal_lines() == [said]


def test_the_trainer_marks_the_start_once_after_the_restore_before_anything_is_recorded(
        learnable_files, tmp_path, monkeypatch):
    files, count = learnable_files
    events, seen = [], []
    restore = RunDirectory.restore
    monkeypatch.setattr(RunDirectory, "restore",
                        lambda self: (events.append("restored"), restore(self))[1])

    def training_starts():
        events.append("training starts")
        seen.append(sorted(os.listdir(tmp_path)))
        return False

    def train(max_steps):
        events.clear()
        return controller.train(small_config(tmp_path, max_steps=max_steps), mirrored(1),
                                TrainData(files, count), print_fn=events.append,
                                on_training_start=training_starts)

    assert train(max_steps=1).step == 1
    assert events[:2] == ["restored", "training starts"]
    assert events[2].startswith("Training on ")  # said, and the start recorded, after it
    assert events.count("training starts") == 1
    assert seen == [[LOCK_FILE, "class_names.txt"]]  # no flags.txt, event file, checkpoint
    assert train(max_steps=1).complete  # already complete: training does not start
    assert events[0] == "restored" and "training starts" not in events
    assert events[1].startswith("Training in ") and "already complete" in events[1]


@pytest.mark.parametrize("after_the_mark", [False, True])
def test_a_first_signal_at_the_trainers_mark_stops_it_untrained_or_saves_after_one_loop(
        learnable_files, tmp_path, after_the_mark):
    # The signal comes in the trainer's call of ``training_starts``, just before or just
    # after the mark, as the watching thread would deliver it.
    files, count = learnable_files
    stop, out = _unentered_stop_requests(tmp_path)

    def signalled_at_the_edge():
        if not after_the_mark:
            stop._signal(signal.SIGINT)
        asked = stop.training_starts()
        if after_the_mark:
            stop._signal(signal.SIGINT)
        return asked

    try:  # (StoppedBeforeTraining is a KeyboardInterrupt: uncaught, it would end pytest)
        result = controller.train(small_config(tmp_path, max_steps=1000), mirrored(1),
                                  TrainData(files, count), stop_event=stop.event,
                                  print_fn=lambda line: None,
                                  on_training_start=signalled_at_the_edge)
    except StoppedBeforeTraining:
        result = None
    if not after_the_mark:
        assert result is None and out.signal_lines() == [NOT_STARTED]
        assert sorted(os.listdir(tmp_path)) == [LOCK_FILE, "class_names.txt"]
    else:
        assert out.signal_lines() == [SAVING]
        assert (result.step, result.stopped, result.complete) == (1, True, False)  # one loop
        assert layout.find(str(tmp_path))[-1].path == str(tmp_path / "model.ckpt-1")
