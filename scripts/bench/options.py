"""Training options timed in turns against the default: (l) --deterministic and
(m) --steps_per_loop at batch 1 per replica, where the host's share of a step shows."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import tensorflow as tf

from bench import measure, programs
from cifar10.data import pipeline as data
from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.core.config import STEPS_PER_LOOP

# The entry point, which (m) starts once per replica count with --loop_only.
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "benchmark.py")


def _rates(args, strategy, train_files, count, train_dir, windows, deterministic
           ) -> list[float]:
    """Examples/sec of each window but the first (the warm-up) of a training run."""
    config = measure.train_config(args, train_dir, max_steps=(windows + 1) * args.window_steps,
                                  log_frequency=args.window_steps, checkpoint_steps=10**9,
                                  deterministic=deterministic)
    reports = measure.train_reports(config, strategy, train_files, count)
    return [r.examples_per_sec for r in reports if r.step > args.window_steps]


def determinism(args, strategy: tf.distribute.Strategy, train_files: list[str], count: int,
                work: str) -> tuple[float, float, float]:
    """(l): end-to-end examples/sec of normal and of --deterministic training, ``turns``
    runs of each in turns (medians of their windows after one warm-up window), and the
    seconds a pipeline resumed at step 1,000 takes to reach its first batch."""
    windows = max(2, args.windows // 2)
    rates = {False: [], True: []}
    for turn in range(args.turns):
        for deterministic in rates:
            rates[deterministic] += _rates(
                args, strategy, train_files, count,
                os.path.join(work, f"determinism-{turn}-{deterministic}"), windows,
                deterministic)
    _, resumed = measure.timed(
        lambda: next(iter(data.train_dataset(train_files, args.batch_size, skip_batches=1000))))
    _, fresh = measure.timed(lambda: next(iter(data.train_dataset(train_files,
                                                                  args.batch_size))))
    return statistics.median(rates[False]), statistics.median(rates[True]), resumed - fresh


def loop_step_times(args, strategy: tf.distribute.Strategy, work: str) -> dict[int, float]:
    """(m), in this process's strategy: {steps_per_loop: median ms per step} at batch
    1 per replica, for 1 and the default, ``turns`` runs of each in turns (windows of
    ``loop_window_steps`` after one warm-up window)."""
    batches_dir = synthetic.write_dataset(os.path.join(work, "loop-data"), records_per_file=200)
    files = datafolder.split_files(batches_dir, "train")
    count = datafolder.validate_files(files)
    window = args.loop_window_steps
    times = {1: [], STEPS_PER_LOOP: []}
    for turn in range(args.turns):
        for steps_per_loop in times:
            config = measure.train_config(
                args, os.path.join(work, f"loop-{turn}-{steps_per_loop}"), batch_size=1,
                max_steps=(args.windows + 1) * window, log_frequency=window,
                checkpoint_steps=10**9, summary_steps=10**9, steps_per_loop=steps_per_loop,
                initial_learning_rate=0.001)  # batch 1 diverges at 0.1; the time is the same
            reports = measure.train_reports(config, strategy, files, count)
            times[steps_per_loop] += [1000 * r.sec_per_batch * strategy.num_replicas_in_sync
                                      for r in reports if r.step > window]
    return {k: statistics.median(v) for k, v in times.items()}


def loop_times_in_process(args, replicas: int, work: str) -> tuple[float, float]:
    """(m)'s ms per step with 1 and the default steps per loop, measured by
    loop_step_times in a process of its own with ``replicas`` replicas (the
    logical devices are fixed once a process has made its strategy)."""
    command = [sys.executable, SCRIPT, "--loop_only", f"--num_gpus={replicas}",
               f"--windows={args.windows}", f"--loop_window_steps={args.loop_window_steps}",
               f"--turns={args.turns}",
               *[f"--{name}" for name in ("use_fp16", "use_bf16", "xla") if getattr(args, name)]]
    out = programs.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=programs.child_env(work, PYTHONPATH=os.pathsep.join(sys.path)))
    if out.returncode != 0:
        raise RuntimeError(f"(m) with {replicas} replicas failed: {out.stderr.strip()}")
    times = json.loads(out.stdout.strip().splitlines()[-1])
    return times["1"], times[str(STEPS_PER_LOOP)]


def loop_times_json(times: dict[int, float]) -> str:
    """loop_step_times' result as the --loop_only process prints it."""
    return json.dumps({str(k): v for k, v in times.items()})
