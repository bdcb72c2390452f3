"""Tests of cifar10.runs.statefile: the state file ``checkpoint`` is the one
TensorFlow's tools read, and what is wrong with a damaged one is said in words."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from cifar10.runs import statefile
from cifar10.runs.checkpoint_files import Checkpoint


def test_the_state_file_the_trainer_writes_is_the_one_tensorflow_reads(trained_run):
    run_dir = trained_run[0]
    assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "model.ckpt-6")
    state = tf.train.get_checkpoint_state(str(run_dir))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-3", "model.ckpt-6"]
    # Relative paths, so that a run directory can be moved.
    assert (run_dir / statefile.STATE_FILE).read_text() == (
        'model_checkpoint_path: "model.ckpt-6"\n'
        'all_model_checkpoint_paths: "model.ckpt-3"\n'
        'all_model_checkpoint_paths: "model.ckpt-6"\n')
    assert statefile.named_step(str(run_dir), {3, 6}) == (6, "")


def test_write_lists_every_checkpoint_and_leaves_no_temporary_file(tmp_path):
    statefile.write(str(tmp_path), [Checkpoint(10, str(tmp_path / "model.ckpt-10")),
                                    Checkpoint(20, str(tmp_path / "model.ckpt-20"))])
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == str(tmp_path / "model.ckpt-20")
    assert list(state.all_model_checkpoint_paths) == [str(tmp_path / "model.ckpt-10"),
                                                      str(tmp_path / "model.ckpt-20")]
    assert os.listdir(tmp_path) == [statefile.STATE_FILE]


@pytest.mark.parametrize("text, steps, expected", [
    (None, {6}, (None, "the state file {path} is missing")),
    ("", {6}, (None, "the state file {path} is empty")),
    (" \n", {6}, (None, "the state file {path} is empty")),
    ("\x00\xffnot a state file{", {6}, (None, "the state file {path} cannot be parsed")),
    ('model_checkpoint_path: "model.ckpt-best"\n', {6},
     (None, "the state file {path} cannot be parsed")),
    ('model_checkpoint_path: "model.ckpt-9"\n', {3, 6},
     (9, "the state file names model.ckpt-9, which is gone")),
    ('model_checkpoint_path: "/elsewhere/train/model.ckpt-3"\n', {3, 6}, (3, "")),
])
def test_named_step_says_what_is_wrong_with_the_state_file(tmp_path, text, steps, expected):
    path = tmp_path / statefile.STATE_FILE
    if text is not None:
        path.write_text(text, encoding="latin-1")
    step, problem = statefile.named_step(str(tmp_path), steps)
    assert (step, problem) == (expected[0], expected[1].format(path=path))
