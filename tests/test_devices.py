"""cifar10.distribute.devices and resolver: replica devices, strategies, the worker's
role, precision warnings, a multi-worker strategy's start (on conftest's 4 logical CPUs)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import types

import pytest
import tensorflow as tf

import cli
import fakegpus
from cifar10.core import machine
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import devices
from cifar10.distribute import gpus as gpu_config


def test_replicas_run_on_the_cpu_or_its_logical_devices_up_to_a_cap(monkeypatch):
    assert len(tf.config.list_logical_devices("CPU")) == 4  # conftest's, TensorFlow started
    assert devices.replica_devices(0) == ["/cpu:0"]
    assert devices.replica_devices(1) == ["/cpu:0"]
    assert [name.split(":")[-2:] for name in devices.replica_devices(3)] == [
        ["CPU", "0"], ["CPU", "1"], ["CPU", "2"]]
    with pytest.raises(Cifar10Error, match="^5 replicas need 5 logical CPU devices but "
                                           "TensorFlow was already initialised with 4; "):
        devices.replica_devices(5)
    with pytest.raises(ValueError):
        devices.replica_devices(-1)
    physical = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [] if kind == "GPU" else physical(kind))
    with pytest.raises(Cifar10Error) as raised:
        devices.make_strategy(100_000, kind="mirrored")
    assert str(raised.value) == (
        "--num_gpus=100000 asks for more replicas than this machine has GPUs (none), and more "
        "than the 64 that run on logical CPU devices in their place: give --num_gpus=64 or "
        "fewer")
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
        assert not devices.is_multi_worker(strategy) and devices.num_workers(strategy) == 1


@pytest.mark.parametrize("spec, task_type, task_id, role", [
    ({"worker": ["a:1", "b:1"]}, "worker", 0, (True, "worker 0")),
    ({"worker": ["a:1", "b:1"]}, "worker", 1, (False, "worker 1")),
    ({"chief": ["c:1"], "worker": ["a:1"]}, "chief", 0, (True, "chief 0")),
    ({"chief": ["c:1"], "worker": ["a:1"]}, "worker", 0, (False, "worker 0")),
])
def test_the_chief_is_the_chief_task_or_else_worker_0(spec, task_type, task_id, role):
    strategy = types.SimpleNamespace(
        cluster_resolver=tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(spec), task_type=task_type, task_id=task_id))
    assert devices.worker_role(strategy) == role
    assert devices.is_multi_worker(strategy) and devices.num_workers(strategy) == 2


X86 = "flags\t\t: fpu sse sse2 avx avx2 fma"


@pytest.mark.parametrize("line, expected", [
    (f"{X86} avx512f avx512_bf16", True),
    (f"{X86} amx_bf16 amx_tile", True),
    ("Features\t: fp asimd atomics bf16 i8mm", True),  # Arm
    (X86, False),  # AVX2 only: emulated
    ("processor\t: 0", None),  # no feature line: cannot tell
])
def test_cpu_bfloat16_instructions_are_read_from_cpuinfo(tmp_path, line, expected):
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nmodel name\t: Some CPU\n{line}\n")
    assert devices.cpu_has_bfloat16(str(tmp_path / "cpuinfo")) is expected
    assert devices.cpu_has_bfloat16(str(tmp_path / "missing")) is None
    assert machine.has_amx() == ("amx_bf16" in (machine.features() or ()))  # this machine's


def test_emulated_bfloat16_is_one_warning_line_naming_the_cpu_features(tmp_path, caplog):
    (tmp_path / "avx2").write_text(f"{X86}\n")
    (tmp_path / "bf16").write_text(f"{X86} avx512_bf16\n")
    assert not devices.warn_if_bfloat16_is_emulated(["/cpu:0"], str(tmp_path / "bf16"))
    assert not devices.warn_if_bfloat16_is_emulated(["/cpu:0"], str(tmp_path / "none"))
    assert devices.warn_if_bfloat16_is_emulated(None, str(tmp_path / "avx2"))  # the CPU
    assert [r.getMessage() for r in caplog.records] == [
        "--use_bf16: this CPU has no bfloat16 instructions (x86's avx512_bf16 or amx_bf16, "
        "Arm's bf16): TensorFlow emulates them, so training runs several times slower than "
        "in float32 here (evaluation about as fast)."]


GPU = "/job:localhost/replica:0/task:0/device:GPU:{}".format


@pytest.fixture
def strategies(monkeypatch):
    """make_strategy's strategies as their arguments, not built (the GPUs are fake)."""
    def mirrored(devices, cross_device_ops):
        return types.SimpleNamespace(devices=devices, ops=type(cross_device_ops).__name__,
                                     extended=types.SimpleNamespace(worker_devices=devices))

    monkeypatch.setattr(tf.distribute, "MirroredStrategy", mirrored)
    monkeypatch.setattr(devices.resolver, "multi_worker_strategy",
                        lambda resolver, options, timeout: types.SimpleNamespace(
                            ops=options.implementation.name))


