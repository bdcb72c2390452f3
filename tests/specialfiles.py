"""FIFOs whose every open is caught (so that a test fails instead of waiting for ever)
and Unix sockets, for the tests of what reads images."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
import time
from typing import Iterator


@contextlib.contextmanager
def watched_fifos(*paths) -> Iterator[list[str]]:
    """Makes a FIFO at each of ``paths``; yields the list of those a reader opened.  A
    thread keeps opening each for writing without blocking, which succeeds only while a
    reader waits on it, and closes it at once, which lets the reader go on."""
    for path in paths:
        os.mkfifo(path)
    opened: list[str] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            for path in paths:
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError as e:
                    if e.errno not in (errno.ENXIO, errno.ENOENT):  # ENXIO: no reader
                        raise
                    continue
                if str(path) not in opened:
                    opened.append(str(path))
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def unix_socket(path) -> Iterator[str]:
    """A listening Unix socket at ``path`` (short: a socket's path holds 107 bytes)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        sock.listen()
        yield str(path)
