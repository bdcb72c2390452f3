"""Whether a batch can fit in this machine's memory at all, answered before TensorFlow
loads.

A step's largest tensor is conv1's output (batch x 24 x 24 x 64 values, and its
gradient as large).  A --batch_size whose conv1 output alone is larger than the
machine's memory cannot run; TensorFlow does not always say so (a batch of 200,000
ends in a segmentation fault inside its CPU kernels), so the trainer refuses it.
Smaller batches that still do not fit end in TensorFlow's out-of-memory error,
which the trainer words as one line.

This module imports no TensorFlow.
"""

from __future__ import annotations

import os

from cifar10.core.config import CROP_SIZE
from cifar10.core.errors import Cifar10Error

CONV1_FILTERS = 64  # model.py's conv1


def conv1_output_bytes(batch_size: int, value_bytes: int = 4) -> int:
    """The bytes of conv1's output for a batch of ``batch_size`` images, of
    ``value_bytes`` a value (4: float32; 2: the least under --use_bf16 or --use_fp16)."""
    return batch_size * CROP_SIZE * CROP_SIZE * CONV1_FILTERS * value_bytes


def total_memory() -> int | None:
    """This machine's physical memory in bytes; None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def refuse_batch_beyond_memory(batch_size: int, value_bytes: int = 4,
                               memory: int | None = None) -> None:
    """Raises Cifar10Error when conv1's output for ``batch_size`` images (a replica's
    batch) of ``value_bytes`` a value alone is larger than ``memory`` bytes (default:
    this machine's)."""
    memory = total_memory() if memory is None else memory
    needed = conv1_output_bytes(batch_size, value_bytes)
    if memory and needed > memory:
        raise Cifar10Error(
            f"--batch_size={batch_size} cannot fit: conv1's output alone would take at "
            f"least {_gb(needed)} a replica, more than this machine's {_gb(memory)} of memory; "
            f"give a smaller --batch_size (the tutorial's is 128)")


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"
