"""Which devices the replicas run on, the distribution strategy over them, and how
the batches reach them.  ``--num_gpus=N`` asks for N replicas: on the first N visible
GPUs (``gpus``), or on a machine without GPUs on N logical CPU devices, made before any
other TensorFlow work, so that the global batch and schedule stay those of N GPUs."""

from __future__ import annotations

import itertools
import os
import platform
from typing import Sequence

from absl import logging
import tensorflow as tf

from cifar10.core import machine
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import cluster, resolver
from cifar10.distribute import gpus as gpu_config

# The most replicas on logical CPU devices (each is built in turn, about a second apiece).
MAX_LOGICAL_REPLICAS = 64


def replica_devices(num_gpus: int | None, per_gpu: int = 1, gpus: list | None = None
                    ) -> list[str]:
    """One device name per replica for ``--num_gpus=num_gpus`` (None, the flag's default:
    one, on the CPU without a word where there is no GPU), before any other TensorFlow
    work: the first of ``gpus`` (default: the visible ones), ``per_gpu`` replicas on each
    (``gpus.use``), the others hidden; 0, or no GPU, the CPU, its logical devices for
    several replicas."""
    asked, num_gpus = num_gpus is not None, 1 if num_gpus is None else num_gpus
    if num_gpus < 0:
        raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
    gpus = tf.config.list_physical_devices("GPU") if gpus is None else gpus
    if num_gpus and gpus:
        gpu_config.use(gpus, num_gpus, per_gpu)
        return [f"/gpu:{i}" for i in range(num_gpus)]
    gpu_config.keep([])
    if num_gpus == 1 and asked:
        logging.warning("--num_gpus=1 but this machine has no GPU: training on the CPU.")
    if num_gpus <= 1:
        return ["/cpu:0"]  # (not listed: a multi-worker strategy needs TensorFlow unstarted)
    if num_gpus > MAX_LOGICAL_REPLICAS:
        raise Cifar10Error(
            f"--num_gpus={num_gpus} asks for more replicas than this machine has GPUs "
            f"(none), and more than the {MAX_LOGICAL_REPLICAS} that run on logical CPU "
            f"devices in their place: give --num_gpus={MAX_LOGICAL_REPLICAS} or fewer")
    logging.warning(
        "--num_gpus=%d but this machine has no GPU: running %d replicas on logical CPU "
        "devices (same global batch and schedule as %d GPUs, not the same speed).",
        num_gpus, num_gpus, num_gpus)
    try:
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * num_gpus)
    except RuntimeError:
        pass  # runtime already initialised: counted below
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < num_gpus:
        raise Cifar10Error(
            f"{num_gpus} replicas need {num_gpus} logical CPU devices but TensorFlow was "
            f"already initialised with {len(logical)}; configure devices before any other "
            f"TensorFlow work in the process")
    return [d.name for d in logical[:num_gpus]]


def make_strategy(num_gpus: int | None, log_device_placement: bool = False, kind: str = "auto",
                  worker_timeout_secs: float | None = None,
                  slurm_port_base: int | None = None, per_gpu: int = 1,
                  all_reduce: str = "auto") -> tf.distribute.Strategy:
    """The strategy of a training run (``kind``: one of ``cluster.STRATEGIES``) with
    ``num_gpus`` replicas per worker (None: the default; under srun, one per GPU Slurm
    gave), ``per_gpu`` on each GPU, adding up by ``all_reduce`` (``gpus.all_reduce``);
    ``worker_timeout_secs`` bounds a wait for the others."""
    kind = cluster.strategy_kind(kind)
    tf.debugging.set_log_device_placement(log_device_placement)
    num_gpus = resolver.default_num_gpus() if num_gpus is None else num_gpus
    if kind == "multi_worker":
        return _multi_worker_strategy(num_gpus, per_gpu, all_reduce, worker_timeout_secs,
                                      slurm_port_base)
    devices = replica_devices(num_gpus, per_gpu)
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0])
    ops = gpu_config.mirrored_ops(gpu_config.all_reduce(all_reduce, devices), len(devices))
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops)


