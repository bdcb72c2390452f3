"""What the evaluator's tests share (test_scoring, test_recording, test_polling): one
short trained run, the settings to evaluate it, results.jsonl read back, and a run
whose model always says cat.

The trained run (6 steps, checkpoints at 3 and 6) is conftest.py's ``trained_run``,
made once per test process and shared by every file; tests that change its directory
work on a copy.
"""

from __future__ import annotations

import json
import os
import types

import tensorflow as tf

from cifar10.core.config import EvalConfig
from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.evaluation import recording
from cifar10.runs import checkpoints
from cifar10.training.step import TrainState

RECORDS = 50  # records per generated file: conftest.trained_run's test split holds 50 examples
DATA_SUFFIX = ".data-00000-of-00001"


def run_of(trained_run) -> types.SimpleNamespace:
    """conftest's session ``trained_run`` as the evaluator's tests read it: train_dir
    with model.ckpt-3 and model.ckpt-6, and the test files."""
    train_dir, test_files = trained_run
    assert checkpoints.completed_step(str(train_dir)) == 6
    return types.SimpleNamespace(
        train_dir=str(train_dir), test_files=test_files,
        ckpt3=os.path.join(train_dir, "model.ckpt-3"),
        ckpt6=os.path.join(train_dir, "model.ckpt-6"))


def config_of(run, eval_dir, **overrides) -> EvalConfig:
    settings = {"checkpoint_dir": run.train_dir, "eval_dir": str(eval_dir),
                "eval_files": run.test_files, "num_examples": RECORDS, "batch_size": 16}
    settings.update(overrides)
    return EvalConfig(**settings)


def results_lines(eval_dir) -> list[dict]:
    path = os.path.join(str(eval_dir), recording.RESULTS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def always_cat_run(tmp_path):
    """(data folder, test files, train_dir) of a run whose model.ckpt-9 always says cat
    (3): zero last-layer weights and a bias for cat alone; 23 test records."""
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=23)
    state = TrainState(seed=0, compute_dtype=tf.float32)
    for model in (state.model, state.averages):
        model.softmax_linear.weights.assign(tf.zeros([192, 10]))
        model.softmax_linear.biases.assign(tf.one_hot(3, 10) * 5.0)
    state.step.assign(9)
    state.checkpoint().write(str(tmp_path / "train" / "model.ckpt-9"))
    return batches_dir, datafolder.split_files(batches_dir, "test"), tmp_path / "train"
