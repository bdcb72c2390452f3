"""What the rest of the toolkit costs: (d) evaluation's pass, (e)-(f) cifar10-train's
start and memory, (h) the exported SavedModel, (i) cifar10-predict, (j) cifar10-prepare."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import tensorflow as tf

from bench import measure
from cifar10.core.errors import Cifar10Error
from cifar10.runs import checkpoint_files
from cifar10.data import pipeline as data
from cifar10.evaluation import scoring
from cifar10.serving import export
from cifar10.data import classfolders, prepare
from cifar10.model import Model


def program(name: str) -> str:
    """The path of console script ``name`` beside this Python."""
    return os.path.join(os.path.dirname(sys.executable), name)


def evaluation(args, test_files: list[str]) -> tuple[float, float]:
    """(d): examples/sec of the evaluator's scoring pass over ``test_files``, and its
    seconds."""
    model = Model(compute_dtype=measure.compute_dtype(args))
    dataset = data.eval_dataset(test_files, args.batch_size)
    score = scoring.make_scorer(model)
    confusion, _ = score(dataset)  # warm-up: tracing
    seconds = measure.median_seconds(lambda: score(dataset), args.windows)
    return int(confusion.sum()) / seconds, seconds


def _start_training(command: list[str]) -> tuple[subprocess.Popen, bool]:
    """Starts ``command`` and reads its lines up to its first step's: (the process,
    whether it got there)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, any(": step 1," in line for line in proc.stdout)


def launch(args, data_dir: str, train_dir: str) -> tuple[float, float]:
    """(e), (f): seconds from starting cifar10-train to its first step; its peak RSS in MB."""
    command = [program("cifar10-train"), f"--data_dir={data_dir}", f"--train_dir={train_dir}",
               f"--batch_size={args.batch_size}",
               *([f"--num_gpus={args.num_gpus}"] if args.num_gpus is not None else []),
               f"--max_steps={args.warmup_steps + args.window_steps}",
               "--log_frequency=1000000", f"--use_fp16={args.use_fp16}",
               f"--use_bf16={args.use_bf16}", f"--xla={args.xla}"]
    (proc, stepped), seconds = measure.timed(_start_training, command)
    for _ in proc.stdout:  # the rest of its lines
        pass
    proc.wait()
    if proc.returncode:
        raise SystemExit(f"benchmark.py: error: {' '.join(command)} failed with exit status "
                         f"{proc.returncode}")
    # ru_maxrss of the waited-for children is in KiB on Linux.
    return (seconds if stepped else float("nan"),
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def _serving_rate(serve, images: list[tf.Tensor], batch_size: int, windows: int) -> float:
    """Images/sec of ``serve`` on batches of ``batch_size`` of ``images``, 256 a window."""
    batch = tf.stack([images[i % len(images)] for i in range(batch_size)])
    calls = max(1, 256 // batch_size)
    serve(images=batch)  # warm-up

    def window() -> None:
        for _ in range(calls):
            serve(images=batch)["probabilities"].numpy()

    return measure.median_rate(window, windows, calls * batch_size)


def serving(args, train_dir: str, test_files: list[str], work: str) -> tuple[float, float]:
    """(h): images/sec of the exported SavedModel on PNG bytes, at batch 1 and 128."""
    target = export.export(checkpoint_files.latest(train_dir).path, os.path.join(work, "export"))
    serve = tf.saved_model.load(target).signatures["serving_default"]
    images = [tf.io.encode_png(image) for image, _ in data.read_records(test_files).take(128)]
    return (_serving_rate(serve, images, 1, args.windows),
            _serving_rate(serve, images, 128, args.windows))


def predict_folder(args, train_dir: str, test_files: list[str], work: str) -> float:
    """(i): seconds from launching cifar10-predict on a folder of PNGs to its last line."""
    folder = os.path.join(work, "predict")
    os.makedirs(folder)
    records = data.read_records(test_files).repeat().take(args.predict_images)
    for i, (image, _) in enumerate(records):
        tf.io.write_file(os.path.join(folder, f"{i:05d}.png"), tf.io.encode_png(image))
    command = [program("cifar10-predict"), f"--checkpoint_dir={train_dir}", "--top_k=1",
               folder]
    result, seconds = measure.timed(subprocess.run, command, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
    lines = result.stdout.splitlines()
    if result.returncode or len(lines) != args.predict_images:
        raise SystemExit(f"benchmark.py: error: {' '.join(command)} failed with exit status "
                         f"{result.returncode} after {len(lines)} lines")
    return seconds


def conversion(args, test_files: list[str], work: str) -> float:
    """(j): images/sec of cifar10.data.prepare converting 10 class folders of 32x32 PNGs."""
    folder = os.path.join(work, "prepare")
    records = data.read_records(test_files).repeat().take(args.prepare_images)
    for i, (image, label) in enumerate(records):
        path = os.path.join(folder, f"class{int(label)}", f"{i:05d}.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tf.io.write_file(path, tf.io.encode_png(image))
    try:
        summary, seconds = measure.timed(  # finding the images is part of the conversion
            lambda: prepare.convert(classfolders.find_source(folder),
                                    os.path.join(work, "prepared")))
    except Cifar10Error as e:  # too few images to split, say
        raise SystemExit(f"benchmark.py: error: (j) cannot convert {args.prepare_images} "
                         f"images: {e}; a larger --prepare_images converts") from None
    if summary.skipped or summary.train_records + summary.test_records != args.prepare_images:
        raise SystemExit(f"benchmark.py: error: the conversion of (j) wrote {summary.train_records} + "
                         f"{summary.test_records} records of {args.prepare_images}")
    return args.prepare_images / seconds
