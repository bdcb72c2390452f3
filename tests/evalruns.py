"""What the evaluator's tests share: conftest's ``trained_run`` (checkpoints at 3 and 6;
a test that changes it works on a copy), its settings, and a run that always says cat."""

from __future__ import annotations

import json
import os
import types

import tensorflow as tf

from cifar10.core.config import EvalConfig
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.evaluation import recording
from cifar10.training.step import TrainState

RECORDS = 50  # conftest.trained_run's test split


def run_of(trained_run) -> types.SimpleNamespace:
    train_dir, test_files = trained_run
    return types.SimpleNamespace(
        train_dir=str(train_dir), test_files=test_files,
        ckpt3=os.path.join(train_dir, "model.ckpt-3"),
        ckpt6=os.path.join(train_dir, "model.ckpt-6"))


def config_of(run, eval_dir, **overrides) -> EvalConfig:
    return EvalConfig(**{"checkpoint_dir": run.train_dir, "eval_dir": str(eval_dir),
                         "eval_files": run.test_files, "num_examples": RECORDS,
                         "batch_size": 16, "misclassified_images": 0, **overrides})


def results_lines(eval_dir) -> list[dict]:
    path = os.path.join(str(eval_dir), recording.RESULTS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def always_cat_run(tmp_path):
    """The test files (23 records) of ``tmp_path/train``, whose model.ckpt-9 always says cat."""
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=23)
    state = TrainState(seed=0, compute_dtype=tf.float32)
    for model in (state.model, state.averages):
        model.softmax_linear.weights.assign(tf.zeros([192, 10]))
        model.softmax_linear.biases.assign(tf.one_hot(3, 10) * 5.0)
    state.step.assign(9)
    state.checkpoint().write(str(tmp_path / "train" / "model.ckpt-9"))
    return datafolder.split_files(batches_dir, "test")


def cat_config(tmp_path, test_files, **overrides) -> EvalConfig:
    """--run_once settings of ``always_cat_run``'s run, its classes named."""
    return EvalConfig(**{"checkpoint_dir": str(tmp_path / "train"),
                         "eval_dir": str(tmp_path / "eval"), "eval_files": test_files,
                         "num_examples": 23, "batch_size": 8, "run_once": True,
                         "class_names": ff.CLASS_NAMES, **overrides})


class FakeSleep:
    """A sleep that records the waits and advances ``clock`` (from 1000); it runs
    ``actions[i]`` at the i-th call."""

    def __init__(self, *actions, limit=20):
        self.calls, self.actions, self.limit, self.now = [], actions, limit, 1000.0

    def clock(self):
        return self.now

    def __call__(self, seconds):
        self.calls.append(seconds)
        self.now += seconds
        if len(self.calls) <= len(self.actions):
            self.actions[len(self.calls) - 1]()
        assert len(self.calls) <= self.limit, f"the poller did not stop: sleeps {self.calls}"
