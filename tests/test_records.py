"""What a run records about how it was made: flags.txt, environment.jsonl, notices of
changed settings on resume, and --deterministic runs that repeat bit for bit."""

import datetime
import errno
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import cli
from cifar10.runs import records as runrecord
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import train_main
from cifar10.core.errors import Cifar10Error
from cifar10.data import getdata, synthetic
from conftest import TRAIN_LINE


def train_args(tmp_path, *extra, train_dir="train"):
    return (f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / train_dir}",
            "--synthetic_data", "--synthetic_records=50", "--batch_size=16", *extra)


def records(directory):
    with open(os.path.join(directory, runrecord.ENVIRONMENT_FILE)) as f:
        return [json.loads(line) for line in f]


def parsed(argv):
    """The cifar10 flags of cifar10-train parsed from ``argv``, as {name: value}."""
    values = flags.FlagValues()
    train_main.define_flags(values)
    values(["cifar10-train", *argv])
    return {flag.name: flag.value
            for flag in values.get_flags_for_module("cifar10.cli.flags")}


def test_flags_txt_replays_the_run_and_keeps_every_start(tmp_path):
    args = train_args(tmp_path, "--max_steps=2", "--seed=3", "--log_frequency=1",
                      "--checkpoint_steps=2", "--keep_checkpoints=4", "--use_bf16",
                      "--fresh_start")
    first = cli.call("cifar10-train", *args)
    assert first.returncode == 0, first.stderr
    record_file = tmp_path / "train" / runrecord.FLAGS_FILE
    text = record_file.read_text()
    assert re.fullmatch(r"# cifar10-train, started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 on "
                        r"\S+ at step 0 \(flags to \"# end of this start\"\)",
                        text.splitlines()[0])
    assert text.endswith("\n--slurm_port_base=24000\n# end of this start\n")
    assert "--batch_size=16\n" in text and "--use_bf16\n" in text and "--seed=3\n" in text
    # The same flags, except that a replay never deletes the run it replays.
    expected = {**parsed(args), "fresh_start": False}
    assert parsed([f"--flagfile={record_file}"]) == expected

    # A replay with one flag changed resumes the run; the file keeps both starts and
    # a replay of it gives the latest start's flags.
    again = cli.call("cifar10-train", f"--flagfile={record_file}", "--max_steps=3")
    assert again.returncode == 0, again.stderr
    assert f"Resuming from {tmp_path / 'train' / 'model.ckpt-2'} at step 2." in again.stdout
    text = record_file.read_text()
    headers = [line for line in text.splitlines() if line.startswith("# cifar10-")]
    assert len(headers) == 2 and headers[1].endswith(' at step 2 (flags to "# end of this start")')
    assert parsed([f"--flagfile={record_file}"]) == {**expected, "max_steps": 3}
    assert "notice" not in again.stderr


def test_a_replay_leaves_unset_the_flags_whose_unset_value_means_something_else(tmp_path):
    # --num_gpus left unset trains on the CPU without a warning where there is no GPU;
    # given (--num_gpus=1), it warns. A replay does as the start did.
    first = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=1"))
    assert (first.returncode, first.stderr) == (0, "")
    record_file = tmp_path / "train" / runrecord.FLAGS_FILE
    assert "\n# --num_gpus=1\n" in record_file.read_text()
    assert runrecord.recorded_flags(str(tmp_path / "train"))["num_gpus"] == "1"  # on record
    replayed = cli.call("cifar10-train", f"--flagfile={record_file}", "--max_steps=2")
    assert (replayed.returncode, replayed.stderr) == (0, "")
    values = flags.FlagValues()
    train_main.define_flags(values)
    values(["cifar10-train", f"--flagfile={record_file}"])
    assert not values["num_gpus"].present
    # Given, it is written as given, and a replay gives it.
    given = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=3", "--num_gpus=1"))
    assert given.returncode == 0, given.stderr
    assert record_file.read_text().endswith("\n--num_gpus=1\n--nolog_device_placement\n"
                                          "--strategy=auto\n--worker_timeout_secs=300.0\n"
                                          "--slurm_port_base=24000\n# end of this start\n")
    values(["cifar10-train", f"--flagfile={record_file}"])
    assert values["num_gpus"].present


