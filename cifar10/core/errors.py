"""The errors a user can fix, which the programs print as ``<program>: error: <message>``
(the thing at fault and the fix) before exiting non-zero."""

import errno
import os
import re
from typing import Sequence


class Cifar10Error(Exception):
    """Base class of the errors shown to users as one line."""


class DataError(Cifar10Error):
    """The CIFAR-10 data is missing, incomplete, corrupt or cannot be fetched."""


class DivergedError(Cifar10Error):
    """The training loss became NaN or infinite."""


class StoppedBeforeTraining(KeyboardInterrupt):
    """A SIGINT or SIGTERM before training started: the program ends as interrupted (130)."""

    def __init__(self):
        super().__init__("before training started; nothing was trained")


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (TensorFlow's can run to pages)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def io_error(action: str, path: str, error: BaseException, advice: str = "") -> Cifar10Error:
    """'<action> <path> (<why>); <advice>' for an OSError or a TensorFlow I/O error."""
    advice = advice or io_advice(error)
    cause = getattr(error, "strerror", None)
    if not cause:  # TensorFlow's '{{function_node ...}} <path>; <why> [Op:SaveV2]'
        line = first_line(error)
        match = re.search(rf"{re.escape(os.sep)}\S*; ([^;]+?)(?: \[Op:\w+\])?$", line)
        cause = match[1] if match else line
    return Cifar10Error(f"{action} {path} ({cause}){'; ' + advice if advice else ''}")


def io_advice(error: BaseException) -> str:
    """What to do about a full disk, a read-only file system or a denied permission."""
    code, text = getattr(error, "errno", None), str(error)
    if code == errno.ENOSPC or "No space left" in text:
        return "free some disk space and run the same command again"
    if code == errno.EROFS or "Read-only file system" in text:
        return "choose a directory on a writable file system"
    if code in (errno.EACCES, errno.EPERM) or "Permission denied" in text:
        return "choose a directory you can write, or change its permissions"
    return ""


def listed(names: Sequence[str], shown: int = 12) -> str:
    """Names for a one-line message: all of them, or for many the first and last few."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown - 2])}, ..., {', '.join(names[-2:])}"


def shown_path(path: str, line: bool = True) -> str:
    """``path`` printable: non-UTF-8 bytes as ``\\xNN``; with ``line``, control
    characters escaped too."""
    shown = os.fsencode(path).decode("utf-8", "backslashreplace")
    return shown.translate(_CONTROLS) if line else shown


# Control characters as escapes: \n, \r and \t as Python writes them, the others \xNN.
_CONTROLS = {c: repr(chr(c))[1:-1] for c in (*range(32), 127)}
