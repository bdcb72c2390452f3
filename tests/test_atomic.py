"""core/atomic.py: the umask the written files' permissions come from, read without
setting it where /proc shows it."""

from __future__ import annotations

import os
import re

import pytest

from cifar10.core import atomic


def _proc_shows_umask() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("Umask:") for line in f)
    except OSError:
        return False


@pytest.fixture
def umask_027():
    """The process's umask set to 0o027 for one test, then set back."""
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def _written_mode(path) -> int:
    atomic.write_bytes(str(path), b"x")
    return os.stat(path).st_mode & 0o777


@pytest.mark.skipif(not _proc_shows_umask(),
                    reason="/proc/self/status has no Umask: line (not Linux 4.7 or later)")
def test_the_umask_is_read_from_proc_and_never_set(umask_027, tmp_path, monkeypatch):
    """Setting it to 0, even for an instant, would give a file another thread makes
    then 0666; so os.umask is not called at all."""
    def set_umask(mask):
        raise AssertionError(f"os.umask({mask:#o}) called")

    monkeypatch.setattr(atomic.os, "umask", set_umask)
    assert atomic._umask() == 0o027
    assert _written_mode(tmp_path / "file") == 0o640


@pytest.mark.parametrize("status", [None, "Name:\tpython3\nState:\tR (running)\n",
                                    "Umask:\n"], ids=["no-file", "no-line", "no-value"])
def test_without_the_proc_line_the_umask_is_set_and_set_back(umask_027, tmp_path,
                                                            monkeypatch, status):
    path = tmp_path / "status"
    if status is not None:
        path.write_text(status)
    monkeypatch.setattr(atomic, "_STATUS", str(path))
    calls = []
    real_umask = os.umask

    def set_umask(mask):
        calls.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(atomic.os, "umask", set_umask)
    assert atomic._umask() == 0o027
    assert calls == [0, 0o027]
    monkeypatch.undo()
    assert os.umask(0o027) == 0o027  # set back as it was
    monkeypatch.setattr(atomic, "_STATUS", str(path))
    assert _written_mode(tmp_path / "file") == 0o640


def test_write_text_writes_through_a_name_of_its_own_and_never_over_a_file(tmp_path):
    """A user's <name>.tmp beside the file is not the temporary file: it stays as it was."""
    (tmp_path / "a.txt.tmp").write_text("mine")
    atomic.write_text(str(tmp_path / "a.txt"), "new")
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "a.txt.tmp"]
    assert (tmp_path / "a.txt").read_text() == "new"
    assert (tmp_path / "a.txt.tmp").read_text() == "mine"
    assert re.fullmatch(r"a\.txt" + atomic.TEMP_SUFFIX, os.path.basename(
        atomic.temp_name(str(tmp_path / "a.txt"))))
    with pytest.raises(FileExistsError):  # a temporary name that is taken: not written
        atomic.write_text(str(tmp_path / "a.txt"), "newer", str(tmp_path / "a.txt.tmp"))
    assert (tmp_path / "a.txt.tmp").read_text() == "mine"
    assert (tmp_path / "a.txt").read_text() == "new"
