"""The console scripts' entry points (setup.py): each program's Ctrl-C answered with
one line from its first moment.

A console script imports its program's module before it calls the program, and
that import (absl, the package's modules) takes a few tenths of a second, in
which Python's own SIGINT handler would end a Ctrl-C with a KeyboardInterrupt
traceback.  So each function here installs the program's handling of Ctrl-C
first, with nothing but the standard library loaded, then imports the program
and runs it.  A Ctrl-C that comes before the program's own handling of it
(``process.guarded``) ends the program as any interrupt outside training does:
``<program>: interrupted`` on stderr and exit status 130.  The same handling
(``interrupts_kept``) guards TensorFlow's import (``process.load_tensorflow``), whose
own imports could swallow a Ctrl-C.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
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
    try:
        with interrupts_kept():  # (SIGTERM's action is still the default here: it ends)
            module = importlib.import_module(module_name)
        module.run()  # with Python's own SIGINT handler, which the programs expect
    except KeyboardInterrupt:
        # Only a Ctrl-C the program did not answer itself comes here (one while its
        # flags are read, before ``guarded``): the program was not under way yet.
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one: the same one line
        sys.stderr.write(f"{program}: interrupted\n")
        sys.stderr.flush()
        sys.exit(INTERRUPTED)


@contextlib.contextmanager
def interrupts_kept() -> Iterator[None]:
    """In the block, a Ctrl-C (SIGINT), or a SIGTERM that the program takes as one
    (``process.run``), raises KeyboardInterrupt at once, as Python's own handler does,
    and is also kept on record: should the block end otherwise (normally, or with
    another exception), it ends with KeyboardInterrupt instead.

    For imports (a program's module; TensorFlow, ``process.load_tensorflow``): a
    library may swallow the KeyboardInterrupt, with a bare except, or with the
    ``except ImportError`` of an import guarded for a missing package where a native
    module's initialisation turned it into ``ImportError: initialization failed``
    (pybind11's: matplotlib's ft2font, which Keras imports as TensorFlow loads); the
    program would run on, the Ctrl-C lost.

    Raised at once rather than held until the block ends: a Ctrl-C 0.5 to 4.5 s into
    TensorFlow's import (6 s on a loaded 2-core VM) ended the process 0.2 to 1.4 s
    after it so, 3 to 8 s after it held.  Except inside a native module's
    initialisation (the Python code it runs, ``_in_native_init``): raised there, it
    left ft2font half made, and Python's finalisation then aborted the process
    ("Fatal Python error", status -6) after the program's last line; it is held until
    the next import that starts outside one (``_InterruptAtNextImport``), or the
    block's end.  Only a signal whose handler is Python's own is handled (one ignored,
    by nohup or a job started in the background, stays ignored), and only in the
    main thread, where Python runs signal handlers.
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
