"""Tests of cifar10.runs.checkpoints: the run directory keeps a user's work.

One short run (30 steps, checkpoints at 10, 20 and 30) is shared by the module;
each test works on a copy.  The tests of full and read-only file systems mount a
small tmpfs, which needs root; elsewhere they are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import uuid

import numpy as np
import pytest
import tensorflow as tf

from cifar10.runs import checkpoints
from cifar10.data import pipeline as data
from cifar10.evaluation import evaluate
from cifar10.data import synthetic
from cifar10.training import train
from cifar10.data import fileformat as ff
from cifar10.core.errors import Cifar10Error
from conftest import LAYERS, mirrored

USER_FILES = ("model.ckpt-best.txt", "model.ckpt-10.index.bak",
              "events.out.tfevents.my_notes.txt", "checkpoint.txt", "notes.txt",
              "class_names.txt.bak")


def config(train_dir, **overrides):
    settings = dict(train_dir=str(train_dir), batch_size=16, max_steps=30, log_frequency=1,
                    checkpoint_steps=10, summary_steps=1000, shuffle_buffer=200)
    settings.update(overrides)
    return train.TrainConfig(**settings)


@pytest.fixture(scope="module")
def trained(learnable_files, tmp_path_factory):
    """A run directory with model.ckpt-10, -20 and -30, complete at step 30."""
    train_dir = tmp_path_factory.mktemp("trained") / "train"
    result = train.train(config(train_dir), mirrored(), *learnable_files, print_fn=lambda line: None)
    assert (result.step, result.complete) == (30, True)
    return train_dir


@pytest.fixture
def run_dir(trained, tmp_path):
    """A copy of the trained run, with files of a user's beside it."""
    copy = tmp_path / "train"
    shutil.copytree(trained, copy)
    for name in USER_FILES:
        (copy / name).write_text("mine")
    return copy