def test_every_flag_whose_presence_the_programs_test_is_recorded_as_given_or_not():
    # A flag a program reads with Flag.present is in UNSET_IS_NOT_DEFAULT, so that
    # flags.txt replays it unset where the start left it unset; the exceptions say why.
    # (The evaluator's following of the run's data flags, follow.py, tests them by a
    # name it holds: an evaluation records the values it took, and its replay scores
    # the same data.)
    exceptions = {
        "verbosity": "absl's own: not recorded in flags.txt",
        "data_dir": "cifar10-train's refusal to download for a run of another --data_dir: a "
                    "replay gives the data the start used",
        "test_fraction": "cifar10-prepare's warning that split folders keep their own test "
                         "set: cifar10-prepare keeps no flags.txt",
    }
    cli_dir = os.path.join(os.path.dirname(cifar10_flags.__file__))
    tested = set()
    for name in os.listdir(cli_dir):
        if name.endswith(".py"):
            with open(os.path.join(cli_dir, name), encoding="utf-8") as f:
                tested |= set(re.findall(r"\[[\"'](\w+)[\"']\]\.present", f.read()))
    assert {"num_gpus", "num_examples", "verbosity", "data_dir"} <= tested
    assert tested - set(exceptions) <= set(cifar10_flags.UNSET_IS_NOT_DEFAULT)


def test_a_flags_txt_of_the_former_flag_name_still_replays(tmp_path):
    # --kernels was --lrn_kernel: a run recorded then replays with its choice, and
    # flags.txt writes the flag by its name now.
    old = tmp_path / "flags.txt"
    old.write_text("# cifar10-train, started 2026-11-25T18:00:00+00:00 on host at step 0\n"
                   "--batch_size=16\n--lrn_kernel=tensorflow\n")
    assert parsed([f"--flagfile={old}"])["kernels"] == "tensorflow"
    values = flags.FlagValues()
    train_main.define_flags(values)
    values(["cifar10-train", f"--flagfile={old}"])
    text = cifar10_flags.flagfile_text(values)
    assert "--kernels=tensorflow\n" in text and "lrn_kernel" not in text


