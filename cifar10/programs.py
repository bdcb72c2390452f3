"""What the command-line programs share: parsing flags, finding the data and the
checkpoint, reporting errors.

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

from cifar10 import cifar100
from cifar10 import fileformat as ff
from cifar10 import flags as cifar10_flags
from cifar10 import download
from cifar10 import logs
from cifar10 import synthetic
from cifar10.errors import Cifar10Error, DataError

SYNTHETIC_SUBDIR = "synthetic"

# Whether TensorFlow's own log lines are shown (``set_up_output`` decides, from what the
# user asked); quiet unless asked.
_tensorflow_lines = False


def prepare_data(data_dir: str, url: str | None = None, md5: str | None = None,
                 use_synthetic: bool = False,
                 synthetic_records: int = 1000, print_fn=print, dataset: str = "cifar10",
                 label: str = "fine") -> tuple[str, dict[str, int]]:
    """Finds, fetches if needed, and validates the data of a program.

    With ``use_synthetic``, generated data in ``<data_dir>/synthetic`` is used
    (written when missing) and a notice says so; otherwise the real data set
    (``dataset``: 'cifar10' or 'cifar100', the latter with its ``label``: 'fine' or
    'coarse') is downloaded and extracted under ``data_dir`` when missing.

    Returns:
      (the ``cifar-10-batches-bin`` folder, {'train': records, 'test': records}).

    Raises:
      DataError: the data cannot be fetched or a file is missing or corrupt.
    """
    load_tensorflow()
    from cifar10 import data

    generated = False
    if use_synthetic:
        batches_dir = data.batches_dir_of(os.path.join(data_dir, SYNTHETIC_SUBDIR))
        generated = not os.path.isdir(batches_dir)
        if generated:
            try:
                synthetic.write_dataset(os.path.dirname(batches_dir),
                                        records_per_file=synthetic_records)
            except OSError as e:
                raise DataError(f"cannot write generated data in {os.path.dirname(batches_dir)} "
                                f"({e.strerror or e}); choose a --data_dir you can "
                                f"write") from e
    elif dataset == ff.CIFAR100.name:
        extracted = download.maybe_download_and_extract(data_dir, url=url, md5=md5,
                                                        archive=ff.CIFAR100)
        batches_dir = cifar100.batches_dir(extracted, data_dir, label)
    else:
        batches_dir = download.maybe_download_and_extract(data_dir, url=url, md5=md5)
    num_classes = len(data.class_names(batches_dir))
    counts = {split: data.validate_files(data.split_files(batches_dir, split), num_classes)
              for split in ("train", "test")}
    if use_synthetic and not generated and counts["test"] != synthetic_records:
        print_fn(f"NOTE: {batches_dir} already holds generated data of another size; it is "
                 f"used as it is (--synthetic_records={synthetic_records} applies only "
                 f"when it is generated: delete the folder to regenerate).")
    if use_synthetic:
        print_fn(f"NOTE: using SYNTHETIC CIFAR-10-format data in {batches_dir} "
                 f"(generated, not the real CIFAR-10 images; results say nothing about "
                 f"CIFAR-10).")
    elif synthetic.is_synthetic(batches_dir):
        print_fn(f"NOTE: {batches_dir} holds SYNTHETIC data (generated, not CIFAR-10).")
    return batches_dir, counts


def checkpoint_to_use(checkpoint_dir: str, checkpoint: str | None = None) -> str:
    """``checkpoint`` if given, else the latest checkpoint of ``checkpoint_dir``.

    Raises:
      Cifar10Error: ``checkpoint_dir`` holds no complete checkpoint.
    """
    if checkpoint:
        return checkpoint
    from cifar10 import checkpoints

    latest = checkpoints.latest(checkpoint_dir)
    if latest is None:
        raise Cifar10Error(
            f"No checkpoint found in {checkpoint_dir}: train first (cifar10-train "
            f"--train_dir={checkpoint_dir}) or point --checkpoint_dir at a training run")
    return latest.path


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
        # start.  None in sys.modules makes that import fail, which Keras allows.
        sys.modules["matplotlib"] = None
    import tensorflow as tf

    if not _tensorflow_lines:
        tf.get_logger().setLevel("ERROR")
    tf.config.experimental.enable_tensor_float_32_execution(allow_tf32)
    return tf


def run(program: str, main: Callable[[list[str]], None], doc: str,
        define_flags: Callable[[flags.FlagValues], None]) -> None:
    """The process of a program: its flags defined and parsed, ``main`` called through
    ``guarded``, the process ended with the exit status.

    ``doc`` (the entry module's docstring) heads ``--help``; ``define_flags`` (one of
    ``cifar10.flags``' ``define_*_flags``) defines the program's flags.
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
        # stop quietly, as other command-line tools do, not with a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def tensorflow_lines_asked(flag_values: flags.FlagValues = flags.FLAGS) -> bool:
    """Whether the user asked for TensorFlow's own log lines: by setting
    ``TF_CPP_MIN_LOG_LEVEL``, passing ``--verbosity``/``-v``, or asking for
    TensorFlow's placement log, which is made of such lines."""
    placement = ("log_device_placement" in flag_values
                 and flag_values["log_device_placement"].value)
    return logs.tensorflow_lines_wanted(os.environ,
                                        bool(flag_values["verbosity"].present) or placement)


def set_up_output(program: str, flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Decides what else a program's process prints: TensorFlow's C++ and Python
    log lines and absl's INFO notices only when asked (``tensorflow_lines_asked``),
    and the program's warnings as ``<program>: warning: ...``.  Called before
    TensorFlow loads.
    """
    global _tensorflow_lines
    _tensorflow_lines = tensorflow_lines_asked(flag_values)
    if not _tensorflow_lines:
        logs.hide_native_lines()
    if not flag_values["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # absl's INFO notices (checkpoint saves)
    handler = logging.get_absl_handler()
    handler.setFormatter(logs.ProgramFormatter(program, handler.python_handler.formatter))


def guarded(program: str, main: Callable[[list[str]], None], argv: list[str]) -> int:
    """Calls ``main(argv)``; returns the program's exit status.

    0 when it returns; 1 for a mistake the user can fix (``Cifar10Error``, or a
    ``UsageError`` such as a stray argument) and 130 for Ctrl-C or SIGTERM where no
    handler saves work, each with one line on stderr, the last the program prints:
    ``<program>: error: <message>`` or ``<program>: interrupted``.
    """
    try:
        main(argv)
        return 0
    except (Cifar10Error, app.UsageError) as e:
        last_line, status = f"{program}: error: {e}", 1
        if isinstance(e, app.UsageError):
            last_line += f" (see {program} --help)"
    except KeyboardInterrupt:
        last_line, status = f"{program}: interrupted", 130
    # The exception and its frames are gone now: free what the failed run still
    # held (input pipelines, checkpoint readers), so that whatever TensorFlow
    # prints as they go comes before the line that says what went wrong.
    gc.collect()
    sys.stdout.flush()
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
    asked = {arg.split("=")[0] for arg in argv[1:]} & set(_HELP_FLAGS)
    if asked & set(_SHORT_HELP_FLAGS):
        # absl's short help lists only the flags of the __main__ module, which is
        # the console-script stub here; show the program's own flags instead.
        print(f"USAGE: {program} [flags]\n\n{doc.strip()}\n")
        print(flag_values.module_help(cifar10_flags.__name__))
        print("\nTry --helpfull to see absl's own flags too. TensorFlow's own log lines are "
              "hidden;\n-v 0 (absl's --verbosity) or setting TF_CPP_MIN_LOG_LEVEL shows them.")
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        sys.exit(0)
    try:
        return flag_values(argv)
    except SystemExit:
        if asked:  # absl exits with status 1 after --helpfull; help is not an error
            sys.exit(0)
        raise
    except flags.Error as e:
        message = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
        sys.stderr.write(f"{program}: error: {message} (see {program} --help)\n")
        sys.exit(1)


def flagfile_text(flag_values: flags.FlagValues = flags.FLAGS,
                  not_replayed: tuple[str, ...] = ("fresh_start",)) -> str:
    """The program's flags and their values, one per line in absl's flagfile format
    (``--name=value``, ``--name`` / ``--noname``), as ``--flagfile`` reads them.

    Flags left unset (None) are left out; each flag of ``not_replayed`` (booleans
    that delete something) is written as false, so that replaying the file never
    does that again.
    """
    lines = []
    for flag in flag_values.get_flags_for_module(cifar10_flags.__name__):
        if flag.name in not_replayed:
            lines.append(f"--no{flag.name}")
        elif flag.value is not None:
            lines.append(flag.serialize())
    return "".join(f"{line}\n" for line in lines)

