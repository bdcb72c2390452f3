"""The benchmark's run: the data it times on, then one small function per figure
that measures it and gives its printed line(s), in the order they print."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile

import tensorflow as tf

from bench import compute, measure, programs, training
from cifar10.data import folder as datafolder
from cifar10.core import machine
from cifar10.distribute import devices
from cifar10.kernels.layers import KernelChoice, choose
from cifar10.data import synthetic
from cifar10.core.config import STEPS_PER_LOOP
from cifar10.model import Model, stage_dtypes


@dataclasses.dataclass
class Setting:
    """What the figures share: the settings, the data, and (c)'s rate for (g)."""
    args: object
    strategy: tf.distribute.Strategy
    work: str  # a temporary folder, removed at the end
    data_dir: str
    batches_dir: str
    train_files: list[str]
    test_files: list[str]
    count: int
    test_count: int
    kernels: KernelChoice  # the layer functions of the training runs and of (k)
    end_to_end: float = 0.0  # (c), set by figure_training

    @property
    def train_dir(self) -> str:
        """The run of (c), whose checkpoint (h) and (i) use."""
        return os.path.join(self.work, "train")


def prepare_setting(args, strategy: tf.distribute.Strategy, work: str) -> Setting:
    """The data of --data_dir, or full-size generated data in ``work``."""
    data_dir = args.data_dir
    if data_dir is None:
        data_dir = work
        synthetic.write_dataset(data_dir, records_per_file=args.records_per_file)
    batches_dir = datafolder.batches_dir_of(data_dir)
    train_files = datafolder.split_files(batches_dir, "train")
    test_files = datafolder.split_files(batches_dir, "test")
    return Setting(args, strategy, work, data_dir, batches_dir, train_files, test_files,
                   datafolder.validate_files(train_files), datafolder.validate_files(test_files),
                   choose(args.kernels, strategy.extended.worker_devices, args.xla))


def heading(s: Setting) -> list[str]:
    args, replicas = s.args, s.strategy.num_replicas_in_sync
    return [f"machine: {measure.machine()}",
            (f"setting: {replicas} replica(s) x batch {args.batch_size} = global batch "
             f"{replicas * args.batch_size}; {measure.compute_dtype(args).name}; "
             f"XLA {'on' if args.xla else 'off'}; "
             f"kernels {s.kernels.kernel} ({s.kernels.reason}); "
             f"data {s.batches_dir} ({s.count} train, "
             f"{s.test_count} test records); median of {args.windows} windows of "
             f"{args.window_steps} steps after {args.warmup_steps} warm-up steps")]


def figure_training(s: Setting) -> list[str]:
    """(a), (b), (c): (a) is timed in turns with (c)'s windows."""
    replicas, cores = s.strategy.num_replicas_in_sync, machine.host_cores()
    time_step = training.step_alone(s.args, s.strategy, os.path.join(s.work, "step"))
    rate_b = training.input_alone(s.args, s.train_files, replicas)
    c, c_first, a = training.end_to_end(s.args, s.strategy, s.train_files, s.count,
                                        s.train_dir, time_step)
    s.end_to_end = c
    return [f"(a) train step alone:        {a:9.1f} examples/sec  (timed in turns with (c))",
            (f"(b) input pipeline alone:    {rate_b:9.1f} examples/sec  ({rate_b / c:.1f}x (c)); "
             f"{rate_b / cores:.0f} per host core ({cores} core(s)); feeds "
             f"{rate_b * replicas / a:.1f} replicas at (a)'s {a / replicas:.0f} each"),
            (f"(c) end-to-end training:     {c:9.1f} examples/sec  ({100 * c / a:.0f}% of (a); "
             f"first epoch: {c_first:.1f})")]


def figure_evaluation(s: Setting) -> list[str]:
    rate, seconds = programs.evaluation(s.args, s.test_files)
    return [(f"(d) evaluation:              {rate:9.1f} examples/sec  ({s.test_count} examples "
             f"in {seconds:.2f} s)")]


def figure_launch(s: Setting) -> list[str]:
    first, rss = programs.launch(s.args, s.data_dir, s.work)
    return [f"(e) launch to first step:    {first:9.2f} s",
            f"(f) peak resident memory:    {rss:9.0f} MB (the cifar10-train process of (e))"]


def figure_speed(s: Setting) -> list[str]:
    # float16 has no fast CPU matmul, so its runs keep float32's rate as the reference.
    matmul_dtype = tf.bfloat16 if s.args.use_bf16 else tf.float32
    gflops = compute.matmul_gflops(s.args.windows, dtype=matmul_dtype)
    flops = compute.train_flops_per_example(Model())
    ceiling = gflops * 1e9 / flops
    share = f" ((c) is {100 * s.end_to_end / ceiling:.0f}% of it)" if s.end_to_end else ""
    return [(f"(g) machine speed:           {gflops:9.1f} GFLOP/s {matmul_dtype.name} matmul; "
             f"at {flops / 1e6:.1f} MFLOP per example the compute ceiling is {ceiling:.0f} "
             f"examples/sec{share}")]


def figure_serving(s: Setting) -> list[str]:
    one, many, files = programs.serving(s.args, s.train_dir, s.test_files, s.batches_dir,
                                        s.work)
    return [(f"(h) serving (SavedModel):    {one:9.1f} images/sec at batch 1, {many:.1f} at "
             f"batch 128 (PNG bytes in); TFLite with LiteRT at batch 1 (decoded images in):"),
            *(f"    {name:22} {size / 1e6:5.2f} MB {seconds * 1e3:8.3f} ms per image"
              for name, size, seconds in files)]


