"""cifar10-train refuses to go on with a run on another kind of data than it was
trained on (cifar10.cli.kind_of_data)."""

from __future__ import annotations

import json
import os
import re

import pytest
from absl import flags

import cli
from cifar10.cli import kind_of_data
from cifar10.cli import launch_args
from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import getdata
from cifar10.data import synthetic

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


def with_default_data_dir(monkeypatch, data_dir):
    """cifar10-train's flags, with ``data_dir`` as --data_dir's default (not the shared
    /tmp/cifar10_data)."""
    module = cli.ENTRY_POINTS["cifar10-train"]
    define = module.define_flags

    def define_flags(values):
        define(values)
        values.set_default("data_dir", str(data_dir))

    monkeypatch.setattr(module, "define_flags", define_flags)


def test_a_resume_without_the_runs_data_dir_does_not_download_another_data_set(
        tmp_path, monkeypatch):
    # The run was trained on a folder of its own; the start leaves --data_dir unset,
    # whose default holds no data: it would download CIFAR-10 there and go on with it.
    tarball = tmp_path / "cifar-10-binary.tar.gz"
    tarball.write_bytes(synthetic.tarball_bytes(records_per_file=10))
    mine, default = tmp_path / "data" / "mine", tmp_path / "default_data"
    train_dir = recorded_run(tmp_path / "train", f"--data_dir={mine}\n--nosynthetic_data\n")
    with_default_data_dir(monkeypatch, default)
    result = cli.call("cifar10-train", f"--train_dir={train_dir}", "--max_steps=4",
                      f"--data_url=file://{tarball}")
    assert result.returncode == 1
    flags_txt = train_dir / "flags.txt"
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: the run in --train_dir={train_dir} was trained on "
        f"--data_dir={mine} ({flags_txt}), and this start, not given --data_dir, would "
        f"download CIFAR-10 into {default} instead: pass --data_dir={mine} (or "
        f"--flagfile={flags_txt}) to go on with the run's data, or --data_dir={default} to "
        f"download CIFAR-10 there"]
    assert not default.exists() and not mine.exists()
    assert flags_txt.read_text() == START + f"--data_dir={mine}\n--nosynthetic_data\n"


def test_only_a_download_for_an_unasked_data_dir_of_a_run_with_checkpoints_is_refused(tmp_path):
    mine = tmp_path / "mine"
    recorded_run(tmp_path / "train", f"--data_dir={mine}\n")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "flags.txt").write_text(START + f"--data_dir={mine}\n")

    def refusal(run_dir, *argv):
        values = flags.FlagValues()
        cli.ENTRY_POINTS["cifar10-train"].define_flags(values)
        values.set_default("data_dir", str(tmp_path / "default_data"))
        values(["cifar10-train", *argv])
        return kind_of_data.download_refusal(values, str(tmp_path / run_dir))

    assert refusal("train").startswith(f"the run in --train_dir={tmp_path / 'train'} was "
                                       f"trained on --data_dir={mine} (")
    assert refusal("train", f"--data_dir={tmp_path / 'other'}") == ""  # asked for
    assert refusal("train", f"--data_dir={mine}") == ""  # the run's own
    assert refusal("new") == ""  # no checkpoint yet: a new run
    assert refusal("none") == ""  # no run
    # Data that is there is taken (a changed --data_dir is then a notice of the run's
    # records); the refusal stands in for a download only, and leaves no folder.
    batches = synthetic.write_dataset(str(tmp_path / "there"), records_per_file=10)
    assert getdata.prepare(str(tmp_path / "there"), no_download="no", print_fn=lambda line: None
                           )[0] == batches
    with pytest.raises(DataError, match="^no$"):
        getdata.prepare(str(tmp_path / "missing"), no_download="no")
    assert not (tmp_path / "missing").exists()


def test_the_launcher_refuses_that_download_for_its_workers_too(tmp_path):
    mine, default = tmp_path / "mine", tmp_path / "default_data"
    train_dir = recorded_run(tmp_path / "train", f"--data_dir={mine}\n")
    values = flags.FlagValues()
    cli.ENTRY_POINTS["cifar10-train"].define_flags(values)
    values.set_default("data_dir", str(default))
    values(["cifar10-train", f"--train_dir={train_dir}", f"--data_url={OFFLINE}"])
    with pytest.raises(DataError, match=re.escape(f"the run in --train_dir={train_dir} was "
                                                  f"trained on --data_dir={mine} (")):
        launch_args.fetch_data(values)
    assert not default.exists()


def unrecorded_run(train_dir, data_folder, flags_txt: str | None):
    """A run in ``train_dir`` whose flags.txt is ``flags_txt`` (None: no such file) and
    whose environment.jsonl recorded it read ``data_folder``, with a checkpoint."""
    train_dir.mkdir()
    if flags_txt is not None:
        (train_dir / "flags.txt").write_text(flags_txt)
    settings = {"batch_size": 16, "data_dir": str(data_folder), "num_classes": 10}
    (train_dir / "environment.jsonl").write_text(
        json.dumps({"program": "cifar10-train", "settings": settings}) + "\n")
    for name in ("model.ckpt-5.index", "model.ckpt-5.data-00000-of-00001"):
        (train_dir / name).write_bytes(b"")
    return train_dir


