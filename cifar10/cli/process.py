"""A program's process: what it prints besides its own lines, TensorFlow's loading,
and how it ends.

Mistakes a user can fix (a bad flag, a stray argument, a ``Cifar10Error``) become
one line on stderr, ``<program>: error: <message>``, and exit status 1, never a
traceback; Ctrl-C, status 130; a closed standard output, status 141; one that
cannot be written (a full disk), one line and status 1.  ``run`` is a
program's process; ``command_line.parse_flags`` and ``guarded`` are its two halves,
which tests also call in their own process.

TensorFlow is imported (``load_tensorflow``) only once the flags are parsed and
checked, so that ``--help`` and setting mistakes are answered at once instead of
after seconds of loading.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from typing import Callable

from absl import app
from absl import flags
from absl import logging

from cifar10.cli import command_line
from cifar10.cli import entry
from cifar10.core import logs
from cifar10.core.errors import Cifar10Error

# The exit status of a program whose standard output was closed (``| head``): 128 +
# SIGPIPE, as a shell reports a program that a closed pipe ended.
STDOUT_CLOSED = 128 + signal.SIGPIPE

# Whether TensorFlow's own log lines are shown (``set_up_output`` decides, from what the
# user asked); quiet unless asked.
_tensorflow_lines = False


def load_tensorflow(allow_tf32: bool = False, plots: bool = False):
    """Imports TensorFlow (which takes seconds), its Python warnings hidden unless
    the user asked for TensorFlow's lines (see ``set_up_output``).

    The programs call it once their flags and settings are checked.  A Ctrl-C (or
    SIGTERM) as it loads ends the program (``entry.interrupts_kept``), even where
    TensorFlow's or Keras's own imports would swallow it.  float32 stays float32: on
    GPUs with TensorFloat-32 (Ampere, Hopper) TensorFlow would otherwise run float32
    convolutions and matmuls with 10-bit mantissas; ``allow_tf32`` lets it.  Only a
    program that draws (``plots``: cifar10-eval) lets TensorFlow load matplotlib.
    """
    with entry.interrupts_kept():
        tf = _import_tensorflow(plots)
    if not _tensorflow_lines:
        tf.get_logger().setLevel(logs.python_level(os.environ))
    tf.config.experimental.enable_tensor_float_32_execution(allow_tf32)
    return tf


def _import_tensorflow(plots: bool):
    if not plots and "tensorflow" not in sys.modules and "matplotlib" not in sys.modules:
        # Keras, which TensorFlow loads, imports matplotlib.pyplot when it is
        # installed, for a plotting helper no program here uses: 0.65 s of every
        # start.  None in sys.modules makes that import fail, which Keras allows;
        # it is taken out again once TensorFlow (and Keras with it) is loaded, so
        # that whoever imports matplotlib later gets it.
        sys.modules["matplotlib"] = None
        try:
            import tensorflow  # noqa: F401
        finally:
            if sys.modules.get("matplotlib", False) is None:
                del sys.modules["matplotlib"]
    import tensorflow as tf
    return tf


def run(program: str, main: Callable[[list[str]], None], doc: str,
        define_flags: Callable[[flags.FlagValues], None]) -> None:
    """The process of a program: its flags defined and parsed, ``main`` called through
    ``guarded``, the process ended with the exit status.

    ``doc`` (the entry module's docstring) heads ``--help``; ``define_flags`` (one of
    ``cifar10.cli.flags``' ``define_*_flags``) defines the program's flags.
    """
    define_flags(flags.FLAGS)

    def process_main(argv: list[str]) -> int:
        # SIGTERM as Ctrl-C: cleanup code runs (a partial download is removed) where
        # the default action would end the process on the spot.  cifar10-train
        # installs its own handlers (save, then stop) once training starts.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        set_up_output(program)
        return guarded(program, main, argv)

    if sys.stdout is None:  # started with no standard output (`>&-`): its lines go nowhere,
        sys.stdout = open(os.devnull, "w")  # as print's do then, and flushes do not fail
    sys.stdout = WatchedStdout(sys.stdout)  # (a failed write is told apart: ``guarded``)
    try:
        app.run(process_main,
                flags_parser=lambda argv: command_line.parse_flags(argv, program, doc))
    except BrokenPipeError:
        # Whoever read the output stopped reading (``cifar10-predict photos/ | head``):
        # stop quietly, as other command-line tools do, not with a traceback, with the
        # status a shell gives a program that a closed pipe ended (128 + SIGPIPE).
        # cifar10-train saves first (``stopping``).
        stdout_to_devnull(sys.stdout)
        sys.exit(STDOUT_CLOSED)


class WatchedStdout:
    """Standard output as a program writes to it (``run`` puts it in ``sys.stdout``),
    remembering the error of a write that failed (a full disk, EIO), so that
    ``guarded`` tells it from another ``OSError``.  Anything else is the stream's."""

    def __init__(self, stream):
        self.stream = stream
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as e:
            self.error = e
            raise

    def __getattr__(self, name):
        return getattr(self.stream, name)


def stdout_error_said(error: OSError) -> str:
    """'cannot write to standard output (No space left on device)'."""
    return f"cannot write to standard output ({error.strerror or error})"


def stdout_failed(error: BaseException) -> bool:
    """Whether ``error`` is that of a write to standard output (``WatchedStdout``)."""
    return getattr(sys.stdout, "error", None) is error


def stdout_to_devnull(stdout) -> None:
    """Points ``stdout``'s descriptor at /dev/null, so that no later write to it (the
    lines still buffered included) fails once its reader is gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stdout.fileno())
    finally:
        os.close(devnull)


def tensorflow_lines_asked(flag_values: flags.FlagValues = flags.FLAGS) -> bool:
    """Whether the user asked for all of TensorFlow's own log lines: by setting
    ``TF_CPP_MIN_LOG_LEVEL=0``, passing ``--verbosity``/``-v`` 0 or more, or asking for
    TensorFlow's placement log, which is made of such lines (1 to 3: the lines of
    that level and above, ``logs.min_level``)."""
    placement = ("log_device_placement" in flag_values
                 and flag_values["log_device_placement"].value)
    verbosity = flag_values["verbosity"]  # -1, absl's default, is warnings: not asked
    asked = bool(verbosity.present) and (verbosity.value or 0) >= 0
    return logs.tensorflow_lines_wanted(os.environ, asked or placement)


def set_up_output(program: str, flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Decides what else a program's process prints: TensorFlow's C++ and Python
    log lines and absl's INFO notices only when asked (``tensorflow_lines_asked``),
    and the program's warnings as ``<program>: warning: ...``.  Called before
    TensorFlow loads.
    """
    global _tensorflow_lines
    _tensorflow_lines = tensorflow_lines_asked(flag_values)
    if not _tensorflow_lines:
        logs.hide_native_lines(logs.min_level(os.environ))
    if not flag_values["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # absl's INFO notices (checkpoint saves)
    handler = logging.get_absl_handler()
    handler.setFormatter(logs.ProgramFormatter(program, handler.python_handler.formatter))


def guarded(program: str, main: Callable[[list[str]], None], argv: list[str]) -> int:
    """Calls ``main(argv)``; returns the program's exit status.

    0 when it returns; 1 for a mistake the user can fix (``Cifar10Error``, or a
    ``UsageError`` such as a stray argument) or a write to standard output that failed
    (a full disk, EIO: ``WatchedStdout``; a closed one, ``BrokenPipeError``, is
    ``run``'s) and 130 for Ctrl-C or SIGTERM where no handler saves work, each with one
    line on stderr, the last the program prints: ``<program>: error: <message>`` or
    ``<program>: interrupted`` (followed by the interrupt's message, if it has one:
    ``before training started; ...``).
    """
    try:
        main(argv)
        sys.stdout.flush()  # here, where a failed write is caught, not at the process's end
        return 0
    except (Cifar10Error, app.UsageError) as e:
        last_line, status = f"{program}: error: {e}", 1
        if isinstance(e, app.UsageError):
            last_line += f" (see {program} --help)"
    except KeyboardInterrupt as e:  # (its message, if any, says what was left undone)
        last_line, status = f"{program}: interrupted{f' {e}' if str(e) else ''}", 130
    except OSError as e:
        if isinstance(e, BrokenPipeError) or not stdout_failed(e):
            raise
        # Nothing more can go there: the lines still buffered go nowhere, not into
        # another failure at the process's end.
        with contextlib.suppress(OSError, ValueError):  # (a stream with no descriptor)
            stdout_to_devnull(sys.stdout)
        last_line, status = f"{program}: error: {stdout_error_said(e)}", 1
    # The exception and its frames are gone now: free what the failed run still
    # held (input pipelines, checkpoint readers), so that whatever TensorFlow
    # prints as they go comes before the line that says what went wrong.
    gc.collect()
    try:
        sys.stdout.flush()
    except OSError:  # Ctrl-C on `| tee` ends the reader too (or the disk is full): the line
        stdout_to_devnull(sys.stdout)  # still goes out
    sys.stderr.write(last_line + "\n")
    sys.stderr.flush()
    return status
