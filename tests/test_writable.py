"""The output folder checked before anything is fetched (cifar10.cli.writable): one
line naming the folder, the reason and the fix, and nothing left behind."""

from __future__ import annotations

import errno
import os

import pytest
from cli import assert_refused, call

from cifar10.cli import writable
from cifar10.core.errors import Cifar10Error

PROC = os.path.isdir("/proc/self")


def listing(root):
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def refused(folder) -> str:
    with pytest.raises(Cifar10Error) as error:
        writable.refuse_unwritable("train_dir", str(folder))
    return str(error.value)


def test_a_new_folder_and_a_folder_there_pass_and_nothing_is_left(tmp_path):
    writable.refuse_unwritable("train_dir", str(tmp_path / "runs" / "a" / "train"))
    writable.refuse_unwritable("train_dir", str(tmp_path))
    assert listing(tmp_path) == []


@pytest.mark.skipif(not PROC, reason="no /proc")
def test_a_folder_the_file_system_takes_none_of_is_named(tmp_path):
    assert refused("/proc/foo/bar") == (
        "cannot create --train_dir /proc/foo/bar (/proc takes no new folders); choose a "
        "directory you can write")


def test_a_folder_under_a_file_or_a_broken_link_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    assert refused(tmp_path / "notes.txt" / "run") == (
        f"cannot create --train_dir {tmp_path / 'notes.txt' / 'run'} ({tmp_path / 'notes.txt'} "
        f"is a file, not a folder); choose a folder whose parents are folders")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    assert refused(tmp_path / "link") == (
        f"cannot create --train_dir {tmp_path / 'link'} ({tmp_path / 'link'} is a link to "
        f"{tmp_path / 'gone'}, which is not there); make that folder, or choose another")
    assert listing(tmp_path) == ["link", "notes.txt"]


def test_a_denied_permission_is_named_and_no_folder_is_left(tmp_path, monkeypatch):
    # (As root, permissions deny nothing: the denial is the system's answer, stood in for.)
    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(os, "mkdir", denied)
    assert refused(tmp_path / "runs" / "train") == (
        f"cannot create --train_dir {tmp_path / 'runs' / 'train'} (Permission denied); choose "
        f"a directory you can write, or change its permissions")
    assert listing(tmp_path) == []


def test_a_folder_on_a_read_only_file_system_is_named(tmp_path, monkeypatch):
    def read_only(path, flags, *args):
        raise OSError(errno.EROFS, "Read-only file system", path)

    monkeypatch.setattr(os, "open", read_only)
    assert refused(tmp_path) == (
        f"cannot write in --train_dir {tmp_path} (Read-only file system); choose a directory "
        f"on a writable file system")


def test_the_folder_asked_for_is_never_made_by_the_check(tmp_path, monkeypatch):
    # cifar10-launch's workers, or a chief started beside them, may be making and
    # writing in that folder at the same moment: the check makes a folder of a name of
    # its own in the nearest folder there, and removes it.
    mkdir, made = os.mkdir, []

    def recorded(path, *args, **kwargs):
        made.append(str(path))
        mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", recorded)
    writable.refuse_unwritable("train_dir", str(tmp_path / "runs" / "train"))
    [probe] = made
    assert os.path.dirname(probe) == str(tmp_path)
    assert os.path.basename(probe).startswith(".cifar10-check-")
    assert listing(tmp_path) == []


@pytest.mark.skipif(not PROC, reason="no /proc")
def test_the_trainer_refuses_it_before_the_data_is_fetched(tmp_path):
    result = call("cifar10-train", "--train_dir=/proc/foo", "--synthetic_data",
                  f"--data_dir={tmp_path / 'data'}")
    assert_refused(result, "cifar10-train: error: cannot create --train_dir /proc/foo (/proc "
                           "takes no new folders); choose a directory you can write")
    assert listing(tmp_path) == []  # no data generated


def test_the_evaluator_refuses_it_before_the_data_is_fetched(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    eval_dir = tmp_path / "notes.txt" / "eval"
    result = call("cifar10-eval", f"--eval_dir={eval_dir}", "--synthetic_data",
                  f"--data_dir={tmp_path / 'data'}", f"--checkpoint_dir={tmp_path / 'train'}",
                  "--run_once")
    assert_refused(result, f"cifar10-eval: error: cannot create --eval_dir {eval_dir} "
                           f"({tmp_path / 'notes.txt'} is a file, not a folder); choose a "
                           f"folder whose parents are folders")
    assert listing(tmp_path) == ["notes.txt"]


def test_the_exporter_refuses_it_before_tensorflow_loads(trained_run, tmp_path):
    train_dir, _ = trained_run
    (tmp_path / "notes.txt").write_text("mine")
    export_dir = tmp_path / "notes.txt" / "export"
    result = call("cifar10-export", f"--checkpoint_dir={train_dir}", f"--export_dir={export_dir}")
    assert_refused(result, f"cifar10-export: error: cannot create --export_dir {export_dir} "
                           f"({tmp_path / 'notes.txt'} is a file, not a folder); choose a "
                           f"folder whose parents are folders")
    assert listing(tmp_path) == ["notes.txt"]
