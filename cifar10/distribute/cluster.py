"""The cluster a training run belongs to, read from ``TF_CONFIG`` or from the Slurm
job step that started it (``slurm.py``), without TensorFlow.

TensorFlow reads ``TF_CONFIG`` in every distribution strategy and answers a mistake
in it with a traceback; this module checks it first, and decides which strategy a
run uses, so that the programs can refuse a bad setting before loading TensorFlow.
``TF_CONFIG``, when set, wins over Slurm's variables.
"""

from __future__ import annotations

import json
import os
import re
import socket

from cifar10.core.errors import Cifar10Error
from cifar10.distribute import slurm

STRATEGIES = ("auto", "mirrored", "multi_worker", "one_device")
TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                     '"task": {"type": "worker", "index": 0}}')
_TASK_TYPES = ("chief", "worker")
# A host of a "host:port" address: a host name or IPv4 address (letters, digits, '.',
# '-', '_'), or an IPv6 address in brackets.
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Za-z:.%]+\]")
# Names of this machine, known without asking DNS: TensorFlow's server listens on every
# address of its machine, so two tasks at one port of it clash whatever name each has.
_LOOPBACK = re.compile(r"localhost|127(?:\.\d{1,3}){3}|0\.0\.0\.0|\[(?:::1|::)\]",
                       re.IGNORECASE)


def read_tf_config(text: str | None = None) -> dict | None:
    """The ``TF_CONFIG`` environment variable, checked before TensorFlow reads it.

    Args:
      text: the value to check (default: the environment's).

    Returns:
      The parsed value; None when the variable is not set.

    Raises:
      Cifar10Error: one line saying what is wrong and showing the expected form.
    """
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
    _check_cluster(config.get("cluster"))
    _check_task(config.get("task"), config["cluster"])
    return config


def _check_cluster(cluster) -> None:
    if not isinstance(cluster, dict) or not cluster:
        raise _tf_config_error('has no "cluster" naming the tasks')
    for task_type, addresses in cluster.items():
        if task_type not in _TASK_TYPES:
            raise _tf_config_error(f'names a "{task_type}" task: only "chief" and "worker" '
                                   f"tasks are supported")
        if not isinstance(addresses, list) or not addresses or not all(
                isinstance(a, str) and a.rpartition(":")[2].isdigit() for a in addresses):
            raise _tf_config_error(f'cluster "{task_type}" must be a list of "host:port" '
                                   f"strings")
    if len(cluster.get("chief", [])) > 1:
        raise _tf_config_error('names more than one "chief"')
    _check_addresses(cluster)


def _check_addresses(cluster: dict) -> None:
    """Each task's "host:port" a host and a port it can listen at, and its own: a
    mistake there would show only as the workers not all starting, after
    --worker_timeout_secs."""
    seen = {}  # (host, or this machine's '', port): (the task, its address)
    for task_type in _TASK_TYPES:
        for index, address in enumerate(cluster.get(task_type, [])):
            task = f"{task_type} {index}"
            host, _, port = address.rpartition(":")
            if not 1 <= int(port) <= 65535:
                raise _tf_config_error(f'{task}\'s address "{address}" has port {int(port)}: '
                                       f"a port is 1 to 65535")
            if not _HOST.fullmatch(host):
                raise _tf_config_error(f'{task}\'s address "{address}" has no host name or IP '
                                       f"address before its port")
            key = ("" if _this_machine(host) else host.lower(), int(port))
            if key in seen:
                other, at = seen[key]
                both = (f"{address} for both {other} and {task}" if at == address else
                        f"{at} for {other} and {address} for {task}, both port {int(port)} "
                        f"of {key[0] or 'this machine'}")
                raise _tf_config_error(f"names {both}: each task needs a host:port of its own")
            seen[key] = task, address


def _this_machine(host: str) -> bool:
    """Whether ``host`` names this machine by a name known without DNS: a loopback name or
    address, or the machine's own host name."""
    return bool(_LOOPBACK.fullmatch(host)) or host.lower() == socket.gethostname().lower()


