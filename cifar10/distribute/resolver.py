"""The cluster resolver MultiWorkerMirroredStrategy is built with under ``srun``.

``slurm.py`` reads the job step's cluster; this module hands it to TensorFlow.
MultiWorkerMirroredStrategy takes its replicas per worker from the resolver's
``num_accelerators`` for every resolver but TF_CONFIG's (which counts the GPUs the
process made visible): ``SlurmResolver`` counts them the same way, once the strategy
has started its server, so that a CPU node runs one CPU replica and a GPU node one
replica per GPU it kept, whatever ``nvidia-smi`` would say.
"""

from __future__ import annotations

import tensorflow as tf

from cifar10.distribute import cluster
from cifar10.distribute import slurm


class SlurmResolver(tf.distribute.cluster_resolver.SimpleClusterResolver):
    """A Slurm job step's workers, this task among them, and its visible GPUs."""

    def __init__(self, task: slurm.SlurmTask, port_base: int):
        super().__init__(tf.train.ClusterSpec({"worker": task.addresses(port_base)}),
                         task_type="worker", task_id=task.rank, rpc_layer="grpc")
        self.slurm_task = task

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        # Asked after the strategy configured its collectives and started its server
        # (listing devices sooner would start TensorFlow's runtime too early).
        return {"GPU": len(tf.config.list_logical_devices("GPU"))}


def from_slurm(port_base: int) -> tuple[SlurmResolver | None, list | None]:
    """(the resolver of this Slurm job step, this task's physical GPUs); (None, None)
    where ``TF_CONFIG`` names the cluster or ``srun`` did not start several tasks.

    The GPUs are those Slurm allocated to this task (``slurm.SlurmTask.gpu_indices``),
    None where it allocated none (the task takes what it sees).

    Raises:
      Cifar10Error: one line: the step's variables, a GPU per task, the port in use.
    """
    if cluster.cluster_source() != "slurm":
        return None, None
    task = slurm.read_task()
    slurm.check_port(task, port_base)
    indices = task.gpu_indices()
    gpus = None
    if indices is not None:
        physical = tf.config.list_physical_devices("GPU")
        gpus = [physical[i] for i in indices if i < len(physical)]
    return SlurmResolver(task, port_base), gpus
