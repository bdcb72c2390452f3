"""cifar10.distribute.cluster: TF_CONFIG and a Slurm job step's variables read before
TensorFlow loads, each mistake one line."""

from __future__ import annotations

import json
import os
import re

import pytest

from cli import run
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import cluster, resolver

EXPECTED_FORM = ('expected the form {"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                 '"task": {"type": "worker", "index": 0}}')
TWO = {"worker": ["127.0.0.1:1234", "127.0.0.1:1235"]}


def config(tasks=TWO, **task):
    return json.dumps({"cluster": tasks, "task": task})


@pytest.mark.parametrize("tf_config, problem", [
    ("", "is set but empty: unset it to train on one machine, or name the cluster and this task"),
    ("not json", "is not a JSON object (Expecting value: line 1 column 1 (char 0))"),
    (config(tasks={}, type="worker", index=0), 'has no "cluster" naming the tasks'),
    (json.dumps({"cluster": TWO}), 'has no "task" saying which task this process is'),
    (config(tasks={"worker": ["127.0.0.1"]}, type="worker", index=0),
     'cluster "worker" must be a list of "host:port" strings'),
    (config(tasks={"worker": [":1234", "h:1"]}, type="worker", index=0),
     'worker 0\'s address ":1234" is not a host name or IP address and a port 1 to 65535'),
    (config(tasks={**TWO, "ps": ["127.0.0.1:1"]}, type="worker", index=0),
     'names a "ps" task: only "chief" and "worker" tasks are supported'),
    (config(tasks={"worker": ["127.0.0.1:1234", "127.0.0.1:99999"]}, type="worker", index=0),
     'worker 1\'s address "127.0.0.1:99999" is not a host name'),
    (config(tasks={"chief": ["h:1"], "worker": ["g:1", "H:1"]}, type="worker", index=1),
     "names H:1 for both chief 0 and worker 1: each task needs a host:port of its own"),
    (config(type="chief", index=0), 'task type "chief" is not in the cluster (it has worker)'),
    (config(type="worker", index=2), 'task index 2 is not one of the 2 "worker" tasks (0 to 1)'),
])
def test_each_tf_config_mistake_is_one_line_with_the_expected_form(tf_config, problem):
    with pytest.raises(Cifar10Error) as err:
        cluster.read_tf_config(tf_config)
    message = str(err.value)
    assert message.startswith(f"TF_CONFIG {problem}")
    assert message.endswith(f"; {EXPECTED_FORM} (see docs/multi-machine.md)")
    assert "\n" not in message


@pytest.mark.parametrize("tf_config, tasks, kind, resolved", [
    (None, 0, "auto", "mirrored"),
    (config(tasks={"worker": ["localhost:5000"]}, type="worker", index=0), 1, "multi_worker",
     "multi_worker"),  # (auto: mirrored)
    (config(type="worker", index=1), 2, "auto", "multi_worker"),
    (config(type="worker", index=1), 2, "mirrored", "mirrored"),
    (config(tasks={"chief": ["h:1"], "worker": ["[::1]:1", "node-1.example.org:65535"]},
            type="chief", index=0), 3, "auto", "multi_worker"),
])
def test_the_strategy_follows_the_number_of_tasks(tf_config, tasks, kind, resolved, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert cluster.cluster_workers(tf_config) == tasks
    assert cluster.strategy_kind(kind, tf_config) == resolved


def test_multi_worker_needs_a_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(Cifar10Error, match=r"^--strategy=multi_worker needs TF_CONFIG naming "
                                           r"the cluster and this task; see docs/multi-machine.md"):
        cluster.strategy_kind("multi_worker")
    with pytest.raises(ValueError, match="strategy must be one of"):
        cluster.strategy_kind("parameter_server")


def test_the_trainer_checks_tf_config_before_tensorflow_reads_it(tmp_path):
    result = run("cifar10-train", "--synthetic_data", f"--data_dir={tmp_path / 'data'}",
                 f"--train_dir={tmp_path / 'train'}", "--max_steps=1", timeout=120,
                 TF_CONFIG=json.dumps({"cluster": TWO}))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        'cifar10-train: error: TF_CONFIG has no "task" saying which task this process is; ')
    assert "Traceback" not in result.stderr and not (tmp_path / "train").exists()


# ---- a Slurm job step ----------------------------------------------------------------


