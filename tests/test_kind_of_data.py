"""cifar10-train refuses to go on with a run on another kind of data than it was
trained on (cifar10.cli.kind_of_data)."""

from __future__ import annotations

import os

import pytest
from absl import flags

import cli
from cifar10.cli import kind_of_data
from cifar10.core.errors import Cifar10Error

OFFLINE = "http://127.0.0.1:9/cifar-10-binary.tar.gz"  # nothing listens on port 9
START = "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n"


def recorded_run(train_dir, flag_lines: str):
    """A run in ``train_dir`` as far as the refusal reads it: the trainer's start
    recorded with ``flag_lines``, and the files of a checkpoint."""
    train_dir.mkdir()
    (train_dir / "flags.txt").write_text(START + flag_lines)
    for name in ("model.ckpt-2.index", "model.ckpt-2.data-00000-of-00001"):
        (train_dir / name).write_bytes(b"")
    return train_dir


@pytest.mark.parametrize("recorded, flags_now, error", [
    ("--synthetic_data\n--dataset=cifar10\n", [],
     "holds a run trained on generated data (--synthetic_data), and this start would go on "
     "with it on CIFAR-10 or data of its format (no --synthetic_data or --dataset): pass "
     "--synthetic_data to go on with the run, or --fresh_start (or another --train_dir) for a "
     "new run"),
    ("--nosynthetic_data\n--dataset=cifar10\n", ["--synthetic_data"],
     "holds a run trained on CIFAR-10 or data of its format (no --synthetic_data or "
     "--dataset), and this start would go on with it on generated data (--synthetic_data): "
     "pass no --synthetic_data or --dataset to go on with the run, or --fresh_start (or "
     "another --train_dir) for a new run"),
])
def test_the_trainer_refuses_to_go_on_with_a_run_on_another_kind_of_data(tmp_path, recorded,
                                                                          flags_now, error):
    train_dir = recorded_run(tmp_path / "train", recorded)
    before = sorted(os.listdir(train_dir))
    result = cli.call("cifar10-train", f"--data_dir={tmp_path / 'data'}",
                      f"--train_dir={train_dir}", f"--data_url={OFFLINE}", "--max_steps=4",
                      "--batch_size=8", *flags_now)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: --train_dir={train_dir} {error}"]
    assert sorted(os.listdir(train_dir)) == before


def test_the_kinds_of_cifar100_are_its_label_and_a_run_without_checkpoints_is_not_one(tmp_path):
    values = flags.FlagValues()
    cli.ENTRY_POINTS["cifar10-train"].define_flags(values)
    values(["cifar10-train", "--dataset=cifar100"])  # fine labels
    (tmp_path / "flags.txt").write_text(START + "--dataset=cifar100\n--label=coarse\n")
    kind_of_data.refuse_other_kind_of_data(values, str(tmp_path))  # no checkpoint: a new run
    (tmp_path / "model.ckpt-10.index").write_bytes(b"")
    with pytest.raises(Cifar10Error, match=r"holds a run trained on CIFAR-100's coarse labels "
                                           r"\(--dataset=cifar100 --label=coarse\), and this "
                                           r"start would go on with it on CIFAR-100's fine "
                                           r"labels \(--dataset=cifar100 --label=fine\): pass "
                                           r"--dataset=cifar100 --label=coarse to go on"):
        kind_of_data.refuse_other_kind_of_data(values, str(tmp_path))
    values["label"].value = "coarse"
    kind_of_data.refuse_other_kind_of_data(values, str(tmp_path))