def figure_predict(s: Setting) -> list[str]:
    seconds = programs.predict_folder(s.args, s.train_dir, s.test_files, s.work)
    images = s.args.predict_images
    return [(f"(i) cifar10-predict:         {seconds:9.2f} s for a folder of {images} PNG "
             f"images, launch to last line ({images / seconds:.0f} images/sec)")]


def figure_prepare(s: Setting) -> list[str]:
    rate = programs.conversion(s.args, s.test_files, s.work)
    return [(f"(j) cifar10-prepare:         {rate:9.1f} images/sec ({s.args.prepare_images} "
             f"PNG images, 32x32, into CIFAR-10 files)")]


def figure_layers(s: Setting) -> list[str]:
    if s.args.use_bf16:
        return figure_layers_bf16(s)
    times = compute.layer_times(s.args, s.kernels)
    total = sum(ms for _, ms in times)
    layers = ", ".join(f"{name} {ms:.1f} ms ({100 * ms / total:.0f}%)" for name, ms in times)
    return [(f"(k) layers, forward+backward: {total:8.1f} ms a batch of {s.args.batch_size}, "
             f"one layer at a time: {layers}")]


def figure_layers_bf16(s: Setting) -> list[str]:
    """(k) in float32 and with --use_bf16, side by side, and each layer's precision."""
    in_float32, in_bf16 = compute.layer_times_by_type(s.args, [tf.float32, tf.bfloat16],
                                                      s.kernels)
    dtypes = stage_dtypes(tf.bfloat16, relu_pool=s.kernels.relu_pool is not None)
    lines = [(f"(k) layers, forward+backward, a batch of {s.args.batch_size}, one layer at a "
              f"time, float32 against --use_bf16 (the precision each layer runs in):")]
    for (name, ms32), (_, ms16) in zip(in_float32, in_bf16):
        lines.append(f"    {name:15s} {ms32:7.1f} ms  {ms16:7.1f} ms {dtypes[name].name:9s}"
                     f" {ms32 / ms16:5.2f}x")
    total32, total16 = (sum(ms for _, ms in times) for times in (in_float32, in_bf16))
    lines.append(f"    {'total':15s} {total32:7.1f} ms  {total16:7.1f} ms {'':9s}"
                 f" {total32 / total16:5.2f}x")
    return lines


def figure_determinism(s: Setting) -> list[str]:
    normal, exact, skip = training.determinism(s.args, s.strategy, s.train_files, s.count,
                                              s.work)
    return [(f"(l) --deterministic:         {exact:9.1f} examples/sec, {exact / normal:.2f}x "
             f"normal training's {normal:.1f} (in turns); a resume at step 1000 spends "
             f"{skip:.2f} s skipping the batches done")]


def figure_loop(s: Setting) -> list[str]:
    """(m): 1 and 4 replicas, each count in a process of its own."""
    parts = []
    for replicas in (1, 4):
        one, default = training.loop_times_in_process(s.args, replicas, s.work)
        parts.append(f"{replicas} replica(s) {one:.2f} ms with 1, {default:.2f} ms with "
                     f"{STEPS_PER_LOOP} ({default / one:.2f}x)")
    return ["(m) ms per step at batch 1 per replica, --steps_per_loop 1 and default: "
            + "; ".join(parts)]


def figure_kernels(s: Setting) -> list[str]:
    """(n), where the runs use the compiled kernels."""
    if s.kernels.kernel != "compiled":
        return [f"(n) compiled kernels: not timed, the runs use TensorFlow's ops "
                f"({s.kernels.reason})"]
    times = training.kernel_step_times(s.args, s.strategy, s.work, s.kernels)
    every = times[0][1]
    return [("(n) the train step alone without each compiled kernel, in turns "
             "(ms per step, and against all kernels):"),
            *(f"    {label:24s} {ms:7.1f} ms  {ms / every:5.2f}x" for label, ms in times)]


# (the letters a figure function prints, the function), in the order they print.
# (g) shows (c) as a share of the ceiling where (c) was measured; (h) and (i) use
# (c)'s checkpoint, so they bring (a)-(c) along (``figures_to_run``).
FIGURES = (("abc", figure_training), ("d", figure_evaluation), ("ef", figure_launch),
           ("g", figure_speed), ("h", figure_serving), ("i", figure_predict),
           ("j", figure_prepare), ("k", figure_layers), ("l", figure_determinism),
           ("m", figure_loop), ("n", figure_kernels))


def figures_to_run(letters: str) -> list:
    """The figure functions that print the figures of ``letters`` (and what they need)."""
    wanted = set(letters) | (set("abc") if set(letters) & set("hi") else set())
    return [figure for printed, figure in FIGURES if wanted & set(printed)]


def run(args) -> int:
    """Measures and prints every figure (only (m)'s own with --loop_only)."""
    strategy = devices.make_strategy(args.num_gpus, per_gpu=args.replicas_per_gpu,
                                     all_reduce=args.all_reduce)  # before other TensorFlow work
    work = tempfile.mkdtemp(prefix="cifar10-benchmark-")
    try:
        if args.loop_only:
            times = training.loop_step_times(args, strategy, work)
            print(json.dumps({str(k): v for k, v in times.items()}))
            return 0
        setting = prepare_setting(args, strategy, work)
        for line in heading(setting):
            print(line, flush=True)
        if args.use_bf16:
            devices.warn_if_bfloat16_is_emulated(strategy.extended.worker_devices)
        for figure in figures_to_run(args.figures):
            for line in figure(setting):
                print(line, flush=True)
        return 0
    finally:  # on Ctrl-C, SIGTERM and a closed standard output too (benchmark.main)
        with programs.interrupts_held():
            shutil.rmtree(work, ignore_errors=True)
