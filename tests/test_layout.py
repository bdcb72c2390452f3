"""runs/layout.py: a run's checkpoints found by their files, the --checkpoint a user
names, TensorFlow's state file, and one trainer per run directory."""

from __future__ import annotations

import fcntl
import os
import re
import socket
import threading

import pytest
import tensorflow as tf

import cli
from cifar10.core.errors import Cifar10Error
from cifar10.runs import layout
from cifar10.runs.layout import LOCK_FILE, Checkpoint, TrainerLock
from cifar10.training import controller
from cifar10.training.controller import TrainData
from conftest import mirrored
from rundirs import config, copy_run, leave_an_interrupted_save, snapshot


def test_find_lists_the_complete_checkpoints_and_nothing_that_only_looks_like_one(trained_run,
                                                                                   tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")  # with a user's look-alikes
    assert layout.find(str(run_dir)) == [Checkpoint(3, str(run_dir / "model.ckpt-3")),
                                         Checkpoint(6, str(run_dir / "model.ckpt-6"))]
    (run_dir / "model.ckpt-3.index").unlink()  # data without index
    (run_dir / "model.ckpt-9.index").write_bytes(b"x")  # index without data
    (run_dir / "model.ckpt-12.index").write_bytes(b"x")  # a shard missing
    (run_dir / "model.ckpt-12.data-00000-of-00002").write_bytes(b"x")
    assert layout.scan(str(run_dir)) == ([6], {3: "no .index file", 9: "no .data file",
                                               12: "some .data files are missing"})
    assert layout.latest(str(run_dir)).path == str(run_dir / "model.ckpt-6")
    assert layout.latest(str(run_dir / "no_such_dir")) is None


def test_a_checkpoint_flag_names_a_checkpoint_or_says_what_it_names_instead(trained_run,
                                                                           tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    prefix = str(run_dir / "model.ckpt-6")
    for value in (prefix, prefix + ".index", prefix + ".data-00000-of-00001"):
        assert layout.given(value) == prefix
    (run_dir / "model.ckpt-3.data-00000-of-00001").unlink()
    (tmp_path / "empty").mkdir()
    (tmp_path / "red.png").write_bytes(b"\x89PNG not a checkpoint")
    holds = f"{run_dir} holds model.ckpt-6"
    not_one = ("is not a TensorFlow checkpoint (a checkpoint is named by the prefix of its "
               ".index and .data files, such as runs/a/train/model.ckpt-1000)")
    cases = {
        f"{run_dir}/model.ckpt-5": f"does not exist; {holds}",
        f"{tmp_path}/gone/model.ckpt-6": f"does not exist: there is no folder {tmp_path}/gone",
        str(run_dir): f"is a folder: pass --checkpoint_dir={run_dir} for its newest "
                      f"checkpoint, or --checkpoint={prefix}",
        str(tmp_path / "empty"): "is a folder and holds no checkpoints: pass a checkpoint, "
                                 "such as runs/a/train/model.ckpt-1000, or "
                                 "--checkpoint_dir=<a training run> for its newest",
        str(tmp_path / "red.png"): f"{not_one}; {tmp_path} holds no checkpoints",
        f"{run_dir}/notes.txt": f"{not_one}; {holds}",
        f"{run_dir}/model.ckpt-3.index": f"is incomplete (no .data file): pass another "
                                         f"checkpoint; {holds}",
    }
    for value, message in cases.items():
        with pytest.raises(Cifar10Error) as err:
            layout.given(value)
        assert str(err.value) == f"--checkpoint {value} {message}"


def test_the_state_file_the_trainer_writes_is_the_one_tensorflow_reads(trained_run, tmp_path):
    run_dir = trained_run[0]
    assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "model.ckpt-6")
    assert (run_dir / layout.STATE_FILE).read_text() == (  # relative: a run can be moved
        'model_checkpoint_path: "model.ckpt-6"\n'
        'all_model_checkpoint_paths: "model.ckpt-3"\n'
        'all_model_checkpoint_paths: "model.ckpt-6"\n')
    assert layout.named_step(str(run_dir), {3, 6}) == (6, "")
    layout.write_state(str(tmp_path), [Checkpoint(10, "model.ckpt-10")])
    assert os.listdir(tmp_path) == [layout.STATE_FILE]  # no temporary file left


@pytest.mark.parametrize("text, steps, expected", [
    (None, {6}, (None, "the state file {path} is missing")),
    (" \n", {6}, (None, "the state file {path} is empty")),
    ("\x00\xffnot a state file{", {6}, (None, "the state file {path} cannot be parsed")),
    ('model_checkpoint_path: "model.ckpt-best"\n', {6},
     (None, "the state file {path} cannot be parsed")),
    ('model_checkpoint_path: "model.ckpt-9"\n', {3, 6},
     (9, "the state file names model.ckpt-9, which is gone")),
    ('model_checkpoint_path: "/elsewhere/train/model.ckpt-3"\n', {3, 6}, (3, "")),
])
def test_named_step_says_what_is_wrong_with_the_state_file(tmp_path, text, steps, expected):
    path = tmp_path / layout.STATE_FILE
    if text is not None:
        path.write_text(text, encoding="latin-1")
    assert layout.named_step(str(tmp_path), steps) == (expected[0],
                                                       expected[1].format(path=path))


IN_USE = ("--train_dir {d} is in use by another trainer ({holder}); wait for it to finish or "
          "stop it, or choose another --train_dir")


def held_by_this_process(directory):
    """The refusal's line when this process holds the lock of ``directory``, as a pattern."""
    line = re.escape(IN_USE.format(d=directory, holder="HOLDER"))
    return line.replace("HOLDER", f"PID {os.getpid()} on host {re.escape(socket.gethostname())}, "
                                  r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def test_a_second_lock_is_refused_naming_the_holder_until_the_first_is_released(tmp_path):
    layout.refuse_if_held(str(tmp_path / "no_run"))  # no lock file: nothing to say
    first = TrainerLock(str(tmp_path))
    first.acquire()
    for refused in (TrainerLock(str(tmp_path)).acquire,
                    lambda: layout.refuse_if_held(str(tmp_path))):
        with pytest.raises(Cifar10Error) as err:
            refused()
        assert re.fullmatch(held_by_this_process(tmp_path), str(err.value))
    (tmp_path / LOCK_FILE).write_text("garbled")
    with pytest.raises(Cifar10Error) as err:
        TrainerLock(str(tmp_path)).acquire()
    assert str(err.value) == IN_USE.format(d=tmp_path, holder="it did not say which")
    first.release()
    layout.refuse_if_held(str(tmp_path))
    # Another start's check holds a shared lock for an instant: waited out, not refused.
    checking = os.open(tmp_path / LOCK_FILE, os.O_RDONLY)
    fcntl.flock(checking, fcntl.LOCK_SH)
    threading.Timer(0.2, os.close, [checking]).start()
    second = TrainerLock(str(tmp_path))
    second.acquire()
    second.release()
    assert os.listdir(tmp_path) == [LOCK_FILE]  # the file stays: it is what is locked


def test_the_trainer_refuses_a_lock_folder_before_it_fetches_data(tmp_path):
    (tmp_path / "t3" / LOCK_FILE).mkdir(parents=True)
    result = cli.call("cifar10-train", f"--train_dir={tmp_path / 't3'}", "--synthetic_data",
                      f"--data_dir={tmp_path / 'data'}", "--max_steps=1")
    cli.assert_refused(result, f"cifar10-train: error: {tmp_path / 't3' / LOCK_FILE} is a "
                               f"folder, not cifar10-train's lock file: move that folder away "
                               f"(the trainer keeps its lock in a file of that name in "
                               f"--train_dir)")
    assert not (tmp_path / "data").exists()


def test_a_trainer_on_a_directory_in_use_changes_nothing_even_with_fresh_start(
        trained_run, tmp_path, learnable_files):
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    leave_an_interrupted_save(run_dir, step=40)  # perhaps the first trainer's save
    first = TrainerLock(str(run_dir))
    first.acquire()
    try:
        before = snapshot(run_dir)
        for fresh_start in (False, True):
            with pytest.raises(Cifar10Error) as err:
                controller.train(config(run_dir, max_steps=40, fresh_start=fresh_start),
                                 mirrored(), TrainData(*learnable_files),
                                 print_fn=lambda line: None)
            assert re.fullmatch(held_by_this_process(run_dir), str(err.value))
            assert snapshot(run_dir) == before
    finally:
        first.release()
