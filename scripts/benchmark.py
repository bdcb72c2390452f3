"""Measures how fast cifar10 trains and evaluates on this machine, and prints it.

    python scripts/benchmark.py                       # 1 replica, batch 128, float32
    python scripts/benchmark.py --num_gpus=2          # 2 replicas (logical devices on CPU)
    python scripts/benchmark.py --use_fp16 --xla
    python scripts/benchmark.py --use_bf16            # bfloat16 compute

Prints, each the median of several timed windows after a warm-up:
  (a) train step alone, on one in-memory batch (examples/sec over all replicas),
      timed in turns with the windows of (c);
  (b) the input pipeline alone, on CIFAR-format files;
  (c) end-to-end training with cifar10.training.controller.train (what the log line reports),
      after a first epoch of warm-up (its rate is shown too; the in-memory cache
      of decoded records is filled before the first step);
  (d) evaluation of the test file with the evaluator's scoring pass
      (cifar10.evaluation.scoring.make_scorer);
  (e) seconds from launching cifar10-train to its first step, data on disk;
  (f) peak resident memory of that cifar10-train process;
  (g) the speed of this machine: float32 matmul GFLOP/s (bfloat16 with
      --use_bf16), and the compute ceiling it sets for training (the train
      step's FLOPs per example at that rate);
  (h) the SavedModel of cifar10-export serving encoded PNG images, images/sec at
      batch 1 and batch 128 (the checkpoint of (c));
  (i) cifar10-predict on a folder of PNG images, from launch to its last line;
  (j) cifar10-prepare's conversion of a folder of 32x32 PNG images in 10 class
      folders into CIFAR-10 files, images/sec;
  (k) where a train step's time goes: each layer's forward and backward pass
      (the LRNs, pools, convolutions, ...), run one layer at a time on a batch,
      in milliseconds and as a share of their sum;
  (l) --deterministic training, as a ratio to normal training (timed in turns),
      and what a resumed deterministic run spends skipping the steps done;
  (m) the time of a step at batch 1 per replica, where the host's share shows as it
      would on a GPU, with --steps_per_loop=1 and the default, timed in turns, for 1
      and 4 replicas (each count in a process of its own);
  (n) what each compiled kernel saves: the train step alone without one kernel at a
      time, and with TensorFlow's ops alone, against all the kernels, in turns.
--figures measures some of them only (--figures=k,n); --skip_launch leaves out (e)
and (f).  It generates full-size CIFAR-format data (50,000 + 10,000 records) in a temporary
directory when --data_dir is not given, so it runs offline.  Ctrl-C and SIGTERM stop it
(status 130) and a closed standard output (status 141), as they stop the programs: the
program it started stopped and waited for, the temporary directory removed.

This file parses the command line; the figures are in scripts/bench/ (its
__init__ lists which module measures which), and TensorFlow loads only after the
arguments are checked.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

try:
    from cifar10.cli.entry import INTERRUPTED, interrupts_kept
    from cifar10.cli.process import STDOUT_CLOSED, stdout_to_devnull
    from cifar10.core import logs, memory
    from cifar10.core.config import KERNEL_CHOICES
    from cifar10.core.errors import Cifar10Error
    from cifar10.data.fileformat import BATCHES_DIRNAME, RECORDS_PER_REAL_FILE
    from cifar10.cli.script_args import ArgumentParser
except ImportError as e:
    sys.exit(f"benchmark.py: error: {sys.executable} cannot import the cifar10 package "
             f"({e}); run this script with the Python the package is installed in "
             f"(e.g. .venv/bin/python scripts/benchmark.py)")

FIGURE_LETTERS = "abcdefghijklmn"  # the figures above, (a) to (n)

# The exit statuses of the programs (cifar10.cli): a usage error 1, as any error
# (``script_args.USAGE_ERROR``); a stop by Ctrl-C or SIGTERM ``entry.INTERRUPTED``
# (130); a standard output that was closed (``| head``) ``process.STDOUT_CLOSED`` (141).

# The memory generating one record of the data takes (numpy's float64 image and its
# temporaries: 114 KB, measured with tracemalloc), so that a --records_per_file whose
# file cannot be generated in this machine's memory is a usage error, not numpy's
# ArrayMemoryError seconds later.
GENERATED_RECORD_BYTES = 120_000

# Before TensorFlow is imported: its C++ log lines kept off the figures, as in the
# programs, unless TF_CPP_MIN_LOG_LEVEL asks for them (docs/output.md).
if __name__ == "__main__" and not logs.tensorflow_lines_wanted(os.environ, False):
    logs.hide_native_lines(logs.min_level(os.environ))


def parse_args(argv):
    p = ArgumentParser(prog="benchmark.py", description=__doc__.splitlines()[0])
    p.add_argument("--num_gpus", type=int, default=None,
                   help="replicas (as cifar10-train; default: one, on the CPU without a "
                        "warning where there is no GPU)")
    p.add_argument("--batch_size", type=int, default=128, help="examples per replica")
    p.add_argument("--use_fp16", action="store_true", help="float16 compute")
    p.add_argument("--use_bf16", action="store_true", help="bfloat16 compute")
    p.add_argument("--xla", action="store_true", help="compile the replica step with XLA")
    p.add_argument("--kernels", choices=KERNEL_CHOICES, default="auto",
                   help="the compiled kernels or TensorFlow's ops (as cifar10-train)")
    p.add_argument("--lrn_kernel", dest="kernels", choices=KERNEL_CHOICES,
                   help=argparse.SUPPRESS)  # --kernels' former name
    p.add_argument("--data_dir", help="folder holding cifar-10-batches-bin (default: generate)")
    p.add_argument("--windows", type=int, default=7, help="timed windows per figure")
    p.add_argument("--window_steps", type=int, default=40, help="steps per timed window")
    p.add_argument("--warmup_steps", type=int, default=20, help="untimed steps first")
    p.add_argument("--records_per_file", type=int, default=RECORDS_PER_REAL_FILE,
                   help="records per file of generated data")
    p.add_argument("--figures", default=",".join(FIGURE_LETTERS),
                   help="the figures to measure, letters from a to n (either case) separated "
                        "by commas, such as k,n (default: all; (h) and (i) bring (a)-(c) "
                        "along)")
    p.add_argument("--skip_launch", action="store_true",
                   help="skip (e) and (f), which start cifar10-train in a subprocess")
    p.add_argument("--predict_images", type=int, default=1000,
                   help="PNG images in the folder of (i)")
    p.add_argument("--prepare_images", type=int, default=6000,
                   help="PNG images converted in (j)")
    p.add_argument("--loop_window_steps", type=int, default=300,
                   help="steps per timed window of (m)")
    p.add_argument("--turns", type=int, default=2,
                   help="runs of each variant of (l) and (m), timed in turns")
    p.add_argument("--loop_only", action="store_true", help=argparse.SUPPRESS)  # (m)'s processes
    args = p.parse_args(argv)
    _check(p, args)
    args.figures = _figures(p, args.figures, args.skip_launch)
    return args


def _check(p: argparse.ArgumentParser, args) -> None:
    """Refuses the values no run can take, each with one line naming the flag."""
    for name in ("batch_size", "windows", "window_steps", "records_per_file", "predict_images",
                 "prepare_images", "loop_window_steps", "turns"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("num_gpus", "warmup_steps"):
        if (getattr(args, name) or 0) < 0:
            p.error(f"--{name} must be at least 0, got {getattr(args, name)}")
    if args.use_fp16 and args.use_bf16:
        p.error("--use_fp16 and --use_bf16 exclude each other: pass at most one of them")
    try:  # as the trainer refuses it: TensorFlow would not say so (a crash, an overflow)
        memory.refuse_batch_beyond_memory(args.batch_size,
                                          2 if args.use_fp16 or args.use_bf16 else 4)
    except Cifar10Error as e:
        p.error(str(e))
    if args.data_dir is not None and not os.path.isdir(
            os.path.join(args.data_dir, BATCHES_DIRNAME)):
        p.error(f"--data_dir={args.data_dir} holds no {BATCHES_DIRNAME}/: pass the folder that "
                f"holds it (the benchmark downloads nothing), or leave --data_dir out to "
                f"time generated data")
    if args.data_dir is None:
        _refuse_data_beyond_memory(p, args.records_per_file)


def _refuse_data_beyond_memory(p: argparse.ArgumentParser, records: int,
                               total: int | None = None) -> None:
    """Refuses a --records_per_file whose file takes more memory to generate than the
    machine has (``total`` bytes; default: this machine's, or what a 64-bit machine
    can address where it is not known)."""
    total = total or memory.total_memory()
    held = f"this machine's {total / 1e9:.1f} GB" if total else "a 64-bit machine can address"
    total = total or memory.ADDRESSABLE
    needed = records * GENERATED_RECORD_BYTES
    if needed > total:
        p.error(f"--records_per_file={records} cannot be generated: a file of that many "
                f"records takes about {needed / 1e9:.3g} GB of memory, more than {held}; "
                f"give at most {total // GENERATED_RECORD_BYTES} (CIFAR-10's files hold "
                f"{RECORDS_PER_REAL_FILE})")


def _figures(p: argparse.ArgumentParser, given: str, skip_launch: bool) -> str:
    """The letters of the figures --figures names (in print order, each once; without
    (e) and (f) under --skip_launch)."""
    letters = [letter.strip() for letter in given.lower().split(",")]
    if any(letter not in FIGURE_LETTERS or not letter for letter in letters):
        p.error(f"--figures takes letters from a to {FIGURE_LETTERS[-1]} ({FIGURE_LETTERS}, "
                f"either case) separated by single commas, such as --figures=k,n; "
                f"got {given!r}")
    figures = "".join(letter for letter in FIGURE_LETTERS
                      if letter in letters and not (skip_launch and letter in "ef"))
    if not figures:
        p.error(f"--figures={given} --skip_launch leaves no figure to measure")
    return figures


def main(argv=None) -> int:
    """Runs the benchmark; returns its exit status.

    A stop ends as the programs' do, the temporary folder removed on the way out
    (``report.run``): Ctrl-C (and SIGTERM, which the script's process takes as one)
    with ``benchmark.py: interrupted`` and status 130; a standard output that was
    closed (``| head``) quietly, with status 141.
    """
    args = parse_args(argv)
    try:
        # TensorFlow loads here, once the arguments are good; a Ctrl-C as it loads stops
        # the script even where TensorFlow's own imports would swallow it.
        with interrupts_kept():
            from bench import report
        return report.run(args)
    except Cifar10Error as e:  # damaged data in --data_dir: one line, as the programs say
        print(f"benchmark.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("benchmark.py: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        stdout_to_devnull(sys.stdout)  # the lines still buffered go nowhere, not into a traceback
        return STDOUT_CLOSED


def _warnings_as_own_lines() -> None:
    """Warnings as ``benchmark.py: warning: ...``, as the programs print theirs, and
    TensorFlow's Python warnings (retracing of the trainers (n) makes in turn) hidden
    unless TF_CPP_MIN_LOG_LEVEL asks for TensorFlow's lines.  For the script's own
    process only: the tests call ``main`` in theirs."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logs.ProgramFormatter(os.path.basename(__file__)))
    absl_logger = logging.getLogger("absl")
    if not any(isinstance(h.formatter, logs.ProgramFormatter) for h in absl_logger.handlers):
        absl_logger.addHandler(handler)
    absl_logger.propagate = False
    if not logs.tensorflow_lines_wanted(os.environ, False):
        logging.getLogger("tensorflow").setLevel(logging.ERROR)


if __name__ == "__main__":
    # SIGTERM (`timeout`, a job scheduler) as Ctrl-C, as the programs take it: the
    # temporary folder is removed on the way out, where the default action would leave it.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    _warnings_as_own_lines()
    sys.exit(main())
