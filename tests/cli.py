"""Helpers of the end-to-end tests: run the programs (installed, or in this process),
read event files."""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import signal
import subprocess
import sys
from unittest import mock

import tensorflow as tf
from absl import flags
from tensorboard.compat.proto import event_pb2

from cifar10.cli import eval_main
from cifar10.cli import export_main
from cifar10.cli import launch
from cifar10.core import logs
from cifar10.cli import predict_main
from cifar10.cli import prepare_main
from cifar10.cli import process
from cifar10.cli import train_main

BIN_DIR = os.path.dirname(sys.executable)


def program(name: str) -> str:
    """Path of an installed console script (next to this Python)."""
    path = os.path.join(BIN_DIR, name)
    assert os.path.exists(path), f"{name} is not installed next to {sys.executable}"
    return path


def env(**extra: str) -> dict[str, str]:
    """The programs' environment: this one, without TF_CPP_MIN_LOG_LEVEL (which would
    ask for TensorFlow's own log lines), plus ``extra``."""
    base = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return dict(base, PYTHONUNBUFFERED="1", **extra)


def run(name: str, *args: str, timeout: float = 300, **extra_env: str
        ) -> subprocess.CompletedProcess:
    """Runs an installed program to completion; returns its result (text output)."""
    return subprocess.run([program(name), *args], capture_output=True, text=True,
                          timeout=timeout, env=env(**extra_env))


ENTRY_POINTS = {module.PROGRAM: module
                for module in (train_main, eval_main, predict_main, export_main, prepare_main,
                               launch)}


def call(name: str, *args: str) -> subprocess.CompletedProcess:
    """Runs a program in this process as ``run`` would (fresh flags for its ``FLAGS``,
    its output captured, the signal handlers restored); returns the same result.  What
    only a process shows (signals, the console scripts) stays with ``run`` and ``start``."""
    module = ENTRY_POINTS[name]
    values = flags.FlagValues()
    module.define_flags(values)
    argv = [name, *args]
    stdout, stderr = io.StringIO(), io.StringIO()
    warnings = logging.StreamHandler(stderr)
    warnings.setLevel(logging.WARNING)
    warnings.setFormatter(logs.ProgramFormatter(name))
    absl_logger = logging.getLogger("absl")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    absl_logger.addHandler(warnings)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                mock.patch.object(module, "FLAGS", values), mock.patch.object(sys, "argv", argv):
            try:
                status = process.guarded(name, module.main,
                                          process.parse_flags(argv, name, module.__doc__, values))
            except SystemExit as e:
                status = e.code
    finally:
        absl_logger.removeHandler(warnings)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(argv, status, stdout.getvalue(), stderr.getvalue())


def assert_refused(result: subprocess.CompletedProcess, line: str) -> None:
    """That ``result`` is a refusal with ``line`` alone on stderr (status 1, no stdout)."""
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr.splitlines() == [line]


def start(name: str, *args: str, **extra_env: str) -> subprocess.Popen:
    """Starts an installed program with stdout piped line by line."""
    return subprocess.Popen([program(name), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env(**extra_env), bufsize=1)


def events(log_dir: str):
    """Every event of the event files directly in ``log_dir``, in file order."""
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            yield event_pb2.Event.FromString(record.numpy())


def event_tags(log_dir: str) -> dict[str, list[int]]:
    """{tag: steps} of every summary in the event files directly in ``log_dir``."""
    tags: dict[str, list[int]] = {}
    for event in events(log_dir):
        for value in event.summary.value:
            tags.setdefault(value.tag, []).append(event.step)
    return tags


def scalar_values(log_dir: str, tag: str) -> dict[int, float]:
    """{step: value} of a scalar summary written with tf.summary.scalar."""
    return {event.step: float(tf.make_ndarray(value.tensor))
            for event in events(log_dir) for value in event.summary.value if value.tag == tag}
