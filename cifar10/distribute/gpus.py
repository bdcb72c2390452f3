"""Which GPUs a process uses, set before TensorFlow allocates: the first N visible ones
(``CUDA_VISIBLE_DEVICES`` picks which), each with memory growth, the others hidden, so
that no program maps the memory of a GPU it does not use; or several replicas on
logical slices of each GPU, their memory checked against the card's (nvidia-smi:
TensorFlow's device details do not give it).  And how the replicas' gradients add up."""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Iterator, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core.errors import Cifar10Error

# Memory of each logical slice where several replicas share one GPU (--replicas_per_gpu).
SLICE_MEMORY_MB = 2048
# A GPU's memory beyond its slices, for CUDA's context and libraries.
CUDA_RESERVE_MB = 1024
NVIDIA_SMI = ["nvidia-smi", "--query-gpu=index,uuid,memory.total,mig.mode.current",
              "--format=csv,noheader,nounits"]
MIG = "nvidia-smi gives the whole card's memory, not an instance's"


def keep(gpus: Sequence) -> None:
    """Makes ``gpus`` (physical devices) the only visible GPUs, each with memory growth."""
    with _before_tensorflow_starts():
        tf.config.set_visible_devices(list(gpus), "GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)


@contextlib.contextmanager
def _before_tensorflow_starts() -> Iterator[None]:
    """One warning line where TensorFlow has started and so keeps its GPUs as they are
    (it refuses a change only: never where there is no GPU)."""
    try:
        yield
    except RuntimeError as e:
        logging.warning("cannot set up the GPUs as chosen (%s): TensorFlow started before, "
                        "so they stay as it set them", e)


def use(gpus: Sequence, num_replicas: int, per_gpu: int = 1) -> None:
    """``num_replicas`` replicas on the first of ``gpus``: one per GPU, or ``per_gpu`` on
    logical slices of each; the other GPUs hidden.  Cifar10Error where there are too few
    GPUs, or where the slices do not fit a GPU's memory."""
    per_gpu = min(per_gpu, num_replicas)  # (one replica: the whole GPU)
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
    with _before_tensorflow_starts():
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
            fits = (total - CUDA_RESERVE_MB) // SLICE_MEMORY_MB
            raise Cifar10Error(
                f"--replicas_per_gpu={per_gpu}: {per_gpu} slices of {SLICE_MEMORY_MB} MB and "
                f"{CUDA_RESERVE_MB} MB for CUDA do not fit GPU {index}'s {total} MB" + (
                    f": give --replicas_per_gpu={fits} or fewer" if fits > 1 else
                    ", which takes one replica: drop --replicas_per_gpu"))


def card_memory_mb() -> list[int] | str:
    """Total memory (MB) of each visible GPU, in CUDA's order, as nvidia-smi reports it;
    where it cannot tell, why not.  Indices (CUDA_VISIBLE_DEVICES', or all GPUs where it
    is unset) are nvidia-smi's only with CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA's default puts
    the fastest first): otherwise each is taken as the smallest card.  A UUID is its card."""
    try:
        result = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "nvidia-smi is not on PATH"
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi: {e}"
    rows = [[field.strip() for field in line.split(",")]
            for line in result.stdout.splitlines() if line.strip()]
    if result.returncode or not rows or any(len(row) != 4 for row in rows):
        said = (result.stderr or result.stdout).strip().splitlines()
        return f"nvidia-smi failed: {said[0] if said else f'status {result.returncode}'}"
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = ([row[0] for row in rows] if chosen is None else
               [entry for entry in (e.strip() for e in chosen.split(",")) if entry])
    totals = []
    for entry in entries:
        if entry.startswith("MIG-"):
            return f"CUDA_VISIBLE_DEVICES names {entry}, a MIG instance: {MIG}"
        cards = [row for row in rows if entry == row[0] or row[1].startswith(entry)]
        if len(cards) != 1:
            return f"CUDA_VISIBLE_DEVICES names {entry}, which is no GPU nvidia-smi lists"
        if entry.isdigit() and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            cards = rows  # CUDA's index N: any card
        for index, _, memory, mig in cards:
            if mig == "Enabled":
                return f"GPU {index} is split into MIG instances: {MIG}"
            if not memory.isdigit():
                return f"nvidia-smi gives GPU {index}'s memory as {memory}"
        totals.append(min(int(card[2]) for card in cards))
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
    """TensorFlow's details (``device_name``, ``compute_capability``) of the GPU each of
    ``device_names`` runs on, with its visible ``index`` and whether ``sliced``; {} for a
    device on none."""
    owners, found = logical(), []
    for name in device_names:
        spec = tf.DeviceSpec.from_string(name)
        if spec.device_type == "GPU" and (spec.device_index or 0) < len(owners):
            index, gpu, sliced = owners[spec.device_index or 0]
            found.append({**tf.config.experimental.get_device_details(gpu),
                          "index": index, "sliced": sliced})
        else:
            found.append({})
    return found


def all_reduce(choice: str, devices: Sequence[str], workers_share_gpus: bool = False) -> str:
    """The all-reduce of ``--all_reduce=choice`` (``config.ALL_REDUCE``) between replicas
    on ``devices`` (``replica_devices``'): 'nccl', 'hierarchical_copy' or 'one_device'.
    auto is NCCL between whole GPUs (given explicitly: MirroredStrategy drops it once
    visibility is narrowed); one device (ring between workers) on CPU replicas, on slices
    of a GPU, and where several workers of one machine may take the same GPUs
    (``workers_share_gpus``): NCCL cannot reduce between replicas on one GPU.
    Cifar10Error where the choice cannot apply."""
    on_gpus = devices[0].startswith("/gpu")
    sliced = any(sliced for _, _, sliced in logical())
    if not on_gpus and choice in ("nccl", "hierarchical_copy"):
        raise Cifar10Error(f"--all_reduce={choice} reduces between GPUs and the replicas run "
                           f"on the CPU here: drop --all_reduce")
    if sliced and choice == "nccl":
        raise Cifar10Error("--all_reduce=nccl cannot reduce between slices of one GPU "
                           "(--replicas_per_gpu): drop one of them")
    if choice == "auto":
        return "nccl" if on_gpus and not sliced and not workers_share_gpus else "one_device"
    return choice


def mirrored_ops(name: str, num_replicas: int) -> tf.distribute.CrossDeviceOps:
    """MirroredStrategy's cross-device ops for ``all_reduce``'s ``name``.  TensorFlow's
    hierarchical copy adds up two equal halves of the replicas (DGX-1's layout): of an
    odd number it would drop the last one's gradients, so that is refused."""
    if name == "hierarchical_copy" and num_replicas % 2 and num_replicas > 1:
        raise Cifar10Error(f"--all_reduce=hierarchical_copy adds up two equal halves of the "
                           f"replicas, and {num_replicas} is odd: give an even --num_gpus, or "
                           f"--all_reduce=one_device")
    return {"nccl": tf.distribute.NcclAllReduce,
            "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
            "one_device": tf.distribute.ReductionToOneDevice}[name]()