def snapshot(directory):
    """{name: (size, mtime)} of every file under ``directory``."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, directory)] = (os.path.getsize(path),
                                                     os.stat(path).st_mtime_ns)
    return out


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def restore_into_new_state(train_dir, lines):
    state = train.TrainState(seed=1, compute_dtype=tf.float32)
    restored = checkpoints.RunDirectory(str(train_dir), state.checkpoint(), keep=5,
                                        print_fn=lines.append).restore()
    return restored, state


# --- discovery ----------------------------------------------------------------


def test_find_lists_the_complete_checkpoints_and_nothing_that_only_looks_like_one(run_dir):
    assert [(c.step, c.name) for c in checkpoints.find(str(run_dir))] == [
        (10, "model.ckpt-10"), (20, "model.ckpt-20"), (30, "model.ckpt-30")]
    os.remove(run_dir / "model.ckpt-20.index")  # data without index
    os.remove(run_dir / "model.ckpt-30.data-00000-of-00001")  # index without data
    (run_dir / "model.ckpt-40.data-00000-of-00002").write_bytes(b"x")  # a shard missing
    (run_dir / "model.ckpt-40.index").write_bytes(b"x")
    assert [c.step for c in checkpoints.find(str(run_dir))] == [10]
    assert checkpoints.latest(str(run_dir)).path == str(run_dir / "model.ckpt-10")
    assert checkpoints.latest(str(run_dir / "no_such_dir")) is None


def test_the_state_file_written_is_the_one_tensorflow_reads(run_dir):
    assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "model.ckpt-30")
    state = tf.train.get_checkpoint_state(str(run_dir))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-10", "model.ckpt-20", "model.ckpt-30"]


# --- resume never silently starts over ----------------------------------------


def delete_state(d):
    os.remove(d / "checkpoint")


def empty_state(d):
    (d / "checkpoint").write_text("")


def garble_state(d):
    (d / "checkpoint").write_bytes(b"\x00\xffnot a state file{")


def delete_newest(d):
    for name in os.listdir(d):
        if name.startswith("model.ckpt-30."):
            os.remove(d / name)


def truncate_newest(d):
    truncate(d / "model.ckpt-30.data-00000-of-00001")


def state_names_an_older_one(d):
    (d / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n')


@pytest.mark.parametrize("damage, step, reason", [
    (delete_state, 30, "the state file {d}/checkpoint is missing"),
    (empty_state, 30, "the state file {d}/checkpoint is empty"),
    (garble_state, 30, "the state file {d}/checkpoint cannot be parsed"),
    (delete_newest, 20, "the state file names model.ckpt-30, which is gone"),
    (truncate_newest, 20, "model.ckpt-30 does not restore ("),
    (state_names_an_older_one, 30, "the state file names model.ckpt-20, an older one"),
])
def test_restore_takes_the_newest_checkpoint_that_restores_and_says_why(run_dir, damage, step,
                                                                        reason):
    damage(run_dir)
    lines = []
    restored, state = restore_into_new_state(run_dir, lines)
    assert restored == checkpoints.Checkpoint(step, str(run_dir / f"model.ckpt-{step}"))
    assert state.step.numpy() == step
    saved = tf.train.load_checkpoint(restored.path)
    np.testing.assert_array_equal(state.model.conv1.weights.numpy(), saved.get_tensor(
        "model/conv1/weights/.ATTRIBUTES/VARIABLE_VALUE"))
    [line] = lines
    assert line.startswith(f"Using {restored.path}, the newest checkpoint that restores: ")
    assert reason.format(d=run_dir) in line
    # The state file is rewritten: TensorFlow's own reader agrees now.
    assert tf.train.latest_checkpoint(str(run_dir)) == restored.path


def test_a_run_whose_checkpoints_were_all_deleted_starts_over_saying_so(run_dir):
    for name in os.listdir(run_dir):
        if name.startswith("model.ckpt-") and not name.endswith((".txt", ".bak")):
            os.remove(run_dir / name)
    lines = []
    restored, state = restore_into_new_state(run_dir, lines)
    assert restored is None and state.step.numpy() == 0
    assert lines == [f"Starting from step 0: no checkpoint is left in {run_dir} (the state "
                     f"file names model.ckpt-30, which is gone)."]


def test_an_intact_run_resumes_without_a_notice(run_dir):
    lines = []
    restored, _ = restore_into_new_state(run_dir, lines)
    assert restored.step == 30 and lines == []


def test_deleting_a_bad_checkpoint_resumes_from_the_one_before_not_from_step_0(
        run_dir, learnable_files):
    """The user's natural fix after 'cannot restore model.ckpt-30': delete it."""
    delete_newest(run_dir)
    before = {n: t for n, t in snapshot(run_dir).items() if n.startswith("model.ckpt-")}
    lines = []
    result = train.train(config(run_dir, max_steps=22, checkpoint_steps=1), mirrored(),
                         *learnable_files, print_fn=lines.append)
    assert (result.start_step, result.step) == (20, 22)
    assert lines[1] == f"Resuming from {run_dir}/model.ckpt-20 at step 20."
    assert lines[2].startswith("Training on 500 examples from ")
    assert ": step 21, loss = " in lines[3]
    after = snapshot(run_dir)
    assert {name: after[name] for name in before} == before  # 10 and 20 untouched
    assert [c.step for c in checkpoints.find(str(run_dir))] == [10, 20, 21, 22]


@pytest.mark.parametrize("damage, listed", [
    ("truncate every checkpoint", ["model.ckpt-30 does not restore (", "model.ckpt-20 does not "
                                   "restore (", "model.ckpt-10 does not restore ("]),
    ("only incomplete checkpoints", ["model.ckpt-30 is incomplete (no .data file)",
                                     "model.ckpt-20 is incomplete (no .index file)"]),
])
def test_when_no_checkpoint_restores_it_stops_and_changes_nothing(run_dir, learnable_files, damage,
                                                                   listed):
    for step in (10, 20, 30):
        if damage.startswith("truncate"):
            truncate(run_dir / f"model.ckpt-{step}.data-00000-of-00001")
    if damage.startswith("only"):
        os.remove(run_dir / "model.ckpt-30.data-00000-of-00001")
        os.remove(run_dir / "model.ckpt-20.index")
        for name in ("model.ckpt-10.index", "model.ckpt-10.data-00000-of-00001"):
            os.remove(run_dir / name)
    before = snapshot(run_dir)
    with pytest.raises(Cifar10Error) as err:
        train.train(config(run_dir, max_steps=40), mirrored(), *learnable_files,
                    print_fn=lambda line: None)
    message = str(err.value)
    assert message.startswith(f"no checkpoint in {run_dir} can be restored: ")
    assert all(item in message for item in listed), message
    assert "move them aside or choose another --train_dir" in message
    assert "\n" not in message
    after = snapshot(run_dir)
    assert {n: after[n] for n in before if n != checkpoints.LOCK_FILE} == {
        n: s for n, s in before.items() if n != checkpoints.LOCK_FILE}
    assert set(after) - set(before) <= {checkpoints.LOCK_FILE}


