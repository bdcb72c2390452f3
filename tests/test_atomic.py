"""core/atomic.py: a file written whole, synced before its rename, through a
temporary name of its own."""

from __future__ import annotations

import errno
import os

import pytest

from cifar10.core import atomic


def test_write_text_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path,
                                                                         monkeypatch):
    """Renamed unsynced, a power cut could leave the new name with no contents."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.path.isdir(
        f"/proc/self/fd/{fd}"))) or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", None))
                        or real_replace(a, b))
    atomic.write_text(str(tmp_path / "a.txt"), "new")
    assert calls == [("fsync", False), ("replace", None), ("fsync", True)]
    assert (tmp_path / "a.txt").read_text() == "new"


def test_a_write_never_touches_a_users_tmp_file(tmp_path):
    """(The usual permissions: test_synthetic's umask test.)"""
    (tmp_path / "a.txt.tmp").write_text("mine")
    atomic.write_text(str(tmp_path / "a.txt"), "new")
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "a.txt.tmp"]
    assert (tmp_path / "a.txt.tmp").read_text() == "mine"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("old")

    def full(source, target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        atomic.write_text(str(tmp_path / "a.txt"), "new")
    assert os.listdir(tmp_path) == ["a.txt"] and (tmp_path / "a.txt").read_text() == "old"
