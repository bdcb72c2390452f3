"""Tests of cifar10.devices: replica devices, the strategies, the worker's role.

In-process, on the four logical CPUs of conftest.py (TensorFlow is initialised by
then, so more devices than those cannot be made).
"""

from __future__ import annotations

import types

import pytest
import tensorflow as tf

from cifar10 import devices
from cifar10.errors import Cifar10Error


def test_replicas_run_on_the_cpu_or_on_its_logical_devices():
    assert devices.replica_devices(0) == ["/cpu:0"]
    assert devices.replica_devices(1) == [tf.config.list_logical_devices("CPU")[0].name]
    assert [name.split(":")[-2:] for name in devices.replica_devices(3)] == [
        ["CPU", "0"], ["CPU", "1"], ["CPU", "2"]]
    with pytest.raises(Cifar10Error, match="^5 replicas need 5 logical CPU devices but "
                                           "TensorFlow was already initialised with 4; "):
        devices.replica_devices(5)
    with pytest.raises(ValueError):
        devices.replica_devices(-1)


def test_the_strategies_of_one_machine():
    mirrored = devices.make_strategy(2, kind="mirrored")
    assert isinstance(mirrored, tf.distribute.MirroredStrategy)
    assert mirrored.num_replicas_in_sync == 2
    # Logical CPUs cannot use NCCL: the gradients are reduced through one device.
    assert isinstance(mirrored.extended._cross_device_ops, tf.distribute.ReductionToOneDevice)
    auto = devices.make_strategy(1)  # no TF_CONFIG: mirrored
    assert isinstance(auto, tf.distribute.MirroredStrategy) and auto.num_replicas_in_sync == 1
    one = devices.make_strategy(0, kind="one_device")
    assert isinstance(one, tf.distribute.OneDeviceStrategy)
    for strategy in (mirrored, auto, one):
        assert devices.worker_role(strategy) == (True, "chief")
        assert not devices.is_multi_worker(strategy)


def with_cluster(spec, task_type, task_id):
    """A stand-in for a multi-worker strategy: only its cluster resolver is read."""
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec), task_type=task_type, task_id=task_id)
    return types.SimpleNamespace(cluster_resolver=resolver)


@pytest.mark.parametrize("spec, task_type, task_id, role", [
    ({"worker": ["a:1", "b:1"]}, "worker", 0, (True, "worker 0")),
    ({"worker": ["a:1", "b:1"]}, "worker", 1, (False, "worker 1")),
    ({"chief": ["c:1"], "worker": ["a:1"]}, "chief", 0, (True, "chief 0")),
    ({"chief": ["c:1"], "worker": ["a:1"]}, "worker", 0, (False, "worker 0")),
])
def test_the_chief_is_the_chief_task_or_else_worker_0(spec, task_type, task_id, role):
    strategy = with_cluster(spec, task_type, task_id)
    assert devices.worker_role(strategy) == role
    assert devices.is_multi_worker(strategy)
