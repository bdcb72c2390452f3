"""Stop requests around training's edges (cifar10.cli.stopping, the controller's stop
before training): a signal while a failed run ends, a stop asked for before
training starts, on one worker or on one of several (real processes where the
signal or the workers are what is tested)."""

from __future__ import annotations

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
from cifar10.cli import workers as launch
from cifar10.distribute import coordination
from cifar10.runs import checkpoint_files
from cifar10.runs.lock import LOCK_FILE, TrainerLock
from cifar10.training import controller
from cifar10.training.run import TrainData

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


def test_a_stop_asked_for_before_training_trains_and_saves_nothing(learnable_files, tmp_path):
    files, count = learnable_files
    stop = threading.Event()
    stop.set()  # Ctrl-C while TensorFlow built the model
    lines = []
    with pytest.raises(coordination.StoppedBeforeTraining) as stopped:
        controller.train(small_config(tmp_path, max_steps=1000), mirrored(1),
                         TrainData(files, count), stop_event=stop, print_fn=lines.append)
    assert str(stopped.value) == "before training started; nothing was trained"
    assert lines == []  # no "Training on ...", no step
    # No checkpoint, event file, flags.txt or environment.jsonl: what the docs say stays.
    assert sorted(os.listdir(tmp_path)) == [LOCK_FILE, "class_names.txt"]
    lock = TrainerLock(str(tmp_path))
    lock.acquire()  # released: the next start is not refused
    lock.release()


# One worker of a job of two (TF_CONFIG) whose stop request is set before training
# when it is worker 1, as when a signal reaches it a moment before the other.
STOP_ONE = """
import sys, threading
from cifar10.data import folder as datafolder
from cifar10.distribute import coordination, devices
from cifar10.core.config import TrainConfig
from cifar10.training import controller
from cifar10.training.run import TrainData

batches_dir, train_dir = sys.argv[1:3]
strategy = devices.make_strategy(1, kind="multi_worker", worker_timeout_secs=60)
stop = threading.Event()
if not devices.worker_role(strategy)[0]:
    stop.set()
files = datafolder.split_files(batches_dir, "train")
config = TrainConfig(train_dir=train_dir, batch_size=8, max_steps=1000, log_frequency=1)
try:
    controller.train(config, strategy, TrainData(files, datafolder.validate_files(files)),
                     stop_event=stop)
except coordination.StoppedBeforeTraining as e:
    print(f"stopped: {e}", flush=True)
"""


def test_a_stop_on_one_worker_before_training_stops_every_worker_before_training(
        learnable_files, tmp_path):
    files, _ = learnable_files
    train_dir = tmp_path / "train"
    procs = [subprocess.Popen([sys.executable, "-c", STOP_ONE, os.path.dirname(files[0]),
                               str(train_dir)], env=env(TF_CONFIG=config, TMPDIR=str(tmp_path)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for config in launch.tf_configs(launch.free_ports(2))]
    try:
        results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for out, err, code in results:
        assert (code, out) == (0, "stopped: before training started; nothing was trained\n"), err
    assert checkpoint_files.find(str(train_dir)) == []


# A signal to a StopRequests: the line it prints, before and after the trainer's line
# that says training starts.
SIGNALLED = """
import os, signal, sys
from cifar10.cli import stopping
with stopping.StopRequests("cifar10-train", sys.argv[1]) as s:
    if len(sys.argv) > 2:
        s.print(sys.argv[2])
    os.kill(os.getpid(), signal.SIGINT)
    s.event.wait(10)
    signal.pause()  # until killed: the line is written by a thread of its own
"""


@pytest.mark.parametrize("printed, said", [
    ((), "Received SIGINT: stopping; training has not started (send it again to stop at "
         "once)."),
    (("Training on 50000 examples from d with 1 replica(s), global batch 128; checkpoints "
      "and summaries in t.",),
     "Received SIGINT: finishing the current steps and saving a checkpoint (send it again to "
     "stop at once).")])
def test_the_first_signal_promises_a_save_only_once_training_started(tmp_path, printed, said):
    """Before training it promised a save, and the program ended 'interrupted before
    training started; nothing was trained'."""
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(tmp_path), *printed],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())
    try:
        lines = [proc.stdout.readline() for _ in range(len(printed) + 1)]
    finally:
        proc.kill()
        proc.communicate()
    assert [line.rstrip("\n") for line in lines] == [*printed, said]
