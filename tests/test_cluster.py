"""Tests of cifar10.distribute.cluster: TF_CONFIG is checked before TensorFlow reads it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from cifar10.distribute import cluster
from cifar10.core.errors import Cifar10Error
from cli import env

EXPECTED_FORM = ('expected the form {"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                 '"task": {"type": "worker", "index": 0}}')
TWO = {"worker": ["127.0.0.1:1234", "127.0.0.1:1235"]}


def config(tasks=TWO, **task):
    return json.dumps({"cluster": tasks, "task": task})


@pytest.mark.parametrize("tf_config, problem", [
    ("", "is set but empty: unset it to train on one machine, or name the cluster and this task"),
    ("   ", "is set but empty"),
    ("not json", "is not a JSON object (Expecting value: line 1 column 1 (char 0))"),
    ("[1, 2]", "is not a JSON object"),
    (json.dumps({"task": {"type": "worker", "index": 0}}), 'has no "cluster" naming the tasks'),
    (config(tasks={}, type="worker", index=0), 'has no "cluster" naming the tasks'),
    (json.dumps({"cluster": TWO}), 'has no "task" saying which task this process is'),
    (config(tasks={"worker": "127.0.0.1:1234,127.0.0.1:1235"}, type="worker", index=0),
     'cluster "worker" must be a list of "host:port" strings'),
    (config(tasks={"worker": ["127.0.0.1"]}, type="worker", index=0),
     'cluster "worker" must be a list of "host:port" strings'),
    (config(tasks={"worker": [1234]}, type="worker", index=0),
     'cluster "worker" must be a list of "host:port" strings'),
    (config(tasks={**TWO, "ps": ["127.0.0.1:1"]}, type="worker", index=0),
     'names a "ps" task: only "chief" and "worker" tasks are supported'),
    (config(tasks={**TWO, "chief": ["h:1", "h:2"]}, type="worker", index=0),
     'names more than one "chief"'),
    (config(tasks={"worker": ["127.0.0.1:1234", "127.0.0.1:99999"]}, type="worker", index=0),
     'worker 1\'s address "127.0.0.1:99999" has port 99999: a port is 1 to 65535'),
    (config(tasks={"chief": ["h:0"], "worker": ["h:1"]}, type="worker", index=0),
     'chief 0\'s address "h:0" has port 0: a port is 1 to 65535'),
    (config(tasks={"worker": ["host with space:1234", "h:1"]}, type="worker", index=0),
     'worker 0\'s address "host with space:1234" has no host name or IP address before its '
     'port'),
    (config(tasks={"worker": [":1234", "h:1"]}, type="worker", index=0),
     'worker 0\'s address ":1234" has no host name or IP address'),
    (config(tasks={"worker": ["127.0.0.1:1234"] * 2}, type="worker", index=1),
     "names 127.0.0.1:1234 for both worker 0 and worker 1: each task needs a host:port of "
     "its own"),
    (config(tasks={"chief": ["h:1"], "worker": ["g:1", "h:1"]}, type="worker", index=1),
     "names h:1 for both chief 0 and worker 1"),
    # One port of this machine by two of its names: TensorFlow's second server could not
    # start, and the job waited --worker_timeout_secs for it.
    (config(tasks={"worker": ["localhost:1234", "127.0.0.1:1234"]}, type="worker", index=0),
     "names localhost:1234 for worker 0 and 127.0.0.1:1234 for worker 1, both port 1234 of "
     "this machine: each task needs a host:port of its own"),
    (config(tasks={"chief": [f"{socket.gethostname()}:7"], "worker": ["[::1]:7"]},
            type="worker", index=0),
     f"names {socket.gethostname()}:7 for chief 0 and [::1]:7 for worker 0, both port 7 of "
     f"this machine"),
    (config(tasks={"worker": ["Node1:5", "node1:5"]}, type="worker", index=0),
     "names Node1:5 for worker 0 and node1:5 for worker 1, both port 5 of node1"),
    (config(type="chief", index=0), 'task type "chief" is not in the cluster (it has worker)'),
    (config(index=0), 'task has no "type"'),
    (config(type="worker"), 'task has no "index"'),
    (config(type="worker", index=2), 'task index 2 is not one of the 2 "worker" tasks (0 to 1)'),
    (config(type="worker", index=-1), 'task index -1 is not one of the 2 "worker" tasks'),
    (config(type="worker", index="0"), 'task index "0" is not one of the 2 "worker" tasks'),
    (config(type="worker", index=True), 'task index true is not one of the 2 "worker" tasks'),
])
def test_each_tf_config_mistake_is_one_line_with_the_expected_form(tf_config, problem):
    with pytest.raises(Cifar10Error) as err:
        cluster.read_tf_config(tf_config)
    message = str(err.value)
    assert message.startswith(f"TF_CONFIG {problem}")
    assert EXPECTED_FORM in message
    assert message.endswith("(see docs/multi-machine.md)")
    assert "\n" not in message and "None" not in message


@pytest.mark.parametrize("tf_config, tasks", [
    (config(type="worker", index=1), 2),
    (config(tasks={"chief": ["h:1"], "worker": ["h:2", "h:3"]}, type="chief", index=0), 3),
    (config(tasks={"worker": ["localhost:5000"]}, type="worker", index=0), 1),
    (config(tasks={"worker": ["node-1.example.org:65535", "[::1]:1", "10.0.0.2:1"]},
            type="worker", index=2), 3),
])
def test_valid_tf_configs_are_accepted_and_their_tasks_counted(tf_config, tasks):
    assert cluster.read_tf_config(tf_config) == json.loads(tf_config)
    assert cluster.cluster_workers(tf_config) == tasks


def test_unset_tf_config_is_one_machine(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert cluster.read_tf_config() is None
    assert cluster.cluster_workers() == 0


@pytest.mark.parametrize("kind, tf_config, resolved", [
    ("auto", None, "mirrored"),
    ("auto", config(tasks={"worker": ["h:1"]}, type="worker", index=0), "mirrored"),
    ("auto", config(type="worker", index=1), "multi_worker"),
    ("mirrored", config(type="worker", index=1), "mirrored"),
    ("one_device", None, "one_device"),
    ("multi_worker", config(tasks={"worker": ["h:1"]}, type="worker", index=0),
     "multi_worker"),
])
def test_strategy_kind_resolves_auto_from_the_number_of_tasks(kind, tf_config, resolved,
                                                              monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert cluster.strategy_kind(kind, tf_config) == resolved


def test_strategy_kind_refuses_multi_worker_without_tf_config_and_checks_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(Cifar10Error, match=r"^--strategy=multi_worker needs TF_CONFIG naming "
                                           r"the cluster and this task; see docs/multi-machine.md"):
        cluster.strategy_kind("multi_worker")
    with pytest.raises(Cifar10Error, match=r'^TF_CONFIG has no "task"'):
        cluster.strategy_kind("mirrored", json.dumps({"cluster": TWO}))
    with pytest.raises(ValueError, match="strategy must be one of"):
        cluster.strategy_kind("parameter_server")


def test_fresh_start_is_refused_only_with_several_workers():
    cluster.refuse_fresh_start("mirrored", "/runs/a")  # no error
    with pytest.raises(Cifar10Error) as err:
        cluster.refuse_fresh_start("multi_worker", "/runs/a")
    assert str(err.value) == (
        "--fresh_start is not supported with several workers (one worker could restore what "
        "the chief is deleting); delete the checkpoints in /runs/a by hand, or use a new "
        "--train_dir")


def test_the_trainer_checks_tf_config_before_tensorflow_reads_it(tmp_path):
    trainer = os.path.join(os.path.dirname(sys.executable), "cifar10-train")
    result = subprocess.run(
        [trainer, "--synthetic_data", "--synthetic_records=20", f"--data_dir={tmp_path / 'data'}",
         f"--train_dir={tmp_path / 'train'}", "--max_steps=1", "--batch_size=8"],
        capture_output=True, text=True, timeout=120,
        env=env(TF_CONFIG=json.dumps({"cluster": TWO})))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        'cifar10-train: error: TF_CONFIG has no "task" saying which task this process is; '
        + EXPECTED_FORM)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "train").exists()
