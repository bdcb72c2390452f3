"""Whether a batch can fit in this machine's memory at all, answered before TensorFlow
loads.

A step's largest tensor is conv1's output (batch x 24 x 24 x 64 values, and its
gradient as large).  A --batch_size whose conv1 output alone is larger than the
machine's memory cannot run; TensorFlow does not always say so (a batch of 200,000
ends in a segmentation fault inside its CPU kernels, and one past 2^63 in an
overflow), so the programs that take a --batch_size refuse it.
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


# The most memory a 64-bit machine can address: the limit where this machine's memory is
# not known, so that no batch past it (past what TensorFlow's 64-bit sizes hold, too)
# reaches TensorFlow.
ADDRESSABLE = 2**64


def refuse_batch_beyond_memory(batch_size: int, value_bytes: int = 4,
                               memory: int | None = None, replica: bool = True) -> None:
    """Raises Cifar10Error when conv1's output for ``batch_size`` images (a replica's
    batch, with ``replica``; else the program's one device's) of ``value_bytes`` a value
    alone is larger than ``memory`` bytes (default: this machine's), or than a 64-bit
    machine can address where the machine's memory is not known."""
    memory = total_memory() if memory is None else memory
    needed = conv1_output_bytes(batch_size, value_bytes)
    if memory and needed > memory:
        held = f"this machine's {_gb(memory)} of memory"
    elif needed > ADDRESSABLE:
        held = "the memory a 64-bit machine can address"
    else:
        return
    raise Cifar10Error(
        f"--batch_size={batch_size} cannot fit: conv1's output alone would take at "
        f"least {_gb(needed)}{' a replica' if replica else ''}, more than {held}; "
        f"give a smaller --batch_size (the tutorial's is 128)")


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size < 10**15 else f"{size / 1e9:.3g} GB"
