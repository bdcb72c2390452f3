"""What the command-line programs share: parsing flags, finding the checkpoint,
reporting errors (the data they read is found by ``getdata``).

Mistakes a user can fix (a bad flag, a stray argument, a ``Cifar10Error``) become
one line on stderr, ``<program>: error: <message>``, and exit status 1, never a
traceback.  ``run`` is a program's process; ``parse_flags`` and ``guarded`` are its
two halves, which tests also call in their own process.

TensorFlow is imported (``load_tensorflow``) only once the flags are parsed and
checked, so that ``--help`` and setting mistakes are answered at once instead of
after seconds of loading.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from typing import Callable

from absl import app
from absl import flags
from absl import logging

from cifar10.cli import flag_errors
from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import outdirs
from cifar10.core import logs
from cifar10.core.errors import Cifar10Error

# The flags whose values are paths on this machine.
PATH_FLAGS = cifar10_flags.PATH_FLAGS

# The programs that take file names after their flags (a name that starts with a dash
# is taken for a flag unless it follows a --).
FILE_PROGRAMS = ("cifar10-predict",)

# The programs that record their flags in flags.txt (``flagfile_text``), for replay.
RECORDING_PROGRAMS = ("cifar10-train", "cifar10-eval")

# The exit status of a program whose standard output was closed (``| head``): 128 +
# SIGPIPE, as a shell reports a program that a closed pipe ended.
STDOUT_CLOSED = 128 + signal.SIGPIPE

# Whether TensorFlow's own log lines are shown (``set_up_output`` decides, from what the
# user asked); quiet unless asked.
_tensorflow_lines = False


def load_tensorflow(allow_tf32: bool = False, plots: bool = False):
    """Imports TensorFlow (which takes seconds), its Python warnings hidden unless
    the user asked for TensorFlow's lines (see ``set_up_output``).

    The programs call it once their flags and settings are checked.  float32
    stays float32: on GPUs with TensorFloat-32 (Ampere, Hopper) TensorFlow would
    otherwise run float32 convolutions and matmuls with 10-bit mantissas;
    ``allow_tf32`` lets it.  Only a program that draws (``plots``: cifar10-eval)
    lets TensorFlow load matplotlib.
    """
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

    if not _tensorflow_lines:
        tf.get_logger().setLevel(logs.python_level(os.environ))
    tf.config.experimental.enable_tensor_float_32_execution(allow_tf32)
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

    try:
        app.run(process_main, flags_parser=lambda argv: parse_flags(argv, program, doc))
    except BrokenPipeError:
        # Whoever read the output stopped reading (``cifar10-predict photos/ | head``):
        # stop quietly, as other command-line tools do, not with a traceback, with the
        # status a shell gives a program that a closed pipe ended (128 + SIGPIPE).
        # cifar10-train saves first (``stopping``).
        stdout_to_devnull(sys.stdout)
        sys.exit(STDOUT_CLOSED)


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
    ``UsageError`` such as a stray argument) and 130 for Ctrl-C or SIGTERM where no
    handler saves work, each with one line on stderr, the last the program prints:
    ``<program>: error: <message>`` or ``<program>: interrupted`` (followed by the
    interrupt's message, if it has one: ``before training started; ...``).
    """
    try:
        main(argv)
        return 0
    except (Cifar10Error, app.UsageError) as e:
        last_line, status = f"{program}: error: {e}", 1
        if isinstance(e, app.UsageError):
            last_line += f" (see {program} --help)"
    except KeyboardInterrupt as e:  # (its message, if any, says what was left undone)
        last_line, status = f"{program}: interrupted{f' {e}' if str(e) else ''}", 130
    # The exception and its frames are gone now: free what the failed run still
    # held (input pipelines, checkpoint readers), so that whatever TensorFlow
    # prints as they go comes before the line that says what went wrong.
    gc.collect()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # Ctrl-C on `| tee` ends the reader too: the line still goes out
        stdout_to_devnull(sys.stdout)
    sys.stderr.write(last_line + "\n")
    sys.stderr.flush()
    return status


