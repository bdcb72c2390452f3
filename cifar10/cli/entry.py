"""The console scripts' entry points (setup.py): each program's Ctrl-C answered with
one line from its first moment.

A console script imports its program's module before it calls the program, and
that import (absl, the package's modules) takes a few tenths of a second, in
which Python's own SIGINT handler would end a Ctrl-C with a KeyboardInterrupt
traceback.  So each function here installs the program's handling of Ctrl-C
first, with nothing but the standard library loaded, then imports the program
and runs it.  A Ctrl-C that comes before the program's own handling of it
(``process.guarded``) ends the program as any interrupt outside training does:
``<program>: interrupted`` on stderr and exit status 130.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
from typing import Iterator

# The exit status of an interrupted program, as a shell reports one that SIGINT ended
# (128 + 2); ``process.guarded`` and ``stopping`` use the same.
INTERRUPTED = 128 + signal.SIGINT


def train() -> None:
    start("cifar10-train", "cifar10.cli.train_main")


def evaluate() -> None:
    start("cifar10-eval", "cifar10.cli.eval_main")


def predict() -> None:
    start("cifar10-predict", "cifar10.cli.predict_main")


def export() -> None:
    start("cifar10-export", "cifar10.cli.export_main")


def prepare() -> None:
    start("cifar10-prepare", "cifar10.cli.prepare_main")


def launch() -> None:
    start("cifar10-launch", "cifar10.cli.launch_main")


def start(program: str, module_name: str) -> None:
    """Imports ``module_name`` (a program's ``*_main`` module) and calls its ``run``;
    a Ctrl-C before ``run`` handles it ends the process with one line and status 130.
    """
    interrupts = []

    def interrupt(signum, frame):
        interrupts.append(signum)  # on record even if an import's bare except drops it
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    try:
        # Where SIGINT is ignored (a job started in the background by a script, nohup),
        # it stays ignored, as it would for the program.
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, interrupt)
        try:
            module = importlib.import_module(module_name)
        except Exception:
            if interrupts:  # a native module's initialisation made it an ImportError
                raise KeyboardInterrupt from None
            raise
        if interrupts:
            raise KeyboardInterrupt
        signal.signal(signal.SIGINT, previous)  # Python's own, which the programs expect
        module.run()
    except KeyboardInterrupt:
        # Only a Ctrl-C the program did not answer itself comes here (one while its
        # flags are read, before ``guarded``): the program was not under way yet.
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one: the same one line
        sys.stderr.write(f"{program}: interrupted\n")
        sys.stderr.flush()
        sys.exit(INTERRUPTED)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """In the block, a Ctrl-C (SIGINT), or a SIGTERM that the program takes as one
    (``process.run``), is held back, and raised as KeyboardInterrupt as the block ends.

    For imports of native modules whose initialisation runs Python code (matplotlib's
    ft2font, built with pybind11): a KeyboardInterrupt raised in it comes out as
    ``ImportError: initialization failed``, which an import guarded for a missing
    package takes for one.  Only a signal whose handler is Python's own is held (one
    ignored stays ignored), and only in the main thread (signal handlers are its).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    own = [signum for signum in (signal.SIGINT, signal.SIGTERM)
           if signal.getsignal(signum) is signal.default_int_handler]
    for signum in own:
        signal.signal(signum, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for signum in own:
            signal.signal(signum, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt
