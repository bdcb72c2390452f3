"""The cluster a training run belongs to, read without TensorFlow (so that a mistake
is one line before it loads) from ``TF_CONFIG``, which wins, or from the Slurm job step.

Under ``srun`` each task is the worker of its rank, listening at ``port_base +
SLURM_LOCALID`` of its host.  TensorFlow's ``SlurmClusterResolver`` fails on a node
without GPUs (tensorflow/tensorflow#56894), sorts host names as text, assumes block
distribution and overwrites ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from typing import Mapping

from cifar10.core.errors import Cifar10Error

STRATEGIES = ("auto", "mirrored", "multi_worker", "one_device")
TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                     '"task": {"type": "worker", "index": 0}}')
# A host of "host:port": a name or IPv4 address, or an IPv6 address in brackets.
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Za-z:.%]+\]")
# The first port of a node's tasks under srun (--slurm_port_base): below Linux's
# ephemeral ports and clear of TensorFlow's default (8888).
DEFAULT_PORT_BASE = 24000


def read_tf_config(text: str | None = None) -> dict | None:
    """``TF_CONFIG`` (``text``, default the environment's) parsed and checked (a mistake
    is a Cifar10Error showing the form); None where it is not set."""
    text = os.environ.get("TF_CONFIG") if text is None else text
    if text is None:
        return None
    if not text.strip():
        raise _tf_config_error("is set but empty: unset it to train on one machine, or name "
                               "the cluster and this task")
    try:
        config = json.loads(text)
    except ValueError as e:
        raise _tf_config_error(f"is not a JSON object ({e})") from e
    if not isinstance(config, dict):
        raise _tf_config_error("is not a JSON object")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise _tf_config_error('has no "cluster" naming the tasks')
    seen = {}
    for task_type, addresses in cluster.items():
        if task_type not in ("chief", "worker"):
            raise _tf_config_error(f'names a "{task_type}" task: only "chief" and "worker" '
                                   f"tasks are supported")
        if not isinstance(addresses, list) or not addresses or not all(
                isinstance(a, str) and a.rpartition(":")[2].isdigit() for a in addresses):
            raise _tf_config_error(f'cluster "{task_type}" must be a list of "host:port" '
                                   f"strings")
        for index, address in enumerate(addresses):
            host, _, port = address.rpartition(":")
            if not _HOST.fullmatch(host) or not 1 <= int(port) <= 65535:
                raise _tf_config_error(f'{task_type} {index}\'s address "{address}" is not a '
                                       f"host name or IP address and a port 1 to 65535")
            if address.lower() in seen:
                raise _tf_config_error(f"names {address} for both {seen[address.lower()]} and "
                                       f"{task_type} {index}: each task needs a host:port of "
                                       f"its own")
            seen[address.lower()] = f"{task_type} {index}"
    if len(cluster.get("chief", [])) > 1:
        raise _tf_config_error('names more than one "chief"')
    if not isinstance(task, dict):
        raise _tf_config_error('has no "task" saying which task this process is')
    if not isinstance(task.get("type"), str) or task["type"] not in cluster:
        raise _tf_config_error(f'task type {json.dumps(task.get("type"))} is not in the '
                               f'cluster (it has {", ".join(cluster)})')
    count, index = len(cluster[task["type"]]), task.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
        raise _tf_config_error(f'task index {json.dumps(index)} is not one of the {count} '
                               f'"{task["type"]}" tasks (0 to {count - 1})')
    return config


def _tf_config_error(problem: str) -> Cifar10Error:
    return Cifar10Error(f"TF_CONFIG {problem}; expected the form {TF_CONFIG_EXAMPLE} (see "
                        f"docs/multi-machine.md)")


def shares_host(tf_config: str | None = None) -> bool:
    """Whether ``TF_CONFIG`` names another task at this task's host (cifar10-launch's
    workers): processes that see the same GPUs."""
    config = read_tf_config(tf_config)
    if config is None:
        return False
    hosts = [address.rpartition(":")[0].lower() for addresses in config["cluster"].values()
             for address in addresses]
    own = config["cluster"][config["task"]["type"]][config["task"]["index"]]
    return hosts.count(own.rpartition(":")[0].lower()) > 1


def cluster_source(tf_config: str | None = None) -> str | None:
    """Where this run's cluster is named: 'tf_config' (it wins), 'slurm', else None."""
    if read_tf_config(tf_config) is not None:
        return "tf_config"
    return "slurm" if read_task() is not None else None