# --- fresh_start, leftovers, retention --------------------------------------------


def leave_an_interrupted_save(train_dir, step=40):
    """What a kill during TensorFlow's save of ``step`` leaves behind."""
    temp = train_dir / f"model.ckpt-{step}_temp"
    temp.mkdir()
    (temp / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 1000)
    (train_dir / f"checkpoint.tmp{uuid.uuid4().hex}").write_text("half")


def test_fresh_start_removes_exactly_the_trainers_files(run_dir, learnable_files):
    leave_an_interrupted_save(run_dir)
    (run_dir / "my_folder").mkdir()
    (run_dir / "my_folder" / "model.ckpt-5.index").write_text("mine too")
    lines = []
    result = train.train(config(run_dir, max_steps=2, fresh_start=True), mirrored(),
                         *learnable_files, print_fn=lines.append)
    assert result.start_step == 0 and result.step == 2
    # 3 checkpoints x 2 files, state file, event file, complete marker, class
    # names, environment record, 2 leftovers.
    assert lines[0] == f"Fresh start: removed 13 files of the earlier run from {run_dir}."
    names = set(os.listdir(run_dir))
    assert set(USER_FILES) | {"my_folder"} <= names
    assert all((run_dir / name).read_text() == "mine" for name in USER_FILES)
    assert (run_dir / "my_folder" / "model.ckpt-5.index").read_text() == "mine too"
    assert [c.step for c in checkpoints.find(str(run_dir))] == [2]
    assert not [n for n in names if "_temp" in n or ".tmp" in n]


def test_leftovers_of_an_interrupted_save_are_removed_when_the_run_resumes(run_dir):
    leave_an_interrupted_save(run_dir)
    lines = []
    state = train.TrainState(seed=0, compute_dtype=tf.float32)
    with checkpoints.RunDirectory(str(run_dir), state.checkpoint(), keep=5,
                                  print_fn=lines.append) as directory:
        assert directory.restore().step == 30
    assert lines[0].startswith(f"Removed what an interrupted save left in {run_dir}: "
                               f"checkpoint.tmp")
    assert lines[0].endswith(", model.ckpt-40_temp.")
    assert not (run_dir / "model.ckpt-40_temp").exists()
    assert set(USER_FILES) <= set(os.listdir(run_dir))


def test_retention_keeps_the_newest_and_never_touches_later_or_foreign_files(run_dir):
    state = train.TrainState(seed=0, compute_dtype=tf.float32)
    with checkpoints.RunDirectory(str(run_dir), state.checkpoint(), keep=2,
                                  print_fn=lambda line: None) as directory:
        directory.save(15)  # as a run resumed at 10 would; 20 and 30 are later
        assert [c.step for c in checkpoints.find(str(run_dir))] == [10, 15, 20, 30]
        directory.save(16)
    assert [c.step for c in checkpoints.find(str(run_dir))] == [15, 16, 20, 30]
    assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "model.ckpt-16")
    assert set(USER_FILES) <= set(os.listdir(run_dir))


# --- one trainer per directory ----------------------------------------------------


def test_a_second_trainer_on_a_directory_in_use_stops_before_writing(run_dir, learnable_files):
    state = train.TrainState(seed=0, compute_dtype=tf.float32)
    with checkpoints.RunDirectory(str(run_dir), state.checkpoint(), keep=5):
        before = snapshot(run_dir)
        with pytest.raises(Cifar10Error) as err:
            train.train(config(run_dir, max_steps=40), mirrored(), *learnable_files,
                        print_fn=lambda line: None)
        assert snapshot(run_dir) == before
    assert str(err.value).startswith(
        f"--train_dir {run_dir} is in use by another trainer (PID {os.getpid()} on host "
        f"{socket.gethostname()}, started ")
    assert str(err.value).endswith("wait for it to finish or stop it, or choose another "
                                   "--train_dir")
    # Released: the next trainer goes on.
    result = train.train(config(run_dir, max_steps=31), mirrored(), *learnable_files,
                         print_fn=lambda line: None)
    assert (result.start_step, result.step) == (30, 31)


# --- stops and messages --------------------------------------------------------------


