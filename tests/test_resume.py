"""Tests of cifar10.runs.resume: a resumed run goes on from the newest checkpoint that
restores, says why when that is not the one the state file names, and never
silently starts over.

Each test damages a copy of the small trained run (conftest's ``trained_run``:
checkpoints at steps 3 and 6, complete at 6).
"""

from __future__ import annotations

import os
from unittest import mock

from absl import logging
import numpy as np
import pytest
import tensorflow as tf

from cifar10.cli import stopping
from cifar10.core.errors import Cifar10Error
from cifar10.evaluation import polling
from cifar10.runs import checkpoint_files, rundir
from cifar10.runs.lock import LOCK_FILE
from cifar10.training import controller
from cifar10.training.run import TrainData
from cifar10.training.state import TrainState
from conftest import mirrored
from evalruns import FakeSleep, config_of, run_of
from rundirs import config, copy_run, snapshot, truncate


@pytest.fixture
def run_dir(trained_run, tmp_path):
    """A copy of the trained run, with files of a user's beside it."""
    return copy_run(trained_run[0], tmp_path / "train")


def restore_into_new_state(train_dir, lines):
    state = TrainState(seed=1, compute_dtype=tf.float32)
    restored = rundir.RunDirectory(str(train_dir), state.checkpoint(), keep=5,
                                   print_fn=lines.append, warn=lines.append).restore()
    return restored, state


def delete_state(d):
    os.remove(d / "checkpoint")


def empty_state(d):
    (d / "checkpoint").write_text("")


def garble_state(d):
    (d / "checkpoint").write_bytes(b"\x00\xffnot a state file{")


def delete_newest(d):
    for name in os.listdir(d):
        if name.startswith("model.ckpt-6."):
            os.remove(d / name)


def truncate_newest(d):
    truncate(d / "model.ckpt-6.data-00000-of-00001")


