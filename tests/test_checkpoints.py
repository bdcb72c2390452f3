"""runs/checkpoints.py: which checkpoint a run resumes from (the newest that restores,
saying why; never silently step 0), a model from one, and the run's class names, on
copies of conftest's ``trained_run`` (checkpoints at 3 and 6)."""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from absl import logging

import cli
from cifar10.cli import stopping
from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import fileformat as ff
from cifar10.data import folder
from cifar10.evaluation import polling
from cifar10.runs import checkpoints, layout, rundir
from cifar10.runs.layout import CLASSES_FILE, LOCK_FILE, Checkpoint
from cifar10.training import controller
from cifar10.training.controller import TrainData
from cifar10.training.step import TrainState
from conftest import LAYERS, mirrored
from evalruns import FakeSleep, config_of, run_of
from rundirs import config, copy_run, snapshot, truncate


@pytest.fixture
def run_dir(trained_run, tmp_path):
    """A copy of the trained run, with files of a user's beside it."""
    return copy_run(trained_run[0], tmp_path / "train")


def restore(train_dir, lines, save_dir=None):
    state = TrainState(seed=1, compute_dtype=tf.float32)
    restored = rundir.RunDirectory(str(train_dir), state.checkpoint(), keep=5, save_dir=save_dir,
                                   print_fn=lines.append, warn=lines.append).restore()
    return restored, state


def delete_newest(d):
    for name in os.listdir(d):
        if name.startswith("model.ckpt-6."):
            os.remove(d / name)