def step_env(nodes="node[9-10]", tasks_per_node="1(x2)", rank=0, **extra):
    """The variables srun gives task ``rank`` of a job step (as Slurm 22.05 sets them)."""
    counts = cluster.expand_tasks_per_node(tasks_per_node)
    return {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_STEP_NUM_TASKS": str(sum(counts)), "SLURM_STEP_NODELIST": nodes,
            "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, **extra}


@pytest.fixture
def environ(monkeypatch):
    """Sets the process's Slurm variables (and TF_CONFIG) for one test."""

    def set_env(values):
        for name in list(os.environ):
            if name.startswith("SLURM") or name in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES"):
                monkeypatch.delenv(name)
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    set_env({})
    return set_env


def test_host_lists_and_task_counts_expand_in_slurms_order():
    # As `scontrol show hostnames` expands them (each range keeps its own zeros).
    assert cluster.expand_hostlist("gpu[01-02,7],login,r[1-2]n[1-2],node[9-10]") == [
        "gpu01", "gpu02", "gpu7", "login", "r1n1", "r1n2", "r2n1", "r2n2", "node9", "node10"]
    assert cluster.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    for broken in ("vm[", "vm[1-2]]", "vm[[1-2]]", "vm[a]"):
        with pytest.raises(Cifar10Error, match=rf"^Slurm's node list {re.escape(repr(broken))} "
                                               rf"is not a host list this program reads"):
            cluster.expand_hostlist(broken)
    with pytest.raises(Cifar10Error, match=r"^SLURM_STEP_TASKS_PER_NODE='2x' is not Slurm's"):
        cluster.expand_tasks_per_node("2x")


def test_the_rank_is_the_task_index_on_hosts_in_slurms_order(environ):
    # TensorFlow's SlurmClusterResolver sorts the names as text: node10 before node9.
    for rank in (0, 1):
        environ(step_env(rank=rank, SLURMD_NODENAME=f"node{9 + rank}", SLURM_LOCALID="0"))
        assert cluster.cluster_source() == "slurm"
        assert cluster.strategy_kind("auto") == "multi_worker"
        spec = resolver.SlurmResolver(cluster.read_task(), 24000)
        assert spec.cluster_spec().as_dict() == {"worker": ["node9:24000", "node10:24000"]}
        assert (spec.task_type, spec.task_id) == ("worker", rank)


def test_tasks_of_a_node_take_consecutive_ports_and_its_first_fetches_the_data(environ):
    block = [cluster.read_task(step_env("a[1-2]", "2(x2)", rank=rank)) for rank in range(4)]
    assert block[0].addresses(5000) == ["a1:5000", "a1:5001", "a2:5000", "a2:5001"]
    assert [task.node_first for task in block] == [0, 0, 2, 2]
    cyclic = [cluster.read_task(step_env("a[1-2]", "2,1", rank=rank, SLURM_DISTRIBUTION="cyclic"))
              for rank in range(3)]
    assert cyclic[0].addresses(5000) == ["a1:5000", "a2:5000", "a1:5001"]
    assert [task.node_first for task in cyclic] == [0, 1, 0]
    for rank, fetcher in enumerate(["", "Slurm task 0 (the first task on a1)", "",
                                    "Slurm task 2 (the first task on a2)"]):
        environ(step_env("a[1-2]", "2(x2)", rank=rank))
        assert cluster.data_fetcher() == fetcher
    # TF_CONFIG wins: its workers fetch their own, as outside Slurm.
    environ(step_env("a[1-2]", "2(x2)", rank=1, TF_CONFIG=config(type="worker", index=1)))
    assert (cluster.cluster_source(), cluster.cluster_workers()) == ("tf_config", 2)
    assert cluster.data_fetcher() == ""


def test_gpus_come_from_slurms_allocation_and_a_cpu_node_has_none(environ):
    two = dict(nodes="n1", tasks_per_node="2", rank=1, SLURM_LOCALID="1")
    assert cluster.read_task(step_env(**two)).gpu_indices() is None  # takes what it sees
    assert cluster.read_task(step_env(**two, CUDA_VISIBLE_DEVICES="")).gpu_indices() == []
    # The step's GPUs of the node, not bound to each task: split by SLURM_LOCALID.
    assert cluster.read_task(step_env(**two, SLURM_STEP_GPUS="4,5,6,7")).gpu_indices() == [6, 7]
    assert cluster.read_task(step_env(**two, CUDA_VISIBLE_DEVICES="4,5,6,7",
                                      SLURM_STEP_GPUS="4,5,6,7", SLURM_GPUS_ON_NODE="4")
                             ).gpu_indices() == [2, 3]  # CUDA numbers what it shows from 0
    # Bound to each task (srun --gpus-per-task): this task's own.
    assert cluster.read_task(step_env(**two, CUDA_VISIBLE_DEVICES="5", SLURM_STEP_GPUS="4,5",
                                      SLURM_GPUS_ON_NODE="2")).gpu_indices() == [0]
    with pytest.raises(Cifar10Error, match=r"^Slurm gave node n1 1 GPU\(s\) for its 2 tasks: "
                                           r"ask for at least one GPU per task"):
        cluster.read_task(step_env(**two, SLURM_STEP_GPUS="0")).gpu_indices()
    environ(step_env(**two, SLURM_STEP_GPUS="4,5,6,7"))
    assert resolver.default_num_gpus() == 2
    environ(step_env(**two, SLURM_STEP_GPUS="4,5,6,7", TF_CONFIG=config(type="worker", index=0)))
    assert resolver.default_num_gpus() is None  # TF_CONFIG wins


@pytest.mark.parametrize("env, error", [
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"},  # a batch script, not srun
     r"this Slurm job has 2 tasks \(SLURM_NTASKS\) but cifar10-train was started once, not "
     r"by srun: start it as `srun cifar10-train \.\.\.`"),
    (step_env(SLURM_STEP_NUM_TASKS="3"), r"the Slurm job step's task count does not match: "
     r"SLURM_STEP_NUM_TASKS=3, SLURM_PROCID=0, SLURM_STEP_TASKS_PER_NODE=1\(x2\) on "),
    (step_env("a[1-2]", "2,1", rank=2, SLURMD_NODENAME="a1", SLURM_LOCALID="1"),
     r"Slurm placed task 2 on a1 as local task 1, not where --distribution=block puts it "
     r"\(a2, 0\): "),
    (step_env(SLURM_DISTRIBUTION="plane=2"), r"srun --distribution=plane is not supported"),
])
def test_slurms_mistakes_are_one_line(environ, env, error):
    environ(env)
    with pytest.raises(Cifar10Error, match=f"^{error}"):
        cluster.strategy_kind("auto")


def test_a_batch_job_of_one_task_is_one_machine_and_its_job_is_recorded(environ):
    environ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"})
    assert cluster.cluster_source() is None
    assert cluster.strategy_kind("auto") == "mirrored"
    assert cluster.job_record(step_env(SLURM_RESTART_COUNT="1")) == {"slurm": {
        "job_id": "42", "step_id": "0", "task": "0", "restart_count": "1"}}
    assert cluster.job_record({}) == {}
