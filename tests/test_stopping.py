"""Stop requests around training's edges (cifar10.cli.stopping): a signal while a
failed run ends (a real process: the signal is what is tested)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from cli import env

# cifar10-train's way out of a failed run: its ``with StopRequests`` block ends with
# the error, and the program takes seconds more to end (TensorFlow's clean-up, here
# a sleep) before programs.guarded prints the error line.
FAILING = """
import sys, time
from absl import flags
from cifar10.cli import flags as cifar10_flags, programs, stopping
from cifar10.core.errors import Cifar10Error

def main(argv):
    try:
        with stopping.StopRequests("cifar10-train", flags.FLAGS.train_dir):
            raise Cifar10Error("training stopped at step 3: disk on fire; the last "
                               "checkpoint is x")
    finally:
        print("failed", flush=True)
        time.sleep(1.5)

programs.run("cifar10-train", main, "doc", cifar10_flags.define_train_flags)
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

