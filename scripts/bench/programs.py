"""The rest of the toolkit: (d) evaluation's pass, (e)-(f) cifar10-train's start and
memory, (h) the exported SavedModel, (i) cifar10-predict, (j) cifar10-prepare.

The programs it starts are stopped and waited for when the benchmark stops on the way
(``stopped_if_left``), so that none writes in the temporary folder as it is removed."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading

import numpy as np
import tensorflow as tf

from bench import measure
from cifar10.core.errors import Cifar10Error
from cifar10.runs import layout
from cifar10.data import pipeline as data
from cifar10.evaluation import exported, scoring
from cifar10.serving import export
from cifar10.data import imagefiles, prepare
from cifar10.model import Model


def program(name: str) -> str:
    """The path of console script ``name`` beside this Python."""
    return os.path.join(os.path.dirname(sys.executable), name)


def evaluation(args, test_files: list[str]) -> tuple[float, float]:
    """(d): examples/sec of the evaluator's scoring pass over ``test_files``, and its
    seconds."""
    model = Model(compute_dtype=measure.compute_dtype(args))
    dataset = data.read_records(test_files).batch(args.batch_size)
    score = scoring.make_scorer(scoring.classifier(model), model.num_classes)
    confusion, _, _ = score(dataset)  # warm-up: tracing
    seconds = measure.median_seconds(lambda: score(dataset), args.windows)
    return int(confusion.sum()) / seconds, seconds


# Seconds a program started here has to end after SIGTERM before it is killed.
STOP_SECONDS = 10


@contextlib.contextmanager
def interrupts_held():
    """SIGINT and SIGTERM ignored in the block (main thread only), so that a second
    Ctrl-C does not cut the clean-up short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop(proc: subprocess.Popen, seconds: float = STOP_SECONDS) -> None:
    """Ends ``proc`` and waits for it: SIGTERM, which every program here takes as a
    stop, then SIGKILL after ``seconds``."""
    with interrupts_held():
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(seconds)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


@contextlib.contextmanager
def stopped_if_left(proc: subprocess.Popen):
    """Yields ``proc``, ``stop``ped where the block is left by an exception."""
    try:
        yield proc
    except BaseException:
        stop(proc)
        raise


def child_env(work: str, **extra: str) -> dict[str, str]:
    """This environment plus ``extra``, temporary files under ``work`` (they go with it
    even where the program was killed)."""
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    return dict(os.environ, TMPDIR=tmp, **extra)


def run(command: list[str], **popen_args) -> subprocess.CompletedProcess:
    """``subprocess.run(command, text=True, ...)``, its program ``stop``ped when the
    benchmark is interrupted (subprocess.run would SIGKILL it)."""
    with stopped_if_left(subprocess.Popen(command, text=True, **popen_args)) as proc:
        out, err = proc.communicate()
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _start_training(command: list[str], env: dict[str, str] | None = None
                    ) -> tuple[subprocess.Popen, bool]:
    """Starts ``command`` and reads its lines up to its first step's: (the process,
    whether it got there)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    with stopped_if_left(proc):
        return proc, any(": step 1," in line for line in proc.stdout)


def launch(args, data_dir: str, work: str) -> tuple[float, float]:
    """(e), (f): seconds from starting cifar10-train to its first step; its peak RSS in MB."""
    train_dir = os.path.join(work, "launch")
    command = [program("cifar10-train"), f"--data_dir={data_dir}", f"--train_dir={train_dir}",
               f"--batch_size={args.batch_size}",
               *([f"--num_gpus={args.num_gpus}"] if args.num_gpus is not None else []),
               f"--max_steps={args.warmup_steps + args.window_steps}",
               "--log_frequency=1000000", f"--use_fp16={args.use_fp16}",
               f"--use_bf16={args.use_bf16}", f"--xla={args.xla}"]
    (proc, stepped), seconds = measure.timed(_start_training, command,
                                             child_env(work, PYTHONUNBUFFERED="1"))
    with stopped_if_left(proc):
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


def serving(args, train_dir: str, test_files: list[str], batches_dir: str, work: str
            ) -> tuple[float, float, list[tuple[str, int, float]]]:
    """(h): images/sec of the exported SavedModel on PNG bytes, at batch 1 and 128; and
    each TFLite file of the export (int8 calibrated on training images): (name, bytes,
    seconds per image at batch 1 with LiteRT)."""
    target = export.export(layout.latest(train_dir).path, os.path.join(work, "export"),
                           tflite=list(export.TFLITE_FILES), print_fn=lambda line: None,
                           calibration=export.calibration_images(batches_dir, 128))
    serve = tf.saved_model.load(target).signatures["serving_default"]
    images = [tf.io.encode_png(image) for image, _ in data.read_records(test_files).take(128)]
    one = next(iter(data.read_records(test_files)))[0].numpy()[None].astype(np.float32)
    files = []
    for name in export.TFLITE_FILES.values():
        path = os.path.join(target, name)
        runner = exported.litert_interpreter(path).get_signature_runner(exported.SIGNATURE)
        runner(images=one)  # warm-up
        rate = measure.median_rate(lambda: [runner(images=one) for _ in range(64)],
                                   args.windows, 64)
        files.append((name, os.path.getsize(path), 1 / rate))
    return (_serving_rate(serve, images, 1, args.windows),
            _serving_rate(serve, images, 128, args.windows), files)


def predict_folder(args, train_dir: str, test_files: list[str], work: str) -> float:
    """(i): seconds from launching cifar10-predict on a folder of PNGs to its last line."""
    folder = os.path.join(work, "predict")
    os.makedirs(folder)
    records = data.read_records(test_files).repeat().take(args.predict_images)
    for i, (image, _) in enumerate(records):
        tf.io.write_file(os.path.join(folder, f"{i:05d}.png"), tf.io.encode_png(image))
    command = [program("cifar10-predict"), f"--checkpoint_dir={train_dir}", "--top_k=1",
               folder]
    result, seconds = measure.timed(run, command, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=child_env(work))
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
            lambda: prepare.convert(imagefiles.find_source(folder),
                                    os.path.join(work, "prepared")))
    except Cifar10Error as e:  # too few images to split, say
        raise SystemExit(f"benchmark.py: error: (j) cannot convert {args.prepare_images} "
                         f"images: {e}; a larger --prepare_images converts") from None
    if summary.skipped or summary.train_records + summary.test_records != args.prepare_images:
        raise SystemExit(f"benchmark.py: error: the conversion of (j) wrote "
                         f"{summary.train_records} + {summary.test_records} records of "
                         f"{args.prepare_images}")
    return args.prepare_images / seconds