def _check_task(task, cluster: dict) -> None:
    if not isinstance(task, dict):
        raise _tf_config_error('has no "task" saying which task this process is')
    task_type, index = task.get("type"), task.get("index")
    if "type" not in task:
        raise _tf_config_error('task has no "type"')
    if task_type not in cluster:
        raise _tf_config_error(f'task type {json.dumps(task_type)} is not in the cluster '
                               f'(it has {", ".join(cluster)})')
    count = len(cluster[task_type])
    if "index" not in task:
        raise _tf_config_error('task has no "index"')
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
        raise _tf_config_error(f'task index {json.dumps(index)} is not one of the {count} '
                               f'"{task_type}" tasks (0 to {count - 1})')


def _tf_config_error(problem: str) -> Cifar10Error:
    return Cifar10Error(f"TF_CONFIG {problem}; expected the form {TF_CONFIG_EXAMPLE} (see "
                        f"docs/multi-machine.md)")


def cluster_source(tf_config: str | None = None) -> str | None:
    """Where the cluster of this run is named: 'tf_config' (``TF_CONFIG`` is set, or
    ``tf_config`` given: it wins), 'slurm' (``srun`` started this process), else None.

    Raises:
      Cifar10Error: ``TF_CONFIG`` is set but not a valid cluster, or Slurm's
        variables are not a job step this program can train in (``slurm.read_task``).
    """
    if read_tf_config(tf_config) is not None:
        return "tf_config"
    return "slurm" if slurm.read_task() is not None else None


def cluster_workers(tf_config: str | None = None) -> int:
    """Number of tasks (chief + workers) in ``TF_CONFIG``, else of the Slurm job step
    that started this process; 0 when neither names a cluster.

    Raises:
      Cifar10Error: as ``cluster_source``.
    """
    source = cluster_source(tf_config)
    if source == "tf_config":
        config = read_tf_config(tf_config)
        return sum(len(addresses) for addresses in config["cluster"].values())
    return slurm.read_task().num_tasks if source == "slurm" else 0


def data_fetcher(tf_config: str | None = None) -> str:
    """The task that fetches this task's data for it, as the lines name it ('Slurm task
    0 (the first task on node7)'); '' where this task fetches its own.

    Under srun the first task of each node fetches a missing --data_dir, and the
    node's other tasks wait for it (``getdata.prepare``'s ``fetched_by``): not all of
    them at once, and per node, for --data_dir may be a folder of each node's own
    (the default /tmp/cifar10_data).  Workers of a ``TF_CONFIG`` fetch their own:
    its "host:port" addresses do not say which workers share a machine, or a disk,
    and a worker that waited for another that does not fetch (one on another
    machine) would wait in vain; cifar10-launch fetches before its workers start.

    Raises:
      Cifar10Error: as ``cluster_source``.
    """
    if cluster_source(tf_config) != "slurm":
        return ""
    task = slurm.read_task()
    if task.node_first == task.rank:
        return ""
    return f"Slurm task {task.node_first} (the first task on {task.node})"


def strategy_kind(kind: str, tf_config: str | None = None) -> str:
    """The strategy ``kind`` ('auto' resolved) that a run with this ``TF_CONFIG`` (or
    in this Slurm job step) uses.

    'auto' is 'multi_worker' when ``TF_CONFIG`` or the Slurm job step names several
    tasks, else 'mirrored'.

    Raises:
      ValueError: ``kind`` is not one of ``STRATEGIES``.
      Cifar10Error: ``TF_CONFIG`` is not a valid cluster, or 'multi_worker' without one.
    """
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
    """Several workers cannot start afresh: one could restore what the chief deletes.

    Raises:
      Cifar10Error: ``kind`` (as ``strategy_kind`` returns it) is 'multi_worker'.
    """
    if kind == "multi_worker":
        raise Cifar10Error(
            "--fresh_start is not supported with several workers (one worker could restore "
            f"what the chief is deleting); delete the checkpoints in {train_dir} by hand, "
            "or use a new --train_dir")
