"""(n) what each compiled kernel saves here: the train step without one kernel at a
time, and with TensorFlow's ops alone, against all the kernels, timed in turns."""

from __future__ import annotations

import os
import statistics
from typing import Callable

import tensorflow as tf

from bench import training
from cifar10.kernels import layers as choice

# (label, the kernels of the variant from the run's compiled ones).  Without the LRN
# kernels, norm1 and norm2 are TensorFlow's ops (norm2's fusion is an LRN kernel too);
# without a fusion, the convolution adds its bias and takes its ReLU, and pool1 is
# TensorFlow's max pooling or norm2 the plain LRN kernel.
VARIANTS: tuple[tuple[str, Callable[[choice.KernelChoice], choice.KernelChoice]], ...] = (
    ("all kernels", lambda k: k),
    ("without the LRN kernels", lambda k: k._replace(lrn=choice.tensorflow_ops("").lrn,
                                                     relu_lrn=None)),
    ("without pool1's fusion", lambda k: k._replace(relu_pool=None)),
    ("without norm2's fusion", lambda k: k._replace(relu_lrn=None)),
    ("TensorFlow's ops", lambda k: choice.tensorflow_ops("(n)")),
)


def step_times(args, strategy: tf.distribute.Strategy, work: str,
               kernels: choice.KernelChoice) -> list[tuple[str, float]]:
    """(n): [(variant label, median ms per step of the train step alone)], in the
    order of VARIANTS.

    One trainer per variant, on one batch in memory as (a); a window of each in
    turns, ``args.windows`` rounds, so that the machine's drift touches them alike.
    The trainers differ only in the layer functions (the same seed, settings and
    batch): the differences are the kernels'.
    """
    timers = [training.step_alone(args, strategy, os.path.join(work, f"kernels-{i}"),
                                  variant(kernels))
              for i, (_, variant) in enumerate(VARIANTS)]
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    times: list[list[float]] = [[] for _ in VARIANTS]
    for _ in range(args.windows):
        for timer, ms in zip(timers, times):
            ms.append(1000 * global_batch / timer())  # examples/sec -> ms per step
    return [(label, statistics.median(ms)) for (label, _), ms in zip(VARIANTS, times)]
