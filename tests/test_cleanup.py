"""runs/cleanup.py: only the files the trainer writes are removed, matched by their
exact names; a user's look-alikes and folders stay."""

from __future__ import annotations

import os
import shutil

import pytest
import tensorflow as tf

import cli
from cifar10.core.errors import Cifar10Error
from cifar10.runs import cleanup, layout, metrics, rundir
from cifar10.runs.layout import TrainerLock
from rundirs import USER_FILES, copy_run, leave_a_save_cut_in_place

# What a run directory of the trainer's holds, by kind (a leftover of each kind of
# interrupted write among them).
CHECKPOINT_FILES = ("model.ckpt-3.index", "model.ckpt-3.data-00000-of-00001",
                    "model.ckpt-6.index", "model.ckpt-6.data-00000-of-00002",
                    "model.ckpt-6.data-00001-of-00002")
RECORDS = ("checkpoint", "training_complete.json", "class_names.txt", "flags.txt",
           "environment.jsonl", "events.out.tfevents.1700000000.host.example.123.0.v2",
           "metrics.csv")
BEST_FILES = ("best.json", "checkpoint", "model.ckpt-6.index", "model.ckpt-6.data-00000-of-00001")
HEX = "0123456789abcdef" * 2  # a temporary name's 32 hex digits
LEFTOVERS = ("model.ckpt-9_temp", "checkpoint.tmp" + "0" * 32, "class_names.txt.tmp" + HEX,
             "environment.jsonl.tmp" + HEX, "flags.txt.tmp" + HEX,
             "training_complete.json.tmp" + HEX)
# (USER_FILES holds a user's flags.txt.tmp and class_names.txt.tmp: no temporary names.)
MORE_USER_FILES = ("cifar10-train.lock", "checkpoint.tmp", "model.ckpt-9_temp.zip",
                   "model.ckpt-3.data-0-of-1", "events.out.tfevents.1.v2", "flags.txt.tmp.bak",
                   "environment.jsonl.tmp", "training_complete.json.tmp",
                   "flags.txt.tmp" + HEX[:31], "flags.txt.tmp" + HEX.upper())


def make_run(directory):
    for name in CHECKPOINT_FILES + RECORDS + LEFTOVERS[1:] + USER_FILES + MORE_USER_FILES:
        (directory / name).write_text("x")
    for name in CHECKPOINT_FILES:
        if name.endswith(".index"):  # as a whole one ends: the table's magic number
            (directory / name).write_bytes(b"x" + cleanup._TABLE_MAGIC)
    (directory / LEFTOVERS[0]).mkdir()
    (directory / LEFTOVERS[0] / "part-00000-of-00001.index").write_text("x")
    (directory / "my_folder").mkdir()
    (directory / "my_folder" / "model.ckpt-3.index").write_text("mine")
    (directory / "metrics.csv").write_text(metrics.HEADER + "\n")
    (directory / "best").mkdir()
    for name in BEST_FILES + ("flags.txt", "notes.txt"):  # (a user's records there)
        (directory / "best" / name).write_text("x")
    (directory / "best" / "model.ckpt-6.index").write_bytes(b"x" + cleanup._TABLE_MAGIC)
    return directory


def test_only_the_trainers_files_are_its_own_and_removed(tmp_path):
    assert cleanup.own_files(str(make_run(tmp_path))) == sorted(
        CHECKPOINT_FILES + RECORDS + LEFTOVERS)
    assert cleanup.own_files(str(tmp_path / "missing")) == []
    assert cleanup.remove_leftovers(str(tmp_path)) == sorted(LEFTOVERS)
    users = sorted(USER_FILES + MORE_USER_FILES + ("my_folder", "best"))
    assert sorted(os.listdir(tmp_path)) == sorted(CHECKPOINT_FILES + RECORDS + tuple(users))
    assert cleanup.remove_run(str(tmp_path)) == len(CHECKPOINT_FILES + RECORDS + BEST_FILES)
    assert sorted(os.listdir(tmp_path)) == users  # the lock file among them
    assert sorted(os.listdir(tmp_path / "best")) == ["flags.txt", "notes.txt"]
    assert (tmp_path / "my_folder" / "model.ckpt-3.index").read_text() == "mine"


