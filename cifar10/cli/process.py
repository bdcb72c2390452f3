"""A program's process: its flags parsed, its output set up, TensorFlow loaded
(only once the flags are checked, so that --help and flag mistakes answer at once),
and its end.  A mistake the user can fix is one line on stderr,
``<program>: error: <message>``, and status 1; Ctrl-C 130; a closed stdout 141.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import signal
import sys
from importlib import metadata
from typing import Callable

from absl import app
from absl import flags
from absl import logging

import cifar10
from cifar10.cli import entry
from cifar10.cli import flagfiles
from cifar10.cli import helptext
from cifar10.cli import flags as cifar10_flags
from cifar10.core import logs
from cifar10.core.errors import Cifar10Error

STDOUT_CLOSED = 128 + signal.SIGPIPE

_tensorflow_lines = False


def load_tensorflow(allow_tf32: bool = False, plots: bool = False, gpus: int | None = 0):
    """Imports TensorFlow (a Ctrl-C meanwhile ends the program), its warnings hidden
    unless asked for; float32 stays float32 unless ``allow_tf32``; only a program that
    draws (``plots``) lets Keras load matplotlib.  The program uses the first ``gpus``
    visible GPUs, each with memory growth, and TensorFlow never maps the others' memory
    (0: every GPU hidden; None: the program chooses, as the trainer's make_strategy)."""
    with entry.interrupts_kept():
        if not plots and "tensorflow" not in sys.modules and "matplotlib" not in sys.modules:
            # Keras imports matplotlib.pyplot for a helper no program uses; None in
            # sys.modules makes that import fail, which Keras allows.
            sys.modules["matplotlib"] = None
            try:
                import tensorflow  # noqa: F401
            finally:
                if sys.modules.get("matplotlib", False) is None:
                    del sys.modules["matplotlib"]
        import tensorflow as tf
    if not _tensorflow_lines:
        tf.get_logger().setLevel(logs.python_level(os.environ))
    tf.config.experimental.enable_tensor_float_32_execution(allow_tf32)
    if gpus is not None:
        from cifar10.distribute import gpus as gpu_config

        gpu_config.keep(tf.config.list_physical_devices("GPU")[:gpus])
    return tf


FILE_PROGRAMS = ("cifar10-predict",)

HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")
_SHORT_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort")


def parse_flags(argv: list[str], program: str, doc: str,
                flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Parses ``argv`` into ``flag_values``; returns the arguments left.  ``--help``
    prints ``doc``'s first line and the flags by topic, ``--version`` the versions
    (status 0); a flag mistake is one line (status 1)."""
    given = {arg.split("=")[0] for arg in cifar10_flags.own_args(argv)}
    # (absl's short help would list the flags of __main__, the console-script stub here.)
    answer = (helptext.short_help(program, doc, flag_values)
              if given & set(_SHORT_HELP_FLAGS) else
              version_line(program) if "--version" in given else None)
    if answer:
        print(answer)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        sys.exit(0)
    try:
        return flagfiles.parse(flag_values, argv, program)
    except SystemExit:
        if given & set(HELP_FLAGS):  # absl exits with status 1 after --helpfull; not an error
            sys.exit(0)
        raise
    except flags.Error as e:
        message = None
        if program == "cifar10-launch":
            message = cifar10_flags.trainers_flag_hint(e, argv, program)
        message = message or cifar10_flags.flag_error_text(e)
        if program in FILE_PROGRAMS and isinstance(e, flags.UnrecognizedFlagError):
            message += " (a file whose name starts with - goes after --)"
    sys.stderr.write(f"{program}: error: {message} (see {program} --help)\n")
    sys.exit(1)


def version_line(program: str) -> str:
    """``cifar10-train 1.0.0 (TensorFlow 2.21.0, Python 3.11.7)``: this code's version (the
    one setup.py installs), TensorFlow's from its package's metadata (importing it takes
    seconds), ``unknown`` where it is not installed."""
    try:
        tensorflow = metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        tensorflow = "unknown"
    return (f"{program} {cifar10.__version__} (TensorFlow {tensorflow}, "
            f"Python {platform.python_version()})")


class ArgumentParser(argparse.ArgumentParser):
    """argparse for scripts/, a usage error one line and status 1, as the programs'."""

    def error(self, message: str):
        self.exit(1, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run(program: str, main: Callable[[list[str]], None], doc: str,
        define_flags: Callable[[flags.FlagValues], None]) -> None:
    """A program's process: flags defined and parsed, ``main`` run through ``guarded``."""
    define_flags(flags.FLAGS)

    def process_main(argv: list[str]) -> int:
        # SIGTERM as Ctrl-C, so that cleanup code runs.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        set_up_output(program)
        return guarded(program, main, argv)

    if sys.stdout is None:  # started with no standard output (`>&-`)
        sys.stdout = open(os.devnull, "w")
    sys.stdout = WatchedStdout(sys.stdout)
    try:
        app.run(process_main,
                flags_parser=lambda argv: parse_flags(argv, program, doc))
    except BrokenPipeError:
        # Whoever read the output stopped (``| head``): stop quietly, as other tools do.
        stdout_to_devnull(sys.stdout)
        sys.exit(STDOUT_CLOSED)


class WatchedStdout:
    """``sys.stdout`` remembering a failed write's error, for ``guarded``."""

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
    return f"cannot write to standard output ({error.strerror or error})"


def stdout_to_devnull(stdout) -> None:
    """Points ``stdout``'s descriptor at /dev/null, so no later write fails."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stdout.fileno())
    finally:
        os.close(devnull)


def tensorflow_lines_asked(flag_values: flags.FlagValues = flags.FLAGS) -> bool:
    """Whether TensorFlow's lines are asked for (TF_CPP_MIN_LOG_LEVEL=0, -v, placement)."""
    placement = ("log_device_placement" in flag_values
                 and flag_values["log_device_placement"].value)
    verbosity = flag_values["verbosity"]  # -1, absl's default, is warnings: not asked
    asked = bool(verbosity.present) and (verbosity.value or 0) >= 0
    return logs.tensorflow_lines_wanted(os.environ, asked or placement)


def set_up_output(program: str, flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """TensorFlow's log lines and absl's INFO notices only when asked for, warnings as
    ``<program>: warning: ...``.  Called before TensorFlow loads."""
    global _tensorflow_lines
    _tensorflow_lines = tensorflow_lines_asked(flag_values)
    if not _tensorflow_lines:
        logs.hide_native_lines(logs.min_level(os.environ))
    if not flag_values["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # absl's INFO notices (checkpoint saves)
    handler = logging.get_absl_handler()
    handler.setFormatter(logs.ProgramFormatter(program, handler.python_handler.formatter))


def guarded(program: str, main: Callable[[list[str]], None], argv: list[str]) -> int:
    """Calls ``main(argv)``; returns the exit status (1: a mistake the user can fix or a failed
    write to stdout; 130: Ctrl-C or SIGTERM), each but 0 with one last line on stderr."""
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
        if isinstance(e, BrokenPipeError) or getattr(sys.stdout, "error", None) is not e:
            raise
        # The lines still buffered go nowhere, not into a failure at exit.
        with contextlib.suppress(OSError, ValueError):  # (a stream with no descriptor)
            stdout_to_devnull(sys.stdout)
        last_line, status = f"{program}: error: {stdout_error_said(e)}", 1
    # Free what the failed run held, so that what TensorFlow prints then comes first.
    gc.collect()
    try:
        sys.stdout.flush()
    except OSError:  # Ctrl-C on `| tee` ends the reader too; the line still goes out
        stdout_to_devnull(sys.stdout)
    sys.stderr.write(last_line + "\n")
    sys.stderr.flush()
    return status
