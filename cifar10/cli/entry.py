"""The console scripts' entry points: each program's Ctrl-C is one line
(``<program>: interrupted``, status 130) from its first moment, its module's import
included (where Python's own handler would print a traceback).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import signal
import sys
import threading
from typing import Iterator

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
    try:
        with interrupts_kept():  # (SIGTERM's action is still the default here: it ends)
            module = importlib.import_module(module_name)
        module.run()  # with Python's own SIGINT handler, which the programs expect
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one: the same one line
        sys.stderr.write(f"{program}: interrupted\n")
        sys.stderr.flush()
        sys.exit(INTERRUPTED)


@contextlib.contextmanager
def interrupts_kept() -> Iterator[None]:
    """For imports: a Ctrl-C (or SIGTERM) in the block raises KeyboardInterrupt, even where a
    library swallowed it; in a native module's initialisation, at the next import (raised
    there, Python aborted at exit).  Only for Python's own handlers, in the main thread."""
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
    """Whether ``frame`` runs in a native (extension) module's initialisation."""
    while frame is not None:
        if (frame.f_code.co_name in ("create_module", "exec_module") and isinstance(
                frame.f_locals.get("self"), importlib.machinery.ExtensionFileLoader)):
            return True
        frame = frame.f_back
    return False


class _InterruptAtNextImport:
    """Raises a held KeyboardInterrupt at the next import."""

    def find_spec(self, name, path=None, target=None):
        if _in_native_init(sys._getframe(1)):
            return None  # (the import goes on as usual)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        raise KeyboardInterrupt
