"""Measures how fast cifar10 trains and evaluates on this machine, and prints it.

    python scripts/benchmark.py                       # 1 replica, batch 128, float32
    python scripts/benchmark.py --num_gpus=2          # 2 replicas (logical devices on CPU)
    python scripts/benchmark.py --use_fp16 --xla
    python scripts/benchmark.py --use_bf16            # bfloat16 compute

Prints, each the median of several timed windows after a warm-up:
  (a) train step alone, on one in-memory batch (examples/sec over all replicas),
      timed in turns with the windows of (c);
  (b) the input pipeline alone, on CIFAR-format files;
  (c) end-to-end training with cifar10.train.train (what the log line reports),
      after a first epoch of warm-up (its rate is shown too; the in-memory cache
      of decoded records is filled before the first step);
  (d) evaluation of the test file with cifar10.evaluate.count_correct;
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
      and 4 replicas (each count in a process of its own).
It generates full-size CIFAR-format data (50,000 + 10,000 records) in a temporary
directory when --data_dir is not given, so it runs offline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cifar10 import logs

# Before TensorFlow is imported: its C++ log lines kept off the figures, as in the
# programs, unless TF_CPP_MIN_LOG_LEVEL asks for them (docs/output.md).
if __name__ == "__main__" and not logs.tensorflow_lines_wanted(os.environ, False):
    logs.hide_native_lines()

import tensorflow as tf  # noqa: E402

from cifar10 import checkpoints, data, devices, evaluate, export, prepare  # noqa: E402
from cifar10 import synthetic  # noqa: E402
from cifar10.config import CROP_SIZE, STEPS_PER_LOOP, compute_dtype as dtype_name  # noqa: E402
from cifar10 import train  # noqa: E402
from cifar10 import fileformat as ff  # noqa: E402
from cifar10.model import Model  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num_gpus", type=int, default=1, help="replicas (as cifar10-train)")
    p.add_argument("--batch_size", type=int, default=128, help="examples per replica")
    p.add_argument("--use_fp16", action="store_true", help="float16 compute")
    p.add_argument("--use_bf16", action="store_true", help="bfloat16 compute")
    p.add_argument("--xla", action="store_true", help="compile the replica step with XLA")
    p.add_argument("--data_dir", help="folder holding cifar-10-batches-bin (default: generate)")
    p.add_argument("--windows", type=int, default=7, help="timed windows per figure")
    p.add_argument("--window_steps", type=int, default=40, help="steps per timed window")
    p.add_argument("--warmup_steps", type=int, default=20, help="untimed steps first")
    p.add_argument("--records_per_file", type=int, default=ff.RECORDS_PER_REAL_FILE,
                   help="records per file of generated data")
    p.add_argument("--skip_launch", action="store_true",
                   help="skip (e) and (f), which start cifar10-train in a subprocess")
    p.add_argument("--predict_images", type=int, default=1000,
                   help="PNG images in the folder of (i)")
    p.add_argument("--prepare_images", type=int, default=6000,
                   help="PNG images converted in (j)")
    p.add_argument("--loop_window_steps", type=int, default=300,
                   help="steps per timed window of (m)")
    p.add_argument("--loop_only", action="store_true", help=argparse.SUPPRESS)  # (m)'s processes
    args = p.parse_args(argv)
    for name in ("batch_size", "windows", "window_steps", "records_per_file", "predict_images",
                 "prepare_images", "loop_window_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.num_gpus < 0 or args.warmup_steps < 0:
        p.error("--num_gpus and --warmup_steps must be >= 0")
    if args.use_fp16 and args.use_bf16:
        p.error("--use_fp16 and --use_bf16 exclude each other: pass at most one of them")
    return args


def compute_dtype(args) -> tf.DType:
    return tf.as_dtype(dtype_name(args))


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = len(tf.config.list_physical_devices("GPU"))
    return (f"{model}; {os.cpu_count()} cores; {gpus} GPU(s); TensorFlow {tf.__version__}; "
            f"Python {platform.python_version()}")


def median_rate(run_window, windows: int, examples_per_window: int) -> float:
    """Median examples/sec of ``windows`` calls of ``run_window``."""
    rates = []
    for _ in range(windows):
        start = time.perf_counter()
        run_window()
        rates.append(examples_per_window / (time.perf_counter() - start))
    return statistics.median(rates)


def train_flops_per_example(model: Model) -> int:
    """FLOPs of one example's training step in the convolutions and matmuls.

    Each layer's multiply-adds (its weights times the output positions they are
    applied at, taken from a forward pass) count twice (a multiply and an add)
    for the forward pass, the weight gradient and, for every layer but conv1
    (the images need no gradient), the input gradient.  LRN, pooling, ReLU and
    the updates are memory-bound and left out.
    """
    acts = model.activations(tf.zeros([1, CROP_SIZE, CROP_SIZE, 3]))
    total = 0
    for i, layer in enumerate(model.layers):
        positions = acts[layer.name].shape[1:-1].num_elements()  # 1 for a matmul layer
        passes = 2 if i == 0 else 3
        total += 2 * passes * positions * layer.weights.shape.num_elements()
    return total


def matmul_gflops(windows: int, size: int = 2048, per_window: int = 10,
                  dtype: tf.DType = tf.float32) -> float:
    """Median GFLOP/s of [size, size] matmuls of ``dtype`` on this machine."""
    a = tf.cast(tf.random.stateless_normal([size, size], seed=(5, 6)), dtype)
    product = tf.function(lambda: tf.matmul(a, a))
    product().numpy()  # warm-up

    def window():
        for _ in range(per_window):
            out = product()
        out.numpy()

    return median_rate(window, windows, per_window * 2 * size**3) / 1e9


def step_alone(args, strategy, train_dir):
    """Warms up the train step on one in-memory batch.

    Returns:
      A function that times one window of it: examples/sec.
    """
    config = train.TrainConfig(train_dir=train_dir, batch_size=args.batch_size,
                               use_fp16=args.use_fp16, use_bf16=args.use_bf16, xla=args.xla)
    trainer = train.Trainer(config, strategy)
    images = tf.random.stateless_normal([args.batch_size, CROP_SIZE, CROP_SIZE, 3],
                                        seed=(1, 2))
    labels = tf.random.stateless_uniform([args.batch_size], (3, 4), 0, 10, tf.int32)
    # Fed as training is fed: one pipeline per replica, no autotuning.
    batches = data.without_autotuning(tf.data.Dataset.from_tensors((images, labels)).repeat())
    it = iter(strategy.distribute_datasets_from_function(lambda ctx: batches,
                                                         train.input_options(strategy)))

    def window(steps):
        for _ in range(steps):
            loss = trainer.step(it)["total_loss"]
        float(loss)  # wait for the last step

    def time_window():
        start = time.perf_counter()
        window(args.window_steps)
        return args.window_steps * trainer.global_batch / (time.perf_counter() - start)

    window(args.warmup_steps)
    return time_window


def input_alone(args, train_files) -> float:
    it = iter(data.train_dataset(train_files, args.batch_size))  # fills its cache
    for _ in range(args.warmup_steps):
        next(it)
    steps = args.window_steps * 10  # a window of 30 batches is too short to time well

    def window():
        for _ in range(steps):
            next(it)

    return median_rate(window, args.windows, steps * args.batch_size)


def end_to_end(args, strategy, train_files, count, train_dir, time_step):
    """Examples/sec of cifar10.train.train, and of the step alone between its windows.

    The first epoch (the shuffle buffer filling, the step traced) is the warm-up,
    timed on its own.  Then each steady-state window
    of training (a log line) is followed by one window of ``time_step``, run
    from the log callback while training waits: the two figures are measured
    in turns over the same minutes, so a virtual machine whose speed drifts
    does not bias one against the other.  The training window's clock starts
    after the callback returns; the input pipeline fills its few prefetch
    slots meanwhile, which saves training well under 1% of a window.

    Returns:
      (training steady state, training first epoch, step alone), each the median.
    """
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    warmup = max(args.warmup_steps, -(-count // global_batch))  # at least one epoch
    warmup = -(-warmup // args.window_steps) * args.window_steps  # whole windows
    steps = warmup + args.windows * args.window_steps
    config = train.TrainConfig(train_dir=train_dir, batch_size=args.batch_size, max_steps=steps,
                               log_frequency=args.window_steps, checkpoint_steps=steps,
                               use_fp16=args.use_fp16, use_bf16=args.use_bf16, xla=args.xla)
    # The report of step n gives examples/sec over the window ending at n.
    steady, first_epoch, alone = [], [], []

    def collect(report: train.StepReport):
        if report.step > 1:
            (steady if report.step > warmup else first_epoch).append(report.examples_per_sec)
            if report.step > warmup:
                alone.append(time_step())

    train.train(config, strategy, train_files, count, print_fn=lambda line: None,
                on_report=collect)
    return statistics.median(steady), statistics.median(first_epoch), statistics.median(alone)


def evaluation(args, test_files) -> tuple[float, float]:
    model = Model(compute_dtype=compute_dtype(args))
    dataset = data.eval_dataset(test_files, args.batch_size)
    counter = evaluate.make_counter(model)
    counter(dataset)  # warm-up: tracing
    times = []
    for _ in range(args.windows):
        start = time.perf_counter()
        _, examples = counter(dataset)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return examples / seconds, seconds


def launch(args, data_dir, train_dir) -> tuple[float, float]:
    """Seconds from starting cifar10-train to its first step; its peak RSS in MB."""
    program = os.path.join(os.path.dirname(sys.executable), "cifar10-train")
    cmd = [program, f"--data_dir={data_dir}", f"--train_dir={train_dir}",
           f"--batch_size={args.batch_size}", f"--num_gpus={args.num_gpus}",
           f"--max_steps={args.warmup_steps + args.window_steps}", "--log_frequency=1000000",
           f"--use_fp16={args.use_fp16}", f"--use_bf16={args.use_bf16}", f"--xla={args.xla}"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    first_step = float("nan")
    for line in proc.stdout:
        if ": step 1," in line:
            first_step = time.perf_counter() - start
    proc.wait()
    if proc.returncode:
        raise SystemExit(f"benchmark: {' '.join(cmd)} failed with exit status {proc.returncode}")
    # ru_maxrss of the waited-for children is in KiB on Linux.
    return first_step, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def serving(args, train_dir, test_files, work) -> tuple[float, float]:
    """Images/sec of the exported SavedModel on PNG bytes, at batch 1 and batch 128."""
    target = export.export(checkpoints.latest(train_dir).path, os.path.join(work, "export"))
    serve = tf.saved_model.load(target).signatures["serving_default"]
    images = [tf.io.encode_png(image) for image, _ in data.read_records(test_files).take(128)]
    rates = []
    for batch_size in (1, 128):
        batch = tf.stack([images[i % len(images)] for i in range(batch_size)])
        calls = max(1, 256 // batch_size)
        serve(images=batch)  # warm-up

        def window():
            for _ in range(calls):
                serve(images=batch)["probabilities"].numpy()

        rates.append(median_rate(window, args.windows, calls * batch_size))
    return rates[0], rates[1]


def predict_folder(args, train_dir, test_files, work) -> float:
    """Seconds from launching cifar10-predict on a folder of PNGs to its last line."""
    folder = os.path.join(work, "predict")
    os.makedirs(folder)
    records = data.read_records(test_files).repeat().take(args.predict_images)
    for i, (image, _) in enumerate(records):
        tf.io.write_file(os.path.join(folder, f"{i:05d}.png"), tf.io.encode_png(image))
    program = os.path.join(os.path.dirname(sys.executable), "cifar10-predict")
    cmd = [program, f"--checkpoint_dir={train_dir}", "--top_k=1", folder]
    start = time.perf_counter()
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seconds = time.perf_counter() - start
    lines = result.stdout.splitlines()
    if result.returncode or len(lines) != args.predict_images:
        raise SystemExit(f"benchmark: {' '.join(cmd)} failed with exit status "
                         f"{result.returncode} after {len(lines)} lines")
    return seconds


def conversion(args, test_files, work) -> float:
    """Images/sec of cifar10.prepare converting 10 class folders of 32x32 PNGs."""
    folder = os.path.join(work, "prepare")
    records = data.read_records(test_files).repeat().take(args.prepare_images)
    for i, (image, label) in enumerate(records):
        path = os.path.join(folder, f"class{int(label)}", f"{i:05d}.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tf.io.write_file(path, tf.io.encode_png(image))
    start = time.perf_counter()
    summary = prepare.convert(prepare.find_source(folder), os.path.join(work, "prepared"))
    seconds = time.perf_counter() - start
    if summary.skipped or summary.train_records + summary.test_records != args.prepare_images:
        raise SystemExit(f"benchmark: the conversion of (j) wrote {summary.train_records} + "
                         f"{summary.test_records} records of {args.prepare_images}")
    return args.prepare_images / seconds


def determinism(args, strategy, train_files, count, work, turns: int = 2
                ) -> tuple[float, float, float]:
    """(l): end-to-end examples/sec of normal and of --deterministic training, runs of
    each in turns (medians of their windows after one warm-up window), and the
    seconds a pipeline resumed at step 1,000 takes to reach its first batch."""
    from tensorflow.python.framework import config as tf_config  # to turn it off again

    windows = max(2, args.windows // 2)
    rates = {False: [], True: []}
    for turn in range(turns):
        for deterministic in (False, True):
            config = train.TrainConfig(
                train_dir=os.path.join(work, f"determinism-{turn}-{deterministic}"),
                batch_size=args.batch_size, max_steps=(windows + 1) * args.window_steps,
                log_frequency=args.window_steps, checkpoint_steps=10**9,
                use_fp16=args.use_fp16, use_bf16=args.use_bf16, xla=args.xla,
                deterministic=deterministic)
            reports = []
            try:
                train.train(config, strategy, train_files, count, print_fn=lambda line: None,
                            on_report=reports.append)
            finally:
                tf_config.disable_op_determinism()
            rates[deterministic] += [r.examples_per_sec for r in reports
                                     if r.step > args.window_steps]
    start = time.perf_counter()
    ds = data.train_dataset(train_files, args.batch_size, skip_batches=1000)
    next(iter(ds))
    resumed = time.perf_counter() - start
    start = time.perf_counter()
    next(iter(data.train_dataset(train_files, args.batch_size)))
    fresh = time.perf_counter() - start
    return statistics.median(rates[False]), statistics.median(rates[True]), resumed - fresh


def _forward_backward(apply, variables, input_gradient: bool):
    @tf.function
    def forward_backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = apply(x)
            total = tf.reduce_sum(tf.cast(y, tf.float32))
        return y, tape.gradient(total, [variables, x] if input_gradient else variables)

    return forward_backward


def layer_times(args, reps: int = 5) -> list[tuple[str, float]]:
    """Median milliseconds of each stage's forward and backward pass, one stage at a time.

    Each stage gets the output of the one before (a batch of ``args.batch_size``
    images in the compute type) and differentiates a sum of its output with
    respect to its variables and, but for the first, its input, as the train
    step does.
    """
    model = Model(compute_dtype=compute_dtype(args))
    x = tf.cast(tf.random.stateless_normal([args.batch_size, CROP_SIZE, CROP_SIZE, 3],
                                           seed=(1, 2)), model.compute_dtype)
    times = []
    for i, (name, apply) in enumerate(model.stages()):
        variables = [v for layer in model.layers if layer.name == name
                     for v in (layer.weights, layer.biases)]
        forward_backward = _forward_backward(apply, variables, input_gradient=i > 0)
        y, _ = forward_backward(x)  # warm-up: tracing

        def once(x=x):
            _, grads = forward_backward(x)
            tf.nest.map_structure(lambda g: g.numpy(), grads)

        seconds = []
        for _ in range(reps):
            start = time.perf_counter()
            once()
            seconds.append(time.perf_counter() - start)
        times.append((name, 1000 * statistics.median(seconds)))
        x = y
    return times


def loop_step_times(args, strategy, work, turns: int = 2) -> dict[int, float]:
    """(m), in this process's strategy: {steps_per_loop: median ms per step} at batch
    1 per replica, for 1 and the default, runs of each in turns (windows of
    ``loop_window_steps`` after one warm-up window)."""
    batches_dir = synthetic.write_dataset(os.path.join(work, "loop-data"), records_per_file=200)
    files = data.split_files(batches_dir, "train")
    count = data.validate_files(files)
    window = args.loop_window_steps
    times = {1: [], STEPS_PER_LOOP: []}
    for turn in range(turns):
        for steps_per_loop in times:
            config = train.TrainConfig(
                train_dir=os.path.join(work, f"loop-{turn}-{steps_per_loop}"), batch_size=1,
                max_steps=(args.windows + 1) * window, log_frequency=window,
                checkpoint_steps=10**9, summary_steps=10**9, steps_per_loop=steps_per_loop,
                use_fp16=args.use_fp16, use_bf16=args.use_bf16, xla=args.xla,
                initial_learning_rate=0.001)  # batch 1 diverges at 0.1; the time is the same
            reports = []
            train.train(config, strategy, files, count, print_fn=lambda line: None,
                        on_report=reports.append)
            times[steps_per_loop] += [1000 * r.sec_per_batch * strategy.num_replicas_in_sync
                                      for r in reports if r.step > window]
    return {k: statistics.median(v) for k, v in times.items()}


def loop_figure(args) -> str:
    """(m)'s line: loop_step_times for 1 and 4 replicas, each in its own process."""
    parts = []
    for replicas in (1, 4):
        command = [sys.executable, os.path.abspath(__file__), "--loop_only",
                   f"--num_gpus={replicas}", f"--windows={args.windows}",
                   f"--loop_window_steps={args.loop_window_steps}",
                   *[f"--{name}" for name in ("use_fp16", "use_bf16", "xla")
                     if getattr(args, name)]]
        out = subprocess.run(command, capture_output=True, text=True, check=False,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        if out.returncode != 0:
            raise RuntimeError(f"(m) with {replicas} replicas failed: {out.stderr.strip()}")
        times = json.loads(out.stdout.strip().splitlines()[-1])
        one, default = times["1"], times[str(STEPS_PER_LOOP)]
        parts.append(f"{replicas} replica(s) {one:.2f} ms with 1, {default:.2f} ms with "
                     f"{STEPS_PER_LOOP} ({default / one:.2f}x)")
    return "; ".join(parts)


def main(argv=None) -> int:
    args = parse_args(argv)
    strategy = devices.make_strategy(args.num_gpus)  # before any other TensorFlow work
    work = tempfile.mkdtemp(prefix="cifar10-benchmark-")
    try:
        if args.loop_only:
            times = loop_step_times(args, strategy, work)
            print(json.dumps({str(k): v for k, v in times.items()}))
            return 0
        return _run(args, strategy, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(args, strategy, work) -> int:
    data_dir = args.data_dir
    if data_dir is None:
        data_dir = work
        synthetic.write_dataset(data_dir, records_per_file=args.records_per_file)
    batches_dir = data.batches_dir_of(data_dir)
    train_files = data.split_files(batches_dir, "train")
    test_files = data.split_files(batches_dir, "test")
    count = data.validate_files(train_files)
    test_count = data.validate_files(test_files)
    replicas = strategy.num_replicas_in_sync
    print(f"machine: {machine()}")
    print(f"setting: {replicas} replica(s) x batch {args.batch_size} = global batch "
          f"{replicas * args.batch_size}; {compute_dtype(args).name}; "
          f"XLA {'on' if args.xla else 'off'}; data {batches_dir} ({count} train, "
          f"{test_count} test records); median of {args.windows} windows of "
          f"{args.window_steps} steps after {args.warmup_steps} warm-up steps", flush=True)
    if args.use_bf16:
        devices.warn_if_bfloat16_is_emulated(strategy.extended.worker_devices)
    time_step = step_alone(args, strategy, os.path.join(work, "step"))
    b = input_alone(args, train_files)
    c, c_first, a = end_to_end(args, strategy, train_files, count,
                               os.path.join(work, "train"), time_step)
    print(f"(a) train step alone:        {a:9.1f} examples/sec  (timed in turns with (c))")
    print(f"(b) input pipeline alone:    {b:9.1f} examples/sec  ({b / c:.1f}x (c))")
    print(f"(c) end-to-end training:     {c:9.1f} examples/sec  ({100 * c / a:.0f}% of (a); "
          f"first epoch: {c_first:.1f})", flush=True)
    d, seconds = evaluation(args, test_files)
    print(f"(d) evaluation:              {d:9.1f} examples/sec  ({test_count} examples in "
          f"{seconds:.2f} s)", flush=True)
    if not args.skip_launch:
        first, rss = launch(args, data_dir, os.path.join(work, "launch"))
        print(f"(e) launch to first step:    {first:9.2f} s")
        print(f"(f) peak resident memory:    {rss:9.0f} MB (the cifar10-train process of (e))")
    # float16 has no fast CPU matmul, so its runs keep float32's rate as the reference.
    matmul_dtype = tf.bfloat16 if args.use_bf16 else tf.float32
    gflops = matmul_gflops(args.windows, dtype=matmul_dtype)
    flops = train_flops_per_example(Model())
    ceiling = gflops * 1e9 / flops
    print(f"(g) machine speed:           {gflops:9.1f} GFLOP/s {matmul_dtype.name} "
          f"matmul; at "
          f"{flops / 1e6:.1f} MFLOP per example the compute ceiling is {ceiling:.0f} "
          f"examples/sec ((c) is {100 * c / ceiling:.0f}% of it)", flush=True)
    one, many = serving(args, os.path.join(work, "train"), test_files, work)
    print(f"(h) serving (SavedModel):    {one:9.1f} images/sec at batch 1, {many:.1f} at "
          f"batch 128 (PNG bytes in)", flush=True)
    seconds = predict_folder(args, os.path.join(work, "train"), test_files, work)
    print(f"(i) cifar10-predict:         {seconds:9.2f} s for a folder of "
          f"{args.predict_images} PNG images, launch to last line "
          f"({args.predict_images / seconds:.0f} images/sec)", flush=True)
    rate = conversion(args, test_files, work)
    print(f"(j) cifar10-prepare:         {rate:9.1f} images/sec ({args.prepare_images} PNG "
          f"images, 32x32, into CIFAR-10 files)", flush=True)
    times = layer_times(args)
    total = sum(ms for _, ms in times)
    print(f"(k) layers, forward+backward: {total:8.1f} ms a batch of {args.batch_size}, one "
          f"layer at a time: " + ", ".join(f"{name} {ms:.1f} ms ({100 * ms / total:.0f}%)"
                                           for name, ms in times), flush=True)
    normal, exact, skip = determinism(args, strategy, train_files, count, work)
    print(f"(l) --deterministic:         {exact:9.1f} examples/sec, {exact / normal:.2f}x "
          f"normal training's {normal:.1f} (in turns); a resume at step 1000 spends "
          f"{skip:.2f} s skipping the batches done", flush=True)
    print(f"(m) ms per step at batch 1 per replica, --steps_per_loop 1 and default: "
          f"{loop_figure(args)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
