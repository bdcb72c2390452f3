"""Training's figures: (a) the train step alone, (b) the input pipeline alone, (c)
end-to-end; (l) --deterministic and (m) --steps_per_loop against the default, and (n)
the step without each compiled kernel, each timed in turns."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Callable

import tensorflow as tf

from bench import measure, programs
from cifar10.core.config import CROP_SIZE, STEPS_PER_LOOP
from cifar10.data import folder as datafolder
from cifar10.data import pipeline as data
from cifar10.data import synthetic
from cifar10.distribute import devices
from cifar10.kernels.layers import KernelChoice, tensorflow_ops
from cifar10.training.engine import Trainer

# The entry point, which (m) starts once per replica count with --loop_only.
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "benchmark.py")


def step_alone(args, strategy: tf.distribute.Strategy, train_dir: str,
               kernels: KernelChoice | None = None) -> Callable[[], float]:
    """(a): warms up the train step on one in-memory batch (``kernels``: the model's
    layer functions; default: as ``args.kernels`` chooses); returns a function that
    times one window of it: examples/sec."""
    trainer = Trainer(measure.train_config(args, train_dir), strategy, kernels=kernels)
    images = tf.random.stateless_normal([args.batch_size, CROP_SIZE, CROP_SIZE, 3],
                                        seed=(1, 2))
    labels = tf.random.stateless_uniform([args.batch_size], (3, 4), 0, 10, tf.int32)
    # Fed as training is fed: one pipeline per replica, no autotuning.
    batches = data.without_autotuning(tf.data.Dataset.from_tensors((images, labels)).repeat())
    it = iter(strategy.distribute_datasets_from_function(lambda ctx: batches,
                                                         devices.input_options(strategy)))

    # A window is one loop in TensorFlow, its figures read once, as training runs it
    # (a call per step would wait for each step's figures on the host).
    trainer.run_steps(it, args.warmup_steps)  # (no steps: it is traced all the same)
    return lambda: measure.rate(lambda: trainer.run_steps(it, args.window_steps),
                                args.window_steps * trainer.global_batch)


def input_alone(args, train_files: list[str], replicas: int) -> float:
    """(b): examples/sec of the training input pipeline on CIFAR-format files, one
    pipeline feeding ``replicas`` (as a worker's feeds its GPUs), as training reads it:
    in a loop in TensorFlow, batches in the order they are ready (not --deterministic)."""
    context = tf.distribute.InputContext(num_replicas_in_sync=replicas)
    it = iter(data.train_dataset(train_files, args.batch_size, input_context=context,
                                 deterministic=False))  # reads its files
    steps = args.window_steps * 10  # a window of 30 batches is too short to time well

    @tf.function
    def read(batches: tf.Tensor) -> tf.Tensor:
        total = tf.constant(0.0)
        for _ in tf.range(batches):
            images, _ = next(it)
            total += images[0, 0, 0, 0]
        return total

    read(tf.constant(args.warmup_steps)).numpy()
    return measure.median_rate(lambda: read(tf.constant(steps)).numpy(), args.windows,
                               steps * args.batch_size)


def end_to_end(args, strategy: tf.distribute.Strategy, train_files: list[str], count: int,
               train_dir: str, time_step: Callable[[], float]
               ) -> tuple[float, float, float]:
    """(c): the medians of training's steady-state and first-epoch examples/sec, and of
    (a), a window of which runs after each of training's (from the log callback, while
    training waits), so that a machine whose speed drifts biases neither."""
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    warmup = max(args.warmup_steps, -(-count // global_batch))  # at least one epoch
    warmup = -(-warmup // args.window_steps) * args.window_steps  # whole windows
    steps = warmup + args.windows * args.window_steps
    config = measure.train_config(args, train_dir, max_steps=steps,
                                  log_frequency=args.window_steps, checkpoint_steps=steps)
    alone = []

    def in_turns(report) -> None:
        if report.step > warmup:
            alone.append(time_step())

    reports = measure.train_reports(config, strategy, train_files, count, in_turns)
    # The report of step n gives examples/sec over the window ending at n.
    steady = [r.examples_per_sec for r in reports if r.step > warmup]
    first_epoch = [r.examples_per_sec for r in reports if 1 < r.step <= warmup]
    return statistics.median(steady), statistics.median(first_epoch), statistics.median(alone)


def determinism(args, strategy: tf.distribute.Strategy, train_files: list[str], count: int,
                work: str) -> tuple[float, float, float]:
    """(l): end-to-end examples/sec of normal and of --deterministic training (``turns``
    runs of each in turns), and the seconds a pipeline resumed at step 1,000 takes to
    reach its first batch beyond a fresh one's."""
    windows = max(2, args.windows // 2)
    rates = {False: [], True: []}
    for turn in range(args.turns):
        for deterministic in rates:
            config = measure.train_config(
                args, os.path.join(work, f"determinism-{turn}-{deterministic}"),
                max_steps=(windows + 1) * args.window_steps, log_frequency=args.window_steps,
                checkpoint_steps=10**9, deterministic=deterministic)
            reports = measure.train_reports(config, strategy, train_files, count)
            rates[deterministic] += [r.examples_per_sec for r in reports
                                     if r.step > args.window_steps]  # after a warm-up
    _, resumed = measure.timed(lambda: next(iter(
        data.train_dataset(train_files, args.batch_size, skip_batches=1000))))
    _, fresh = measure.timed(lambda: next(iter(data.train_dataset(train_files,
                                                                  args.batch_size))))
    return statistics.median(rates[False]), statistics.median(rates[True]), resumed - fresh


def loop_step_times(args, strategy: tf.distribute.Strategy, work: str) -> dict[int, float]:
    """(m) in this process's strategy: {steps_per_loop: median ms per step} at batch 1
    per replica, for 1 and the default, ``turns`` runs of each in turns."""
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
                learning_rate=0.001)  # batch 1 diverges at 0.1; the time is the same
            reports = measure.train_reports(config, strategy, files, count)
            times[steps_per_loop] += [1000 * r.sec_per_batch * strategy.num_replicas_in_sync
                                      for r in reports if r.step > window]
    return {k: statistics.median(v) for k, v in times.items()}


