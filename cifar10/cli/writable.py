"""Whether a program's output folder (cifar10-train's --train_dir, cifar10-eval's
--eval_dir) can be made and written, answered before anything is fetched or
TensorFlow loads: a folder on a read-only file system, one the user may not write,
one under a file, or one where no folder can be made (/proc), is one line then, not
after the data's download.

Nothing is left behind: a folder not there yet is not made, but a folder of a name of
its own in the nearest folder there (removed at once), and a folder there is tried
with a file that has no name (``O_TMPFILE``).  No TensorFlow here.
"""

from __future__ import annotations

import errno
import os
import tempfile

from cifar10.core.errors import Cifar10Error, io_advice


# How many times the check starts again where the folder came or went while it looked
# (the workers cifar10-launch starts at once check the same new folder).
_TRIES = 5


class _Changed(Exception):
    """The folder was made or removed by another process while it was tried."""


def refuse_unwritable(flag: str, folder: str) -> None:
    """Raises Cifar10Error when the folder ``folder`` (the value of --``flag``) cannot
    be made, or is there and cannot be written: one line naming it, the reason and
    what to do.  Nothing is left behind."""
    path = os.path.abspath(folder)
    for _ in range(_TRIES):
        try:
            problem = _problem(flag, folder, path)
        except _Changed:
            continue
        if problem:
            raise Cifar10Error(problem)
        return
    # Still changing under other processes: the program's own write says what fails.


def _problem(flag: str, folder: str, path: str) -> str:
    """What keeps ``path`` (the absolute path of --``flag``=``folder``) from being made
    and written; '' when nothing does."""
    if os.path.isdir(path):
        error = _write_error(path)
        if error is not None and error.errno == errno.ENOENT:
            raise _Changed
        return _line(f"cannot write in --{flag}", folder, error) if error else ""
    parent = _nearest_existing(path)
    if not os.path.isdir(parent):
        if os.path.islink(parent) and not os.path.exists(parent):
            return (f"cannot create --{flag} {folder} ({parent} is a link to "
                    f"{os.readlink(parent)}, which is not there); make that folder, or "
                    f"choose another")
        return (f"cannot create --{flag} {folder} ({parent} is a file, not a folder); "
                f"choose a folder whose parents are folders")
    error = _make_error(parent)
    if error is None:
        return ""
    if error.errno == errno.ENOENT and not os.path.isdir(parent):
        raise _Changed
    if error.errno == errno.ENOENT:  # /proc, /sys: file systems of the kernel's own
        return (f"cannot create --{flag} {folder} ({parent} takes no new folders); choose "
                f"a directory you can write")
    return _line(f"cannot create --{flag}", folder, error)


def _line(action: str, folder: str, error: OSError) -> str:
    advice = io_advice(error) or "choose a directory you can write"
    return f"{action} {folder} ({error.strerror or error}); {advice}"


def _nearest_existing(path: str) -> str:
    """``path``'s nearest parent that is there (a folder or not)."""
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def _make_error(parent: str) -> OSError | None:
    """The error of making a folder in the folder ``parent`` (the nearest one there of
    the folders to make), or None.  Tried with a folder of a name of its own, removed
    at once: never with the folder asked for, which another start (a worker of the same
    job) may be making and writing in at that moment."""
    try:
        probe = tempfile.mkdtemp(prefix=".cifar10-check-", dir=parent)
    except OSError as e:
        return e
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return None


def _write_error(folder: str) -> OSError | None:
    """The error of writing a file in the folder ``folder``, or None.  Tried with a file
    of no name, which goes with its descriptor; where the file system takes no such
    file, asked of the system (``os.access``)."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            os.close(os.open(folder, tmpfile | os.O_WRONLY, 0o600))
            return None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                return e
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    code = errno.EROFS if read_only else errno.EACCES
    return OSError(code, os.strerror(code), folder)
