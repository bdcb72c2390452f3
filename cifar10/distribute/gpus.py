"""Which GPUs a process uses, set before TensorFlow allocates: the first N visible ones
(``CUDA_VISIBLE_DEVICES`` picks which), each with memory growth, the others hidden, so
that no program maps the memory of a GPU it does not use; or several replicas on
logical slices of each GPU, their memory checked against the card's (nvidia-smi:
TensorFlow's device details do not give it).  And how the replicas' gradients add up."""

from __future__ import annotations

import os
import subprocess
from typing import Sequence

from absl import logging
import tensorflow as tf

from cifar10.core.errors import Cifar10Error

# Memory of each logical slice where several replicas share one GPU (--replicas_per_gpu).
SLICE_MEMORY_MB = 2048
# A GPU's memory beyond its slices, for CUDA's context and libraries.
CUDA_RESERVE_MB = 1024
NVIDIA_SMI = ["nvidia-smi", "--query-gpu=index,uuid,memory.total",
              "--format=csv,noheader,nounits"]


def keep(gpus: Sequence) -> None:
    """Makes ``gpus`` (physical devices) the only visible GPUs, each with memory growth."""
    try:
        tf.config.set_visible_devices(list(gpus), "GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:
        pass  # TensorFlow already started in this process (a test): its GPUs stay as set


def use(gpus: Sequence, num_replicas: int, per_gpu: int = 1) -> None:
    """``num_replicas`` replicas on the first of ``gpus``: one per GPU, or ``per_gpu`` on
    logical slices of each; the other GPUs hidden.  Cifar10Error where there are too few
    GPUs, or where the slices do not fit a GPU's memory."""
    needed = -(-num_replicas // per_gpu)
    if needed > len(gpus):
        asked = f"--num_gpus={num_replicas}" + (f" --replicas_per_gpu={per_gpu}"
                                                 if per_gpu > 1 else "")
        chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={chosen})" if chosen is not None else ""
        raise Cifar10Error(
            f"{asked} needs {needed} GPUs and this process sees {len(gpus)}{shown}: give "
            f"--num_gpus={len(gpus) * per_gpu} or fewer, or --replicas_per_gpu="
            f"{-(-num_replicas // len(gpus))} for several replicas on each GPU's slices")
    if per_gpu == 1:
        keep(gpus[:needed])
        return
    check_memory(needed, per_gpu)
    tf.config.set_visible_devices(list(gpus[:needed]), "GPU")
    for i, gpu in enumerate(gpus[:needed]):
        slices = min(per_gpu, num_replicas - i * per_gpu)
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=SLICE_MEMORY_MB)] * slices)


def check_memory(count: int, per_gpu: int) -> None:
    """Refuses ``per_gpu`` slices that do not fit one of the first ``count`` visible GPUs;
    a warning where nvidia-smi cannot tell."""
    totals = card_memory_mb()
    if isinstance(totals, str):
        logging.warning("--replicas_per_gpu=%d: cannot check that %d slices of %d MB fit "
                        "each GPU's memory (%s); if TensorFlow runs out of GPU memory, give "
                        "fewer", per_gpu, per_gpu, SLICE_MEMORY_MB, totals)
        return
    for index, total in enumerate(totals[:count]):
        if per_gpu * SLICE_MEMORY_MB + CUDA_RESERVE_MB > total:
            fits = max(1, (total - CUDA_RESERVE_MB) // SLICE_MEMORY_MB)
            raise Cifar10Error(
                f"--replicas_per_gpu={per_gpu}: {per_gpu} slices of {SLICE_MEMORY_MB} MB and "
                f"{CUDA_RESERVE_MB} MB for CUDA do not fit GPU {index}'s {total} MB: give "
                f"--replicas_per_gpu={fits} or fewer")


def card_memory_mb() -> list[int] | str:
    """Total memory (MB) of each visible GPU, in CUDA's order under CUDA_VISIBLE_DEVICES
    (indices or UUIDs), as nvidia-smi reports it; where it cannot tell, why not."""
    try:
        result = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "nvidia-smi is not on PATH"
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi: {e}"
    rows = [[field.strip() for field in line.split(",")]
            for line in result.stdout.splitlines() if line.strip()]
    if result.returncode or not rows or any(len(row) != 3 or not row[2].isdigit()
                                            for row in rows):
        said = (result.stderr or result.stdout).strip().splitlines()
        return f"nvidia-smi failed: {said[0] if said else f'status {result.returncode}'}"
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return [int(row[2]) for row in rows]
    totals = []
    for entry in filter(None, (e.strip() for e in chosen.split(","))):
        matches = [row for row in rows if entry == row[0] or row[1].startswith(entry)]
        if len(matches) != 1:
            return f"CUDA_VISIBLE_DEVICES names {entry}, which is no GPU nvidia-smi lists"
        totals.append(int(matches[0][2]))
    return totals


def logical() -> list[tuple[int, object, bool]]:
    """(its visible GPU's index, that physical GPU, whether a slice) of each logical GPU,
    in TensorFlow's order."""
    gpus = tf.config.get_visible_devices("GPU")
    found = []
    for index, gpu in enumerate(gpus):
        slices = tf.config.get_logical_device_configuration(gpu)
        found += [(index, gpu, bool(slices))] * max(1, len(slices or ()))
    return found


def details(device_names: Sequence[str]) -> list[dict]:
    """TensorFlow's details (``device_name``, ``compute_capability``) of each GPU the
    replicas on ``device_names`` use, once each, with ``index`` and ``sliced``."""
    owners, seen = logical(), {}
    for name in device_names:
        spec = tf.DeviceSpec.from_string(name)
        if spec.device_type == "GPU" and (spec.device_index or 0) < len(owners):
            index, gpu, sliced = owners[spec.device_index or 0]
            if index not in seen:
                seen[index] = {**tf.config.experimental.get_device_details(gpu),
                               "index": index, "sliced": sliced}
    return list(seen.values())


def all_reduce(choice: str, on_gpus: bool, sliced: bool) -> str:
    """The all-reduce of ``--all_reduce=choice`` (``cluster.ALL_REDUCE``): 'nccl',
    'hierarchical_copy' or 'one_device'.  auto is NCCL on physical GPUs (given
    explicitly: MirroredStrategy drops it once visibility is narrowed), one device on
    CPU replicas and slices of a GPU.  Cifar10Error where the choice cannot apply."""
    if not on_gpus and choice in ("nccl", "hierarchical_copy"):
        raise Cifar10Error(f"--all_reduce={choice} reduces between GPUs and the replicas run "
                           f"on the CPU here: drop --all_reduce")
    if sliced and choice == "nccl":
        raise Cifar10Error("--all_reduce=nccl cannot reduce between slices of one GPU "
                           "(--replicas_per_gpu): drop one of them")
    if choice == "auto":
        return "nccl" if on_gpus and not sliced else "one_device"
    return choice


def mirrored_ops(name: str) -> tf.distribute.CrossDeviceOps:
    """MirroredStrategy's cross-device ops for ``all_reduce``'s ``name``."""
    return {"nccl": tf.distribute.NcclAllReduce,
            "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
            "one_device": tf.distribute.ReductionToOneDevice}[name]()
