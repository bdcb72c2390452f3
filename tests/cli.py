"""Helpers of the end-to-end tests: run the installed programs, read event files."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import tensorflow as tf
from tensorboard.compat.proto import event_pb2

BIN_DIR = os.path.dirname(sys.executable)


def program(name: str) -> str:
    """Path of an installed console script (next to this Python)."""
    path = os.path.join(BIN_DIR, name)
    assert os.path.exists(path), f"{name} is not installed next to {sys.executable}"
    return path


def env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", **extra)


def run(name: str, *args: str, timeout: float = 300, **extra_env: str
        ) -> subprocess.CompletedProcess:
    """Runs an installed program to completion; returns its result (text output)."""
    return subprocess.run([program(name), *args], capture_output=True, text=True,
                          timeout=timeout, env=env(**extra_env))


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
