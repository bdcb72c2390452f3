"""Tests of cifar10.distribute.devices: replica devices, the strategies, the worker's role.

In-process, on the four logical CPUs of conftest.py (TensorFlow is initialised by
then, so more devices than those cannot be made).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import types

import pytest

import cli
import tensorflow as tf

from cifar10.core import machine
from cifar10.distribute import devices
from cifar10.distribute import logical_devices
from cifar10.distribute import resolver
from cifar10.core.errors import Cifar10Error


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


def test_more_logical_replicas_than_the_cap_are_refused_before_any_is_made(monkeypatch):
    """--num_gpus=100000 on a CPU warned, then built replicas for hours in silence."""
    physical = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [] if kind == "GPU" else physical(kind))
    asked = logical_devices.MAX_LOGICAL_REPLICAS + 1
    for num_gpus in (asked, 100_000):
        with pytest.raises(Cifar10Error) as raised:
            devices.replica_devices(num_gpus)
        assert str(raised.value) == (
            f"--num_gpus={num_gpus} asks for more replicas than this machine has GPUs (none), "
            f"and more than the 64 that run on logical CPU devices in their place (each is "
            f"built in turn, about a second of CPU time apiece, before the first step): give "
            f"--num_gpus=64 or fewer")
    with pytest.raises(Cifar10Error, match="^--num_gpus=65 asks for more replicas"):
        devices.make_strategy(asked, kind="mirrored")
    assert len(tf.config.list_logical_devices("CPU")) == 4  # none made


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
    cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec), task_type=task_type, task_id=task_id)
    return types.SimpleNamespace(cluster_resolver=cluster_resolver)


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


X86_FLAGS = "fpu vme sse sse2 avx avx2 fma"


@pytest.mark.parametrize("lines, expected", [
    ([f"flags\t\t: {X86_FLAGS} avx512f avx512_bf16 amx_tile"], True),  # Cooper Lake on
    ([f"flags\t\t: {X86_FLAGS} amx_bf16 amx_tile"], True),
    (["Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics bf16 i8mm"], True),  # Arm
    ([f"flags\t\t: {X86_FLAGS}"], False),  # AVX2 only: emulated
    (["Features\t: fp asimd evtstrm aes"], False),
    (["processor\t: 0"], None),  # no feature line: cannot tell
])
def test_cpu_bfloat16_instructions_are_read_from_cpuinfo(tmp_path, lines, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\n" + "\n".join(lines) + "\n")
    assert devices.cpu_has_bfloat16(str(cpuinfo)) is expected
    assert devices.cpu_has_bfloat16(str(tmp_path / "missing")) is None


def test_float16_training_on_the_cpu_is_one_warning_line(caplog):
    assert not devices.warn_if_float16_runs_on_cpu(
        ["/job:localhost/replica:0/task:0/device:GPU:0"])
    assert not caplog.records
    assert devices.warn_if_float16_runs_on_cpu(["/job:localhost/replica:0/task:0/device:CPU:0"])
    (record,) = caplog.records
    assert record.levelname == "WARNING" and record.getMessage() == (
        "--use_fp16 on the CPU: TensorFlow's CPU kernels compute float16 slowly, so training "
        "runs many times slower than in float32 here; float16 is for GPUs (on a CPU with "
        "bfloat16 instructions, --use_bf16 is the faster lower precision).")


def test_the_trainer_warns_of_float16_on_the_cpu_as_its_own_line(tmp_path):
    result = cli.call("cifar10-train", "--use_fp16", "--synthetic_data",
                      "--synthetic_records=20", f"--data_dir={tmp_path / 'data'}",
                      f"--train_dir={tmp_path / 'train'}", "--max_steps=1", "--batch_size=2")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        "cifar10-train: warning: --use_fp16 on the CPU: TensorFlow's CPU kernels compute "
        "float16 slowly, so training runs many times slower than in float32 here; float16 is "
        "for GPUs (on a CPU with bfloat16 instructions, --use_bf16 is the faster lower "
        "precision)."]


def test_emulated_bfloat16_is_one_warning_line_naming_the_cpu_features(tmp_path, caplog):
    avx2, bf16 = tmp_path / "avx2", tmp_path / "bf16"
    avx2.write_text(f"flags\t\t: {X86_FLAGS}\n")
    bf16.write_text(f"flags\t\t: {X86_FLAGS} avx512_bf16\n")
    assert not devices.warn_if_bfloat16_is_emulated(["/cpu:0"], cpuinfo=str(bf16))
    assert not devices.warn_if_bfloat16_is_emulated(["/cpu:0"], cpuinfo=str(tmp_path / "none"))
    assert not caplog.records
    assert devices.warn_if_bfloat16_is_emulated(None, cpuinfo=str(avx2))  # default device: CPU
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "\n" not in record.getMessage()
    assert record.getMessage() == (
        "--use_bf16: this CPU has no bfloat16 instructions (x86's avx512_bf16 or amx_bf16, "
        "Arm's bf16): TensorFlow emulates them, so training runs several times slower than "
        "in float32 here (evaluation about as fast).")


def test_a_gpu_before_ampere_is_named_in_the_bfloat16_warning(monkeypatch, caplog):
    capabilities = {"A100": (8, 0), "V100": (7, 0)}
    visible = list(capabilities)  # /gpu:0 is the A100, /gpu:1 the V100
    monkeypatch.setattr(tf.config, "get_visible_devices",
                        lambda kind=None: visible if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda gpu: {"device_name": f"Tesla {gpu}",
                                     "compute_capability": capabilities[gpu]})
    gpu = "/job:localhost/replica:0/task:0/device:GPU:{}".format
    assert not devices.warn_if_bfloat16_is_emulated([gpu(0)])  # the V100 is not used
    assert not caplog.records
    assert devices.warn_if_bfloat16_is_emulated([gpu(0), gpu(1)])
    assert caplog.records[0].getMessage().startswith(
        "--use_bf16: Tesla V100 has no bfloat16 tensor cores (those came with Ampere, "
        "compute capability 8.0)")
    visible.reverse()  # now the V100 is /gpu:0, split into logical /gpu:0 and /gpu:1
    del visible[1]
    assert devices.warn_if_bfloat16_is_emulated([gpu(0), gpu(1)])


def test_cpu_features_are_the_flags_line_of_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {X86_FLAGS} amx_bf16 amx_tile\n"
                       f"processor\t: 1\nflags\t\t: {X86_FLAGS} amx_bf16 amx_tile\n")
    flags = machine.features(str(cpuinfo))
    assert {"avx2", "amx_bf16", "amx_tile"} <= flags and "avx512_bf16" not in flags
    assert machine.features(str(tmp_path / "missing")) is None
    # has_amx reads this machine's: the same answer as its flags give.
    assert machine.has_amx() == ("amx_bf16" in (machine.features() or ()))


def held_port_tf_config(held, index=1):
    """A TF_CONFIG of two workers on 127.0.0.1 whose worker ``index`` has the port of the
    listening socket ``held``; and that address."""
    held.bind(("", 0))
    held.listen()
    own = f"127.0.0.1:{held.getsockname()[1]}"
    other = "127.0.0.1:1" if own != "127.0.0.1:1" else "127.0.0.1:2"
    workers = [other, own] if index == 1 else [own, other]
    return json.dumps({"cluster": {"worker": workers},
                       "task": {"type": "worker", "index": index}}), own


def test_a_tf_config_task_whose_port_is_in_use_is_refused_before_its_server_starts(
        monkeypatch):
    with socket.socket() as held:
        config, own = held_port_tf_config(held)
        monkeypatch.setenv("TF_CONFIG", config)
        with pytest.raises(Cifar10Error) as raised:
            devices.make_strategy(1, kind="multi_worker", worker_timeout_secs=5)
    assert str(raised.value) == (
        f"this is worker 1: cannot listen at its address {own}: port {own.split(':')[1]} is "
        f"in use on this machine (by another program, or another worker given the same "
        f"TF_CONFIG task index); give each worker its own index and a free port")


def test_a_port_taken_after_the_check_is_the_same_line_not_a_traceback(monkeypatch):
    # (The port taken between the check and TensorFlow's server: TensorFlow's error.)
    with socket.socket() as held:
        config, own = held_port_tf_config(held, index=0)
    monkeypatch.setenv("TF_CONFIG", config)

    def taken(**_):
        raise tf.errors.UnknownError(None, None, "Could not start gRPC server")

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", taken)
    with pytest.raises(Cifar10Error, match=rf"^this is worker 0: cannot listen at its "
                                           rf"address {own}: port \d+ is in use on this "
                                           rf"machine"):
        resolver.multi_worker_strategy(None, None, None)


def test_a_sigterm_once_the_multi_worker_strategy_is_built_is_not_lost():
    # TensorFlow's preemption notifier sets a C handler for SIGTERM as the strategy is
    # built and leaves it: a SIGTERM before the trainer's handlers did nothing at all.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{free.getsockname()[1]}"
    config = json.dumps({"cluster": {"worker": [address]}, "task": {"type": "worker", "index": 0}})
    script = ("import os, signal, time\n"
              "from cifar10.distribute import resolver\n"
              "signal.signal(signal.SIGTERM, signal.default_int_handler)  # as process.run\n"
              "resolver.multi_worker_strategy(None, None, None)\n"
              "try:\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(10)\n"
              "    print('lost')\n"
              "except KeyboardInterrupt:\n"
              "    print('raised')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env=cli.env(TF_CONFIG=config))
    assert result.stdout == "raised\n", result.stderr
