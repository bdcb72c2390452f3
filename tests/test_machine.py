"""core/machine.py: a batch that cannot fit in memory at all is refused before
TensorFlow loads, by every program that takes a --batch_size."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cifar10 import model as model_lib
from cifar10.core import machine
from cifar10.core.errors import Cifar10Error
from cli import call


def test_conv1_output_bytes_is_the_models_largest_tensor():
    outputs = model_lib.Model().stage_outputs(tf.zeros([2, 24, 24, 3]))
    sizes = {name: int(np.prod(out.shape)) * out.dtype.size for name, out in outputs.items()}
    assert max(sizes, key=sizes.get) == "conv1"
    assert machine.conv1_output_bytes(2) == sizes["conv1"] == 2 * 24 * 24 * 64 * 4
    assert machine.conv1_output_bytes(2, value_bytes=2) == sizes["conv1"] // 2
    assert machine.total_memory() > 2**30


@pytest.mark.parametrize("batch_size, value_bytes, memory, held", [
    (100_000, 4, 24 * 2**30, None), (200_000, 2, 24 * 2**30, None),
    (200_000, 4, 24 * 2**30, ("29.5 GB", "this machine's 25.8 GB of memory")),
    (400_000, 2, 24 * 2**30, ("29.5 GB", "this machine's 25.8 GB of memory")),
    (10**9, 4, None, None),  # the machine's memory not known: only past 64 bits
    (99999999999999999999, 4, None, ("1.47e+16 GB", "the memory a 64-bit machine can address")),
])
def test_a_batch_whose_conv1_output_passes_memory_is_refused_naming_both_sizes(
        monkeypatch, batch_size, value_bytes, memory, held):
    monkeypatch.setattr(machine, "total_memory", lambda: None)
    check = lambda: machine.refuse_batch_beyond_memory(batch_size, value_bytes, memory)  # noqa
    if held is None:
        check()
        return
    with pytest.raises(Cifar10Error) as raised:
        check()
    assert str(raised.value) == (
        f"--batch_size={batch_size} cannot fit: conv1's output alone would take at least "
        f"{held[0]} a replica, more than {held[1]}; give a smaller --batch_size (the "
        f"tutorial's is 128)")


@pytest.mark.parametrize("value", ["2147483648", "1" + "0" * 40])
@pytest.mark.parametrize("program, args", [
    ("cifar10-train", ["--synthetic_data", "--data_dir={d}/data", "--train_dir={d}/train"]),
    ("cifar10-eval", ["--synthetic_data", "--data_dir={d}/data", "--run_once",
                      "--checkpoint_dir={d}/train", "--eval_dir={d}/eval"]),
    ("cifar10-predict", ["--checkpoint_dir={d}/train", "{d}/cat.png"]),
])
def test_every_program_that_takes_a_batch_size_refuses_one_past_memory_in_one_line(
        tmp_path, program, args, value):
    (tmp_path / "cat.png").write_bytes(b"")
    result = call(program, f"--batch_size={value}", *[arg.format(d=tmp_path) for arg in args])
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{program}: error: --batch_size={value} cannot fit: conv1's "
                           f"output alone would take at least ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cat.png"]  # nothing made
