"""What the evaluator's tests share (test_scoring, test_recording, test_polling): one
short trained run, the settings to evaluate it, results.jsonl read back, and a run
whose model always says cat.

The trained run (6 steps, checkpoints at 3 and 6) is made once per test process and
shared by the three files; tests that change its directory work on a copy.
"""

from __future__ import annotations

import json
import os
import types

import tensorflow as tf
from conftest import mirrored

from cifar10.core.config import EvalConfig, TrainConfig
from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.evaluation import recording
from cifar10.runs import checkpoints
from cifar10.training import controller
from cifar10.training.run import TrainData
from cifar10.training.state import TrainState

RECORDS = 50  # records per generated file: the test split holds 50 examples
DATA_SUFFIX = ".data-00000-of-00001"

# One run per test process, whichever of the three files asks first: a module
# fixture would train it once per file (3.5 s each).
_RUNS: dict[str, types.SimpleNamespace] = {}


def trained_run(tmp_path_factory) -> types.SimpleNamespace:
    """A trained run: train_dir with model.ckpt-3 and model.ckpt-6, and the test files."""
    key = str(tmp_path_factory.getbasetemp())
    if key not in _RUNS:
        _RUNS[key] = _train(tmp_path_factory.mktemp("evaluate"))
    return _RUNS[key]


def _train(root) -> types.SimpleNamespace:
    batches_dir = synthetic.write_dataset(str(root / "data" / "synthetic"),
                                          records_per_file=RECORDS)
    files = datafolder.split_files(batches_dir, "train")
    count = datafolder.validate_files(files)
    train_dir = str(root / "train")
    config = TrainConfig(train_dir=train_dir, batch_size=16, max_steps=6,
                         checkpoint_steps=3, summary_steps=1000, log_frequency=1000,
                         shuffle_buffer=300)
    strategy = mirrored()
    result = controller.train(config, strategy, TrainData(files, count),
                              print_fn=lambda line: None)
    assert result.complete and checkpoints.completed_step(train_dir) == 6
    return types.SimpleNamespace(
        train_dir=train_dir, test_files=datafolder.split_files(batches_dir, "test"),
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
