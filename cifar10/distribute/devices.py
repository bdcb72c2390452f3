"""Which devices the replicas run on, the distribution strategy over them, and how
the batches reach them (``input_options``).

``--num_gpus=N`` asks for N replicas.  On a machine with fewer GPUs than that,
the replicas run on logical devices made by splitting what there is (logical
GPUs on a GPU, else logical CPUs), so that the global batch and the learning-rate
schedule stay those of N GPUs; one warning says so.  GPU memory growth is turned
on so that an evaluator can share a GPU with the trainer.

Logical devices can only be made before TensorFlow initialises its runtime, so
``replica_devices`` must run before any other TensorFlow work in the process.
"""

from __future__ import annotations

import platform
from typing import Sequence

from absl import logging
import tensorflow as tf

from cifar10.distribute import cluster
from cifar10.distribute import logical_devices
from cifar10.distribute import resolver
from cifar10.core import machine
from cifar10.core.errors import Cifar10Error

def enable_memory_growth() -> list:
    """Turns on memory growth for every GPU; returns the physical GPUs."""
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass  # runtime already initialised, or the GPU is split into logical devices
    return gpus


def replica_devices(num_gpus: int | None) -> list[str]:
    """Returns one device name per replica for ``--num_gpus=num_gpus``.

    Args:
      num_gpus: replicas wanted; 0 means one replica on the CPU; None (the flag left
        at its default) one replica, on the CPU without a word where there is no GPU.

    Raises:
      Cifar10Error: more replicas than GPUs and than
        ``logical_devices.MAX_LOGICAL_REPLICAS``;
        TensorFlow was already initialised with too few devices.
    """
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
    logical_devices.refuse_too_many(num_gpus, gpus, kind)
    logical_devices.make_logical_devices(num_gpus, gpus, asked)
    logical = tf.config.list_logical_devices(kind)
    if len(logical) < num_gpus:
        raise Cifar10Error(
            f"{num_gpus} replicas need {num_gpus} logical {kind} devices but TensorFlow was "
            f"already initialised with {len(logical)}; configure devices before any other "
            f"TensorFlow work in the process")
    return [d.name for d in logical[:num_gpus]]


def make_strategy(num_gpus: int | None, log_device_placement: bool = False, kind: str = "auto",
                  worker_timeout_secs: float | None = None,
                  slurm_port_base: int | None = None) -> tf.distribute.Strategy:
    """The distribution strategy of a training run.

    Args:
      num_gpus: replicas per worker (``replica_devices``); 0 is one CPU replica, None
        the flag's default (one per GPU Slurm gave a task under ``srun``, else one
        replica, quietly on the CPU where there is no GPU).
      log_device_placement: turn on TensorFlow's placement log.
      kind: 'auto' (multi_worker when ``TF_CONFIG`` names several tasks, else
        mirrored), 'mirrored' (MirroredStrategy, one replica per device),
        'multi_worker' (MultiWorkerMirroredStrategy configured by ``TF_CONFIG``)
        or 'one_device' (OneDeviceStrategy on the first device).
      worker_timeout_secs: multi_worker only: a collective operation waiting this
        long for another worker fails, so that a lost worker stops the others
        with an error instead of a hang.
      slurm_port_base: under ``srun``, the port of a node's first task (``slurm.py``).

    Raises:
      Cifar10Error: a setting this machine or ``TF_CONFIG`` cannot serve.
    """
    kind = cluster.strategy_kind(kind)
    tf.debugging.set_log_device_placement(log_device_placement)
    num_gpus = resolver.default_num_gpus() if num_gpus is None else num_gpus
    if kind == "multi_worker":
        return _multi_worker_strategy(num_gpus, worker_timeout_secs, slurm_port_base)
    devices = replica_devices(num_gpus)
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0])
    # Several logical devices on one CPU cannot use NCCL; reduce through one device.
    cross_device_ops = None
    if all("CPU" in d.upper() for d in devices):
        cross_device_ops = tf.distribute.ReductionToOneDevice()
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)


