"""Files and folders that appear whole: written under a temporary name, synced, and
renamed when complete.  A scratch folder ``.<name>-incomplete-<random>`` holds a marker
locked (``flock``) by its writer, so one whose lock can be taken is a dead writer's
leftover (``remove_leftovers``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import uuid
from typing import Iterator

MARKER = ".cifar10-incomplete"  # in a scratch folder while it is being written
_SCRATCH = re.compile(r"\.(?P<name>.+)-incomplete-[A-Za-z0-9_]+")
# A file's temporary name: unique, so no user's file is in its way; it tells a leftover.
TEMP_SUFFIX = r"\.tmp[0-9a-f]{32}"


def temp_name(path: str) -> str:
    return f"{path}.tmp{uuid.uuid4().hex}"


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, contents: bytes) -> None:
    """Writes ``contents`` to a new ``temp_name``, synced and renamed over ``path``, then
    syncs the folder; OSError (the temporary file removed) where that fails."""
    tmp = temp_name(path)
    f = open(tmp, "xb")  # (if this fails, what is there is not ours)
    try:
        with f:
            f.write(contents)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _sync_folder(os.path.dirname(path) or ".")


def _sync_folder(folder: str) -> None:
    """Makes a rename in ``folder`` durable, where the system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def new_folder(target: str) -> Iterator[str]:
    """Yields a scratch folder beside ``target``, renamed to ``target`` when the block
    ends; removed if the block raises."""
    with _marked(target) as (scratch, marker):
        yield scratch
        os.remove(marker)
        os.rename(scratch, target)


@contextlib.contextmanager
def scratch_folder(target: str) -> Iterator[str]:
    """Yields a scratch folder beside ``target`` (for a file the block moves out of it),
    removed when the block ends."""
    with _marked(target) as (scratch, _):
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _marked(target: str) -> Iterator[tuple[str, str]]:
    """(scratch folder beside ``target``, its marker), locked until the block ends; the
    folder is removed if the block raises."""
    parent = os.path.dirname(target) or "."
    os.makedirs(parent, exist_ok=True)
    scratch = os.path.join(parent, f".{os.path.basename(target)}-incomplete-{uuid.uuid4().hex}")
    marker = None
    try:  # from the mkdir on: a Ctrl-C just after it must remove the folder too
        os.mkdir(scratch)
        marker = open(os.path.join(scratch, MARKER), "w")
        fcntl.flock(marker, fcntl.LOCK_EX)
        marker.write(json.dumps({"for": os.path.basename(target), "pid": os.getpid()}) + "\n")
        marker.flush()
        yield scratch, marker.name
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        if marker is not None:
            marker.close()  # drops the lock


def remove_leftovers(parent: str) -> list[str]:
    """Removes the scratch folders in ``parent`` whose writer died; their names, sorted."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    removed = []
    for name in names:
        match = _SCRATCH.fullmatch(name)
        path = os.path.join(parent, name)
        if match and not os.path.islink(path) and _marker(path, match["name"]) is False:
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(name)
    return removed


def at_work(parent: str) -> bool:
    """Whether a live process is writing a scratch folder in ``parent``."""
    try:
        names = os.listdir(parent)
    except OSError:
        return False
    return any(_SCRATCH.fullmatch(name) and _marker(os.path.join(parent, name))
               for name in names)


def _marker(scratch: str, name: str | None = None) -> bool | None:
    """Whether the marker in ``scratch`` (for ``name``) is locked; None: no such marker."""
    marker = os.path.join(scratch, MARKER)
    if os.path.islink(marker) or not os.path.isfile(marker):
        return None  # (a FIFO under that name would block the open)
    try:
        with open(marker) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            if name is not None and json.loads(f.readline()).get("for") != name:
                return None
            return False  # (closing the file drops the lock just taken)
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def made_folders_removed_on_failure(folder: str) -> Iterator[None]:
    """Removes ``folder`` and its parents made in the block, if it fails and they are empty."""
    missing, path = [], os.path.abspath(folder)
    while not os.path.lexists(path):
        missing.append(path)  # deepest first
        path = os.path.dirname(path)
    try:
        yield
    except BaseException:
        for path in missing:
            try:
                os.rmdir(path)
            except OSError:
                break
        raise
