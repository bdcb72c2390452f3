"""Measures how fast cifar10 trains and evaluates on this machine, and prints it.

    python scripts/benchmark.py                       # 1 replica, batch 128, float32
    python scripts/benchmark.py --num_gpus=2          # 2 replicas (logical devices on CPU)
    python scripts/benchmark.py --use_fp16 --xla
    python scripts/benchmark.py --use_bf16            # bfloat16 compute

Prints, each the median of several timed windows after a warm-up:
  (a) train step alone, on one in-memory batch (examples/sec over all replicas),
      timed in turns with the windows of (c);
  (b) the input pipeline alone, on CIFAR-format files, per host core (those this
      process may use), and the replicas it feeds at (a)'s rate per replica;
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
      batch 1 and batch 128 (the checkpoint of (c)); each TFLite file of
      --tflite=float32,float16,dynamic,int8, its size and ms per image at batch 1 (LiteRT);
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
      and 4 replicas (each count in a process of its own; on 1-3 GPUs the 4 share
      them as --replicas_per_gpu slices);
  (n) what each compiled kernel saves: the train step alone without one kernel at a
      time, and with TensorFlow's ops alone, against all the kernels, in turns.
--figures measures some of them only (--figures=k,n); --skip_launch leaves out (e)
and (f).  Without --data_dir it generates full-size CIFAR-format data in a temporary
folder, so it runs offline.  Ctrl-C and SIGTERM stop it (status 130), a closed standard
output too (141): the program it started stopped, the temporary folder removed.
The figures are measured in scripts/bench/; TensorFlow loads once the arguments are good.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

try:
    from cifar10.cli.entry import INTERRUPTED, interrupts_kept
    from cifar10.cli.process import (STDOUT_CLOSED, ArgumentParser, load_tensorflow,
                                     stdout_to_devnull)
    from cifar10.core import logs, machine
    from cifar10.core.config import ALL_REDUCE, KERNEL_CHOICES
    from cifar10.core.errors import Cifar10Error
    from cifar10.data.fileformat import BATCHES_DIRNAME, RECORDS_PER_REAL_FILE
except ImportError as e:
    sys.exit(f"benchmark.py: error: {sys.executable} cannot import the cifar10 package "
             f"({e}); run this script with the Python the package is installed in "
             f"(e.g. .venv/bin/python scripts/benchmark.py)")

FIGURE_LETTERS = "abcdefghijklmn"  # the figures above, (a) to (n)

# TensorFlow's C++ log lines kept off the figures, as in the programs (docs/output.md).
if __name__ == "__main__" and not logs.tensorflow_lines_wanted(os.environ, False):
    logs.hide_native_lines(logs.min_level(os.environ))


def parse_args(argv):
    p = ArgumentParser(prog="benchmark.py", description=__doc__.splitlines()[0])
    p.add_argument("--num_gpus", type=int, default=None,
                   help="replicas (as cifar10-train; default: one, on the CPU without a "
                        "warning where there is no GPU)")
    p.add_argument("--replicas_per_gpu", type=int, default=1,
                   help="replicas on logical slices of each GPU (as cifar10-train)")
    p.add_argument("--all_reduce", choices=ALL_REDUCE, default="auto",
                   help="how the replicas add up their gradients (as cifar10-train)")
    p.add_argument("--batch_size", type=int, default=128, help="examples per replica")
    p.add_argument("--use_fp16", action="store_true", help="float16 compute")
    p.add_argument("--use_bf16", action="store_true", help="bfloat16 compute")
    p.add_argument("--allow_tf32", action="store_true",
                   help="float32 convolutions and matmuls as TensorFloat-32 (as cifar10-train)")
    p.add_argument("--xla", action="store_true", help="compile the replica step with XLA")
    p.add_argument("--kernels", choices=KERNEL_CHOICES, default="auto",
                   help="the compiled kernels or TensorFlow's ops (as cifar10-train)")
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
    for name, least in (("batch_size", 1), ("windows", 1), ("window_steps", 1),
                        ("records_per_file", 1), ("predict_images", 1), ("prepare_images", 1),
                        ("loop_window_steps", 1), ("turns", 1), ("num_gpus", 0),
                        ("replicas_per_gpu", 1),
                        ("warmup_steps", 0)):
        if (getattr(args, name) or 0) < least:
            p.error(f"--{name} must be at least {least}, got {getattr(args, name)}")
    if args.use_fp16 and args.use_bf16:
        p.error("--use_fp16 and --use_bf16 exclude each other: pass at most one of them")
    try:  # as the trainer refuses it
        machine.refuse_batch_beyond_memory(args.batch_size,
                                           2 if args.use_fp16 or args.use_bf16 else 4)
    except Cifar10Error as e:
        p.error(str(e))
    if args.data_dir is not None and not os.path.isdir(
            os.path.join(args.data_dir, BATCHES_DIRNAME)):
        p.error(f"--data_dir={args.data_dir} holds no {BATCHES_DIRNAME}/: pass the folder that "
                f"holds it (the benchmark downloads nothing), or leave --data_dir out to "
                f"time generated data")


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
    """Runs the benchmark; returns its exit status (130 on Ctrl-C or SIGTERM, 141 where
    standard output was closed), the temporary folder removed on the way out."""
    args = parse_args(argv)
    try:
        # float32 stays float32, as in training; the GPUs as make_strategy chooses them
        load_tensorflow(allow_tf32=args.allow_tf32, gpus=None)
        with interrupts_kept():  # a Ctrl-C as TensorFlow loads stops the script
            from bench import report
        return report.run(args)
    except (Cifar10Error, MemoryError) as e:  # damaged data, a --records_per_file too large
        print(f"benchmark.py: error: {e or 'out of memory'}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("benchmark.py: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        stdout_to_devnull(sys.stdout)  # the lines still buffered go nowhere
        return STDOUT_CLOSED


def _warnings_as_own_lines() -> None:
    """Warnings as ``benchmark.py: warning: ...``, as the programs print theirs, and
    TensorFlow's Python warnings hidden unless TF_CPP_MIN_LOG_LEVEL asks for them."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logs.ProgramFormatter(os.path.basename(__file__)))
    absl_logger = logging.getLogger("absl")
    absl_logger.addHandler(handler)
    absl_logger.propagate = False
    if not logs.tensorflow_lines_wanted(os.environ, False):
        logging.getLogger("tensorflow").setLevel(logging.ERROR)


if __name__ == "__main__":
    # SIGTERM (`timeout`, a job scheduler) as Ctrl-C: the temporary folder is removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    _warnings_as_own_lines()
    sys.exit(main())
