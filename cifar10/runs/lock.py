"""One trainer per run directory: the lock file ``cifar10-train.lock``.

The lock is an ``flock`` on the file, which belongs to the open file: the kernel
releases it when the process ends in any way, kill -9 included, so a stale lock
cannot remain.  The file itself stays (removing it would let two processes lock
two files); it says who holds it, for the error line of the trainer refused.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import time

from absl import logging

from cifar10.core.errors import Cifar10Error, io_error

LOCK_FILE = "cifar10-train.lock"


class TrainerLock:
    """The lock of the run directory ``directory`` (its ``--train_dir``)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Takes the lock, or raises naming the trainer that holds it.

        On a file system without locks (some network mounts) it warns and goes on.

        Raises:
          Cifar10Error: another trainer holds the lock, the lock file is a folder, or
            the directory is not writable.
        """
        refuse_a_folder_for_the_file(self.directory)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise io_error("cannot write in --train_dir", self.directory, e) from e
        try:
            _lock_soon(fd)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise _in_use(self.directory, holder) from None
        except OSError as e:
            logging.warning("cannot lock %s (%s): make sure no other trainer uses %s.",
                            self.path, e.strerror, self.directory)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                     "started": time.time()}).encode())
        except OSError as e:
            os.close(fd)
            raise io_error("cannot write", self.path, e) from e
        self._fd = fd

    def release(self) -> None:
        """Releases the lock, if held (the file stays)."""
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


def _lock_soon(fd: int, tries: int = 6, pause: float = 0.1) -> None:
    """Takes the exclusive lock of ``fd``, trying again for about half a second: another
    start's ``refuse_if_held`` holds a shared lock for an instant.

    Raises:
      BlockingIOError: another trainer holds it.
    """
    for attempt in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == tries - 1:
                raise
            time.sleep(pause)


def refuse_if_held(directory: str) -> None:
    """Raises Cifar10Error, as ``TrainerLock.acquire`` would, when another trainer holds
    the lock of ``directory`` now: a check before the data is fetched and TensorFlow
    loads, so that a second trainer says nothing else first; also when the lock file
    is a folder (``refuse_a_folder_for_the_file``).  Takes no lock."""
    refuse_a_folder_for_the_file(directory)
    holder = held_by(directory)
    if holder is not None:
        raise _in_use(directory, holder)


def refuse_a_folder_for_the_file(directory: str) -> None:
    """Raises Cifar10Error when ``directory``'s lock file is a folder (made by hand, or
    copied): the lock cannot be opened, and the folder is not the trainer's to remove."""
    path = os.path.join(directory, LOCK_FILE)
    if os.path.isdir(path):
        raise Cifar10Error(f"{path} is a folder, not cifar10-train's lock file: move that "
                           f"folder away (the trainer keeps its lock in a file of that name "
                           f"in --train_dir)")


def held_by(directory: str) -> str | None:
    """Who holds the trainer's lock of ``directory`` now ('PID 123 on host h, started
    ...'), or None when no trainer does (or it cannot be told).  Takes no lock."""
    try:
        fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDONLY)
    except OSError:
        return None  # no lock file (no run yet), or not readable: acquire() will say
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        pass  # no locks on this file system: acquire() warns
    finally:
        os.close(fd)  # (and with it the shared lock, if taken)
    return None


def _in_use(directory: str, holder: str) -> Cifar10Error:
    return Cifar10Error(f"--train_dir {directory} is in use by another trainer ({holder}); "
                        f"wait for it to finish or stop it, or choose another --train_dir")


def _holder(fd: int) -> str:
    """'PID 123 on host h, started 2026-11-23 10:00:00' from the lock file, if it says."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = json.loads(os.read(fd, 4096).decode())
        started = datetime.datetime.fromtimestamp(holder["started"]).strftime("%Y-%m-%d %H:%M:%S")
        return f"PID {holder['pid']} on host {holder['host']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "it did not say which"
