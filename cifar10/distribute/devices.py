"""Which devices the replicas run on, the distribution strategy over them, and how
the batches reach them.  ``--num_gpus=N`` asks for N replicas: where a machine has
fewer GPUs, /gpu:0 (else the CPU) is split into N logical devices, before any other
TensorFlow work, so that the global batch and schedule stay those of N GPUs."""

from __future__ import annotations

import platform
from typing import Sequence

from absl import logging
import tensorflow as tf

from cifar10.core import machine
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import cluster, resolver

# Memory of each logical GPU where several replicas share one physical GPU.
LOGICAL_GPU_MEMORY_MB = 2048
# The most replicas on logical devices (each is built in turn, about a second apiece).
MAX_LOGICAL_REPLICAS = 64


def enable_memory_growth() -> None:
    """Memory growth on every GPU, so that an evaluator can share one with the trainer."""
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass  # runtime already initialised, or the GPU is split into logical devices


def replica_devices(num_gpus: int | None) -> list[str]:
    """One device name per replica for ``--num_gpus=num_gpus``: 0 is one on the CPU;
    None (the flag's default) one, on the CPU without a word where there is no GPU."""
    asked, num_gpus = num_gpus is not None, 1 if num_gpus is None else num_gpus
    if num_gpus < 0:
        raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
    if num_gpus == 0:
        return ["/cpu:0"]
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= num_gpus:
        enable_memory_growth()
        return [f"/gpu:{i}" for i in range(num_gpus)]
    kind = "GPU" if gpus else "CPU"
    if num_gpus > MAX_LOGICAL_REPLICAS:
        raise Cifar10Error(
            f"--num_gpus={num_gpus} asks for more replicas than this machine has GPUs "
            f"({len(gpus) or 'none'}), and more than the {MAX_LOGICAL_REPLICAS} that run on "
            f"logical {kind} devices in their place: give --num_gpus={MAX_LOGICAL_REPLICAS} "
            f"or fewer")
    if gpus:
        logging.warning(
            "--num_gpus=%d but this machine has %d GPU(s): running %d replicas on logical "
            "GPUs of %d MB each on /gpu:0 (same global batch and schedule as %d GPUs).",
            num_gpus, len(gpus), num_gpus, LOGICAL_GPU_MEMORY_MB, num_gpus)
        # Only /gpu:0 is split: a multi-worker strategy takes every GPU it sees.
        _split(gpus[0], num_gpus, LOGICAL_GPU_MEMORY_MB, visible=gpus[:1])
    elif num_gpus == 1:
        if asked:
            logging.warning("--num_gpus=1 but this machine has no GPU: training on the CPU.")
    else:
        logging.warning(
            "--num_gpus=%d but this machine has no GPU: running %d replicas on logical CPU "
            "devices (same global batch and schedule as %d GPUs, not the same speed).",
            num_gpus, num_gpus, num_gpus)
        _split(tf.config.list_physical_devices("CPU")[0], num_gpus, None)
    logical = tf.config.list_logical_devices(kind)
    if len(logical) < num_gpus:
        raise Cifar10Error(
            f"{num_gpus} replicas need {num_gpus} logical {kind} devices but TensorFlow was "
            f"already initialised with {len(logical)}; configure devices before any other "
            f"TensorFlow work in the process")
    return [d.name for d in logical[:num_gpus]]


def _split(physical, count: int, memory_limit: int | None, visible=None) -> None:
    config = [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit)] * count
    try:
        if visible is not None:
            tf.config.set_visible_devices(visible, "GPU")
        tf.config.set_logical_device_configuration(physical, config)
    except RuntimeError:
        pass  # runtime already initialised: replica_devices counts what there is