H200_LINE = "/gpu:{} (NVIDIA H200{})".format


@pytest.mark.parametrize("num_gpus, options, visible, used, ops, state, line", [
    (0, {}, None, ["/cpu:0"], "ReductionToOneDevice", ([], [], {}), ""),  # every GPU hidden
    (None, {}, None, ["/gpu:0"], "NcclAllReduce", ([0], [0], {}), " on " + H200_LINE(0, "")),
    (2, {}, "1,2", ["/gpu:0", "/gpu:1"], "NcclAllReduce", ([0, 1], [0, 1], {}),
     " on " + H200_LINE("0-1", "; CUDA_VISIBLE_DEVICES=1,2")),
    (2, {"all_reduce": "hierarchical_copy"}, None, ["/gpu:0", "/gpu:1"],
     "HierarchicalCopyAllReduce", ([0, 1], [0, 1], {}), " on " + H200_LINE("0-1", "")),
    (3, {"per_gpu": 2}, "2,0,1", ["/gpu:0", "/gpu:1", "/gpu:2"], "ReductionToOneDevice",
     ([0, 1], [], {0: 2, 1: 1}), f" on {H200_LINE('0-1', ', slice of GPU 0')}, "
                                 f"{H200_LINE(2, ', slice of GPU 1; CUDA_VISIBLE_DEVICES=2,0,1')}"),
    (1, {"per_gpu": 8}, None, ["/gpu:0"], "NcclAllReduce", ([0], [0], {}),  # the whole GPU
     " on " + H200_LINE(0, "")),
])
def test_num_gpus_takes_the_first_visible_gpus_hides_the_others_and_names_them(
        num_gpus, options, visible, used, ops, state, line, strategies, monkeypatch, tmp_path):
    gpus = fakegpus.FakeGPUs(monkeypatch, fakegpus.H200, fakegpus.H200, fakegpus.H200)
    fakegpus.nvidia_smi(tmp_path, monkeypatch, 143771, 143771, 143771)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    strategy = devices.make_strategy(num_gpus, **{"kind": "mirrored", **options})
    assert (strategy.ops, gpus.state(), strategy.devices) == (ops, state, used)
    assert devices.placement(strategy) == line


@pytest.mark.parametrize("other, all_reduce, ops", [
    ("gpu2:1", "auto", "NCCL"),
    ("gpu2:1", "one_device", "RING"),
    ("localhost:2", "auto", "RING"),  # cifar10-launch's: both take GPUs 0 and 1
    ("localhost:2", "nccl", "NCCL"),  # (where CUDA_VISIBLE_DEVICES tells them apart)
])
def test_workers_reduce_by_nccl_unless_they_share_a_machine(other, all_reduce, ops, strategies,
                                                            monkeypatch):
    gpus = fakegpus.FakeGPUs(monkeypatch, fakegpus.H200, fakegpus.H200, fakegpus.H200)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1", other]},
                                                "task": {"type": "worker", "index": 0}}))
    strategy = devices.make_strategy(2, kind="multi_worker", all_reduce=all_reduce)
    assert (strategy.ops, gpus.state()) == (ops, ([0, 1], [0, 1], {}))