def state_names_an_older_one(d):
    (d / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')


@pytest.mark.parametrize("damage, step, reason", [
    (delete_state, 6, "the state file {d}/checkpoint is missing"),
    (empty_state, 6, "the state file {d}/checkpoint is empty"),
    (garble_state, 6, "the state file {d}/checkpoint cannot be parsed"),
    (delete_newest, 3, "the state file names model.ckpt-6, which is gone"),
    (truncate_newest, 3, "model.ckpt-6 does not restore ("),
    (state_names_an_older_one, 6, "the state file names model.ckpt-3, an older one"),
])
def test_restore_takes_the_newest_checkpoint_that_restores_and_says_why(run_dir, damage, step,
                                                                        reason):
    damage(run_dir)
    lines = []
    restored, state = restore_into_new_state(run_dir, lines)
    assert restored == checkpoint_files.Checkpoint(step, str(run_dir / f"model.ckpt-{step}"))
    assert state.step.numpy() == step
    saved = tf.train.load_checkpoint(restored.path)
    np.testing.assert_array_equal(state.model.conv1.weights.numpy(), saved.get_tensor(
        "model/conv1/weights/.ATTRIBUTES/VARIABLE_VALUE"))
    [line] = lines
    assert line.startswith(f"Using {restored.path}, the newest checkpoint that restores: ")
    assert reason.format(d=run_dir) in line
    # The state file is rewritten: TensorFlow's own reader agrees now.
    assert tf.train.latest_checkpoint(str(run_dir)) == restored.path


def test_a_worker_that_is_not_the_chief_does_not_rewrite_the_state_file(run_dir, tmp_path):
    state_names_an_older_one(run_dir)
    state = TrainState(seed=1, compute_dtype=tf.float32)
    lines = []
    restored = rundir.RunDirectory(str(run_dir), state.checkpoint(), keep=5,
                                   save_dir=str(tmp_path / "scratch"),
                                   print_fn=lines.append, warn=lines.append).restore()
    assert restored.step == 6 and len(lines) == 1
    assert (run_dir / "checkpoint").read_text() == 'model_checkpoint_path: "model.ckpt-3"\n'


def test_a_run_whose_checkpoints_were_all_deleted_starts_over_saying_so(run_dir):
    for name in os.listdir(run_dir):
        if name.startswith("model.ckpt-") and not name.endswith((".txt", ".bak")):
            os.remove(run_dir / name)
    lines = []
    restored, state = restore_into_new_state(run_dir, lines)
    assert restored is None and state.step.numpy() == 0
    assert lines == [f"Starting from step 0: no checkpoint is left in {run_dir} (the state "
                     f"file names model.ckpt-6, which is gone)."]


def test_an_intact_run_resumes_without_a_notice(run_dir):
    lines = []
    restored, _ = restore_into_new_state(run_dir, lines)
    assert restored.step == 6 and lines == []


def test_deleting_a_bad_checkpoint_resumes_from_the_one_before_not_from_step_0(
        run_dir, learnable_files):
    """The user's natural fix after 'cannot restore model.ckpt-6': delete it."""
    delete_newest(run_dir)
    before = {n: t for n, t in snapshot(run_dir).items() if n.startswith("model.ckpt-")}
    lines = []
    with mock.patch.object(logging, "warning") as warned:
        result = controller.train(config(run_dir, max_steps=5, checkpoint_steps=1),
                                  mirrored(), TrainData(*learnable_files),
                                  print_fn=lines.append)
    assert (result.start_step, result.step) == (3, 5)
    # The skipped checkpoint is the program's warning (stderr), the rest its lines.
    warnings = [call.args[0] for call in warned.call_args_list]
    assert warnings[0].startswith(f"Using {run_dir}/model.ckpt-3, the newest checkpoint "
                                  f"that restores: ")
    assert lines[0] == f"Resuming from {run_dir}/model.ckpt-3 at step 3."
    assert lines[1].startswith("Training on 500 examples from ")
    assert ": step 4, loss = " in lines[2]
    after = snapshot(run_dir)
    assert {name: after[name] for name in before} == before  # 3 untouched
    assert [c.step for c in checkpoint_files.find(str(run_dir))] == [3, 4, 5]


@pytest.mark.parametrize("damage, listed", [
    ("truncate every checkpoint", ["model.ckpt-6 does not restore (",
                                   "model.ckpt-3 does not restore ("]),
    ("only incomplete checkpoints", ["model.ckpt-6 is incomplete (no .data file)",
                                     "model.ckpt-3 is incomplete (no .index file)"]),
])
def test_when_no_checkpoint_restores_it_stops_and_changes_nothing(run_dir, learnable_files, damage,
                                                                   listed):
    for step in (3, 6):
        if damage.startswith("truncate"):
            truncate(run_dir / f"model.ckpt-{step}.data-00000-of-00001")
    if damage.startswith("only"):
        os.remove(run_dir / "model.ckpt-6.data-00000-of-00001")
        os.remove(run_dir / "model.ckpt-3.index")
    before = snapshot(run_dir)
    with pytest.raises(Cifar10Error) as err:
        controller.train(config(run_dir, max_steps=40), mirrored(), TrainData(*learnable_files),
                         print_fn=lambda line: None)
    message = str(err.value)
    assert message.startswith(f"no checkpoint in {run_dir} can be restored: ")
    assert all(item in message for item in listed), message
    assert "move them aside or choose another --train_dir" in message
    assert "\n" not in message
    after = snapshot(run_dir)
    assert {n: after[n] for n in before if n != LOCK_FILE} == {
        n: s for n, s in before.items() if n != LOCK_FILE}
    assert set(after) - set(before) <= {LOCK_FILE}


def test_the_advice_of_a_run_whose_checkpoints_do_not_restore_works_when_followed(
        run_dir, learnable_files, tmp_path):
    """Each checkpoint's .index cut short (a full disk): the error said "--fresh_start
    deletes them", and --fresh_start refused, since a .index that is not whole is no
    file it knows it wrote.  The error names those files; moved out, --fresh_start
    starts over."""
    for step in (3, 6):
        truncate(run_dir / f"model.ckpt-{step}.index")
    with pytest.raises(Cifar10Error) as err:
        controller.train(config(run_dir, max_steps=40), mirrored(), TrainData(*learnable_files),
                         print_fn=lambda line: None)
    named = [f"model.ckpt-{step}.{kind}" for step in (3, 6)
             for kind in ("data-00000-of-00001", "index")]
    assert str(err.value).endswith(
        f"; to start over, move {', '.join(named)} out of {run_dir} (damaged, or not the "
        f"trainer's: --fresh_start deletes only the checkpoints it wrote whole), then "
        f"cifar10-train --train_dir={run_dir} --fresh_start deletes the rest")
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in named:
        os.rename(run_dir / name, aside / name)
    result = controller.train(config(run_dir, max_steps=1, fresh_start=True), mirrored(),
                              TrainData(*learnable_files), print_fn=lambda line: None)
    assert result.complete
    assert [c.step for c in checkpoint_files.find(str(run_dir))] == [1]
    assert sorted(os.listdir(aside)) == named


def _write_checkpoint(path, **objects):
    tf.train.Checkpoint(**objects).write(str(path))


def test_a_checkpoint_of_another_model_is_named_as_such_in_one_line(tmp_path):
    """The cause was TensorFlow's list of the unmatched objects, cut inside the first:
    '(Found 23 Python objects ... unmatched objects: [MirroredVariable:{).'"""
    with mirrored().scope():  # the variables the trainer restores into, as it makes them
        state = TrainState(seed=1, compute_dtype=tf.float32)
        _write_checkpoint(tmp_path / "model.ckpt-5", net=tf.Module(), w=tf.Variable(tf.zeros([3])))
        _write_checkpoint(tmp_path / "model.ckpt-4", model=state.model, averages=state.averages,
                          step=state.step, loss_averages=state.loss_averages)
    with pytest.raises(Cifar10Error) as err:
        rundir.RunDirectory(str(tmp_path), state.checkpoint(), keep=5).restore()
    # Every variable of the state: the model's and its averages' 10 each, the step,
    # examples_seen and the two losses' moving averages.
    assert str(err.value).startswith(
        f"no checkpoint in {tmp_path} can be restored: the state file {tmp_path}/checkpoint "
        f"is missing; model.ckpt-5 does not restore (it is not a checkpoint of this model: "
        f"24 of the variables to restore are not in it); model.ckpt-4 does not restore (it "
        f"is not a checkpoint of this model: 1 of the variables to restore is not in it: "
        f"examples_seen). To keep them")


def test_a_run_that_went_on_before_a_damaged_newer_checkpoint_names_the_one_it_saved(
        run_dir, trained_run, learnable_files, tmp_path):
    """model.ckpt-6 does not restore: the run goes on from 3 to 5, saves model.ckpt-5 and
    says so; the damaged one is left in place, and neither the second signal's line nor
    the evaluator takes it for the run's last checkpoint."""
    truncate_newest(run_dir)
    restoring = rundir.RunDirectory(str(run_dir), TrainState(seed=1, compute_dtype=tf.float32).checkpoint(), keep=5,
                                    warn=lambda line: None)
    assert restoring.restore().step == 3  # what a diverged run or a failed save names:
    assert restoring.describe_latest() == f"the last checkpoint is {run_dir / 'model.ckpt-3'}"
    with mock.patch.object(logging, "warning"):
        result = controller.train(config(run_dir, max_steps=5), mirrored(),
                                  TrainData(*learnable_files), print_fn=lambda line: None)
    saved = str(run_dir / "model.ckpt-5")
    assert (result.start_step, result.step, result.last_checkpoint) == (3, 5, saved)
    assert result.summary()[0] == f"Training complete at step 5; saved {saved}."
    assert [c.step for c in checkpoint_files.find(str(run_dir))] == [3, 5, 6]
    assert stopping.last_good_checkpoint(str(run_dir)) == saved

    lines = []
    sleep = FakeSleep()
    results = polling.evaluate(config_of(run_of(trained_run), tmp_path / "eval",
                                         checkpoint_dir=str(run_dir), eval_interval_secs=1),
                               print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert [r.step for r in results] == [5]
    assert lines[-1] == (f"Training in {run_dir} is complete and its final checkpoint is "
                         f"evaluated; stopping.")
