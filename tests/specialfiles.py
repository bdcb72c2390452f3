"""Files that are not regular ones, for the tests of what reads images: FIFOs whose
every open is caught (so that a program that opens one fails its test instead of
waiting for a writer for ever), and Unix sockets."""

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
    """Makes a FIFO at each of ``paths``; yields the list of those a reader opened.

    A thread opens each FIFO for writing without blocking, over and over: that
    succeeds only while a reader has it open (blocked, waiting for a writer), and
    closing it at once gives the reader an end of file, so the reader goes on.
    """
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
