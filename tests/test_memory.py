"""The trainer's refusal of a batch that cannot fit in memory at all (core/memory.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cifar10 import model as model_lib
from cifar10.core import memory
from cifar10.core.errors import Cifar10Error
from absl import flags
from cli import ENTRY_POINTS, call


def test_conv1_output_bytes_is_the_models_largest_tensor():
    model = model_lib.Model()
    outputs = model.stage_outputs(tf.zeros([2, 24, 24, 3]))
    sizes = {name: int(np.prod(out.shape)) * out.dtype.size for name, out in outputs.items()}
    assert max(sizes, key=sizes.get) == "conv1"
    assert memory.conv1_output_bytes(2) == sizes["conv1"] == 2 * 24 * 24 * 64 * 4
    assert memory.conv1_output_bytes(2, value_bytes=2) == sizes["conv1"] // 2


def test_a_batch_whose_conv1_output_passes_memory_is_refused_naming_both_sizes():
    with pytest.raises(Cifar10Error) as raised:
        memory.refuse_batch_beyond_memory(200_000, memory=24 * 2**30)
    assert str(raised.value) == (
        "--batch_size=200000 cannot fit: conv1's output alone would take at least 29.5 GB "
        "a replica, more than this machine's 25.8 GB of memory; give a smaller "
        "--batch_size (the tutorial's is 128)")


@pytest.mark.parametrize("batch_size, value_bytes, fits", [
    (100_000, 4, True), (200_000, 4, False), (200_000, 2, True), (400_000, 2, False)])
def test_the_limit_counts_the_bytes_of_a_value(batch_size, value_bytes, fits):
    check = lambda: memory.refuse_batch_beyond_memory(batch_size, value_bytes,  # noqa: E731
                                                      memory=24 * 2**30)
    if fits:
        check()
    else:
        pytest.raises(Cifar10Error, check)


def test_an_unknown_memory_size_refuses_nothing(monkeypatch):
    monkeypatch.setattr(memory, "total_memory", lambda: None)
    memory.refuse_batch_beyond_memory(10**9)


def test_this_machines_memory_is_read():
    assert memory.total_memory() > 2**30


def test_the_trainer_refuses_it_before_writing_anything(tmp_path):
    batch_size = memory.total_memory() // memory.conv1_output_bytes(1) + 1
    result = call("cifar10-train", "--synthetic_data", f"--data_dir={tmp_path / 'data'}",
                  f"--train_dir={tmp_path / 'train'}", f"--batch_size={batch_size}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"cifar10-train: error: --batch_size={batch_size} cannot fit: conv1's output alone")
    assert not (tmp_path / "train").exists() and not (tmp_path / "data").exists()


def test_an_unknown_memory_size_still_refuses_what_no_64_bit_machine_holds(monkeypatch):
    monkeypatch.setattr(memory, "total_memory", lambda: None)
    with pytest.raises(Cifar10Error) as raised:
        memory.refuse_batch_beyond_memory(99999999999999999999)
    assert str(raised.value) == (
        "--batch_size=99999999999999999999 cannot fit: conv1's output alone would take at "
        "least 1.47e+16 GB a replica, more than the memory a 64-bit machine can address; "
        "give a smaller --batch_size (the tutorial's is 128)")


def _flag_names(program):
    values = flags.FlagValues()
    ENTRY_POINTS[program].define_flags(values)
    return set(values)


ENTRY_POINTS_FLAGS = {program: _flag_names(program)
                      for program in ("cifar10-train", "cifar10-eval", "cifar10-predict")}

# Past int32 and past int64 (which TensorFlow's sizes hold), and far past both.
HUGE = ["2147483648", "4294967297", "9223372036854775808", "99999999999999999999",
        "1" + "0" * 40]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("program, args", [
    ("cifar10-train", ["--synthetic_data"]),
    ("cifar10-eval", ["--synthetic_data", "--run_once"]),
    ("cifar10-predict", []),
])
def test_every_program_that_takes_a_batch_size_refuses_one_past_memory_in_one_line(
        tmp_path, program, args, value):
    (tmp_path / "cat.png").write_bytes(b"")
    folders = [f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
               f"--checkpoint_dir={tmp_path / 'train'}", f"--eval_dir={tmp_path / 'eval'}"]
    own = [arg for arg in folders if arg.split("=")[0].lstrip("-") in
           ENTRY_POINTS_FLAGS[program]]
    files = [str(tmp_path / "cat.png")] if program == "cifar10-predict" else []
    result = call(program, f"--batch_size={value}", *args, *own, *files)
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{program}: error: --batch_size={value} cannot fit: conv1's "
                               f"output alone would take at least ")
    assert lines[0].endswith("; give a smaller --batch_size (the tutorial's is 128)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cat.png"]  # nothing made