@pytest.mark.parametrize("foreign", [
    ["model.ckpt-99.index"],  # `echo hi > model.ckpt-99.index`: --fresh_start removed it
    ["model.ckpt-99.index", "model.ckpt-99.data-00000-of-00001"],
    ["model.ckpt-6.index"],  # a file of the user's in place of a checkpoint's .index
])
def test_fresh_start_removes_nothing_where_a_file_named_as_a_checkpoint_is_not_one(
        tmp_path, foreign):
    """Nothing is removed, and the lock is let go."""
    make_run(tmp_path)
    for name in foreign:
        (tmp_path / name).write_text("hi\n")
    # The .data files of a checkpoint whose .index is not whole are not told apart.
    shards = [n for n in CHECKPOINT_FILES if n.startswith("model.ckpt-6.data")]
    expected = sorted(foreign + (shards if "model.ckpt-6.index" in foreign else []))
    assert cleanup.foreign_checkpoint_files(str(tmp_path)) == expected
    assert not set(expected) & set(cleanup.own_files(str(tmp_path)))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(Cifar10Error) as err, rundir.RunDirectory(
            str(tmp_path), tf.train.Checkpoint(), keep=1, fresh_start=True, print_fn=pytest.fail):
        pytest.fail("opened")
    said, it = (("has a checkpoint's name but is not a checkpoint", "it") if len(expected) == 1
                else ("have checkpoints' names but are not checkpoints", "them"))
    assert str(err.value) == (
        f"{', '.join(expected)} in {tmp_path} {said} the trainer wrote (no whole TensorFlow "
        f".index), and --fresh_start removes only the trainer's files; the new run would "
        f"take {it} for a checkpoint: move {it} out of {tmp_path} and start again (nothing "
        f"was removed), or choose another --train_dir")
    assert sorted(os.listdir(tmp_path)) == before
    assert (tmp_path / foreign[0]).read_text() == "hi\n"
    lock = TrainerLock(str(tmp_path))
    lock.acquire()  # free: not "in use by another trainer"
    lock.release()


def test_an_orphan_shard_of_a_prune_cut_short_is_the_trainers(trained_run, tmp_path):
    """A kill while old checkpoints were deleted left a .data shard without its .index:
    --fresh_start refused it as not the trainer's, and nothing removed it."""
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    (run_dir / "model.ckpt-3.index").unlink()
    assert cleanup.foreign_checkpoint_files(str(run_dir)) == []
    assert "model.ckpt-3.data-00000-of-00001" in cleanup.own_files(str(run_dir))
    cleanup.remove_run(str(run_dir))
    assert not [n for n in os.listdir(run_dir) if n.startswith("model.ckpt-3.")]