def test_a_stop_requested_before_the_first_step_still_saves_a_checkpoint(tmp_path, learnable_files):
    stop = threading.Event()
    stop.set()
    result = train.train(config(tmp_path / "train", max_steps=100), mirrored(), *learnable_files,
                         stop_event=stop, print_fn=lambda line: None)
    assert (result.step, result.stopped) == (1, True)
    assert result.last_checkpoint == str(tmp_path / "train" / "model.ckpt-1")


def test_divergence_before_any_checkpoint_says_so_without_none(tmp_path, learnable_files):
    with pytest.raises(Cifar10Error) as err:
        train.train(config(tmp_path / "train", initial_learning_rate=1e12), mirrored(),
                    *learnable_files, print_fn=lambda line: None)
    assert str(err.value).endswith("no checkpoint was written yet")
    assert "None" not in str(err.value)


# --- full and read-only file systems -------------------------------------------------


@contextlib.contextmanager
def tmpfs(path, size):
    """A tmpfs of ``size`` mounted at ``path`` (skips the test where that is not allowed)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill or make read-only needs root")
    os.makedirs(path)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_stops_with_one_line_and_keeps_the_last_checkpoint(tmp_path, learnable_files):
    # A checkpoint holds the weights and their averages: 2 x 1,068,298 float32, 8.5 MB.
    with tmpfs(tmp_path / "disk", "20m") as disk:
        train_dir = disk / "train"
        with pytest.raises(Cifar10Error) as err:
            train.train(config(train_dir, checkpoint_steps=1), mirrored(), *learnable_files,
                        print_fn=lambda line: None)
        message = str(err.value)
        assert message.startswith(f"cannot write checkpoint model.ckpt-3 in {train_dir} (")
        assert "free some disk space and run the same command again" in message
        assert message.endswith(f"the last checkpoint is {train_dir}/model.ckpt-2")
        assert not [n for n in os.listdir(train_dir) if n.startswith("model.ckpt-3")]
        assert checkpoints.load_model(str(train_dir / "model.ckpt-2"))[1] == 2
        # The rerun on the still full disk: the same one line, the same checkpoint kept.
        with pytest.raises(Cifar10Error) as again:
            train.train(config(train_dir, checkpoint_steps=1), mirrored(), *learnable_files,
                        print_fn=lambda line: None)
        assert str(again.value) == message
        # With room again, it goes on from model.ckpt-2.
        os.remove(train_dir / "model.ckpt-1.index")
        os.remove(train_dir / "model.ckpt-1.data-00000-of-00001")
        result = train.train(config(train_dir, max_steps=3, checkpoint_steps=1),
                             mirrored(), *learnable_files, print_fn=lambda line: None)
        assert (result.start_step, result.step) == (2, 3)


def test_a_read_only_file_system_is_one_line_for_trainer_and_evaluator(tmp_path, learnable_files):
    with tmpfs(tmp_path / "disk", "40m") as disk:
        train_dir, eval_dir = disk / "train", disk / "eval"
        train.train(config(train_dir, max_steps=2, checkpoint_steps=2), mirrored(),
                    *learnable_files, print_fn=lambda line: None)
        eval_dir.mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        with pytest.raises(Cifar10Error) as err:
            train.train(config(train_dir, max_steps=4), mirrored(), *learnable_files,
                        print_fn=lambda line: None)
        assert str(err.value) == (f"cannot write in --train_dir {train_dir} (Read-only file "
                                  f"system); choose a directory on a writable file system")
        test_files = [f.replace("data_batch_1", "test_batch") for f in learnable_files[0][:1]]
        eval_config = evaluate.EvalConfig(checkpoint_dir=str(train_dir), eval_dir=str(eval_dir),
                                          eval_files=test_files, num_examples=10,
                                          run_once=True)
        with pytest.raises(Cifar10Error) as err:
            evaluate.evaluate(eval_config, print_fn=lambda line: None)
        assert str(err.value) == (f"cannot record the run's start in {eval_dir}/environment.jsonl"
                                  f" (Read-only file system); choose a directory on a "
                                  f"writable file system")
        with pytest.raises(Cifar10Error, match=f"cannot create --eval_dir {disk}/new "
                                               r"\(Read-only file system\); choose a "
                                               r"directory on a writable file system"):
            evaluate.evaluate(evaluate.EvalConfig(**{**eval_config.__dict__,
                                                     "eval_dir": str(disk / "new")}))


def test_the_evaluator_on_a_full_disk_stops_with_one_line(trained, tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=10)
    checkpoint_dir = tmp_path / "train"
    with tmpfs(tmp_path / "disk", "1m") as disk:
        eval_dir = disk / "eval"

        def disk_fills_while_the_trainer_saves(seconds):
            with open(disk / "filler", "wb", buffering=0) as f:
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * 4096)
            shutil.copytree(trained, checkpoint_dir)

        config_ = evaluate.EvalConfig(checkpoint_dir=str(checkpoint_dir), eval_dir=str(eval_dir),
                                      eval_files=data.split_files(batches_dir, "test"),
                                      num_examples=10)
        with pytest.raises(Cifar10Error) as err:
            evaluate.evaluate(config_, print_fn=lambda line: None,
                              sleep=disk_fills_while_the_trainer_saves)
        assert str(err.value) == (
            f"cannot record the result of {checkpoint_dir}/model.ckpt-30 in {eval_dir} (No "
            f"space left on device); free some disk space and run the same command again")


def test_a_train_dir_without_write_permission_is_one_line(tmp_path, learnable_files):
    if os.geteuid() == 0:
        pytest.skip("root may write anywhere; the read-only file system test covers root")
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    train_dir.chmod(0o500)
    with pytest.raises(Cifar10Error) as err:
        train.train(config(train_dir), mirrored(), *learnable_files, print_fn=lambda line: None)
    assert str(err.value) == (f"cannot write in --train_dir {train_dir} (Permission denied); "
                              f"choose a directory you can write, or change its permissions")


def test_the_run_records_its_class_names_and_refuses_data_of_other_classes(tmp_path):
    state = train.TrainState(seed=0, compute_dtype=tf.float32)
    assert checkpoints.class_names(str(tmp_path)) == ff.CLASS_NAMES  # a run that recorded none
    with checkpoints.RunDirectory(str(tmp_path), state.checkpoint(), keep=5) as directory:
        directory.record_class_names(("ant", "bee"))
        directory.record_class_names(("ant", "bee"))  # resumed on the same data
    assert (tmp_path / checkpoints.CLASSES_FILE).read_text() == "ant\nbee\n"
    assert checkpoints.class_names(str(tmp_path)) == ("ant", "bee")
    with checkpoints.RunDirectory(str(tmp_path), state.checkpoint(), keep=5) as directory:
        with pytest.raises(Cifar10Error) as info:
            directory.record_class_names(("ant", "bee", "cow"))
    assert str(info.value) == (
        f"the run in {tmp_path} was trained on the classes (ant, bee) and --data_dir holds "
        f"(ant, bee, cow): train it on the data it started with, or choose another --train_dir")
    assert (tmp_path / checkpoints.CLASSES_FILE).read_text() == "ant\nbee\n"
    # A worker that is not the chief writes nothing in train_dir.
    other = tmp_path / "worker"
    with checkpoints.RunDirectory(str(other), state.checkpoint(), keep=5,
                                  save_dir=str(tmp_path / "scratch")) as directory:
        directory.record_class_names(("cow",))
    assert not (other / checkpoints.CLASSES_FILE).exists()


def test_load_model_gives_the_averages_or_the_raw_weights_and_the_step(trained_run):
    train_dir, _ = trained_run
    ckpt6, ckpt3 = str(train_dir / "model.ckpt-6"), str(train_dir / "model.ckpt-3")
    reader = tf.train.load_checkpoint(ckpt6)
    averages, avg_step = checkpoints.load_model(ckpt6, "averages")
    raw, raw_step = checkpoints.load_model(ckpt6, "raw")
    assert avg_step == raw_step == 6
    for name in LAYERS:
        for kind in ("weights", "biases"):
            key = f"{name}/{kind}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(getattr(getattr(averages, name), kind).numpy(),
                                          reader.get_tensor("averages/" + key))
            np.testing.assert_array_equal(getattr(getattr(raw, name), kind).numpy(),
                                          reader.get_tensor("model/" + key))
    assert not np.allclose(averages.conv1.weights.numpy(), raw.conv1.weights.numpy())
    assert checkpoints.load_model(ckpt3)[1] == 3


def test_load_model_rejects_an_unknown_weights_name(trained_run):
    with pytest.raises(ValueError, match="weights must be one of"):
        checkpoints.load_model(str(trained_run[0] / "model.ckpt-6"), "ema")