def _multi_worker_strategy(num_gpus: int | None, per_gpu: int, all_reduce: str,
                           timeout: float | None, port_base: int | None
                           ) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy with ``num_gpus`` replicas per worker, on its GPUs as
    ``replica_devices`` chooses them (under srun, among those Slurm gave the task), or
    one CPU replica."""
    cluster_resolver, task_gpus = resolver.from_slurm(port_base)  # (None, None): TF_CONFIG
    gpus = tf.config.list_physical_devices("GPU") if task_gpus is None else task_gpus
    if num_gpus and num_gpus > 1 and not gpus:
        raise Cifar10Error(
            f"--num_gpus={num_gpus} replicas per worker need {num_gpus} GPUs on each worker, "
            f"and this one has none: use --num_gpus=1 and more workers")
    # Workers of one machine (cifar10-launch's) each take its first GPUs, unless told apart.
    name = gpu_config.all_reduce(all_reduce, replica_devices(num_gpus, per_gpu, gpus),
                                 task_gpus is None and cluster.shares_host())
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=timeout,
        implementation=implementation.NCCL if name == "nccl" else implementation.RING)
    return resolver.multi_worker_strategy(cluster_resolver, options, timeout)


def input_options(strategy: tf.distribute.Strategy, device_type: str | None = None
                  ) -> tf.distribute.InputOptions | None:
    """How the batches reach ``strategy``'s replicas (``device_type``: default, its first
    device's): GPUs get one pipeline per worker, copied ahead of the step; CPU replicas
    of MirroredStrategy one pipeline each, uncopied (twice the speed of small steps)."""
    if device_type is None:
        try:
            first = strategy.extended.worker_devices[0]
        except (RuntimeError, NotImplementedError, AttributeError, IndexError):
            first = "/device:CPU:0"  # the default strategy has no device list
        device_type = tf.DeviceSpec.from_string(first).device_type or "CPU"
    if device_type == "GPU":
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_WORKER,
            experimental_fetch_to_device=True, experimental_per_replica_buffer_size=2)
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False)
    return None


def cpu_has_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU has bfloat16 instructions; None when ``cpuinfo`` cannot be read."""
    flags = machine.features(cpuinfo)
    return None if flags is None else bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def warn_if_bfloat16_is_emulated(device_names: Sequence[str] | None = None,
                                 cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Warns in one line where bfloat16 runs emulated on the model's devices (default:
    the first GPU, else the CPU); returns whether it warned."""
    names = device_names or (["/gpu:0"] if tf.config.list_logical_devices("GPU") else ["/cpu:0"])
    if _on_gpus(names):
        old = [d.get("device_name", "GPU") for d in gpu_config.details(names)
               if d.get("compute_capability", (8, 0)) < (8, 0)]
        if not old:
            return False
        logging.warning("--use_bf16: %s has no bfloat16 tensor cores (those came with "
                        "Ampere, compute capability 8.0): bfloat16 runs emulated, slower "
                        "than float32.", old[0])
        return True
    if cpu_has_bfloat16(cpuinfo) is not False:
        return False
    logging.warning("--use_bf16: this CPU has no bfloat16 instructions (x86's avx512_bf16 or "
                    "amx_bf16, Arm's bf16): TensorFlow emulates them, so training runs "
                    "several times slower than in float32 here (evaluation about as fast).")
    return True


def _on_gpus(device_names: Sequence[str]) -> bool:
    return any("GPU" in name.upper() for name in device_names)


def warn_if_float16_runs_on_cpu(device_names: Sequence[str]) -> bool:
    """Warns in one line where --use_fp16 trains on the CPU; returns whether it warned."""
    if _on_gpus(device_names):
        return False
    logging.warning("--use_fp16 on the CPU: TensorFlow's CPU kernels compute float16 "
                    "slowly, so training runs many times slower than in float32 here; "
                    "float16 is for GPUs (on a CPU with bfloat16 instructions, --use_bf16 "
                    "is the faster lower precision).")
    return True


def suggest_precision(device_names: Sequence[str]) -> bool:
    """A notice where float32 trains on hardware with a faster precision it does not use:
    GPUs with TF32 tensor cores (compute capability 8.0 on) without --allow_tf32, or a
    CPU with AMX, on which bfloat16 trains several times faster; returns whether given."""
    if _on_gpus(device_names):
        tf32 = [d["device_name"] for d in gpu_config.details(device_names)
                if d.get("compute_capability", (0, 0)) >= (8, 0)]
        if not tf32 or tf.config.experimental.tensor_float_32_execution_enabled():
            return False
        logging.warning("%s has TF32 tensor cores, which float32 leaves idle: --allow_tf32 "
                        "runs its convolutions and matrix products on them, faster, with "
                        "TF32's 10-bit mantissa", tf32[0], extra={"notice": True})
        return True
    if not machine.has_amx():
        return False
    logging.warning("this CPU has bfloat16 instructions (AMX): --use_bf16 trains about 2.3x "
                    "faster here, to the same precision", extra={"notice": True})
    return True


def _cluster(strategy: tf.distribute.Strategy) -> dict[str, list[str]]:
    """The strategy's cluster, {job: [task addresses]}; empty without one."""
    cluster_resolver = getattr(strategy, "cluster_resolver", None)
    return cluster_resolver.cluster_spec().as_dict() if cluster_resolver else {}


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    return bool(_cluster(strategy))


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, str]:
    """(whether this is the chief: 'chief' if there is one, else 'worker' 0; a name for
    this task)."""
    spec = _cluster(strategy)
    if not spec:
        return True, "chief"
    cluster_resolver = strategy.cluster_resolver
    task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id or 0
    if "chief" in spec:
        return task_type == "chief", f"{task_type} {task_id}"
    return task_type in (None, "worker") and task_id == 0, f"{task_type} {task_id}"


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Worker processes that train together: 1 without a cluster."""
    spec = _cluster(strategy)
    return max(1, sum(len(spec.get(job, ())) for job in ("chief", "worker")))


def describe(device_names: Sequence[str]) -> list[dict[str, str]]:
    """{'name', 'kind'} of each device: its GPU (and which one's slice) or CPU model."""
    described = []
    for name, gpu in zip(device_names, gpu_config.details(device_names)):
        device_type = tf.DeviceSpec.from_string(name).device_type
        kind = cpu_model() if device_type == "CPU" else str(device_type)
        if gpu:
            kind = gpu.get("device_name", "GPU") + (
                f", slice of GPU {gpu['index']}" if gpu["sliced"] else "")
        described.append({"name": name, "kind": kind})
    return described


def placement(strategy: tf.distribute.Strategy) -> str:
    """' on /gpu:0-1 (NVIDIA H200; CUDA_VISIBLE_DEVICES=4,5)': the GPUs of the strategy's
    replicas on this worker, those of one kind together, and which ones the process
    sees where CUDA_VISIBLE_DEVICES says, for the trainer's first line; '' on the CPU."""
    described = [d for d in describe(strategy.extended.worker_devices)
                 if tf.DeviceSpec.from_string(d["name"]).device_type == "GPU"]
    parts = []
    for kind, group in itertools.groupby(described, key=lambda d: d["kind"]):
        indices = [tf.DeviceSpec.from_string(d["name"]).device_index or 0 for d in group]
        span = f"{indices[0]}-{indices[-1]}" if len(indices) > 1 else f"{indices[0]}"
        parts.append(f"/gpu:{span} ({kind})")
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if parts and chosen is not None:
        parts[-1] = f"{parts[-1][:-1]}; CUDA_VISIBLE_DEVICES={chosen})"
    whose = ", this worker's" if is_multi_worker(strategy) else ""
    return f"{whose} on {', '.join(parts)}" if parts else ""


def cpu_model() -> str:
    """This machine's CPU model (Linux's /proc/cpuinfo), else what Python knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU: " + (platform.processor() or platform.machine() or "unknown")
