"""Tests of cifar10.runs.lock: one trainer per run directory, and the one refused
is told which trainer holds it, before anything in the directory changes."""

from __future__ import annotations

import fcntl
import os
import re
import socket
import threading

import pytest
import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.runs import lock
from cifar10.runs.lock import LOCK_FILE, TrainerLock
from cifar10.training import controller
from cifar10.training.run import TrainData
from cifar10.training.state import TrainState
from conftest import mirrored
from rundirs import USER_FILES, config, leave_an_interrupted_save, snapshot

IN_USE = ("--train_dir {d} is in use by another trainer ({holder}); wait for it to finish or "
          "stop it, or choose another --train_dir")


def held_by_this_process(directory):
    """The refusal's line when this process holds the lock of ``directory``, as a pattern."""
    line = re.escape(IN_USE.format(d=directory, holder="HOLDER"))
    return line.replace("HOLDER", f"PID {os.getpid()} on host {re.escape(socket.gethostname())}, "
                                  r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def test_a_second_lock_is_refused_naming_the_holder_until_the_first_is_released(tmp_path):
    first, second = TrainerLock(str(tmp_path)), TrainerLock(str(tmp_path))
    first.acquire()
    with pytest.raises(Cifar10Error) as err:
        second.acquire()
    assert re.fullmatch(held_by_this_process(tmp_path), str(err.value))
    first.release()
    second.acquire()
    second.release()
    assert os.listdir(tmp_path) == [LOCK_FILE]  # the file stays: it is what is locked


def test_a_held_lock_is_refused_before_anything_and_a_free_one_is_left_free(tmp_path):
    lock.refuse_if_held(str(tmp_path / "no_run"))  # no directory, no lock file: nothing to say
    first = TrainerLock(str(tmp_path))
    first.acquire()
    with pytest.raises(Cifar10Error) as err:
        lock.refuse_if_held(str(tmp_path))
    assert re.fullmatch(held_by_this_process(tmp_path), str(err.value))
    first.release()
    lock.refuse_if_held(str(tmp_path))
    second = TrainerLock(str(tmp_path))
    second.acquire()  # the check took no lock
    second.release()


def test_a_check_of_another_start_at_that_instant_does_not_refuse_the_lock(tmp_path):
    (tmp_path / LOCK_FILE).write_text("")
    checking = os.open(tmp_path / LOCK_FILE, os.O_RDONLY)
    fcntl.flock(checking, fcntl.LOCK_SH)  # as refuse_if_held holds it, for an instant
    threading.Timer(0.2, os.close, [checking]).start()
    first = TrainerLock(str(tmp_path))
    first.acquire()  # waits out the check instead of being refused
    first.release()


def test_a_folder_where_the_lock_file_goes_is_refused_naming_it(tmp_path):
    (tmp_path / LOCK_FILE).mkdir()
    line = (f"{tmp_path / LOCK_FILE} is a folder, not cifar10-train's lock file: move that "
            f"folder away (the trainer keeps its lock in a file of that name in --train_dir)")
    for check in (lock.refuse_if_held, lambda d: TrainerLock(d).acquire()):
        with pytest.raises(Cifar10Error) as err:
            check(str(tmp_path))
        assert str(err.value) == line
    assert os.listdir(tmp_path) == [LOCK_FILE] and not os.listdir(tmp_path / LOCK_FILE)


def test_the_trainer_refuses_a_lock_folder_before_it_fetches_data(tmp_path):
    import cli

    (tmp_path / "t3" / LOCK_FILE).mkdir(parents=True)
    result = cli.call("cifar10-train", f"--train_dir={tmp_path / 't3'}", "--synthetic_data",
                      f"--data_dir={tmp_path / 'data'}", "--max_steps=1")
    cli.assert_refused(result, f"cifar10-train: error: {tmp_path / 't3' / LOCK_FILE} is a "
                               f"folder, not cifar10-train's lock file: move that folder away "
                               f"(the trainer keeps its lock in a file of that name in "
                               f"--train_dir)")
    assert not (tmp_path / "data").exists()


def test_a_lock_file_that_does_not_say_who_holds_it_still_refuses(tmp_path):
    first = TrainerLock(str(tmp_path))
    first.acquire()
    (tmp_path / LOCK_FILE).write_text("garbled")
    with pytest.raises(Cifar10Error) as err:
        TrainerLock(str(tmp_path)).acquire()
    assert str(err.value) == IN_USE.format(d=tmp_path, holder="it did not say which")
    first.release()


@pytest.fixture
def old_run(tmp_path):
    """A run directory at step 30 (a checkpoint, the state file), with what an
    interrupted save left and files of a user's beside it."""
    train_dir = tmp_path / "train"
    state = TrainState(seed=0, compute_dtype=tf.float32)
    state.step.assign(30)
    state.checkpoint().write(str(train_dir / "model.ckpt-30"))
    (train_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-30"\n')
    leave_an_interrupted_save(train_dir, step=40)
    for name in USER_FILES:
        (train_dir / name).write_text("mine")
    return train_dir


def test_a_second_trainer_on_a_directory_in_use_stops_before_writing(old_run, learnable_files):
    first = TrainerLock(str(old_run))  # the first trainer's
    first.acquire()
    try:
        before = snapshot(old_run)  # the leftovers too: they may be the first trainer's save
        for fresh_start in (False, True):
            with pytest.raises(Cifar10Error) as err:
                controller.train(config(old_run, max_steps=40, fresh_start=fresh_start),
                                 mirrored(), TrainData(*learnable_files),
                                 print_fn=lambda line: None)
            assert re.fullmatch(held_by_this_process(old_run), str(err.value))
            assert snapshot(old_run) == before
    finally:
        first.release()
    # Released: the next trainer goes on, and removes the leftovers.
    lines = []
    result = controller.train(config(old_run, max_steps=31), mirrored(),
                              TrainData(*learnable_files), print_fn=lines.append)
    assert (result.start_step, result.step) == (30, 31)
    assert lines[0].startswith(f"Removed what an interrupted save left in {old_run}: ")
