"""The console scripts' entry points (setup.py): each program's Ctrl-C answered with
one line (``<program>: interrupted``, status 130) from its first moment.

A console script imports its program's module (absl, the package: a few tenths of a
second) before it calls it; Python's own SIGINT handler would end a Ctrl-C there with
a traceback.  So each function here handles Ctrl-C first, with only the standard
library loaded, then imports the program and runs it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import signal
import sys
import threading
from typing import Iterator

# The exit status of an interrupted program, as a shell reports one SIGINT ended.
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
    start("cifar10-launch", "cifar10.cli.launch")


def start(program: str, module_name: str) -> None:
    """Imports ``module_name`` (a program's ``*_main`` module) and calls its ``run``."""
    try:
        with interrupts_kept():  # (SIGTERM's action is still the default here: it ends)
            module = importlib.import_module(module_name)
        module.run()  # with Python's own SIGINT handler, which the programs expect
    except KeyboardInterrupt:
        # A Ctrl-C the program did not answer itself (one while its flags are read).
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one: the same one line
        sys.stderr.write(f"{program}: interrupted\n")
        sys.stderr.flush()
        sys.exit(INTERRUPTED)


@contextlib.contextmanager
def interrupts_kept() -> Iterator[None]:
    """In the block, a Ctrl-C (or a SIGTERM the program takes as one) raises
    KeyboardInterrupt at once, and is kept on record: should the block end otherwise
    (a library swallowed it, with a bare except or an ``except ImportError`` of a
    native module's failed initialisation), it ends with KeyboardInterrupt instead.

    For imports (a program's module; TensorFlow, ``process.load_tensorflow``).  Inside
    a native module's initialisation the interrupt is held until the next import
    (``_InterruptAtNextImport``) or the block's end: raised there, it left matplotlib's
    ft2font half made and Python aborted at exit.  Only a signal whose handler is
    Python's own is handled (one ignored by nohup stays ignored), in the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = []
    at_next_import = _InterruptAtNextImport()

    def interrupt(signum, frame):
        kept.append(signum)
        if not _in_native_init(frame):
            raise KeyboardInterrupt
        if at_next_import not in sys.meta_path:
            sys.meta_path.insert(0, at_next_import)

    own = [signum for signum in (signal.SIGINT, signal.SIGTERM)
           if signal.getsignal(signum) is signal.default_int_handler]
    for signum in own:
        signal.signal(signum, interrupt)
    try:
        yield
    except Exception:
        if kept:  # the interrupt made into another error (or its aftermath)
            raise KeyboardInterrupt from None
        raise
    finally:
        for signum in own:
            signal.signal(signum, signal.default_int_handler)
        if at_next_import in sys.meta_path:
            sys.meta_path.remove(at_next_import)
    if kept:  # swallowed
        raise KeyboardInterrupt


def _in_native_init(frame) -> bool:
    """Whether ``frame`` (a signal handler's) runs in the initialisation of a native
    (extension) module: Python code it calls, such as pybind11's enums."""
    while frame is not None:
        if (frame.f_code.co_name in ("create_module", "exec_module") and isinstance(
                frame.f_locals.get("self"), importlib.machinery.ExtensionFileLoader)):
            return True
        frame = frame.f_back
    return False


class _InterruptAtNextImport:
    """A finder first on ``sys.meta_path`` that raises KeyboardInterrupt as the next
    import starts outside a native module's initialisation (one held in it)."""

    def find_spec(self, name, path=None, target=None):
        if _in_native_init(sys._getframe(1)):
            return None  # (the import goes on as usual)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        raise KeyboardInterrupt
