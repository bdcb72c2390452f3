"""Exceptions the command-line programs turn into one-line errors.

Every error a user can fix (bad data, a failed download, a diverged run) is a
``Cifar10Error``; its message names the thing at fault and says how to fix it.
The entry points print it as ``<program>: error: <message>`` and exit non-zero
instead of showing a traceback.
"""


class Cifar10Error(Exception):
    """Base class of the errors shown to users as one line."""


class DataError(Cifar10Error):
    """The CIFAR-10 data is missing, incomplete, corrupt or cannot be fetched."""


class DivergedError(Cifar10Error):
    """The training loss became NaN or infinite."""


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (TensorFlow's can run to pages)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
