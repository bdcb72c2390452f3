"""runs/records.py: what a run records about how it was made (flags.txt, which replays
its latest start exactly, and environment.jsonl), notices of changed settings on
resume, and --deterministic runs that repeat bit for bit across processes."""

import datetime
import errno
import json
import os
import re
import sys

import pytest
import tensorflow as tf
from absl import flags
from absl import logging

import cli
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import train_main
from cifar10.core.errors import Cifar10Error
from cifar10.data import getdata, synthetic
from cifar10.runs import records
from conftest import TRAIN_LINE


def train_args(tmp_path, *extra):
    return (f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
            "--synthetic_data", "--synthetic_records=50", "--batch_size=16", *extra)


def environment_records(directory):
    with open(os.path.join(directory, records.ENVIRONMENT_FILE)) as f:
        return [json.loads(line) for line in f]


def parsed(argv):
    """cifar10-train's flags parsed from ``argv``: ({name: value}, the FlagValues)."""
    values = flags.FlagValues()
    train_main.define_flags(values)
    values(["cifar10-train", *argv])
    return ({flag.name: flag.value for flag in values.get_flags_for_module("cifar10.cli.flags")},
            values)


def test_flags_txt_replays_the_latest_start_exactly_from_anywhere(tmp_path, monkeypatch):
    """A flag an earlier start set and the latest left unset stays unset (so does one
    whose unset value means something else: --num_gpus); relative paths, spaces and
    equals signs replay to the same run from another folder, where it resumes."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base = ("--train_dir=r 1=x", "--data_dir= d a=b\u2028c", "--synthetic_data",
            "--synthetic_records=50", "--batch_size=16")
    record_file = tmp_path / "a" / "r 1=x" / records.FLAGS_FILE
    for extra in (("--seed=3", "--max_steps=1", "--use_bf16", "--fresh_start"),
                  ("--max_steps=2", "--max_epochs=100")):
        monkeypatch.chdir(tmp_path / "a")
        result = cli.call("cifar10-train", *base, *extra)
        assert result.returncode == 0, result.stderr
    text = record_file.read_text()
    headers = [line for line in text.splitlines() if line.startswith("# cifar10-")]
    assert len(headers) == 2 and re.fullmatch(
        r"# cifar10-train, started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 on \S+ at step 1 "
        r"\(flags to \"# end of this start\"\)", headers[1])
    assert text.endswith("\n# end of this start\n")
    assert "\n# --seed=3\n" in text and "\n--seed=3\n" not in text  # kept, as history
    assert "\n# --num_gpus=1\n" in text.split("at step 1")[1]  # unset: on record only
    expected = {**parsed(base + ("--max_steps=2", "--max_epochs=100"))[0],
                "train_dir": str(tmp_path / "a" / "r 1=x"),
                "data_dir": str(tmp_path / "a" / " d a=b\u2028c")}
    monkeypatch.chdir(tmp_path / "b")
    replayed, values = parsed([f"--flagfile={record_file}"])
    assert replayed == expected and not values["num_gpus"].present
    assert records.recorded_flags(str(record_file.parent))["data_dir"] == expected["data_dir"]
    again = cli.call("cifar10-train", f"--flagfile={record_file}", "--max_steps=3")
    assert again.returncode == 0, again.stderr
    assert f"Resuming from {record_file.parent / 'model.ckpt-2'} at step 2." in again.stdout
    assert not (tmp_path / "b" / "r 1=x").exists() and "notice" not in again.stderr


def test_every_flag_whose_presence_the_programs_test_is_recorded_as_given_or_not():
    """A flag a program reads with Flag.present is in UNSET_IS_NOT_DEFAULT, so that
    flags.txt replays it unset where the start left it unset; the exceptions say why."""
    exceptions = {
        "verbosity": "absl's own: not recorded in flags.txt",
        "data_dir": "cifar10-train's refusal to download for a run of another --data_dir: a "
                    "replay gives the data the start used",
        "test_fraction": "cifar10-prepare's warning: cifar10-prepare keeps no flags.txt",
    }
    cli_dir = os.path.dirname(cifar10_flags.__file__)
    tested = set()
    for name in os.listdir(cli_dir):
        if name.endswith(".py"):
            with open(os.path.join(cli_dir, name), encoding="utf-8") as f:
                tested |= set(re.findall(r"\[[\"'](\w+)[\"']\]\.present", f.read()))
    assert {"num_gpus", "num_examples", "verbosity", "data_dir"} <= tested
    assert tested - set(exceptions) <= set(cifar10_flags.UNSET_IS_NOT_DEFAULT)


def test_a_flags_txt_of_the_former_flag_name_still_replays(tmp_path):
    old = tmp_path / "flags.txt"
    old.write_text("# cifar10-train, started 2026-11-25T18:00:00+00:00 on host at step 0\n"
                   "--batch_size=16\n--lrn_kernel=tensorflow\n")
    replayed, values = parsed([f"--flagfile={old}"])
    assert replayed["kernels"] == "tensorflow"
    text = cifar10_flags.flagfile_text(values)  # written by its name now
    assert "--kernels=tensorflow\n" in text and "lrn_kernel" not in text


@pytest.mark.parametrize("program, value, problem", [
    ("cifar10-train", "/ d a=b ", "ends with white space, which would be dropped"),
    ("cifar10-eval", "/d\n--max_steps=9", "holds a line break, which would end its line"),
])
def test_a_value_flags_txt_cannot_replay_is_one_line_and_nothing_is_written(
        tmp_path, program, value, problem):
    value = f"{tmp_path}{value}"
    result = cli.call(program, f"--data_dir={value}", "--synthetic_data",
                      f"--train_dir={tmp_path / 'train'}" if program == "cifar10-train" else
                      f"--eval_dir={tmp_path / 'eval'}")
    cli.assert_refused(result, f"{program}: error: --data_dir={value!r} {problem} in the run's "
                               f"flags.txt (one flag per line, replayed with --flagfile): "
                               f"choose a value without it (see {program} --help)")
    assert os.listdir(tmp_path) == []


def test_each_start_records_its_environment_and_a_changed_setting_is_one_notice(tmp_path):
    first = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=1", "--num_gpus=2"))
    assert first.returncode == 0, first.stderr
    (record,) = environment_records(tmp_path / "train")
    assert record["program"] == "cifar10-train"
    assert record["tensorflow"] == tf.__version__
    assert record["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["cifar10"] and record["host"] and record["platform"]
    assert record["command"] == ["cifar10-train", *train_args(tmp_path, "--max_steps=1",
                                                              "--num_gpus=2")]
    assert datetime.datetime.fromisoformat(record["start_time"]).tzinfo is not None
    assert [d["name"].rsplit("/", 1)[-1] for d in record["devices"]] == ["device:CPU:0",
                                                                         "device:CPU:1"]
    assert (record["num_replicas"], record["num_workers"], record["start_step"]) == (2, 1, 0)
    assert record["settings"] == {
        "batch_size": 16, "global_batch": 32, "num_replicas": 2, "num_workers": 1,
        "precision": "float32",
        "data_dir": str(tmp_path / "data" / "synthetic" / "cifar-10-batches-bin"),
        "num_classes": 10, "examples_per_epoch": 250, "learning_rate": 0.1,
        "learning_rate_decay_factor": 0.1, "num_epochs_per_decay": 350.0,
        "moving_average_decay": 0.9999, "weight_decay": 0.004, "seed": 0,
        "deterministic": False, "xla": False, "max_steps": 1, "max_epochs": None}

    resumed = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=2", "--num_gpus=2"),
                       "--batch_size=8", "--learning_rate=0.05")  # the later value wins
    assert resumed.returncode == 0, resumed.stderr
    environment = tmp_path / "train" / records.ENVIRONMENT_FILE
    assert [line for line in resumed.stderr.splitlines() if ": notice: " in line] == [
        f"cifar10-train: notice: batch_size (the batch size per replica) changed from 16 to 8, "
        f"the global batch from 32 to 16; the run goes on from step 1 with 8 (recorded in "
        f"{environment})",
        f"cifar10-train: notice: learning_rate (the initial learning rate) changed from 0.1 "
        f"to 0.05; the run goes on from step 1 with 0.05 (recorded in {environment})"]
    before, after = environment_records(tmp_path / "train")
    assert (before["changes"], after["start_step"]) == ([], 1)
    assert after["changes"] == [{"setting": "batch_size", "from": 16, "to": 8},
                                {"setting": "learning_rate", "from": 0.1, "to": 0.05}]

    record_file = tmp_path / "train" / records.FLAGS_FILE
    record_file.unlink()
    record_file.mkdir()  # the start cannot be recorded: no notice that it was
    refused = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=3"))
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"cifar10-train: error: cannot record the run's start in {record_file} (Is a "
        f"directory); a folder of that name is not the run's record: move it away"]


@pytest.mark.parametrize("damaged", ['{"settings": 5}', "5", "{not json",
                                     '{"program": "cifar10-train"}'])
def test_a_damaged_last_record_is_one_warning_and_no_comparison(tmp_path, damaged):
    path = tmp_path / records.ENVIRONMENT_FILE
    path.write_text('{"settings": {"seed": 1}}\n' + damaged + "\n")
    with pytest.MonkeyPatch.context() as patch:
        warnings = []
        patch.setattr(logging, "warning", lambda *args: warnings.append(args[0] % args[1:]))
        assert records.last_settings(str(tmp_path)) is None
    assert warnings == [f"{path}: its last record is damaged (no settings object): this "
                        f"start's settings are not compared with the last start's; its own "
                        f"record is appended as usual."]


def test_changes_compare_what_both_starts_recorded_and_name_the_global_batch(tmp_path):
    before = {"batch_size": 16, "num_replicas": 1, "global_batch": 16,
              "examples_per_epoch": 500, "seed": 0}
    now = {"batch_size": 16, "num_replicas": 2, "global_batch": 32, "examples_per_epoch": 600,
           "seed": 0, "precision": "bfloat16"}
    changed = records.changes(before, now)
    assert [c["setting"] for c in changed] == ["num_replicas", "examples_per_epoch"]
    assert records.changes(None, now) == []
    environment = tmp_path / records.ENVIRONMENT_FILE
    assert records.describe_changes(changed, 7, str(tmp_path), before, now) == [
        f"num_replicas (the number of replicas) changed from 1 to 2, the global batch from 16 "
        f"to 32; the run goes on from step 7 with 2 (recorded in {environment})",
        f"examples_per_epoch (the examples per epoch, which the learning-rate schedule "
        f"counts) changed from 500 to 600; the run goes on from step 7 with 600 (recorded in "
        f"{environment})"]
    # Replicas and workers changed at once: the global batch is named once, with the last.
    before.update(num_workers=1)
    now.update(num_workers=2, global_batch=64)
    lines = records.describe_changes(records.changes(before, now), 7, str(tmp_path),
                                     before, now)
    assert [", the global batch from 16 to 64" in line for line in lines] == [
        False, True, False]
    change = {"setting": "deterministic", "from": False, "to": True}
    assert records.describe_changes([change], 7, "/r") == [
        "deterministic (deterministic mode) changed from false to true; the run goes on from "
        "step 7 with true (recorded in /r/environment.jsonl)"]


def test_a_record_that_cannot_be_written_leaves_the_old_file_and_a_users_tmp_files(
        tmp_path, monkeypatch):
    (tmp_path / "flags.txt.tmp").mkdir()  # a user's: neither written nor removed
    (tmp_path / "environment.jsonl.tmp").write_text("mine")
    record = records.environment("cifar10-train", ["x"], [], "2.x")
    records.record_start(str(tmp_path), record, "--seed=1\n")

    def full(source, target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", full)
        with pytest.raises(Cifar10Error) as err:
            records.record_start(str(tmp_path), record, "--seed=2\n")
    assert str(err.value) == (f"cannot record the run's start in {tmp_path}/flags.txt (No "
                              f"space left on device); free some disk space and run the same "
                              f"command again")
    assert (tmp_path / "flags.txt").read_text().endswith("--seed=1\n# end of this start\n")
    assert records.last_record(str(tmp_path)) == record
    assert sorted(os.listdir(tmp_path)) == ["environment.jsonl", "environment.jsonl.tmp",
                                            "flags.txt", "flags.txt.tmp"]
    assert (tmp_path / "environment.jsonl.tmp").read_text() == "mine"


def losses(stdout):
    """(step, loss) of each progress line: the log without its times and speeds."""
    return [(int(m[1]), line.split("loss = ")[1].split(" ")[0])
            for line in stdout.splitlines() if (m := TRAIN_LINE.match(line))]


def test_two_deterministic_processes_write_identical_checkpoints_and_losses(tmp_path):
    """Two processes of 2 replicas each, at once: the same losses at every step and
    the same weights bit for bit (one process's runs are test_loop's)."""
    # The generated data written once, before two processes would both write it.
    synthetic.write_dataset(str(tmp_path / "data" / getdata.SYNTHETIC_SUBDIR),
                            records_per_file=100)
    started = [cli.start("cifar10-train", f"--data_dir={tmp_path / 'data'}", "--synthetic_data",
                         "--synthetic_records=100", "--batch_size=16", "--log_frequency=1",
                         "--deterministic", "--seed=5", "--num_gpus=2", "--max_steps=3",
                         f"--train_dir={tmp_path / name}") for name in ("a", "b")]
    outputs = []
    for process in started:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        outputs.append(out)
    assert [step for step, _ in losses(outputs[0])] == [1, 2, 3]
    assert losses(outputs[0]) == losses(outputs[1])
    a, b = (tf.train.load_checkpoint(str(tmp_path / name / "model.ckpt-3")) for name in "ab")
    keys = a.get_variable_to_shape_map()
    assert len(keys) > 20 and keys == b.get_variable_to_shape_map()
    as_bytes = lambda v: v if isinstance(v, bytes) else v.tobytes()  # noqa: E731
    assert [k for k in keys if as_bytes(a.get_tensor(k)) != as_bytes(b.get_tensor(k))] == []
