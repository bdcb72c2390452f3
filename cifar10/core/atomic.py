"""Files and folders that appear whole: written under a temporary name, renamed
when complete.

A reader (a trainer finding its data, TensorFlow Serving polling for versions)
never sees half of one, and a failure or an interruption leaves nothing behind,
except after ``kill -9`` or a power cut: then the scratch folder stays, and
``remove_leftovers`` removes it at the next run, because it can prove who made it.

The proof: a scratch folder ``.<name>-incomplete-<random>`` holds a marker file
naming ``<name>``, and the process writing it holds a lock (``flock``) on that
marker until the folder is complete.  The system drops the lock when the process
dies, however it dies; so a marked folder whose lock can be taken is a leftover,
and one whose lock is held is being written by a live process and is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import uuid
from typing import Iterator

MARKER = ".cifar10-incomplete"  # in a scratch folder while it is being written
_SCRATCH = re.compile(r"\.(?P<name>.+)-incomplete-[A-Za-z0-9_]+")


# The temporary name ``write_text`` gives: ``<name>.tmp<32 hex digits>``, unique to the
# write, so that no file of a user's (a ``flags.txt.tmp`` of theirs) is in its way or
# overwritten, and a leftover is told from a user's file by its name alone.
TEMP_SUFFIX = r"\.tmp[0-9a-f]{32}"


def temp_name(path: str) -> str:
    """A new temporary name beside ``path`` (``TEMP_SUFFIX``)."""
    return f"{path}.tmp{uuid.uuid4().hex}"


def write_text(path: str, text: str, tmp: str | None = None) -> None:
    """Writes ``text`` to ``path`` through ``tmp`` (default a new ``temp_name``),
    renamed over ``path`` when written, so that a reader sees the old file or the new
    one.  ``tmp`` is made new (``O_EXCL``): a file already there is never written.

    Raises:
      OSError: the write or the rename failed; ``tmp`` is removed if this made it.
    """
    tmp = tmp or temp_name(path)
    f = open(tmp, "x", encoding="utf-8")  # (if it fails, what is there is not ours)
    try:
        with f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def write_bytes(path: str, contents: bytes) -> None:
    """Writes ``contents`` to ``path`` through a temporary file beside it, renamed over
    ``path`` when written, so that a reader sees the old file or the new one.  The
    file gets the usual permissions (0666 less the umask), as ``open`` gives a new
    file, not those of a private temporary file (0600).

    Raises:
      OSError: the write or the rename failed; the temporary file is removed.
    """
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(contents)
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def _remove_quietly(path: str) -> None:
    """Removes the temporary file ``path`` of a write that failed, if it is there."""
    try:
        os.remove(path)
    except OSError:
        pass


# Where Linux (4.7 and later) shows the process's umask, as an octal ``Umask:`` line.
_STATUS = "/proc/self/status"


def _umask() -> int:
    """The process's umask, read from ``/proc/self/status`` without changing it.

    Where that file has no ``Umask:`` line (another system, a Linux before 4.7) it
    is read the only other way there is: set to 0 and set back.  For that instant
    a file another thread of the process makes gets 0666, not 0666 less the umask.
    """
    try:
        with open(_STATUS, encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def new_folder(target: str) -> Iterator[str]:
    """Yields a scratch folder beside ``target``, renamed to ``target`` when the block ends.

    The scratch folder gets the usual permissions (0777 less the umask), not
    those of a private temporary folder.  If the block raises, it is removed.

    Raises:
      OSError: the scratch folder cannot be made, or the rename fails.
    """
    with _marked(target) as (scratch, marker):
        yield scratch
        os.remove(marker)
        os.rename(scratch, target)


@contextlib.contextmanager
def scratch_folder(target: str) -> Iterator[str]:
    """Yields a scratch folder beside ``target``, for work that ends in ``target`` (a
    file the block moves out of it, say); removed when the block ends, however it
    ends, or by ``remove_leftovers`` after a ``kill -9``.

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
    """(scratch folder ``.<name>-incomplete-*`` beside ``target``, its marker file), the
    marker locked until the block ends; the folder is removed if the block raises."""
    parent = os.path.dirname(target) or "."
    name = os.path.basename(target)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{name}-incomplete-", dir=parent)
    marker = None
    try:
        os.chmod(scratch, 0o777 & ~_umask())
        marker = open(os.path.join(scratch, MARKER), "w")
        fcntl.flock(marker, fcntl.LOCK_EX)
        marker.write(json.dumps({"for": name, "pid": os.getpid()}) + "\n")
        marker.flush()
        yield scratch, marker.name
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        if marker is not None:
            marker.close()  # drops the lock


def remove_leftovers(parent: str) -> list[str]:
    """Removes the scratch folders in ``parent`` that ``new_folder`` left when its
    process died; returns their names, sorted.

    Only a folder named ``.<name>-incomplete-*`` that holds a marker for ``<name>``
    whose lock no live process holds is removed; anything else stays, among
    them the scratch folder of a ``new_folder`` still at work.  A folder that
    cannot be inspected or removed stays too.
    """
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    removed = []
    for name in names:
        match = _SCRATCH.fullmatch(name)
        path = os.path.join(parent, name)
        if match and not os.path.islink(path) and _abandoned(path, match["name"]):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(name)
    return removed


def at_work(parent: str) -> bool:
    """Whether a live process is writing a scratch folder in ``parent`` (one of
    ``new_folder`` or ``scratch_folder``: its marker is locked)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return False
    return any(_SCRATCH.fullmatch(name) and _locked(os.path.join(parent, name, MARKER))
               for name in names)


def _locked(marker: str) -> bool:
    """Whether another process holds the lock of the marker file ``marker``."""
    if os.path.islink(marker) or not os.path.isfile(marker):
        return False  # (a FIFO under that name would block the open)
    try:
        with open(marker) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False  # (closing the file drops the lock just taken)
    except OSError:
        return False


def _abandoned(scratch: str, name: str) -> bool:
    """Whether ``scratch`` holds ``new_folder``'s marker for ``name``, unlocked."""
    marker = os.path.join(scratch, MARKER)
    if os.path.islink(marker) or not os.path.isfile(marker):
        return False
    try:
        with open(marker) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # its writer is alive
            try:
                return json.loads(f.readline()).get("for") == name
            except (ValueError, AttributeError):
                return False
    except OSError:
        return False


@contextlib.contextmanager
def made_folders_removed_on_failure(folder: str) -> Iterator[None]:
    """Removes ``folder`` and the parents of it that do not exist yet, if the block
    fails and they are empty (what the block made there is its own to remove)."""
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
