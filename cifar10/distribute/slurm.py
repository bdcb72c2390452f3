"""The cluster of a Slurm job step (``srun cifar10-train``), read from its SLURM_*
variables without TensorFlow.

Under ``srun`` every task of the step is one worker of MultiWorkerMirroredStrategy:
its index is its rank (``SLURM_PROCID``), the workers are listed in rank order on
the hosts Slurm placed them on (``SLURM_STEP_NODELIST``, ``SLURM_STEP_TASKS_PER_NODE``,
``SLURM_DISTRIBUTION``), and each listens on ``port_base + SLURM_LOCALID`` of its
host, so that several tasks of one node do not collide.  Worker 0 is the chief.

Why not TensorFlow's ``SlurmClusterResolver``, which reads the same variables: on a
node without GPUs its defaults fail (it runs ``nvidia-smi``: ``FileNotFoundError``;
``gpus_per_node=0`` raises ``ValueError: range() arg 3 must not be zero``,
tensorflow/tensorflow#56894), it sorts the host names as text (with ``node[9-10]``,
rank 0 on node9 is given ``node10:8888``), it assumes Slurm's block distribution,
and it overwrites ``CUDA_VISIBLE_DEVICES`` even where Slurm bound GPUs to each
task.  Building the cluster here also lets a mistake be one line before
TensorFlow loads.  ``resolver.py`` gives TensorFlow the result.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import os
import re
import socket
from typing import Mapping

from cifar10.core.errors import Cifar10Error

# The first port of a node's tasks (--slurm_port_base): task SLURM_LOCALID listens on
# DEFAULT_PORT_BASE + SLURM_LOCALID.  Below Linux's ephemeral ports (32768-60999),
# which outgoing connections take, and clear of TensorFlow's own default (8888).
DEFAULT_PORT_BASE = 24000


@dataclasses.dataclass(frozen=True)
class SlurmTask:
    """This process as a task of a Slurm job step."""

    job_id: str
    step_id: str
    rank: int
    hosts: tuple[str, ...]          # the step's nodes, in Slurm's order
    tasks_per_node: tuple[int, ...]  # tasks on each of them
    placement: tuple[tuple[int, int], ...]  # (node index, local id) of each rank
    gpus: tuple[int, ...] | None = None  # what Slurm gave this node's tasks (None: nothing)
    gpus_per_task_bound: bool = False  # Slurm gave each task its own GPUs

    @property
    def num_tasks(self) -> int:
        return len(self.placement)

    @property
    def local_id(self) -> int:
        return self.placement[self.rank][1]

    @property
    def node(self) -> str:
        return self.hosts[self.placement[self.rank][0]]

    @property
    def node_first(self) -> int:
        """The rank of the first task (SLURM_LOCALID 0) of this task's node."""
        return self.placement.index((self.placement[self.rank][0], 0))

    def addresses(self, port_base: int) -> list[str]:
        """Every worker's "host:port", in rank order."""
        return [f"{self.hosts[node]}:{port_base + local}" for node, local in self.placement]

    def gpu_indices(self) -> list[int] | None:
        """Which of the GPUs this process sees (CUDA's numbering) are this task's; None
        where Slurm allocated none (the task takes what it sees: none on a CPU node).

        Slurm names a step's GPUs on each node; where it did not bind them to each
        task, the node's tasks split them evenly by ``SLURM_LOCALID``.

        Raises:
          Cifar10Error: the node has more tasks than GPUs.
        """
        if self.gpus is None:
            return None
        seen = list(self.gpus)
        tasks = self.tasks_per_node[self.placement[self.rank][0]]
        if self.gpus_per_task_bound or tasks == 1 or not seen:
            return seen
        if len(seen) < tasks:
            raise Cifar10Error(
                f"Slurm gave node {self.node} {len(seen)} GPU(s) for its {tasks} tasks: ask "
                f"for at least one GPU per task (srun --gpus-per-task=1) or fewer tasks per "
                f"node (--ntasks-per-node)")
        share = len(seen) // tasks
        return seen[self.local_id * share:(self.local_id + 1) * share]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list ('node[9-10],gpu[01-02]x') as names, in its order."""
    if text.count("[") != text.count("]") or re.search(r"\[[^\]]*\[|\][^\[]*\]", text):
        raise Cifar10Error(f"Slurm's node list {text!r} is not a host list this program "
                           f"reads (its brackets do not pair); report it with the output of "
                           f"`scontrol show hostnames`")
    hosts = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        parts = re.split(r"\[([^\]]*)\]", item)
        choices = [[p] if i % 2 == 0 else _expand_ranges(p, text) for i, p in enumerate(parts)]
        hosts.extend("".join(names) for names in itertools.product(*choices))
    return hosts


def _expand_ranges(ranges: str, text: str) -> list[str]:
    names = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise Cifar10Error(f"Slurm's node list {text!r} is not a host list this program "
                               f"reads; report it with the output of `scontrol show hostnames`")
        width = len(first)
        names.extend(str(n).zfill(width) for n in range(int(first), int(last or first) + 1))
    return names


def expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's task counts per node ('2(x3),1') as one count per node ([2, 2, 2, 1])."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise Cifar10Error(f"SLURM_STEP_TASKS_PER_NODE={text!r} is not Slurm's form "
                               f"(e.g. '2(x3),1')")
        counts.extend([int(match[1])] * int(match[2] or 1))
    return counts


def placement(tasks_per_node: list[int], distribution: str) -> list[tuple[int, int]]:
    """(node index, local id) of each rank under Slurm's node distribution: 'block'
    fills each node in turn, 'cyclic' deals the ranks round the nodes."""
    if distribution == "block":
        return [(node, local) for node, count in enumerate(tasks_per_node)
                for local in range(count)]
    placed, given = [], [0] * len(tasks_per_node)
    while len(placed) < sum(tasks_per_node):
        for node, count in enumerate(tasks_per_node):
            if given[node] < count:
                placed.append((node, given[node]))
                given[node] += 1
    return placed


def read_task(env: Mapping[str, str] | None = None) -> SlurmTask | None:
    """This process's task when ``srun`` started it; None outside a Slurm job step.

    Raises:
      Cifar10Error: one line naming what to fix: a job of several tasks whose
        program was not started by ``srun``, a step whose variables do not agree, a
        distribution other than block or cyclic.
    """
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return None
    if "SLURM_STEP_NUM_TASKS" not in env:
        _refuse_several_tasks_without_srun(env)
        return None
    hosts = expand_hostlist(env.get("SLURM_STEP_NODELIST", ""))
    counts = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    num_tasks, rank = _int(env, "SLURM_STEP_NUM_TASKS"), _int(env, "SLURM_PROCID")
    if len(hosts) != len(counts) or sum(counts) != num_tasks or not 0 <= rank < num_tasks:
        raise Cifar10Error(
            f"the Slurm job step's task count does not match: SLURM_STEP_NUM_TASKS="
            f"{num_tasks}, SLURM_PROCID={rank}, SLURM_STEP_TASKS_PER_NODE="
            f"{env.get('SLURM_STEP_TASKS_PER_NODE')} on SLURM_STEP_NODELIST="
            f"{env.get('SLURM_STEP_NODELIST')}; start the step with srun alone (no "
            f"--het-group, no SLURM_* variables set by hand)")
    distribution = re.split("[:=,]", env.get("SLURM_DISTRIBUTION", "block"))[0] or "block"
    if distribution not in ("block", "cyclic"):
        raise Cifar10Error(f"srun --distribution={distribution} is not supported: use block "
                           f"(Slurm's default) or cyclic")
    task = SlurmTask(env["SLURM_JOB_ID"], env.get("SLURM_STEP_ID", ""), rank, tuple(hosts),
                     tuple(counts), tuple(placement(counts, distribution)), *_gpus(env))
    _check_placement(task, env, distribution)
    return task


def _refuse_several_tasks_without_srun(env: Mapping[str, str]) -> None:
    """A batch script's (or salloc's) process of a job of several tasks: only one
    worker would run, and the job's other tasks would stay idle."""
    tasks = env.get("SLURM_NTASKS", "1")
    if tasks.isdigit() and int(tasks) > 1:
        raise Cifar10Error(
            f"this Slurm job has {tasks} tasks (SLURM_NTASKS) but cifar10-train was "
            f"started once, not by srun: start it as `srun cifar10-train ...` (one worker "
            f"per task), or ask for one task (--ntasks=1)")