def loop_times_in_process(args, replicas: int, work: str) -> tuple[float, float]:
    """(m) with ``replicas`` replicas, in a process of its own (the logical devices are
    fixed once a process has made its strategy): ms per step with 1 and the default."""
    gpus = len(tf.config.list_physical_devices("GPU"))
    # Four replicas on 1-3 GPUs as slices of them, so that (m) still compares 1 and 4
    # replicas' host share on every machine (min(4, GPUs) would change what it measures).
    per_gpu = -(-replicas // gpus) if gpus else 1
    command = [sys.executable, SCRIPT, "--loop_only", f"--num_gpus={replicas}",
               f"--replicas_per_gpu={per_gpu}", f"--all_reduce={args.all_reduce}",
               f"--windows={args.windows}", f"--loop_window_steps={args.loop_window_steps}",
               f"--turns={args.turns}",
               *[f"--{name}" for name in ("use_fp16", "use_bf16", "xla") if getattr(args, name)]]
    out = programs.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=programs.child_env(work, PYTHONPATH=os.pathsep.join(sys.path)))
    if out.returncode != 0:
        raise RuntimeError(f"(m) with {replicas} replicas failed: {out.stderr.strip()}")
    times = json.loads(out.stdout.strip().splitlines()[-1])
    return times["1"], times[str(STEPS_PER_LOOP)]


# (n)'s variants: (label, the kernels from the run's compiled ones).  Without the LRN
# kernels norm2's fusion goes too; without a fusion, the convolution adds its bias and
# takes its ReLU, then TensorFlow's max pooling or the plain LRN kernel.
VARIANTS: tuple[tuple[str, Callable[[KernelChoice], KernelChoice]], ...] = (
    ("all kernels", lambda k: k),
    ("without the LRN kernels", lambda k: k._replace(lrn=tensorflow_ops("").lrn,
                                                     relu_lrn=None)),
    ("without pool1's fusion", lambda k: k._replace(relu_pool=None)),
    ("without norm2's fusion", lambda k: k._replace(relu_lrn=None)),
    ("TensorFlow's ops", lambda k: tensorflow_ops("(n)")),
)


def kernel_step_times(args, strategy: tf.distribute.Strategy, work: str,
                      kernels: KernelChoice) -> list[tuple[str, float]]:
    """(n): [(variant label, median ms per step of the train step alone)]: one trainer
    per variant, the same but for the layer functions, a window of each in turns."""
    timers = [step_alone(args, strategy, os.path.join(work, f"kernels-{i}"), variant(kernels))
              for i, (_, variant) in enumerate(VARIANTS)]
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    times: list[list[float]] = [[] for _ in VARIANTS]
    for _ in range(args.windows):
        for timer, ms in zip(timers, times):
            ms.append(1000 * global_batch / timer())  # examples/sec -> ms per step
    return [(label, statistics.median(ms)) for (label, _), ms in zip(VARIANTS, times)]