def make_strategy(num_gpus: int | None, log_device_placement: bool = False, kind: str = "auto",
                  worker_timeout_secs: float | None = None,
                  slurm_port_base: int | None = None) -> tf.distribute.Strategy:
    """The strategy of a training run (``kind``: one of ``cluster.STRATEGIES``) with
    ``num_gpus`` replicas per worker (None: the default; under srun, one per GPU Slurm
    gave); ``worker_timeout_secs`` bounds a wait for the others."""
    kind = cluster.strategy_kind(kind)
    tf.debugging.set_log_device_placement(log_device_placement)
    num_gpus = resolver.default_num_gpus() if num_gpus is None else num_gpus
    if kind == "multi_worker":
        return _multi_worker_strategy(num_gpus, worker_timeout_secs, slurm_port_base)
    devices = replica_devices(num_gpus)
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0])
    # Logical devices of one CPU cannot use NCCL: reduce through one device.
    cross_device_ops = None
    if all("CPU" in d.upper() for d in devices):
        cross_device_ops = tf.distribute.ReductionToOneDevice()
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)


def _multi_worker_strategy(num_gpus: int | None, timeout: float | None,
                           port_base: int | None) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy with ``num_gpus`` replicas per worker (every GPU the
    process sees, or one CPU replica)."""
    cluster_resolver, task_gpus = resolver.from_slurm(port_base)  # (None, None): TF_CONFIG
    asked, num_gpus = num_gpus is not None, 1 if num_gpus is None else num_gpus
    gpus = tf.config.list_physical_devices("GPU") if task_gpus is None else task_gpus
    if num_gpus == 0:
        tf.config.set_visible_devices([], "GPU")
    elif len(gpus) >= num_gpus:
        tf.config.set_visible_devices(gpus[:num_gpus], "GPU")
        enable_memory_growth()
    elif gpus:
        replica_devices(num_gpus)
    elif num_gpus > 1:
        raise Cifar10Error(
            f"--num_gpus={num_gpus} replicas per worker need {num_gpus} GPUs on each worker, "
            f"and this one has none: use --num_gpus=1 and more workers")
    elif asked:
        logging.warning("--num_gpus=1 but this worker has no GPU: training on the CPU.")
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
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
    indices = [int(name.rsplit(":", 1)[1]) for name in names if "GPU" in name.upper()]
    if indices:
        # Logical GPUs beyond the visible ones are slices of the first (replica_devices).
        visible = tf.config.get_visible_devices("GPU")
        used = sorted({min(i, len(visible) - 1) for i in indices}) if visible else []
        details = [tf.config.experimental.get_device_details(visible[i]) for i in used]
        old = [d.get("device_name", "GPU") for d in details
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


def warn_if_float16_runs_on_cpu(device_names: Sequence[str]) -> bool:
    """Warns in one line where --use_fp16 trains on the CPU; returns whether it warned."""
    if any("GPU" in name.upper() for name in device_names):
        return False
    logging.warning("--use_fp16 on the CPU: TensorFlow's CPU kernels compute float16 "
                    "slowly, so training runs many times slower than in float32 here; "
                    "float16 is for GPUs (on a CPU with bfloat16 instructions, --use_bf16 "
                    "is the faster lower precision).")
    return True


def suggest_bfloat16(device_names: Sequence[str]) -> bool:
    """A notice where float32 trains on a CPU with AMX, on which bfloat16 trains several
    times faster; returns whether it was given."""
    if any("GPU" in name.upper() for name in device_names) or not machine.has_amx():
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
    """{'name', 'kind'} of each device: its GPU or CPU model."""
    gpus = tf.config.list_physical_devices("GPU")
    described = []
    for name in device_names:
        spec = tf.DeviceSpec.from_string(name)
        if spec.device_type == "GPU" and gpus:
            details = tf.config.experimental.get_device_details(
                gpus[min(spec.device_index or 0, len(gpus) - 1)])
            kind = details.get("device_name", "GPU")
        else:
            kind = cpu_model() if spec.device_type == "CPU" else str(spec.device_type)
        described.append({"name": name, "kind": kind})
    return described


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