def cluster_workers(tf_config: str | None = None) -> int:
    """Tasks of ``TF_CONFIG``, else of the Slurm job step; 0 outside a cluster."""
    source = cluster_source(tf_config)
    if source == "tf_config":
        return sum(len(tasks) for tasks in read_tf_config(tf_config)["cluster"].values())
    return len(read_task().placement) if source == "slurm" else 0


def strategy_kind(kind: str, tf_config: str | None = None) -> str:
    """``kind`` with 'auto' resolved: 'multi_worker' where the cluster has several
    tasks, else 'mirrored'.  'multi_worker' without a cluster is refused."""
    if kind not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {kind!r}")
    workers = cluster_workers(tf_config)  # checked whatever the kind: TensorFlow reads it
    if kind == "auto":
        return "multi_worker" if workers > 1 else "mirrored"
    if kind == "multi_worker" and workers < 1:
        raise Cifar10Error("--strategy=multi_worker needs TF_CONFIG naming the cluster and "
                           "this task; see docs/multi-machine.md (under Slurm: start it with srun)")
    return kind


def refuse_fresh_start(kind: str, train_dir: str) -> None:
    """Several workers cannot start afresh: one could restore what the chief deletes."""
    if kind == "multi_worker":
        raise Cifar10Error(
            "--fresh_start is not supported with several workers (one worker could restore "
            f"what the chief is deleting); delete the checkpoints in {train_dir} by hand, "
            "or use a new --train_dir")


def data_fetcher(tf_config: str | None = None) -> str:
    """The task that fetches this task's missing --data_dir ('Slurm task 0 (the first
    task on node7)'), or '' where it fetches its own: under srun the first task of each
    node fetches; ``TF_CONFIG`` does not say which workers share a disk."""
    if cluster_source(tf_config) != "slurm":
        return ""
    task = read_task()
    if task.node_first == task.rank:
        return ""
    return f"Slurm task {task.node_first} (the first task on {task.node})"


@dataclasses.dataclass(frozen=True)
class SlurmTask:
    """This process as a task of a Slurm job step."""

    rank: int
    hosts: tuple[str, ...]                  # the step's nodes, in Slurm's order
    tasks_per_node: tuple[int, ...]
    placement: tuple[tuple[int, int], ...]  # (node index, local id) of each rank
    gpus: tuple[int, ...] | None = None     # the node's GPUs for the step (None: none given)
    gpus_per_task_bound: bool = False       # Slurm gave each task its own GPUs

    @property
    def local_id(self) -> int:
        return self.placement[self.rank][1]

    @property
    def node(self) -> str:
        return self.hosts[self.placement[self.rank][0]]

    @property
    def node_first(self) -> int:
        """The rank of the first task of this task's node."""
        return self.placement.index((self.placement[self.rank][0], 0))

    def addresses(self, port_base: int) -> list[str]:
        """Every worker's "host:port", in rank order."""
        return [f"{self.hosts[node]}:{port_base + local}" for node, local in self.placement]

    def gpu_indices(self) -> list[int] | None:
        """This task's GPUs among those the process sees; None where Slurm gave none.
        GPUs not bound to each task are split among the node's tasks by local id."""
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
    try:
        if text.count("[") != text.count("]") or re.search(r"\[[^\]]*\[|\][^\[]*\]", text):
            raise ValueError(text)
        hosts = []
        for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
            parts = re.split(r"\[([^\]]*)\]", item)
            choices = [[p] if i % 2 == 0 else _expand_ranges(p) for i, p in enumerate(parts)]
            hosts.extend("".join(names) for names in itertools.product(*choices))
        return hosts
    except ValueError:
        raise Cifar10Error(f"Slurm's node list {text!r} is not a host list this program "
                           f"reads; report it with the output of `scontrol show hostnames`"
                           ) from None


