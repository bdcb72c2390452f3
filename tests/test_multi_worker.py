"""Multi-worker training on TensorFlow's runtime: local workers on 127.0.0.1, each a
process with its own TF_CONFIG, as cifar10-launch starts them (once through it).
Every wait is bounded; no outcome depends on how fast a worker runs."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import multi_worker_steps
from cli import call, env, run, start
from conftest import mirrored
from test_output import NATIVE
from test_step import fixed_batches
from cifar10.cli import launch
from cifar10.core.config import TrainConfig
from cifar10.runs import checkpoints
from cifar10.runs.layout import LOCK_FILE
from cifar10.training.engine import Trainer

LOG_STEP = re.compile(r": step (\d+), loss = ")


def start_workers(args_of_each, tmp_path, configs=None):
    """Starts one cifar10-train worker per argument list; returns the processes."""
    configs = configs or launch.tf_configs(launch.free_ports(len(args_of_each)))
    return [start("cifar10-train", *args, TF_CONFIG=config, TMPDIR=str(tmp_path))
            for args, config in zip(args_of_each, configs)]


def finish(procs, timeout=240):
    """Waits for every process; returns [(returncode, stdout, stderr)]; kills on timeout."""
    results, deadline = [], time.time() + timeout
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1, deadline - time.time()))
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


def train_args(tmp_path, *extra):
    # A generous --worker_timeout_secs: a worker slowed by a busy machine is waited for.
    return ("--synthetic_data", "--synthetic_records=50", f"--data_dir={tmp_path / 'data'}",
            f"--train_dir={tmp_path / 'train'}", "--batch_size=8", "--worker_timeout_secs=120",
            *extra)


def wait_for_step(proc, step):
    """Reads ``proc``'s stdout until it logs ``step`` or more; returns the lines read."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = LOG_STEP.search(line)
        if match and int(match[1]) >= step:
            return lines
    raise AssertionError("worker ended before step %d:\n%s" % (step, "".join(lines)))