_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")
_SHORT_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort")


def parse_flags(argv: list[str], program: str, doc: str,
                flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Parses ``argv`` into ``flag_values``; returns the arguments left.

    ``--help`` prints the program's flags (``doc`` first) and exits with status 0; a
    flag mistake prints ``<program>: error: <message>`` and exits with status 1.
    """
    own = argv[1:argv.index("--")] if "--" in argv else argv[1:]  # after --: another's
    asked = {arg.split("=")[0] for arg in own} & set(_HELP_FLAGS)
    if asked & set(_SHORT_HELP_FLAGS):
        # absl's short help lists only the flags of the __main__ module, which is
        # the console-script stub here; show the program's own flags instead.
        print(f"USAGE: {program} [flags]\n\n{doc.strip()}\n")
        print(flag_values.module_help(cifar10_flags.__name__))
        print("\nTry --helpfull to see absl's own flags too. TensorFlow's own log lines are "
              "hidden;\n-v 0 (absl's --verbosity) or TF_CPP_MIN_LOG_LEVEL=0 shows them (1 "
              "to 3: those of\nlevel W, E or F and above).")
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        sys.exit(0)
    try:
        rest = flagfiles.parse(flag_values, argv, program)
        _refuse_paths_not_utf8(flag_values)
        _refuse_unexpanded_tilde(flag_values)
        outdirs.refuse_folders_that_are_not(flag_values)
        if program in RECORDING_PROGRAMS:
            _refuse_values_flags_txt_cannot_hold(flag_values)
    except SystemExit:
        if asked:  # absl exits with status 1 after --helpfull; help is not an error
            sys.exit(0)
        raise
    except flagfiles.FlagfileError as e:
        message = str(e)
    except flags.Error as e:
        message = (_trainers_flag(e, argv, program) or _file_name_taken_for_a_flag(e, argv, program)
                   or flag_errors.flag_error_text(e))
    else:
        return rest
    sys.stderr.write(f"{program}: error: {message} (see {program} --help)\n")
    sys.exit(1)


def _refuse_paths_not_utf8(flag_values: flags.FlagValues) -> None:
    """A path flag whose value is not UTF-8 (bytes the file system allows) is a flag
    error: the runs' records (flags.txt, environment.jsonl) are UTF-8 text, and
    TensorFlow reads and writes checkpoints and SavedModels by UTF-8 names."""
    for name in PATH_FLAGS:
        value = flag_values[name].value if name in flag_values else None
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                why = _TENSORFLOW_NAMES if name in _TENSORFLOW_PATHS else _RECORDED_NAMES
                raise flags.Error(f"--{name}={os.fsencode(value)!r} is not UTF-8: choose a "
                                  f"name in UTF-8 ({why})") from None


def _refuse_unexpanded_tilde(flag_values: flags.FlagValues) -> None:
    """A path flag whose value starts with a ~ the shell left as it is (it expands none
    after '=': ``--data_dir=~/data``) is a flag error: taken as it is, it would make a
    folder named ~ in the current folder (and a later ``rm -rf ~`` of it, the home)."""
    found = cifar10_flags.unexpanded_tildes(flag_values)
    if found:
        name, value, home = found[0]
        raise flags.Error(
            f"--{name}={value} starts with a ~ that was not expanded (the shell does "
            f"not expand a ~ after '='): write --{name} {value} or --{name}={home}; "
            f"for a folder named ~, write ./{value}")


# Why a path flag's value must be UTF-8.
_RECORDED_NAMES = "the run's records, flags.txt and environment.jsonl, are UTF-8 text"
_TENSORFLOW_NAMES = "TensorFlow reads and writes checkpoints and SavedModels by UTF-8 names"
_TENSORFLOW_PATHS = ("checkpoint_dir", "checkpoint", "export_dir")


def _refuse_values_flags_txt_cannot_hold(flag_values: flags.FlagValues) -> None:
    """A string flag whose value flags.txt cannot give back on replay is a flag error:
    absl reads a flag file a line at a time (``\\n``, ``\\r``) and strips each line, so
    a line break would split the value (and could set another flag) and white space
    at its end would be dropped."""
    for flag in flag_values.get_flags_for_module(cifar10_flags.__name__):
        value = flag.value
        if not isinstance(value, str):
            continue
        if "\n" in value or "\r" in value:
            problem = "holds a line break, which would end its line"
        elif value != value.rstrip():
            problem = "ends with white space, which would be dropped"
        else:
            continue
        raise flags.Error(f"--{flag.name}={value!r} {problem} in the run's flags.txt (one "
                          f"flag per line, replayed with --flagfile): choose a value without it")


def _trainers_flag(error: flags.Error, argv: list[str], program: str) -> str | None:
    """cifar10-launch's error for one of cifar10-train's flags given before its ``--``
    (``launch_args.trainers_flag_hint``), or None."""
    if program != "cifar10-launch":
        return None
    from cifar10.cli import launch_args  # the launcher's own, loaded for its error alone

    return launch_args.trainers_flag_hint(error, argv, program)


def _file_name_taken_for_a_flag(error: flags.Error, argv: list[str], program: str
                                ) -> str | None:
    """The error for a file name that starts with a dash (``-y.jpg``), which absl
    takes for an unknown flag, given to a program that takes file names
    (``FILE_PROGRAMS``): an existing file's name or an image file's; or None."""
    if program not in FILE_PROGRAMS or not isinstance(error, flags.UnrecognizedFlagError):
        return None
    from cifar10.data import imagefiles  # no TensorFlow

    own = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    name = next((arg for arg in own if arg.startswith("-")
                 and arg.lstrip("-").split("=")[0] == error.flagname), None)
    if name is None or not (os.path.exists(name)
                            or name.lower().endswith(imagefiles.IMAGE_EXTENSIONS)):
        return None
    after = argv[argv.index("--") + 1:] if "--" in argv else []
    others = [arg for arg in own if arg != name]
    return (f"{name} is taken for a flag (unknown flag --{error.flagname}): name that file "
            f"./{name}, or put the file names after --, as in "
            f"{' '.join([program, *others, '--', *after, name])}")


def flagfile_text(flag_values: flags.FlagValues = flags.FLAGS,
                  not_replayed: tuple[str, ...] = ("fresh_start",)) -> str:
    """The program's flags and their values, one per line in absl's flagfile format
    (``--name=value``, ``--name`` / ``--noname``), as ``--flagfile`` reads them.

    Paths (``PATH_FLAGS``) are written absolute.  Flags left unset (None) are left
    out; each flag of ``not_replayed`` (booleans that delete something) is written
    as false, so that replaying the file never does that again.  A flag of
    ``cifar10_flags.UNSET_IS_NOT_DEFAULT`` that was not given is written commented
    out (``# --num_gpus=1``): its value stays on record (``records.recorded_starts``
    reads it) and a replay leaves it unset, as the start did.
    """
    lines = []
    for flag in flag_values.get_flags_for_module(cifar10_flags.__name__):
        if flag.name in cifar10_flags.UNSET_IS_NOT_DEFAULT and not flag.present:
            lines.append(f"# {flag.serialize()}")
        elif flag.name in not_replayed:
            lines.append(f"--no{flag.name}")
        elif flag.name in PATH_FLAGS and isinstance(flag.value, str):
            # Absolute, so that a replay from another directory finds the same run.
            lines.append(f"--{flag.name}={os.path.abspath(flag.value)}")
        elif flag.value is not None:
            lines.append(flag.serialize())
    return "".join(f"{line}\n" for line in lines)

