"""runs/rundir.py: the trainer's run directory keeps a user's work (fresh starts,
leftovers, retention), full and read-only disks are one line (a small tmpfs, root
only), the class names are recorded and checked."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest
import tensorflow as tf

from cifar10.core.config import EvalConfig
from cifar10.core.errors import Cifar10Error
from cifar10.data import synthetic
from cifar10.data.folder import split_files
from cifar10.evaluation import polling
from cifar10.runs import checkpoints, cleanup, layout, rundir
from cifar10.training import controller
from cifar10.training.controller import TrainData
from cifar10.training.step import TrainState
from conftest import mirrored
from rundirs import (USER_FILES, config, copy_run, leave_a_save_cut_in_place,
                     leave_an_interrupted_save)


@pytest.fixture
def run_dir(trained_run, tmp_path):
    """A copy of the trained run, with files of a user's beside it."""
    return copy_run(trained_run[0], tmp_path / "train")


def test_fresh_start_removes_exactly_the_trainers_files(run_dir, learnable_files):
    leave_an_interrupted_save(run_dir, step=9)
    lines = []
    result = controller.train(config(run_dir, max_steps=2, fresh_start=True), mirrored(),
                              TrainData(*learnable_files), print_fn=lines.append)
    assert result.start_step == 0 and result.step == 2
    # 2 checkpoints x 2 files, state file, event file, complete marker, class
    # names, environment record, metrics file, 2 leftovers.
    assert lines[0] == f"Fresh start: removed 12 files of the earlier run from {run_dir}."
    names = set(os.listdir(run_dir))
    assert set(USER_FILES) <= names  # (a user's folders: test_cleanup)
    assert all((run_dir / name).read_text() == "mine" for name in USER_FILES)
    assert [c.step for c in layout.find(str(run_dir))] == [2]
    assert not [n for n in names - set(USER_FILES) if "_temp" in n or ".tmp" in n]


def test_the_leftovers_of_saves_cut_short_are_removed_in_one_line_and_the_run_resumes(
        run_dir):
    leave_an_interrupted_save(run_dir, step=12)
    source = run_dir / "model.ckpt-6"
    leave_a_save_cut_in_place(run_dir, 9, source, os.path.getsize(f"{source}.index") // 2)
    lines = []
    state = TrainState(seed=0, compute_dtype=tf.float32)
    with rundir.RunDirectory(str(run_dir), state.checkpoint(), keep=5,
                             print_fn=lines.append) as directory:
        assert directory.restore().step == 6
    [line] = lines
    assert line.startswith(f"Removed what an interrupted save left in {run_dir}: checkpoint.tmp")
    assert line.endswith(", model.ckpt-12_temp, model.ckpt-9.data-00000-of-00001, "
                         "model.ckpt-9.index, model.ckpt-9_temp (the unfinished checkpoint "
                         "model.ckpt-9).")
    assert not [name for name in os.listdir(run_dir) if name.startswith(("model.ckpt-9",
                                                                         "model.ckpt-12"))]
    assert set(USER_FILES) <= set(os.listdir(run_dir))


def test_retention_keeps_the_newest_and_the_next_prune_finishes_one_cut_short(run_dir,
                                                                             monkeypatch):
    """Later (6) and a user's files are never touched.  A prune deletes each .data before
    its .index: what a kill leaves is an incomplete checkpoint the next prune removes."""
    state = TrainState(seed=0, compute_dtype=tf.float32)
    deleted, real_delete = [], cleanup.delete

    def killed_after_one(directory, name):
        if deleted:
            raise KeyboardInterrupt
        deleted.append(name)
        real_delete(directory, name)

    with rundir.RunDirectory(str(run_dir), state.checkpoint(), keep=2,
                             print_fn=lambda line: None) as directory:
        directory.save(4)  # as a run resumed at 3 would; 6 is later
        assert [c.step for c in layout.find(str(run_dir))] == [3, 4, 6]
        directory.save(5)
        assert [c.step for c in layout.find(str(run_dir))] == [4, 5, 6]
        assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "model.ckpt-5")
        monkeypatch.setattr(cleanup, "delete", killed_after_one)
        with pytest.raises(KeyboardInterrupt):
            directory.save(7)  # drops model.ckpt-4 and -5
        assert deleted == ["model.ckpt-4.data-00000-of-00001"]
        assert layout.scan(str(run_dir))[1] == {4: "no .data file"}
        monkeypatch.setattr(cleanup, "delete", real_delete)
        directory.save(8)
    assert layout.scan(str(run_dir)) == ([7, 8], {})
    assert cleanup.remove_leftovers(str(run_dir)) == []
    assert set(USER_FILES) <= set(os.listdir(run_dir))


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
            controller.train(config(train_dir, checkpoint_steps=1), mirrored(),
                             TrainData(*learnable_files), print_fn=lambda line: None)
        message = str(err.value)
        assert message.startswith(f"cannot write checkpoint model.ckpt-3 in {train_dir} (")
        assert "free some disk space and run the same command again" in message
        assert message.endswith(f"the last checkpoint is {train_dir}/model.ckpt-2")
        assert not [n for n in os.listdir(train_dir) if n.startswith("model.ckpt-3")]
        assert checkpoints.load_model(str(train_dir / "model.ckpt-2"))[1] == 2
        # The rerun on the still full disk: the same one line, the same checkpoint kept.
        with pytest.raises(Cifar10Error) as again:
            controller.train(config(train_dir, checkpoint_steps=1), mirrored(),
                             TrainData(*learnable_files), print_fn=lambda line: None)
        assert str(again.value) == message
        # With room again, it goes on from model.ckpt-2.
        os.remove(train_dir / "model.ckpt-1.index")
        os.remove(train_dir / "model.ckpt-1.data-00000-of-00001")
        result = controller.train(config(train_dir, max_steps=3, checkpoint_steps=1), mirrored(),
                                  TrainData(*learnable_files), print_fn=lambda line: None)
        assert (result.start_step, result.step) == (2, 3)