def _multi_worker_strategy(num_gpus: int | None, timeout: float | None,
                           port_base: int | None) -> tf.distribute.Strategy:
    cluster_resolver, task_gpus = resolver.from_slurm(port_base)  # (None, None) if not Slurm
    if cluster_resolver is None:
        resolver.check_tf_config_port()
    asked, num_gpus = num_gpus is not None, 1 if num_gpus is None else num_gpus
    gpus = tf.config.list_physical_devices("GPU") if task_gpus is None else task_gpus
    if num_gpus == 0:
        tf.config.set_visible_devices([], "GPU")
    elif len(gpus) >= num_gpus:
        tf.config.set_visible_devices(gpus[:num_gpus], "GPU")
        enable_memory_growth()
    elif gpus:  # MultiWorkerMirroredStrategy takes every (logical) GPU it sees
        replica_devices(num_gpus)
    elif num_gpus > 1:
        raise Cifar10Error(
            f"--num_gpus={num_gpus} replicas per worker need {num_gpus} GPUs on each worker, "
            f"and this one has none (MultiWorkerMirroredStrategy runs one replica per worker "
            f"on a CPU): use --num_gpus=1 and more workers")
    elif asked:
        logging.warning("--num_gpus=1 but this worker has no GPU: training on the CPU.")
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
    return resolver.multi_worker_strategy(cluster_resolver, options, timeout)


def input_options(strategy: tf.distribute.Strategy, device_type: str | None = None
                  ) -> tf.distribute.InputOptions | None:
    """How the batches reach the replicas of ``strategy``, by the kind of its devices
    (``device_type``, 'GPU' or 'CPU', the kind of its first device by default).

    GPU replicas: one pipeline per worker, whose batches TensorFlow's multi-device
    iterator copies to each GPU ahead of the step (fetch to device), so that a step
    of a few milliseconds does not wait for its batch to cross the bus.

    CPU replicas (MirroredStrategy): one pipeline per replica, each reading its own
    shard of the records, and no device copy, the batch already being in host
    memory: measured on CPUs, that doubles the speed of small steps, and deleting
    the multi-device iterator can wait for up to a minute in TensorFlow 2.21.
    MultiWorkerMirroredStrategy takes one pipeline per worker, OneDeviceStrategy its
    default (None).
    """
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


# CPU features (as /proc/cpuinfo names them) that run bfloat16 arithmetic natively:
# x86's AVX512_BF16 and AMX, Arm's BF16.
BFLOAT16_CPU_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_has_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU has bfloat16 instructions; None when ``cpuinfo`` cannot be read."""
    flags = machine.features(cpuinfo)
    return None if flags is None else bool(flags & set(BFLOAT16_CPU_FEATURES))


def warn_if_bfloat16_is_emulated(device_names: Sequence[str] | None = None,
                                 cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Warns, in one line, when bfloat16 will run emulated (slowly) here.

    Args:
      device_names: where the model runs (a strategy's ``extended.worker_devices``);
        default: this process's default device, the first GPU if there is one.

    Returns:
      True when it warned.
    """
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
    """Warns, in one line, when --use_fp16 trains on the CPU (``device_names``: where
    the model runs, a strategy's ``extended.worker_devices``): TensorFlow's CPU
    kernels compute float16 slowly, even with avx512_fp16 (a step of batch 8: 1.75 s
    against float32's 0.012 s, Intel Xeon with AMX, TensorFlow 2.21).  Returns True
    when it warned."""
    if any("GPU" in name.upper() for name in device_names):
        return False
    logging.warning("--use_fp16 on the CPU: TensorFlow's CPU kernels compute float16 "
                    "slowly, so training runs many times slower than in float32 here; "
                    "float16 is for GPUs (on a CPU with bfloat16 instructions, --use_bf16 "
                    "is the faster lower precision).")
    return True


def _cluster(strategy: tf.distribute.Strategy) -> dict[str, list[str]]:
    """The strategy's cluster, {job: [task addresses]}; empty without one."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver.cluster_spec().as_dict() if resolver else {}


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """True for a strategy whose replicas span several worker processes."""
    return bool(_cluster(strategy))


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, str]:
    """(is this the chief, a name for this task) of a strategy.

    Only the chief writes checkpoints and summaries to the run's directory: the
    task 'chief' if the cluster has one, else 'worker' 0.  Without a cluster
    (one machine), this process is the chief.
    """
    cluster = _cluster(strategy)
    if not cluster:
        return True, "chief"
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id or 0
    if "chief" in cluster:
        return task_type == "chief", f"{task_type} {task_id}"
    return task_type in (None, "worker") and task_id == 0, f"{task_type} {task_id}"


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Worker processes that train together: 1 without a cluster."""
    cluster = _cluster(strategy)
    return max(1, sum(len(cluster.get(job, ())) for job in ("chief", "worker")))


def describe(device_names: Sequence[str]) -> list[dict[str, str]]:
    """{'name', 'kind'} of each device: the GPU's model as TensorFlow reports it
    (e.g. 'NVIDIA A100-SXM4-40GB'), or this machine's CPU model for a CPU device."""
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