@pytest.mark.parametrize("damage, step, reason", [
    (lambda d: os.remove(d / "checkpoint"), 6, "the state file {d}/checkpoint is missing"),
    (lambda d: (d / "checkpoint").write_text(""), 6, "the state file {d}/checkpoint is empty"),
    (lambda d: (d / "checkpoint").write_bytes(b"\x00\xff{"), 6,
     "the state file {d}/checkpoint cannot be parsed"),
    (delete_newest, 3, "the state file names model.ckpt-6, which is gone"),
    (lambda d: truncate(d / "model.ckpt-6.data-00000-of-00001"), 3,
     "model.ckpt-6 does not restore ("),
    (lambda d: (d / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n'), 6,
     "the state file names model.ckpt-3, an older one"),
])
def test_restore_takes_the_newest_checkpoint_that_restores_and_says_why(run_dir, damage, step,
                                                                        reason):
    damage(run_dir)
    lines = []
    restored, state = restore(run_dir, lines)
    assert restored == Checkpoint(step, str(run_dir / f"model.ckpt-{step}"))
    assert state.step.numpy() == step
    np.testing.assert_array_equal(state.model.conv1.weights.numpy(), tf.train.load_checkpoint(
        restored.path).get_tensor("model/conv1/weights/.ATTRIBUTES/VARIABLE_VALUE"))
    [line] = lines
    assert line.startswith(f"Using {restored.path}, the newest checkpoint that restores: ")
    assert reason.format(d=run_dir) in line
    # The state file is rewritten: TensorFlow's own reader agrees now.
    assert tf.train.latest_checkpoint(str(run_dir)) == restored.path


def test_an_intact_run_resumes_without_a_notice_and_only_the_chief_rewrites_the_state(
        run_dir, tmp_path):
    lines = []
    assert restore(run_dir, lines)[0].step == 6 and lines == []
    state = 'model_checkpoint_path: "model.ckpt-3"\n'
    (run_dir / "checkpoint").write_text(state)
    assert restore(run_dir, lines, save_dir=str(tmp_path / "scratch"))[0].step == 6
    assert len(lines) == 1 and (run_dir / "checkpoint").read_text() == state


def test_a_run_whose_checkpoints_were_all_deleted_starts_over_saying_so(run_dir):
    for name in os.listdir(run_dir):
        if name.startswith("model.ckpt-") and not name.endswith((".txt", ".bak")):
            os.remove(run_dir / name)
    lines = []
    restored, state = restore(run_dir, lines)
    assert restored is None and state.step.numpy() == 0
    assert lines == [f"Starting from step 0: no checkpoint is left in {run_dir} (the state "
                     f"file names model.ckpt-6, which is gone)."]


@pytest.mark.parametrize("damage, listed", [
    ("truncate every checkpoint", ["model.ckpt-6 does not restore (",
                                   "model.ckpt-3 does not restore ("]),
    ("only incomplete checkpoints", ["model.ckpt-6 is incomplete (no .data file)",
                                     "model.ckpt-3 is incomplete (no .index file)"]),
])
def test_when_no_checkpoint_restores_it_stops_and_changes_nothing(run_dir, learnable_files,
                                                                   damage, listed):
    if damage.startswith("truncate"):
        for step in (3, 6):
            truncate(run_dir / f"model.ckpt-{step}.data-00000-of-00001")
    else:
        os.remove(run_dir / "model.ckpt-6.data-00000-of-00001")
        os.remove(run_dir / "model.ckpt-3.index")
    before = snapshot(run_dir)
    with pytest.raises(Cifar10Error) as err:
        controller.train(config(run_dir, max_steps=40), mirrored(), TrainData(*learnable_files),
                         print_fn=lambda line: None)
    message = str(err.value)
    assert message.startswith(f"no checkpoint in {run_dir} can be restored: ")
    assert all(item in message for item in listed), message
    assert "move them aside or choose another --train_dir" in message and "\n" not in message
    after = snapshot(run_dir)
    before.pop(LOCK_FILE, None), after.pop(LOCK_FILE)  # held, then let go
    assert after == before


def test_the_advice_of_a_run_whose_checkpoints_do_not_restore_works_when_followed(
        run_dir, learnable_files, tmp_path):
    """Each .index cut short (a full disk): no file --fresh_start knows it wrote, so the
    error names them to move out first; moved, --fresh_start starts over."""
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
    (tmp_path / "aside").mkdir()
    for name in named:
        os.rename(run_dir / name, tmp_path / "aside" / name)
    result = controller.train(config(run_dir, max_steps=1, fresh_start=True), mirrored(),
                              TrainData(*learnable_files), print_fn=lambda line: None)
    assert result.complete and [c.step for c in layout.find(str(run_dir))] == [1]


def test_a_checkpoint_of_another_model_is_named_as_such_in_one_line(tmp_path):
    with mirrored().scope():  # the variables the trainer restores into, as it makes them
        state = TrainState(seed=1, compute_dtype=tf.float32)
        tf.train.Checkpoint(net=tf.Module(), w=tf.Variable(tf.zeros([3]))).write(
            str(tmp_path / "model.ckpt-5"))
        tf.train.Checkpoint(model=state.model, averages=state.averages, step=state.step,
                            loss_averages=state.loss_averages).write(
            str(tmp_path / "model.ckpt-4"))
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
    """model.ckpt-6 does not restore: the run goes on from 3 to 5 and says so; the damaged
    one is left in place, and neither a stop's line nor the evaluator takes it for the
    run's last checkpoint."""
    truncate(run_dir / "model.ckpt-6.data-00000-of-00001")
    restoring = rundir.RunDirectory(str(run_dir), TrainState(
        seed=1, compute_dtype=tf.float32).checkpoint(), keep=5, warn=lambda line: None)
    assert restoring.restore().step == 3
    assert restoring.describe_latest() == f"the last checkpoint is {run_dir / 'model.ckpt-3'}"
    with mock.patch.object(logging, "warning"):
        result = controller.train(config(run_dir, max_steps=5), mirrored(),
                                  TrainData(*learnable_files), print_fn=lambda line: None)
    saved = str(run_dir / "model.ckpt-5")
    assert (result.start_step, result.step, result.last_checkpoint) == (3, 5, saved)
    assert result.summary()[0] == f"Training complete at step 5; saved {saved}."
    assert [c.step for c in layout.find(str(run_dir))] == [3, 5, 6]
    assert stopping.last_good_checkpoint(str(run_dir)) == saved
    lines = []
    sleep = FakeSleep()
    results = polling.evaluate(config_of(run_of(trained_run), tmp_path / "eval",
                                         checkpoint_dir=str(run_dir), eval_interval_secs=1),
                               print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert [r.step for r in results] == [5]
    assert lines[-1] == (f"Training in {run_dir} is complete and its final checkpoint is "
                         f"evaluated; stopping.")


def test_load_model_gives_the_averages_or_the_raw_weights_and_the_step(trained_run):
    ckpt6 = str(trained_run[0] / "model.ckpt-6")
    reader = tf.train.load_checkpoint(ckpt6)
    (averages, avg_step), (raw, raw_step) = (checkpoints.load_model(ckpt6, w)
                                             for w in ("averages", "raw"))
    assert avg_step == raw_step == 6
    for name in LAYERS:
        for kind in ("weights", "biases"):
            key = f"{name}/{kind}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(getattr(getattr(averages, name), kind).numpy(),
                                          reader.get_tensor("averages/" + key))
            np.testing.assert_array_equal(getattr(getattr(raw, name), kind).numpy(),
                                          reader.get_tensor("model/" + key))
    assert not np.allclose(averages.conv1.weights.numpy(), raw.conv1.weights.numpy())
    assert checkpoints.num_outputs(ckpt6) == ff.NUM_CLASSES
    with pytest.raises(ValueError, match="weights must be one of"):
        checkpoints.load_model(ckpt6, "ema")


FIX = ("write the run's {n}class names in a file of that name, one per line in label order "
       "(the batches.meta.txt of the data it was trained on)")


def test_the_runs_class_names_are_its_own_file_not_the_datas(tmp_path):
    assert checkpoints.trained_class_names(str(tmp_path)) == ff.CLASS_NAMES  # none recorded
    (tmp_path / ff.META_FILE).write_text("cat\ndog\n")  # as if it were a data folder too
    (tmp_path / CLASSES_FILE).write_text("ant\nbee\n")
    assert checkpoints.trained_class_names(str(tmp_path)) == ("ant", "bee")
    assert folder.class_names(str(tmp_path)) == ("cat", "dog")
    assert checkpoints.recorded_class_names(str(tmp_path), 3) == (
        None, "lists 2 class names and the run's model has 3 classes")
    # A run of before the model's outputs followed the data: 10 of them, its 2 names.
    assert checkpoints.recorded_class_names(str(tmp_path), 10) == (("ant", "bee"), "")
    (tmp_path / CLASSES_FILE).unlink()
    assert checkpoints.recorded_class_names(str(tmp_path), 10) == (None, "")
    with pytest.raises(DataError) as err:
        checkpoints.trained_class_names(str(tmp_path), num_classes=3)
    assert str(err.value) == (f"{tmp_path / CLASSES_FILE} is missing and the run's model has 3 "
                              f"classes: {FIX.format(n='3 ')}")


@pytest.mark.parametrize("content, problem", [
    (b"airplane\nautom\xffbile\n", "is not UTF-8 text (byte 0xff at offset 14)"),
    (b"ant\nant\n", "lists ant more than once"),
    (b"", "lists no class names"),
    ("".join(f"c{i}\n" for i in range(11)).encode(),
     "lists 11 class names and the run's model has 10 classes"),
    (None, "is a folder, not a class names file"),
])
def test_a_damaged_class_names_file_is_one_line_naming_it_and_the_fix(run_dir, content,
                                                                     problem):
    path = run_dir / CLASSES_FILE
    if content is None:
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(DataError) as info:
        checkpoints.trained_class_names(str(run_dir))  # the newest model's 10 classes
    assert str(info.value) == f"{path} {problem}: {FIX.format(n='10 ')}"
    # Given the data's names (the evaluator), one warning, and the run goes on with them.
    names = tuple(f"k{i}" for i in range(10))
    assert checkpoints.trained_class_names(str(run_dir), fallback=names) == names


def test_predict_export_eval_and_a_resumed_run_on_a_damaged_class_names_file(trained_run,
                                                                               run_dir, tmp_path):
    """cifar10-predict and cifar10-export stop with one line; cifar10-eval goes on with
    the data's names and says so once; cifar10-train resumes and writes the file again."""
    path = run_dir / CLASSES_FILE
    path.write_text("".join(f"c{i}\n" for i in range(11)))
    problem = (f"{path} lists 11 class names and the run's model has 10 classes: "
               f"{FIX.format(n='10 ')}")
    image = tmp_path / "cat.png"
    image.write_bytes(tf.io.encode_png(np.zeros((32, 32, 3), np.uint8)).numpy())
    predicted = cli.call("cifar10-predict", f"--checkpoint_dir={run_dir}", str(image))
    cli.assert_refused(predicted, f"cifar10-predict: error: {problem}")
    exported = cli.call("cifar10-export", f"--checkpoint_dir={run_dir}",
                        f"--export_dir={tmp_path / 'export'}")
    cli.assert_refused(exported, f"cifar10-export: error: {problem}")
    assert not (tmp_path / "export").exists()

    data_dir = os.path.dirname(os.path.dirname(trained_run[1][0]))
    evaluated = cli.call("cifar10-eval", f"--checkpoint_dir={run_dir}", "--run_once",
                         f"--eval_dir={tmp_path / 'eval'}", f"--data_dir={data_dir}")
    assert evaluated.returncode == 0, evaluated.stderr
    problem = problem.split(":")[0]
    assert [line for line in evaluated.stderr.splitlines() if "warning" in line] == [
        f"cifar10-eval: warning: {problem}: the run's 10 classes are taken to be the data's "
        f"({', '.join(ff.CLASS_NAMES)})."]
    resumed = cli.call("cifar10-train", f"--train_dir={run_dir}", f"--data_dir={data_dir}",
                       "--max_steps=7", "--batch_size=16")
    assert resumed.returncode == 0, resumed.stderr
    assert [line for line in resumed.stderr.splitlines() if "warning" in line] == [
        f"cifar10-train: warning: {problem}: it is written again with --data_dir's class "
        f"names ({', '.join(ff.CLASS_NAMES)})."]
    assert path.read_text() == "".join(f"{name}\n" for name in ff.CLASS_NAMES)