def test_flags_txt_replays_each_latest_start_exactly_from_another_directory(
        tmp_path, monkeypatch):
    """A flag an earlier start set and the latest left unset stays unset; relative paths
    replay to the same run from anywhere."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    starts = [("--seed=3", "--max_steps=1", "--log_frequency=1"), ("--max_steps=2",)]
    base = ("--train_dir=r/a1", "--data_dir=data", "--synthetic_data",
            "--synthetic_records=50", "--batch_size=16")
    record_file = tmp_path / "a" / "r" / "a1" / runrecord.FLAGS_FILE
    for extra in starts:
        monkeypatch.chdir(tmp_path / "a")
        result = cli.call("cifar10-train", *base, *extra)
        assert result.returncode == 0, result.stderr
        expected = {**parsed([*base, *extra]), "fresh_start": False,
                    "train_dir": str(tmp_path / "a" / "r" / "a1"),
                    "data_dir": str(tmp_path / "a" / "data")}
        monkeypatch.chdir(tmp_path / "b")
        assert parsed([f"--flagfile={record_file}"]) == expected
    text = record_file.read_text()
    assert "# --seed=3\n" in text and "\n--seed=3\n" not in text  # kept, as history
    assert runrecord.recorded_flags(str(record_file.parent))["max_steps"] == "2"
    # Replayed from elsewhere, it resumes the same run (not a new one beside it).
    again = cli.call("cifar10-train", f"--flagfile={record_file}", "--max_steps=3")
    assert again.returncode == 0, again.stderr
    assert "Resuming from" in again.stdout and not (tmp_path / "b" / "r").exists()


@pytest.mark.parametrize("program, value, problem", [
    ("cifar10-train", "/ d a=b ", "ends with white space, which would be dropped"),
    ("cifar10-eval", "/d\n--max_steps=9", "holds a line break, which would end its line"),
])
def test_a_value_flags_txt_cannot_replay_is_one_line_and_nothing_is_written(
        tmp_path, program, value, problem):
    """absl reads a flag file line by line and strips each line: a replay gave another
    --data_dir (its last space dropped), or set a flag from inside a value."""
    value = f"{tmp_path}{value}"
    result = cli.run(program, f"--data_dir={value}", "--synthetic_data",
                     f"--train_dir={tmp_path / 'train'}" if program == "cifar10-train" else
                     f"--eval_dir={tmp_path / 'eval'}", timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{program}: error: --data_dir={value!r} {problem} in the run's flags.txt (one flag "
        f"per line, replayed with --flagfile): choose a value without it (see {program} "
        f"--help)"]
    assert os.listdir(tmp_path) == []


def test_values_with_spaces_inside_and_equals_signs_replay_as_they_were(tmp_path, monkeypatch):
    """Also for the evaluator, which reads the run's data flags from flags.txt as absl
    does: a line ends at a line feed only, not at U+2028 (str.splitlines split there)."""
    monkeypatch.chdir(tmp_path)
    data_dir = " d a=b\u2028c"
    args = (f"--data_dir={data_dir}", "--train_dir=r 1=x", "--synthetic_data",
            "--synthetic_records=50", "--batch_size=16", "--max_steps=1")
    result = cli.call("cifar10-train", *args)
    assert result.returncode == 0, result.stderr
    record_file = tmp_path / "r 1=x" / runrecord.FLAGS_FILE
    assert (tmp_path / data_dir).is_dir()
    assert parsed([f"--flagfile={record_file}"]) == {
        **parsed(args), "fresh_start": False, "train_dir": str(tmp_path / "r 1=x"),
        "data_dir": str(tmp_path / data_dir)}
    assert runrecord.recorded_flags(str(record_file.parent))["data_dir"] == str(
        tmp_path / data_dir)


def test_a_resume_with_another_batch_size_says_so_once_and_records_it(tmp_path):
    first = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=2"))
    assert first.returncode == 0, first.stderr
    resumed = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=4"),
                       "--batch_size=8")  # the later value wins
    assert resumed.returncode == 0, resumed.stderr
    environment = tmp_path / "train" / runrecord.ENVIRONMENT_FILE
    notices = [line for line in resumed.stderr.splitlines() if ": notice: " in line]
    assert notices == [
        f"cifar10-train: notice: batch_size (the batch size per replica) changed from 16 to 8, the global batch from 16 to 8; "
        f"the run goes on from step 2 with 8 (recorded in {environment})"]
    before, after = records(tmp_path / "train")
    assert (before["start_step"], before["changes"]) == (0, [])
    assert after["start_step"] == 2
    assert after["changes"] == [{"setting": "batch_size", "from": 16, "to": 8}]
    assert (before["settings"]["global_batch"], after["settings"]["global_batch"]) == (16, 8)


@pytest.mark.parametrize("damaged", ['{"settings": 5}', '{"settings": [1]}', "5", "{not json",
                                     '{"program": "cifar10-train"}'])
def test_a_damaged_last_record_is_one_warning_and_the_run_resumes(tmp_path, damaged):
    first = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=1"))
    assert first.returncode == 0, first.stderr
    environment = tmp_path / "train" / runrecord.ENVIRONMENT_FILE
    with open(environment, "a") as f:
        f.write(damaged + "\n")
    resumed = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=2"))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.splitlines() == [
        f"cifar10-train: warning: {environment}: its last record is damaged (no settings "
        f"object): this start's settings are not compared with the last start's; its own "
        f"record is appended as usual."]
    assert "Training complete at step 2" in resumed.stdout
    assert json.loads(environment.read_text().splitlines()[-1])["start_step"] == 1


def test_each_start_records_its_environment(tmp_path):
    result = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=1", "--num_gpus=2"))
    assert result.returncode == 0, result.stderr
    (record,) = records(tmp_path / "train")
    assert record["program"] == "cifar10-train"
    assert record["tensorflow"] == tf.__version__
    assert record["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["cifar10"] and record["host"] and record["platform"]
    assert record["command"] == ["cifar10-train", *train_args(tmp_path, "--max_steps=1",
                                                              "--num_gpus=2")]
    assert datetime.datetime.fromisoformat(record["start_time"]).tzinfo is not None
    assert [d["name"].rsplit("/", 1)[-1] for d in record["devices"]] == ["device:CPU:0",
                                                                         "device:CPU:1"]
    assert all(d["kind"].startswith("CPU") for d in record["devices"])
    assert (record["num_replicas"], record["num_workers"], record["start_step"]) == (2, 1, 0)
    assert record["settings"] == {
        "batch_size": 16, "global_batch": 32, "num_replicas": 2, "num_workers": 1,
        "precision": "float32",
        "data_dir": str(tmp_path / "data" / "synthetic" / "cifar-10-batches-bin"),
        "num_classes": 10, "examples_per_epoch": 250, "initial_learning_rate": 0.1,
        "seed": 0, "deterministic": False, "xla": False, "max_steps": 1}


def test_the_evaluator_records_its_flags_and_environment_per_start(tmp_path):
    trained = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=1"))
    assert trained.returncode == 0, trained.stderr
    args = (f"--checkpoint_dir={tmp_path / 'train'}", f"--eval_dir={tmp_path / 'eval'}",
            f"--data_dir={tmp_path / 'data'}", "--synthetic_data", "--synthetic_records=50",
            "--run_once", "--num_examples=20", "--misclassified_images=0")
    for _ in range(2):
        result = cli.call("cifar10-eval", *args)
        assert result.returncode == 0, result.stderr
    text = (tmp_path / "eval" / runrecord.FLAGS_FILE).read_text()
    assert [line.split(",")[0] for line in text.splitlines() if line.startswith("# cifar10-")] == [
        "# cifar10-eval"] * 2
    assert "--num_examples=20\n" in text and "--run_once\n" in text
    starts = records(tmp_path / "eval")
    assert [r["program"] for r in starts] == ["cifar10-eval"] * 2
    assert starts[0]["command"] == ["cifar10-eval", *args]


def test_changes_compare_only_what_both_starts_recorded():
    before = {"batch_size": 128, "num_replicas": 1, "seed": 0}
    now = {"batch_size": 128, "num_replicas": 4, "seed": 0, "precision": "bfloat16"}
    assert runrecord.changes(before, now) == [{"setting": "num_replicas", "from": 1, "to": 4}]
    assert runrecord.changes(None, now) == []
    change = {"setting": "deterministic", "from": False, "to": True}
    assert runrecord.describe_change(change, 7, "/r") == (
        "deterministic (deterministic mode) changed from false to true; the run goes on from "
        "step 7 with true (recorded in /r/environment.jsonl)")


def test_a_record_that_cannot_be_written_is_one_line_and_leaves_the_old_file(tmp_path,
                                                                             monkeypatch):
    record = runrecord.environment("cifar10-train", ["x"], [], "2.x")
    runrecord.record_start(str(tmp_path), record, "--seed=1\n")

    def full(source, target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", full)
        with pytest.raises(Cifar10Error) as err:
            runrecord.record_start(str(tmp_path), record, "--seed=2\n")
    assert str(err.value).startswith(f"cannot record the run's start in {tmp_path}/flags.txt (")
    assert "\n" not in str(err.value)
    assert (tmp_path / "flags.txt").read_text().endswith("--seed=1\n# end of this start\n")
    assert runrecord.last_record(str(tmp_path)) == record
    assert sorted(os.listdir(tmp_path)) == ["environment.jsonl", "flags.txt"]  # no temporary


def test_a_users_tmp_files_beside_the_records_are_neither_written_nor_removed(tmp_path):
    """The records' temporary names are their own: a user's flags.txt.tmp (a folder, even)
    is not in the way, and is left as it was."""
    (tmp_path / "flags.txt.tmp").mkdir()
    (tmp_path / "flags.txt.tmp" / "notes.txt").write_text("mine")
    (tmp_path / "environment.jsonl.tmp").write_text("mine")
    record = runrecord.environment("cifar10-train", ["x"], [], "2.x")
    for seed in (1, 2):
        runrecord.record_start(str(tmp_path), record, f"--seed={seed}\n")
    assert (tmp_path / "flags.txt").read_text().endswith("--seed=2\n# end of this start\n")
    assert sorted(os.listdir(tmp_path)) == ["environment.jsonl", "environment.jsonl.tmp",
                                            "flags.txt", "flags.txt.tmp"]
    assert (tmp_path / "environment.jsonl.tmp").read_text() == "mine"
    assert (tmp_path / "flags.txt.tmp" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("name", [runrecord.FLAGS_FILE, runrecord.ENVIRONMENT_FILE])
def test_a_folder_in_a_records_place_is_one_line_saying_to_move_it(tmp_path, name):
    (tmp_path / name).mkdir()
    (tmp_path / name / "notes.txt").write_text("mine")
    assert runrecord.last_settings(str(tmp_path)) is None  # and no warning of damage
    record = runrecord.environment("cifar10-train", ["x"], [], "2.x")
    with pytest.raises(Cifar10Error) as err:
        runrecord.record_start(str(tmp_path), record, "--seed=1\n")
    assert str(err.value) == (f"cannot record the run's start in {tmp_path / name} (Is a "
                              f"directory); a folder of that name is not the run's record: "
                              f"move it away")
    assert (tmp_path / name / "notes.txt").read_text() == "mine"


# -- --deterministic ----------------------------------------------------------------


def losses(stdout):
    """(step, loss) of each progress line: the log without its times and speeds."""
    return [(int(m[1]), line.split("loss = ")[1].split(" ")[0])
            for line in stdout.splitlines() if (m := TRAIN_LINE.match(line))]


def weights(checkpoint):
    reader = tf.train.load_checkpoint(str(checkpoint))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def assert_same_weights(a, b):
    a, b = weights(a), weights(b)
    assert sorted(a) == sorted(b) and len(a) > 20
    as_bytes = lambda v: v if isinstance(v, bytes) else v.tobytes()  # noqa: E731
    different = [key for key in a if as_bytes(a[key]) != as_bytes(b[key])]
    assert not different


@pytest.fixture(scope="module")
def deterministic_runs(tmp_path_factory):
    """Deterministic runs as processes, two at a time: for 1 and 2 replicas, an
    uninterrupted run of 6 steps, and one stopped at 3 and resumed to 6 (the second
    run of the same settings each run is compared with: one process more per replica
    count would repeat what this one shows)."""
    root = tmp_path_factory.mktemp("deterministic")
    # The generated data written once, as --synthetic_data would write it, before two
    # processes would both write it.
    synthetic.write_dataset(str(root / "data" / getdata.SYNTHETIC_SUBDIR), records_per_file=100)
    common = [f"--data_dir={root / 'data'}", "--synthetic_data", "--synthetic_records=100",
              "--batch_size=16", "--log_frequency=1", "--checkpoint_steps=3",
              "--deterministic", "--seed=5"]

    def start(name, replicas, max_steps):
        return cli.start("cifar10-train", *common, f"--num_gpus={replicas}",
                         f"--max_steps={max_steps}", f"--train_dir={root / name}")

    outputs = {}
    batches = [[(f"a{replicas}", replicas, 6) for replicas in (1, 2)]]
    batches += [[(f"stopped{replicas}", replicas, max_steps) for replicas in (1, 2)]
                for max_steps in (3, 6)]
    for batch in batches:
        for process in [start(*run) for run in batch]:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, err
            name = process.args[-1].rsplit("/", 1)[-1]
            outputs[name] = outputs.get(name, "") + out
    return root, outputs


@pytest.mark.parametrize("replicas", [1, 2])
def test_two_deterministic_runs_write_identical_checkpoints_and_losses_across_a_stop(
        deterministic_runs, replicas):
    """The uninterrupted run against the one stopped at 3 and resumed: the same
    losses at every step, the same weights bit for bit at both checkpoints."""
    root, outputs = deterministic_runs
    a, resumed = outputs[f"a{replicas}"], outputs[f"stopped{replicas}"]
    assert [step for step, _ in losses(a)] == [1, 2, 3, 4, 5, 6]
    assert "Resuming from" in resumed
    assert losses(resumed) == losses(a)
    for step in (3, 6):
        assert_same_weights(root / f"stopped{replicas}" / f"model.ckpt-{step}",
                            root / f"a{replicas}" / f"model.ckpt-{step}")


def test_replica_counts_give_different_runs(deterministic_runs):
    """Not a promise across replica counts: the data is sharded per replica."""
    root, _ = deterministic_runs
    a1, a2 = weights(root / "a1" / "model.ckpt-6"), weights(root / "a2" / "model.ckpt-6")
    assert any(not np.array_equal(a1[k], a2[k]) for k in a1 if "conv1" in k and "VARIABLE" in k)


def test_a_start_that_cannot_be_recorded_gives_no_notice_that_it_was(tmp_path):
    first = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=2"))
    assert first.returncode == 0, first.stderr
    record_file = tmp_path / "train" / runrecord.FLAGS_FILE
    record_file.unlink()
    record_file.mkdir()  # a folder of the record's name: the start cannot be recorded
    resumed = cli.call("cifar10-train", *train_args(tmp_path, "--max_steps=4"),
                       "--batch_size=8")
    assert resumed.returncode == 1
    assert resumed.stderr.splitlines() == [
        f"cifar10-train: error: cannot record the run's start in {record_file} (Is a directory); "
        f"a folder of that name is not the run's record: move it away"]


def test_a_change_of_the_global_batchs_factors_names_the_global_batch(tmp_path):
    before = {"batch_size": 16, "num_replicas": 1, "global_batch": 16,
              "examples_per_epoch": 500}
    now = {"batch_size": 16, "num_replicas": 2, "global_batch": 32, "examples_per_epoch": 600}
    changed = runrecord.changes(before, now)
    assert [c["setting"] for c in changed] == ["num_replicas", "examples_per_epoch"]
    environment = tmp_path / runrecord.ENVIRONMENT_FILE
    assert [runrecord.describe_change(c, 7, str(tmp_path), before, now) for c in changed] == [
        f"num_replicas (the number of replicas) changed from 1 to 2, the global batch from 16 "
        f"to 32; the run goes on from step 7 with 2 (recorded in {environment})",
        f"examples_per_epoch (the examples per epoch, which the learning-rate schedule "
        f"counts) changed from 500 to 600; the run goes on from step 7 with 600 (recorded in "
        f"{environment})"]
    # Replicas and workers changed at once: the global batch is named once, with the last.
    before.update(num_workers=1)
    now.update(num_workers=2, global_batch=64)
    lines = runrecord.describe_changes(runrecord.changes(before, now), 7, str(tmp_path),
                                       before, now)
    assert [", the global batch from 16 to 64" in line for line in lines] == [
        False, True, False]
    assert lines[1].startswith("num_workers (the number of workers) changed from 1 to 2, ")
    # An earlier start that did not record the global batch: the change alone.
    del before["global_batch"]
    assert ", the global batch" not in runrecord.describe_change(changed[0], 7, str(tmp_path),
                                                                before, now)