@pytest.mark.parametrize("index_written", [None, 0, "half", "whole"])
def test_a_checkpoint_cut_short_as_it_was_put_in_place_is_removed(trained_run, tmp_path,
                                                                   index_written):
    """A kill after the .index was written whole leaves a checkpoint that reads."""
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    before = sorted(os.listdir(run_dir))
    source = run_dir / "model.ckpt-6"
    size = os.path.getsize(f"{source}.index")
    written = {None: None, 0: 0, "half": size // 2, "whole": size}[index_written]
    leave_a_save_cut_in_place(run_dir, 9, source, written)
    assert cleanup.foreign_checkpoint_files(str(run_dir)) == []
    if index_written == "whole":
        assert cleanup.remove_leftovers(str(run_dir)) == ["model.ckpt-9_temp"]
        tf.train.load_checkpoint(str(run_dir / "model.ckpt-9"))  # reads
        return
    if written is not None:  # it looks complete, and does not read
        assert [c.step for c in layout.find(str(run_dir))] == [3, 6, 9]
        with pytest.raises(tf.errors.OpError):
            tf.train.load_checkpoint(str(run_dir / "model.ckpt-9"))
    assert cleanup.cut_short_steps(str(run_dir)) == [9]
    assert cleanup.remove_leftovers(str(run_dir)) == sorted(
        ["model.ckpt-9.data-00000-of-00001", "model.ckpt-9_temp"]
        + (["model.ckpt-9.index"] if written is not None else []))
    assert sorted(os.listdir(run_dir)) == before


def test_fresh_start_keeps_an_evaluators_files_and_a_users_folders(trained_run, tmp_path):
    """An evaluator an older version let write into the run directory left an event file
    of the trainer's name pattern there; a user's folder has the state file's name.
    --fresh_start removes the trainer's files alone, and the run goes on without a state
    file, saying so once."""
    train_dir = copy_run(trained_run[0], tmp_path / "train")
    evaluators = _event_file(tmp_path / "eval", "Precision @ 1")
    shutil.copy(evaluators, train_dir / evaluators.name)
    trainers = [n for n in os.listdir(trained_run[0]) if n.startswith("events.")]
    (train_dir / "checkpoint").unlink()
    (train_dir / "checkpoint").mkdir()
    (train_dir / "checkpoint" / "notes.txt").write_text("mine")
    result = cli.call("cifar10-train", "--fresh_start", f"--train_dir={train_dir}",
                      "--synthetic_data", f"--data_dir={tmp_path / 'data'}", "--max_steps=2",
                      "--batch_size=8", "--checkpoint_steps=1")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if ": warning: " in line] == [
        f"cifar10-train: warning: {train_dir / 'checkpoint'} is a folder, not TensorFlow's "
        f"state file: it is left alone and the run goes on without a state file "
        f"(tf.train.latest_checkpoint will not find its checkpoints); move the folder away "
        f"to have the state file written again."]
    names = set(os.listdir(train_dir))
    assert (train_dir / evaluators.name).read_bytes() == evaluators.read_bytes()
    assert set(USER_FILES) <= names and not set(trainers) & names
    assert (train_dir / "checkpoint" / "notes.txt").read_text() == "mine"
    assert [c.step for c in layout.find(str(train_dir))] == [1, 2]
    assert len([n for n in cleanup.own_files(str(train_dir))
                if n.startswith("events.")]) == 1  # the new start's


def test_a_folder_with_the_name_of_a_trainers_file_is_never_removed(tmp_path):
    for name in ("training_complete.json", "class_names.txt", "model.ckpt-3.index"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text("mine")
    assert cleanup.own_files(str(tmp_path)) == []
    with pytest.raises(Cifar10Error) as err:
        cleanup.delete(str(tmp_path), "training_complete.json")
    assert str(err.value) == (
        f"cannot remove {tmp_path / 'training_complete.json'} (Is a directory); a folder of "
        f"that name is not the trainer's file: move it away")
    assert cleanup.remove_run(str(tmp_path)) == 0
    assert all((tmp_path / name / "notes.txt").read_text() == "mine"
               for name in os.listdir(tmp_path))


def _event_file(directory, tag=None):
    """An event file TensorFlow writes in ``directory``: three scalars of ``tag``, or
    nothing but the file's version record (a start cut short)."""
    writer = tf.summary.create_file_writer(str(directory))
    with writer.as_default():
        for step in range(3) if tag else ():
            tf.summary.scalar(tag, 0.5, step=step)
    writer.close()
    [name] = [n for n in os.listdir(directory) if n.startswith("events.")]
    return directory / name


def test_another_programs_small_event_file_is_not_the_trainers(tmp_path):
    foreign = _event_file(tmp_path / "foreign", "accuracy")
    assert os.path.getsize(foreign) < 1024
    assert not cleanup.trainers_events(str(foreign))
    assert cleanup.own_files(str(foreign.parent)) == []
    empty = _event_file(tmp_path / "cut_short")
    assert cleanup.trainers_events(str(empty))  # no summary: nothing is lost with it
    assert cleanup.remove_run(str(empty.parent)) == 1