def test_a_read_only_file_system_is_one_line_for_trainer_and_evaluator(tmp_path, learnable_files):
    with tmpfs(tmp_path / "disk", "40m") as disk:
        train_dir, eval_dir = disk / "train", disk / "eval"
        controller.train(config(train_dir, max_steps=2, checkpoint_steps=2), mirrored(),
                         TrainData(*learnable_files), print_fn=lambda line: None)
        eval_dir.mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        with pytest.raises(Cifar10Error) as err:
            controller.train(config(train_dir, max_steps=4), mirrored(),
                             TrainData(*learnable_files), print_fn=lambda line: None)
        assert str(err.value) == (f"cannot write in --train_dir {train_dir} (Read-only file "
                                  f"system); choose a directory on a writable file system")
        test_files = [f.replace("data_batch_1", "test_batch") for f in learnable_files[0][:1]]
        eval_config = EvalConfig(checkpoint_dir=str(train_dir), eval_dir=str(eval_dir),
                                 eval_files=test_files, num_examples=10, run_once=True)
        with pytest.raises(Cifar10Error) as err:
            polling.evaluate(eval_config, print_fn=lambda line: None)
        assert str(err.value) == (f"cannot record the run's start in {eval_dir}/environment.jsonl"
                                  f" (Read-only file system); choose a directory on a "
                                  f"writable file system")
        with pytest.raises(Cifar10Error, match=f"cannot create --eval_dir {disk}/new "
                                               r"\(Read-only file system\); choose a "
                                               r"directory on a writable file system"):
            polling.evaluate(EvalConfig(**{**eval_config.__dict__,
                                           "eval_dir": str(disk / "new")}))


def test_the_evaluator_on_a_full_disk_stops_with_one_line(trained_run, tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=10)
    checkpoint_dir = tmp_path / "train"
    with tmpfs(tmp_path / "disk", "1m") as disk:
        eval_dir = disk / "eval"

        def disk_fills_while_the_trainer_saves(seconds):
            with open(disk / "filler", "wb", buffering=0) as f:
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * 4096)
            shutil.copytree(trained_run[0], checkpoint_dir)

        config_ = EvalConfig(checkpoint_dir=str(checkpoint_dir), eval_dir=str(eval_dir),
                             eval_files=split_files(batches_dir, "test"), num_examples=10)
        with pytest.raises(Cifar10Error) as err:
            polling.evaluate(config_, print_fn=lambda line: None,
                             sleep=disk_fills_while_the_trainer_saves)
        assert str(err.value) == (
            f"cannot record the result of {checkpoint_dir}/model.ckpt-6 in {eval_dir} (No "
            f"space left on device); free some disk space and run the same command again")


def test_the_run_records_its_class_names_and_refuses_data_of_other_classes(tmp_path):
    state = TrainState(seed=0, compute_dtype=tf.float32)
    with rundir.RunDirectory(str(tmp_path), state.checkpoint(), keep=5) as directory:
        directory.record_class_names(("ant", "bee"))
        directory.record_class_names(("ant", "bee"))  # resumed on the same data
    assert (tmp_path / layout.CLASSES_FILE).read_text() == "ant\nbee\n"
    assert checkpoints.trained_class_names(str(tmp_path)) == ("ant", "bee")
    with rundir.RunDirectory(str(tmp_path), state.checkpoint(), keep=5) as directory:
        with pytest.raises(Cifar10Error) as info:
            directory.record_class_names(("ant", "bee", "cow"))
    assert str(info.value) == (
        f"the run in {tmp_path} was trained on the classes (ant, bee) and --data_dir holds "
        f"(ant, bee, cow): train it on the data it started with, or choose another --train_dir")
    assert (tmp_path / layout.CLASSES_FILE).read_text() == "ant\nbee\n"
    # A worker that is not the chief writes nothing in train_dir.
    other = tmp_path / "worker"
    with rundir.RunDirectory(str(other), state.checkpoint(), keep=5,
                             save_dir=str(tmp_path / "scratch")) as directory:
        directory.record_class_names(("cow",))
    assert not (other / layout.CLASSES_FILE).exists()