def test_gpus_that_tensorflow_set_already_stay_so_with_a_warning(monkeypatch, tmp_path, caplog):
    gpus = fakegpus.FakeGPUs(monkeypatch, fakegpus.H200, fakegpus.H200, started=True)
    fakegpus.nvidia_smi(tmp_path, monkeypatch, 143771, 143771)
    gpu_config.keep([])
    gpu_config.use(gpus.physical, 4, per_gpu=2)
    assert gpus.state() == ([0, 1], [], {})
    assert [r.getMessage() for r in caplog.records] == [
        "cannot set up the GPUs as chosen (Visible devices cannot be modified after being "
        "initialized): TensorFlow started before, so they stay as it set them"] * 2


@pytest.mark.parametrize("gpus, memory, options, line", [
    (2, (81559,) * 2, {"num_gpus": 3}, "--num_gpus=3 needs 3 GPUs and this process sees 2: give "
     "--num_gpus=2 or fewer, or --replicas_per_gpu=2 for several replicas on each GPU's slices"),
    (2, (8192,) * 2, {"num_gpus": 8, "per_gpu": 4}, "--replicas_per_gpu=4: 4 slices of 2048 MB "
     "and 1024 MB for CUDA do not fit GPU 0's 8192 MB: give --replicas_per_gpu=3 or fewer"),
    (1, (4096,), {"num_gpus": 2, "per_gpu": 2}, "--replicas_per_gpu=2: 2 slices of 2048 MB and "
     "1024 MB for CUDA do not fit GPU 0's 4096 MB, which takes one replica: drop "
     "--replicas_per_gpu"),
    (1, (81559,), {"num_gpus": 2, "per_gpu": 2, "all_reduce": "nccl"}, "--all_reduce=nccl "
     "cannot reduce between slices of one GPU (--replicas_per_gpu): drop one of them"),
    (3, (81559,) * 3, {"num_gpus": 3, "all_reduce": "hierarchical_copy"}, "--all_reduce="
     "hierarchical_copy adds up two equal halves of the replicas, and 3 is odd: give an even "
     "--num_gpus, or --all_reduce=one_device"),
    (0, (), {"num_gpus": 2, "all_reduce": "nccl"}, "--all_reduce=nccl reduces between GPUs and "
     "the replicas run on the CPU here: drop --all_reduce"),
])
def test_what_the_gpus_cannot_do_is_refused_in_one_line(gpus, memory, options, line,
                                                        strategies, monkeypatch, tmp_path):
    fakegpus.FakeGPUs(monkeypatch, *[fakegpus.H200] * gpus)
    fakegpus.nvidia_smi(tmp_path, monkeypatch, *memory)
    with pytest.raises(Cifar10Error) as refused:
        devices.make_strategy(**{"kind": "mirrored", **options})
    assert str(refused.value) == line


PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.mark.parametrize("environ, smi, memory", [
    ({}, "two", [16384, 16384]),  # CUDA's order, fastest first: either may be the smaller
    (PCI, "two", [16384, 81559]),  # nvidia-smi's
    ({"CUDA_VISIBLE_DEVICES": "1", **PCI}, "two", [81559]),
    ({"CUDA_VISIBLE_DEVICES": "1"}, "two", [16384]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-1"}, "two", [81559]),  # a UUID, or its start, as CUDA's
    ({"CUDA_VISIBLE_DEVICES": "GPU-7"}, "two", "CUDA_VISIBLE_DEVICES names GPU-7, which is no "
                                               "GPU nvidia-smi lists"),
    ({"CUDA_VISIBLE_DEVICES": "MIG-5"}, "two", "CUDA_VISIBLE_DEVICES names MIG-5, a MIG "
                                               f"instance: {gpu_config.MIG}"),
    ({}, "mig", f"GPU 0 is split into MIG instances: {gpu_config.MIG}"),
    (PCI, "n/a", "nvidia-smi gives GPU 0's memory as [N/A]"),
    ({}, "fails", "nvidia-smi failed: NVIDIA-SMI has failed"),
    ({}, "missing", "nvidia-smi is not on PATH"),
])
def test_the_memory_of_the_visible_gpus_is_nvidia_smis(environ, smi, memory, monkeypatch,
                                                        tmp_path, caplog):
    fakegpus.nvidia_smi(tmp_path, monkeypatch, "[N/A]" if smi == "n/a" else 16384, 81559,
                        fails=smi == "fails", mig=smi == "mig")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    if smi == "missing":
        monkeypatch.setenv("PATH", str(tmp_path))  # (the fake is in tmp_path/bin)
    assert gpu_config.card_memory_mb() == memory
    gpu_config.check_memory(1, 2)  # (fits every card here)
    assert [r.getMessage() for r in caplog.records] == ([] if isinstance(memory, list) else [
        f"--replicas_per_gpu=2: cannot check that 2 slices of 2048 MB fit each GPU's memory "
        f"({memory}); if TensorFlow runs out of GPU memory, give fewer"])


@pytest.mark.parametrize("gpus, tf32, line", [
    ([fakegpus.H200], False, "NVIDIA H200 has TF32 tensor cores, which float32 leaves idle: "
     "--allow_tf32 runs its convolutions and matrix products on them, faster, with TF32's "
     "10-bit mantissa"),
    ([fakegpus.H200], True, None),  # --allow_tf32 given
    ([fakegpus.V100], False, None),  # before Ampere: no TF32
])
def test_a_float32_run_on_gpus_with_tf32_is_told_of_allow_tf32(gpus, tf32, line, monkeypatch,
                                                               caplog):
    fakegpus.FakeGPUs(monkeypatch, *gpus)
    monkeypatch.setattr(tf.config.experimental, "tensor_float_32_execution_enabled",
                        lambda: tf32)
    assert devices.suggest_precision([GPU(0)]) is (line is not None)
    assert [r.getMessage() for r in caplog.records] == ([line] if line else [])


def test_a_gpu_before_ampere_is_named_in_the_bfloat16_warning(monkeypatch, caplog):
    gpus = fakegpus.FakeGPUs(monkeypatch, ("NVIDIA A100", (8, 0)), fakegpus.V100)
    assert not devices.warn_if_bfloat16_is_emulated([GPU(0)])  # the V100 is not used
    assert devices.warn_if_bfloat16_is_emulated([GPU(0), GPU(1)])
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "--use_bf16: Tesla V100-SXM2-16GB has no bfloat16 tensor core"]
    gpu_config.use(gpus.physical[1:], 2, per_gpu=2)  # logical /gpu:0 and /gpu:1: the V100's
    assert devices.warn_if_bfloat16_is_emulated([GPU(0), GPU(1)])


def test_the_trainer_warns_of_float16_on_the_cpu_as_its_own_line(tmp_path):
    """(With no hint to try --use_bf16: a float32 run's, test_output.py.)"""
    assert not devices.warn_if_float16_runs_on_cpu(["/job:localhost/device:GPU:0"])
    assert not devices.suggest_precision(["/job:localhost/device:GPU:0"])
    result = cli.call("cifar10-train", "--use_fp16", "--synthetic_data",
                      "--synthetic_records=20", f"--data_dir={tmp_path / 'data'}",
                      f"--train_dir={tmp_path / 'train'}", "--max_steps=1", "--batch_size=2")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        "cifar10-train: warning: --use_fp16 on the CPU: TensorFlow's CPU kernels compute "
        "float16 slowly, so training runs many times slower than in float32 here; float16 is "
        "for GPUs (on a CPU with bfloat16 instructions, --use_bf16 is the faster lower "
        "precision)."]
    assert "notice" not in result.stderr


def test_a_tf_config_task_whose_port_is_in_use_is_one_line(tmp_path):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        own = f"127.0.0.1:{held.getsockname()[1]}"
        config = json.dumps({"cluster": {"worker": ["127.0.0.1:1", own]},
                             "task": {"type": "worker", "index": 1}})
        result = cli.run("cifar10-train", "--synthetic_data", f"--data_dir={tmp_path}",
                         f"--train_dir={tmp_path / 'train'}", timeout=120, TF_CONFIG=config)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-train: error: this is worker 1: cannot listen at its address {own}: port "
        f"{own.split(':')[1]} is in use on this machine (by another program, or another "
        f"worker given the same TF_CONFIG task index); give each worker its own index and a "
        f"free port")


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
              "    time.sleep(60)\n"
              "    print('lost')\n"
              "except KeyboardInterrupt:\n"
              "    print('raised')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env=cli.env(TF_CONFIG=config))
    assert result.stdout == "raised\n", result.stderr
