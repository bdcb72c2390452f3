"""Replicas on logical devices, where a machine has fewer GPUs than --num_gpus asks
for: /gpu:0 (else the CPU) split into that many, so that the global batch and the
learning-rate schedule stay those of N GPUs, with one warning that says so; and
the most replicas that run so (``MAX_LOGICAL_REPLICAS``).  ``devices.replica_devices``
uses them.
"""

from __future__ import annotations

from absl import logging
import tensorflow as tf

from cifar10.core.errors import Cifar10Error

# Memory of each logical GPU when several replicas share one physical GPU.
LOGICAL_GPU_MEMORY_MB = 2048

# The most replicas that run on logical devices.  They stand in for a machine's GPUs
# (the same global batch and schedule as that many), and each is built one after the
# other: its copy of every variable, its part of the step function.  That takes about
# a second of CPU time a replica (64 logical CPU replicas: 73 s of CPU time for a
# start and two steps of batch 2, 2026-11-26), so a start asking for thousands would
# be silent for hours; no machine has more GPUs than this to stand in for.
MAX_LOGICAL_REPLICAS = 64


def refuse_too_many(num_gpus: int, gpus: list, kind: str) -> None:
    """Refuses more replicas than ``MAX_LOGICAL_REPLICAS`` where they would run on
    logical ``kind`` devices (this machine has fewer ``gpus`` than asked)."""
    if num_gpus > MAX_LOGICAL_REPLICAS:
        raise Cifar10Error(
            f"--num_gpus={num_gpus} asks for more replicas than this machine has GPUs "
            f"({len(gpus) or 'none'}), and more than the {MAX_LOGICAL_REPLICAS} that run on "
            f"logical {kind} devices in their place (each is built in turn, about a second "
            f"of CPU time apiece, before the first step): give --num_gpus="
            f"{MAX_LOGICAL_REPLICAS} or fewer")


def make_logical_devices(num_gpus: int, gpus: list, asked: bool) -> None:
    """Splits /gpu:0 (else the CPU) into ``num_gpus`` logical devices for a machine
    with fewer ``gpus`` than that, with a warning that says so (none for one CPU
    replica where --num_gpus was not ``asked``)."""
    if gpus:
        logging.warning(
            "--num_gpus=%d but this machine has %d GPU(s): running %d replicas on logical "
            "GPUs of %d MB each on /gpu:0 (same global batch and schedule as %d GPUs).",
            num_gpus, len(gpus), num_gpus, LOGICAL_GPU_MEMORY_MB, num_gpus)
        # Only /gpu:0 is split: hide the others, or a multi-worker strategy (which
        # takes every GPU it sees) would run more replicas than asked.
        try:
            tf.config.set_visible_devices(gpus[:1], "GPU")
        except RuntimeError:
            pass  # runtime already initialised; the check in replica_devices decides
        _split(gpus[0], num_gpus, LOGICAL_GPU_MEMORY_MB)
    elif num_gpus == 1:
        if asked:  # left at its default, one CPU replica is what the user has and gets
            logging.warning("--num_gpus=1 but this machine has no GPU: training on the CPU.")
    else:
        logging.warning(
            "--num_gpus=%d but this machine has no GPU: running %d replicas on logical CPU "
            "devices (same global batch and schedule as %d GPUs, not the same speed).",
            num_gpus, num_gpus, num_gpus)
        _split(tf.config.list_physical_devices("CPU")[0], num_gpus, None)


def _split(physical, count: int, memory_limit: int | None) -> None:
    config = [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit)] * count
    try:
        tf.config.set_logical_device_configuration(physical, config)
    except RuntimeError:
        pass  # runtime already initialised; the check in replica_devices decides
