"""What every figure measures with: one clock, medians over windows, and training runs
that print nothing but report their rates."""

from __future__ import annotations

import platform
import statistics
import time
from typing import Any, Callable

import tensorflow as tf

from cifar10.core import machine as machine_facts
from cifar10.core.config import TrainConfig
from cifar10.core.config import compute_dtype as dtype_name
from cifar10.distribute import devices
from cifar10.training import controller
from cifar10.training.controller import TrainData


def timed(run: Callable[..., Any], *args, **kwargs) -> tuple[Any, float]:
    """(what ``run(*args, **kwargs)`` returns, the seconds it took)."""
    start = time.perf_counter()
    result = run(*args, **kwargs)
    return result, time.perf_counter() - start


def rate(run_window: Callable[[], Any], examples: int) -> float:
    """Examples/sec of one call of ``run_window``, which handles ``examples``."""
    return examples / timed(run_window)[1]


def median_rate(run_window: Callable[[], Any], windows: int, examples_per_window: int
                ) -> float:
    return statistics.median(rate(run_window, examples_per_window) for _ in range(windows))


def median_seconds(run: Callable[[], Any], windows: int) -> float:
    return statistics.median(timed(run)[1] for _ in range(windows))


def train_config(args, train_dir: str, **settings) -> TrainConfig:
    """The benchmark's batch size (unless ``settings`` give one), precision, XLA, kernels."""
    settings.setdefault("batch_size", args.batch_size)
    return TrainConfig(train_dir=train_dir, use_fp16=args.use_fp16, use_bf16=args.use_bf16,
                       xla=args.xla, kernels=args.kernels, **settings)


def train_reports(config: TrainConfig, strategy: tf.distribute.Strategy, files: list[str],
                  count: int, on_report: Callable[[Any], None] | None = None) -> list:
    """The reports (``StepReport``, one a log line) of a silent training run;
    ``on_report`` is called with each as it comes, while training waits."""
    reports = []

    def collect(report) -> None:
        reports.append(report)
        if on_report:
            on_report(report)

    controller.train(config, strategy, TrainData(files, count), print_fn=lambda line: None,
                     on_report=collect)
    return reports


def compute_dtype(args) -> tf.DType:
    return tf.as_dtype(dtype_name(args))


def machine() -> str:
    """This machine, TensorFlow and Python, on one line."""
    gpus = len(tf.config.list_physical_devices("GPU"))
    return (f"{devices.cpu_model().removeprefix('CPU: ')}; {machine_facts.host_cores()} cores; "
            f"{gpus} GPU(s); TensorFlow {tf.__version__}; "
            f"Python {platform.python_version()}")