def _check_placement(task: SlurmTask, env: Mapping[str, str], distribution: str) -> None:
    """Where Slurm says this task runs must be where the distribution puts its rank."""
    node_name, local = env.get("SLURMD_NODENAME"), env.get("SLURM_LOCALID")
    if (node_name and node_name != task.node) or (local and int(local) != task.local_id):
        raise Cifar10Error(
            f"Slurm placed task {task.rank} on {node_name} as local task {local}, not where "
            f"--distribution={distribution} puts it ({task.node}, {task.local_id}): use "
            f"srun --distribution=block")


def _int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    if not value.isdigit():
        raise Cifar10Error(f"{name}={value!r} is not a number: start the step with srun")
    return int(value)


def _gpus(env: Mapping[str, str]) -> tuple[tuple[int, ...] | None, bool]:
    """(the GPUs Slurm gave this node's tasks, as numbers of the GPUs this process
    sees; whether Slurm bound them to each task).  CUDA numbers the GPUs of
    ``CUDA_VISIBLE_DEVICES`` from 0; without it, Slurm's IDs are the node's own."""
    step = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        seen = [g for g in visible.split(",") if g.strip() and g != "NoDevFiles"]
        on_node = env.get("SLURM_GPUS_ON_NODE") or (len(step.split(",")) if step else 0)
        return tuple(range(len(seen))), 0 < len(seen) < int(on_node)
    if step:
        return tuple(int(g) for g in step.split(",") if g.strip().isdigit()), False
    return None, False


def check_port(task: SlurmTask, port_base: int) -> None:
    """Raises a one-line ``Cifar10Error`` when this task's port is taken on its node."""
    port = port_base + task.local_id
    if port_in_use(port):
        raise Cifar10Error(
            f"port {port} on {task.node} (--slurm_port_base={port_base} + local task "
            f"{task.local_id}) is in use by another program or job: choose another "
            f"--slurm_port_base, e.g. {port_base + 1000}")


def port_in_use(port: int) -> bool:
    """Whether a program listens at ``port`` of this machine (where a task of a Slurm
    job step, or of ``TF_CONFIG``, would start its server)."""
    with socket.socket() as probe:
        # SO_REUSEADDR: a port whose last connections are closing (an earlier run's)
        # is free; one that a program listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            return True
    return False


def job_record(env: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """{'slurm': the job, step, task and restart count} for a run's record; {} outside
    Slurm."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return {}
    names = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "step_id": "SLURM_STEP_ID",
             "task": "SLURM_PROCID", "node": "SLURMD_NODENAME",
             "restart_count": "SLURM_RESTART_COUNT"}
    return {"slurm": {key: env[name] for key, name in names.items() if name in env}}