def test_two_workers_update_as_one_process_with_two_replicas(tmp_path):
    steps, batch = 3, 8
    script = os.path.join(os.path.dirname(__file__), "multi_worker_steps.py")
    procs = [subprocess.Popen([sys.executable, script, str(tmp_path), str(steps), str(batch)],
                              env=env(TF_CONFIG=config), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for config in launch.tf_configs(launch.free_ports(2))]
    for code, _, err in finish(procs):
        assert code == 0, err
    saved = np.load(tmp_path / "variables.npz")

    images, labels = multi_worker_steps.batches(steps, 2 * batch)
    strategy = mirrored(2)
    trainer = Trainer(TrainConfig(train_dir=str(tmp_path / "one"), batch_size=batch),
                      strategy, examples_per_epoch=1000)
    iterator = fixed_batches(strategy, images, labels, steps)
    for _ in range(steps):
        trainer.step(iterator)
    for var, avg in zip(trainer.variables, trainer.state.averages.parameters()):
        np.testing.assert_allclose(saved[f"model/{var.name}"], var.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(saved[f"averages/{avg.name}"], avg.numpy(), rtol=1e-4,
                                   atol=1e-6)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """(cifar10-launch's result, its tmp folder): two workers trained 6 steps, saved and
    validated at 3 and 6."""
    tmp_path = tmp_path_factory.mktemp("launched")
    result = run("cifar10-launch", "--num_workers=2", "--", *train_args(
        tmp_path, "--max_steps=6", "--log_frequency=3", "--checkpoint_steps=3",
        "--summary_steps=3", "--eval_every_steps=3"), timeout=300, TMPDIR=str(tmp_path))
    return result, tmp_path


def test_launcher_trains_two_workers_prints_each_line_once_and_only_the_chief_writes(launched):
    result, tmp_path = launched
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert result.stderr == ""
    _, *lines = result.stdout.splitlines()  # (its first line: test_launch's)
    # The chief's lines, each once; of worker 1 only its warnings, if it has any.
    for line in lines:
        assert line.startswith("[worker 0] ") or re.match(
            r"\[worker 1\] cifar10-train: (warning|notice): ", line), line
    assert len(lines) == len(set(lines))
    out = result.stdout
    assert len(re.findall(r"^\[worker 0\] Training complete at step 6\b", out, re.M)) == 1
    assert len(re.findall(r"^\[worker 0\] .*: step 6, loss = ", out, re.M)) == 1
    assert re.search(r"^\[worker 0\] .*: step 6, precision @ 1 = ", out, re.M)  # chief alone
    assert "with 2 replica(s), global batch 16; checkpoints and summaries in" in out
    assert not NATIVE.findall(out), out
    assert "Traceback" not in out and "eagerly has significant overhead" not in out
    assert "Sharding callback duration" not in out  # absl's INFO line at every save
    names = sorted(os.listdir(tmp_path / "train"))
    assert [n for n in names if n.endswith(".index")] == ["model.ckpt-3.index",
                                                          "model.ckpt-6.index"]
    assert len([n for n in names if n.startswith("events.out.tfevents")]) == 1
    assert checkpoints.completed_step(str(tmp_path / "train")) == 6
    assert not [n for n in os.listdir(tmp_path) if n.startswith("cifar10-worker")]


@pytest.mark.slow  # its TensorFlow calls: the launched fixture's, test_stopping's
def test_sigterm_to_one_worker_saves_all_at_one_step_and_a_worker_killed_later_stops_all(
        tmp_path):
    args = train_args(tmp_path, "--max_steps=100000", "--log_frequency=1", "--steps_per_loop=1",
                      "--checkpoint_steps=100000")
    procs = start_workers([args, args], tmp_path)
    try:
        wait_for_step(procs[1], 5)
        procs[1].send_signal(signal.SIGTERM)
    finally:
        results = finish(procs)
    stops = []
    for code, out, err in results:
        assert code == 0, err[-3000:]
        stops.append(int(re.search(r"Stopped at step (\d+)", out)[1]))
    stop, train_dir = stops[0], tmp_path / "train"
    assert stops == [stop, stop] and stop >= 5
    # Only the chief says it saved and how to evaluate; worker 1 says who saves.
    ends = [[line for line in out.splitlines() if line.startswith("Stopped at step ")]
            for _, out, _ in results]
    assert ends == [[f"Stopped at step {stop}; saved {train_dir}/model.ckpt-{stop}. "
                     f"Run the same command again to resume."],
                    [f"Stopped at step {stop} (this is worker 1: the chief saves the "
                     f"checkpoints in {train_dir}). Run the same command again to resume."]]
    assert ["Evaluate it: " in out for _, out, _ in results] == [True, False]
    assert tf.train.latest_checkpoint(str(train_dir)).endswith(f"model.ckpt-{stop}")

    # The job resumes at that step.  The chief killed then (kill -9, maybe as it saves)
    # stops the other: one line naming the chief, TensorFlow's cause and the checkpoint
    # the run resumes from; no traceback.
    args = train_args(tmp_path, "--max_steps=100000", "--log_frequency=1", "--steps_per_loop=1",
                      "--checkpoint_steps=4")
    again = start_workers([args, args], tmp_path)
    try:
        read = wait_for_step(again[1], stop + 5)  # past a checkpoint of the resumed job
        again[0].kill()
        code, out, err = finish(again[1:])[0]
    finally:
        finish(again)
    out = "".join(read) + out
    assert f"at step {stop}." in out and LOG_STEP.findall(out)[0] == str(stop + 1)
    assert code == 1 and "Traceback" not in err, err
    assert "Graph execution error" not in err and "{{function_node" not in err
    line = re.fullmatch(
        r"cifar10-train: error: this is worker 1: lost the chief \(worker 0\) or the connection "
        r"to it at step \d+ \(.+\); the last checkpoint, (.+), is kept; start every worker "
        r"again with the same command to resume", err.splitlines()[-1])
    assert line, err
    named = int(line[1].rpartition("-")[2])
    assert line[1] == f"{train_dir}/model.ckpt-{named}" and named > stop and named % 4 == 0
    # That is the checkpoint a restart resumes from.
    restart = call("cifar10-train", *train_args(tmp_path, f"--max_steps={named}"))
    assert f"is already complete at step {named} " in restart.stdout, restart.stdout + restart.stderr


def test_workers_that_restore_different_steps_stop_with_a_clear_error(launched, tmp_path):
    result, launched_path = launched
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    shutil.copytree(launched_path / "train", tmp_path / "train")
    # Worker 1 sees another, empty --train_dir (absl takes the last one given).
    args = train_args(tmp_path, "--max_steps=9")
    for code, _, err in finish(start_workers(
            [args, (*args, f"--train_dir={tmp_path / 'other'}")], tmp_path)):
        assert code == 1
        assert "the workers restored different steps" in err
        assert "must be one directory shared by every worker" in err
    assert tf.train.latest_checkpoint(str(tmp_path / "train")).endswith("model.ckpt-6")


@pytest.mark.slow  # its all-gather runs at every start of several workers (the fixture's)
def test_workers_started_with_different_flags_each_name_theirs_and_train_nothing(tmp_path):
    results = finish(start_workers([
        train_args(tmp_path, "--max_steps=3"),
        train_args(tmp_path, "--max_steps=2", "--batch_size=4")], tmp_path))
    for (code, out, err), (this, other, own) in zip(results, [
            ("worker 0", "worker 1", "--batch_size=8 and --max_steps=3"),
            ("worker 1", "worker 0", "--batch_size=4 and --max_steps=2")]):
        assert code == 1, err
        assert err.splitlines()[-1] == (
            f"cifar10-train: error: this is {this}: its {own} differ from {other}'s; start "
            f"every worker with the same flags and data")
        assert "Traceback" not in err and "Training on" not in out
    assert not (tmp_path / "train").exists() or not os.listdir(tmp_path / "train")


def test_a_chief_that_refuses_a_locked_train_dir_stops_the_other_worker_with_one_line(
        tmp_path):
    # Only the chief takes the lock, once the cluster has formed: worker 1 is already
    # waiting in a collective when the chief stops.
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    args = train_args(tmp_path, "--max_steps=3")
    with open(train_dir / LOCK_FILE, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (chief_code, _, chief_err), (code, _, err) = finish(start_workers([args, args],
                                                                          tmp_path))
    assert "Traceback" not in chief_err + err, chief_err + err
    assert chief_code == 1 and code == 1
    assert chief_err.splitlines()[-1].startswith(
        f"cifar10-train: error: --train_dir {train_dir} is in use by another trainer (")
    assert err.splitlines()[-1] == (
        "cifar10-train: error: this is worker 1: lost the chief (worker 0) or the connection "
        "to it before training started (see its error); start every worker again once it "
        "is fixed")
    assert os.listdir(train_dir) == [LOCK_FILE]


def test_a_worker_whose_others_never_start_names_each_task_and_ends(tmp_path):
    # TF_CONFIG's own names: its "chief" task is chief 0, its first "worker" worker 0.
    chief, worker = (f"127.0.0.1:{port}" for port in launch.free_ports(2))
    config = json.dumps({"cluster": {"chief": [chief], "worker": [worker]},
                         "task": {"type": "worker", "index": 0}})
    result = run("cifar10-train", *train_args(tmp_path), "--worker_timeout_secs=1",
                 timeout=120, TF_CONFIG=config)
    assert result.returncode == 1, result.stderr  # exit status 1, not killed
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-train: error: the 2 workers did not all start within 1 s "
        f"(--worker_timeout_secs): this is worker 0; check that every task started (see the "
        f"others' errors) and that each node reaches chief 0 at {chief}, worker 0 at "
        f"{worker}, then start the job again")
    assert not (tmp_path / "train" / "model.ckpt-0.index").exists()
    refused = run("cifar10-train", *train_args(tmp_path), "--fresh_start", timeout=120,
                  TF_CONFIG=config)
    assert refused.returncode == 1
    assert "--fresh_start is not supported with several workers" in refused.stderr


def watchdog_started(pid: int) -> bool:
    """Whether the process ``pid`` waits for the other workers: its watchdog runs and
    catches SIGINT and SIGTERM (/proc's SigCgt mask).  (test_launch's signals while the
    workers wait use it.)"""
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
        for child in children:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"select.select" not in f.read():
                    continue
            with open(f"/proc/{child}/status") as f:
                caught = next(int(line.split()[1], 16) for line in f
                              if line.startswith("SigCgt:"))
            return caught & wanted == wanted
    except (OSError, StopIteration):
        pass
    return False
