"""This machine's CPU features, cores and memory, known before TensorFlow loads."""

from __future__ import annotations

import functools
import os

from cifar10.core.config import CROP_SIZE
from cifar10.core.errors import Cifar10Error

CONV1_FILTERS = 64  # model.py's conv1
ADDRESSABLE = 2**64
CPU_QUOTA_FILE = "/sys/fs/cgroup/cpu.max"  # a container's CPU quota (cgroup v2)


def features(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags ('avx2', 'amx_bf16', ...); None where not known."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):  # x86, Arm
                    return frozenset(value.split())
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def has_amx() -> bool:
    """Whether this CPU has AMX's bfloat16 tiles (Intel Sapphire Rapids and later)."""
    return "amx_bf16" in (features() or ())


def conv1_output_bytes(batch_size: int, value_bytes: int = 4) -> int:
    """The bytes of conv1's output (a step's largest tensor) for ``batch_size`` images."""
    return batch_size * CROP_SIZE * CROP_SIZE * CONV1_FILTERS * value_bytes


def total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def refuse_batch_beyond_memory(batch_size: int, value_bytes: int = 4,
                               memory: int | None = None, replica: bool = True) -> None:
    """Cifar10Error when conv1's output for ``batch_size`` images alone exceeds ``memory``
    (default: this machine's) or 2**64 bytes: TensorFlow may crash instead of saying so."""
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


def host_cores() -> int:
    """The CPU cores this process may run on: its affinity (taskset, a container, Slurm)
    within a container's CPU quota (``CPU_QUOTA_FILE``: "max" or quota and period)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this system (macOS)
        cores = os.cpu_count() or 1
    try:
        with open(CPU_QUOTA_FILE) as f:
            quota, period = f.read().split()
        return max(1, min(cores, -(-int(quota) // int(period))))
    except (OSError, ValueError):  # no file, or no quota ("max")
        return cores