def _expand_ranges(ranges: str) -> list[str]:
    names = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(ranges)
        names.extend(str(n).zfill(len(first)) for n in range(int(first), int(last or first) + 1))
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
    """(node index, local id) of each rank: 'block' fills each node in turn, 'cyclic'
    deals the ranks round the nodes."""
    if distribution == "block":
        return [(node, local) for node, count in enumerate(tasks_per_node)
                for local in range(count)]
    return [(node, local) for local in range(max(tasks_per_node, default=0))
            for node, count in enumerate(tasks_per_node) if local < count]


def read_task(env: Mapping[str, str] | None = None) -> SlurmTask | None:
    """This process's task when ``srun`` started it; None outside a Slurm job step.
    Variables that do not agree, or a job of several tasks not started by ``srun``,
    are a Cifar10Error."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return None
    if "SLURM_STEP_NUM_TASKS" not in env:
        tasks = env.get("SLURM_NTASKS", "1")
        if tasks.isdigit() and int(tasks) > 1:  # a batch script's: one worker would run
            raise Cifar10Error(
                f"this Slurm job has {tasks} tasks (SLURM_NTASKS) but cifar10-train was "
                f"started once, not by srun: start it as `srun cifar10-train ...` (one "
                f"worker per task), or ask for one task (--ntasks=1)")
        return None
    hosts = expand_hostlist(env.get("SLURM_STEP_NODELIST", ""))
    counts = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    num_tasks, rank = _int(env, "SLURM_STEP_NUM_TASKS"), _int(env, "SLURM_PROCID")
    if len(hosts) != len(counts) or sum(counts) != num_tasks or not 0 <= rank < num_tasks:
        raise Cifar10Error(
            f"the Slurm job step's task count does not match: SLURM_STEP_NUM_TASKS="
            f"{num_tasks}, SLURM_PROCID={rank}, SLURM_STEP_TASKS_PER_NODE="
            f"{env.get('SLURM_STEP_TASKS_PER_NODE')} on SLURM_STEP_NODELIST="
            f"{env.get('SLURM_STEP_NODELIST')}; start the step with srun alone")
    distribution = re.split("[:=,]", env.get("SLURM_DISTRIBUTION", "block"))[0] or "block"
    if distribution not in ("block", "cyclic"):
        raise Cifar10Error(f"srun --distribution={distribution} is not supported: use block "
                           f"(Slurm's default) or cyclic")
    task = SlurmTask(rank, tuple(hosts), tuple(counts), tuple(placement(counts, distribution)),
                     *_gpus(env))
    node_name, local = env.get("SLURMD_NODENAME"), env.get("SLURM_LOCALID")
    if (node_name and node_name != task.node) or (local and int(local) != task.local_id):
        raise Cifar10Error(
            f"Slurm placed task {rank} on {node_name} as local task {local}, not where "
            f"--distribution={distribution} puts it ({task.node}, {task.local_id}): use "
            f"srun --distribution=block")
    return task


def _int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    if not value.isdigit():
        raise Cifar10Error(f"{name}={value!r} is not a number: start the step with srun")
    return int(value)


def _gpus(env: Mapping[str, str]) -> tuple[tuple[int, ...] | None, bool]:
    """(the node's GPUs Slurm gave the step, numbered as this process sees them (CUDA's
    from 0); whether Slurm bound them to each task)."""
    step = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        seen = [g for g in visible.split(",") if g.strip() and g != "NoDevFiles"]
        on_node = env.get("SLURM_GPUS_ON_NODE") or (len(step.split(",")) if step else 0)
        return tuple(range(len(seen))), 0 < len(seen) < int(on_node)
    if step:
        return tuple(int(g) for g in step.split(",") if g.strip().isdigit()), False
    return None, False


def job_record(env: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """{'slurm': the job, step, task and restart count} for a run's record, or {}."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return {}
    names = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "step_id": "SLURM_STEP_ID",
             "task": "SLURM_PROCID", "node": "SLURMD_NODENAME",
             "restart_count": "SLURM_RESTART_COUNT"}
    return {"slurm": {key: env[name] for key, name in names.items() if name in env}}
