"""Files and folders that appear whole: written under a temporary name, synced, and
renamed when complete, so that a reader never sees half of one and a crash or a
power cut leaves the old one or the new one.

A scratch folder ``.<name>-incomplete-<random>`` holds a marker file naming
``<name>``, locked (``flock``) by its writer until the folder is complete.  The
system drops the lock when the process dies, however it dies: so a marked folder
whose lock can be taken is a leftover, which ``remove_leftovers`` removes.
"""

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
# The temporary name of a file's write: ``<name>.tmp<32 hex digits>``, unique, so that
# no file of a user's is in its way and a leftover is told by its name alone.
TEMP_SUFFIX = r"\.tmp[0-9a-f]{32}"


def temp_name(path: str) -> str:
    """A new temporary name beside ``path`` (``TEMP_SUFFIX``)."""
    return f"{path}.tmp{uuid.uuid4().hex}"


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` (``write_bytes``)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, contents: bytes) -> None:
    """Writes ``contents`` to ``path`` through a new ``temp_name`` (made with ``O_EXCL``,
    so no file already there is written; the usual permissions), synced to disk and
    renamed over ``path``, the folder synced after.

    Raises:
      OSError: the write or the rename failed; the temporary file is removed.
    """
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
    """Makes a rename in ``folder`` durable, where the system allows a folder's fsync."""
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
    ends; removed if the block raises.

    Raises:
      OSError: the scratch folder cannot be made, or the rename fails.
    """
    with _marked(target) as (scratch, marker):
        yield scratch
        os.remove(marker)
        os.rename(scratch, target)


@contextlib.contextmanager
def scratch_folder(target: str) -> Iterator[str]:
    """Yields a scratch folder beside ``target`` for work that ends in ``target`` (a file
    the block moves out of it); removed when the block ends, however it ends.

    Raises:
      OSError: the scratch folder cannot be made.
    """
    with _marked(target) as (scratch, _):
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _marked(target: str) -> Iterator[tuple[str, str]]:
    """(scratch folder beside ``target``, its marker file), the marker locked until the
    block ends; the folder (the usual permissions) is removed if the block raises."""
    parent = os.path.dirname(target) or "."
    os.makedirs(parent, exist_ok=True)
    scratch = os.path.join(parent, f".{os.path.basename(target)}-incomplete-{uuid.uuid4().hex}")
    os.mkdir(scratch)
    marker = None
    try:
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
    """Removes the scratch folders in ``parent`` whose writer died (marker for their
    name, unlocked); returns their names, sorted.  Anything else stays."""
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
    """Whether the marker in ``scratch`` is locked by a live process (True) or not
    (False); None where there is no marker (for ``name``, if given) to tell."""
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
    """Removes ``folder`` and its parents that do not exist yet, if the block fails and
    they are empty (what the block made there is its own to remove)."""
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