@pytest.mark.parametrize("flags_txt", [None, "", START, START + "--batch_size=16\n"])
def test_a_run_on_generated_data_whose_flags_txt_tells_nothing_is_refused_real_data(
        tmp_path, flags_txt):
    # flags.txt missing, empty, or without the data flags: environment.jsonl's data
    # folder (--synthetic_data's, with the generated data's marker) tells the kind.
    generated = tmp_path / "sd" / "synthetic"
    synthetic.write_dataset(str(generated), records_per_file=10)
    real = tmp_path / "d10"
    synthetic.write_dataset(str(real), records_per_file=10)
    os.remove(real / "cifar-10-batches-bin" / synthetic.SYNTHETIC_MARKER)
    train_dir = unrecorded_run(tmp_path / "train", generated / "cifar-10-batches-bin",
                               flags_txt)
    before = sorted(os.listdir(train_dir))
    result = cli.call("cifar10-train", f"--train_dir={train_dir}", f"--data_dir={real}",
                      "--max_steps=6", "--batch_size=16")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: --train_dir={train_dir} holds a run trained on generated "
        f"data (--synthetic_data) in {generated / 'cifar-10-batches-bin'} (its "
        f"environment.jsonl; its flags.txt is missing, empty or holds no data flags), and "
        f"this start would go on with it on CIFAR-10 or data of its format (no "
        f"--synthetic_data or --dataset): pass --synthetic_data --data_dir={tmp_path / 'sd'} "
        f"to go on with the run, or --fresh_start (or another --train_dir) for a new run"]
    assert sorted(os.listdir(train_dir)) == before


def test_a_run_on_real_data_whose_flags_txt_is_empty_is_refused_generated_data(tmp_path):
    real = tmp_path / "d10" / "cifar-10-batches-bin"
    train_dir = unrecorded_run(tmp_path / "train", real, "")
    result = cli.call("cifar10-train", f"--train_dir={train_dir}", "--synthetic_data",
                      f"--data_dir={tmp_path / 'sd'}", "--max_steps=6")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: --train_dir={train_dir} holds a run trained on CIFAR-10 or "
        f"data of its format (no --synthetic_data or --dataset) in {real} (its "
        f"environment.jsonl; its flags.txt is missing, empty or holds no data flags), and "
        f"this start would go on with it on generated data (--synthetic_data): pass "
        f"--data_dir={tmp_path / 'd10'} (no --synthetic_data or --dataset) to go on with the "
        f"run, or --fresh_start (or another --train_dir) for a new run"]
    assert not (tmp_path / "sd").exists()


def test_the_data_folder_recorded_tells_the_kind_and_the_same_kind_goes_on(tmp_path):
    def refusal(folder, *argv):
        train_dir = tmp_path / f"train{len(os.listdir(tmp_path))}"
        unrecorded_run(train_dir, folder, None)
        values = flags.FlagValues()
        cli.ENTRY_POINTS["cifar10-train"].define_flags(values)
        values(["cifar10-train", *argv])
        try:
            kind_of_data.refuse_other_kind_of_data(values, str(train_dir))
        except Cifar10Error as e:
            return str(e).split(" and this start")[0].split("holds a run trained on ")[1]
        return ""

    made = tmp_path / "data" / "cifar-100-coarse-batches-bin"
    assert refusal(made, "--dataset=cifar100").startswith("CIFAR-100's coarse labels")
    assert refusal(made, "--dataset=cifar100", "--label=coarse") == ""
    # Generated data given as --data_dir itself (its marker tells) is generated data
    # again; the same folder is the same kind without --synthetic_data.
    given = tmp_path / "given"
    synthetic.write_dataset(str(given), records_per_file=10)
    assert refusal(given / "cifar-10-batches-bin", f"--data_dir={given}") == ""
    assert refusal(given / "cifar-10-batches-bin", f"--data_dir={tmp_path / 'none'}"
                   ).startswith("generated data")
    assert refusal(tmp_path / "x" / "synthetic" / "cifar-10-batches-bin", "--synthetic_data",
                   f"--data_dir={tmp_path / 'other'}") == ""  # a data_dir change: a notice


def test_a_run_with_checkpoints_and_no_record_is_resumed_with_a_warning(tmp_path):
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    (train_dir / "model.ckpt-5.index").write_bytes(b"")
    (train_dir / "flags.txt").write_text("")
    # (Then the download from nothing fails: the start ends before TensorFlow loads.)
    result = cli.call("cifar10-train", f"--train_dir={train_dir}",
                      f"--data_dir={tmp_path / 'd10'}", f"--data_url={OFFLINE}",
                      "--max_steps=6")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"cifar10-train: warning: --train_dir={train_dir} holds checkpoints, but neither its "
        f"flags.txt nor its environment.jsonl records the data the run was trained on "
        f"(missing or empty): this start's data is not checked against the run's")
