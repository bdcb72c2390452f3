"""The data a run was trained on (cifar10.cli.run_data): cifar10-eval follows it,
cifar10-train refuses other data for it, cifar10-predict refuses CIFAR-format data
given for images."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from absl import flags

import cli
from cli import assert_refused
from conftest import EVAL_LINE
from evalruns import FakeSleep
from cifar10.cli import launch
from cifar10.cli import run_data
from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import getdata
from cifar10.data import synthetic

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here

OFFLINE = "http://127.0.0.1:9/cifar-10-binary.tar.gz"  # nothing listens on port 9
START = "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n"


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    """(data_dir, train_dir) of a 2-step run of cifar10-train on a data folder of its own."""
    root = tmp_path_factory.mktemp("rundata")
    synthetic.write_dataset(str(root / "own_data"), records_per_file=20)
    data_dir, train_dir = root / "own_data", root / "own_train"
    result = cli.call("cifar10-train", f"--data_dir={data_dir}", f"--train_dir={train_dir}",
                      "--max_steps=2", "--batch_size=8")
    assert result.returncode == 0, result.stderr
    return data_dir, train_dir


def flags_beside_a_run(run_dir, recorded: str | None, *argv: str,
                       program: str = "cifar10-eval") -> flags.FlagValues:
    """``program``'s flags parsed from ``argv``, beside a run in ``run_dir`` whose latest
    start recorded the flag lines ``recorded`` (None: no flags.txt)."""
    if recorded is not None:
        (run_dir / "flags.txt").write_text(START + recorded)
    values = flags.FlagValues()
    cli.ENTRY_POINTS[program].define_flags(values)
    values([program, *argv])
    return values


# ---- cifar10-eval follows the run it scores -----------------------------------------

def test_unset_flags_take_the_runs_values_and_given_ones_win_with_a_notice(tmp_path, caplog):
    values = flags_beside_a_run(tmp_path, "--data_dir=/runs/data\n--synthetic_data\n"
                                "--synthetic_records=20\n--batch_size=8\n",
                                "--synthetic_records=30")
    followed = run_data.follow_run(values, str(tmp_path), "cifar10-eval")
    assert (values.data_dir, values.synthetic_data, values.synthetic_records) == (
        "/runs/data", True, 30)
    assert values.batch_size == 128  # not a data flag: the evaluator's own
    assert followed.describe() == (f"--synthetic_data --data_dir=/runs/data, from "
                                   f"{tmp_path / 'flags.txt'}")
    assert [r.getMessage() for r in caplog.records] == [
        f"--synthetic_records=30 differs from the run it scores (--synthetic_records=20 in "
        f"{tmp_path / 'flags.txt'}); using --synthetic_records=30."]


def test_a_given_data_dir_naming_the_runs_folder_otherwise_is_no_notice(
        tmp_path, caplog, monkeypatch):
    (tmp_path / "d1").mkdir()
    os.symlink(tmp_path / "d1", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    for given in ("d1", "./d1/", "link"):
        values = flags_beside_a_run(tmp_path, f"--data_dir={tmp_path / 'd1'}\n",
                                    f"--data_dir={given}")
        run_data.follow_run(values, str(tmp_path), "cifar10-eval")
        assert values.data_dir == given
    assert caplog.records == []


def test_a_run_whose_flags_txt_lost_its_header_is_followed_by_its_train_dir(tmp_path, caplog):
    values = flags_beside_a_run(tmp_path, None)
    (tmp_path / "flags.txt").write_text("--train_dir=/runs/a\n--data_dir=/runs/data\n"
                                        "--synthetic_data\n")
    run_data.follow_run(values, str(tmp_path), "cifar10-eval")
    assert (values.data_dir, values.synthetic_data) == ("/runs/data", True)
    # Without --train_dir, they are no trainer's: not followed.
    (tmp_path / "flags.txt").write_text("--data_dir=/e/data\n")
    values = flags_beside_a_run(tmp_path, None)
    assert run_data.follow_run(values, str(tmp_path), "cifar10-eval") is None
    assert values.data_dir == "/tmp/cifar10_data"
    assert caplog.records == []


def test_data_flags_that_contradict_each_other_are_one_line_by_their_rule(tmp_path):
    values = flags_beside_a_run(tmp_path, "--dataset=cifar100\n--label=coarse\n",
                                "--synthetic_data")
    with pytest.raises(Cifar10Error) as error:
        run_data.follow_run(values, str(tmp_path), "cifar10-eval")
    assert str(error.value) == (
        f"--synthetic_data generates CIFAR-10-format data: drop --dataset=cifar100 or "
        f"--synthetic_data (the run's data flags are in {tmp_path / 'flags.txt'})")
    # --label=coarse alone scores a CIFAR-100 run; without one, it is refused.
    values = flags_beside_a_run(tmp_path, "--dataset=cifar100\n--label=fine\n", "--label=coarse")
    run_data.follow_run(values, str(tmp_path), "cifar10-eval")
    assert (values.dataset, values.label) == ("cifar100", "coarse")
    assert_refused(cli.call("cifar10-eval", "--label=coarse", "--run_once",
                            f"--checkpoint_dir={tmp_path / 'no_run'}"),
                   "cifar10-eval: error: --label=coarse applies to --dataset=cifar100 only")


def test_a_run_on_its_own_data_folder_is_scored_on_it(own_run, tmp_path):
    data_dir, train_dir = own_run
    result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                      f"--eval_dir={tmp_path / 'eval'}")
    assert result.returncode == 0, result.stderr
    assert "20 examples, averages weights" in result.stdout
    assert f"--data_dir={data_dir}\n" in (tmp_path / "eval" / "flags.txt").read_text()


def test_data_that_moved_is_an_error_naming_the_runs_setting(own_run, tmp_path):
    data_dir, train_dir = own_run
    moved = tmp_path / "moved"
    shutil.move(data_dir, moved)
    try:
        result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                          f"--eval_dir={tmp_path / 'eval'}", f"--data_url={OFFLINE}")
    finally:
        shutil.move(moved, data_dir)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"cifar10-eval: error: no CIFAR-10 data: --data_dir={data_dir}, as the run it scores "
        f"recorded (--data_dir={data_dir}, from {train_dir / 'flags.txt'}) does not exist")
    assert not (tmp_path / "eval").exists()  # no --eval_dir made by a failed evaluation


WAITING = ("No training run in {} yet; waiting for cifar10-train to start there, to evaluate "
           "on the data it trains on.")


def test_a_checkpoint_without_flags_txt_is_a_run_to_evaluate_at_once(tmp_path):
    # (The wait for a trainer's start: test_an_evaluator_started_before_its_trainer_...)
    (tmp_path / "model.ckpt-5.index").write_bytes(b"")
    run_data.wait_for_run(str(tmp_path), 0, print_fn=pytest.fail)


def test_an_evaluator_refuses_a_missing_run_folder_unless_it_waits_for_the_run(tmp_path):
    never = tmp_path / "runs" / "typo"
    args = [f"--checkpoint_dir={never}", f"--eval_dir={tmp_path / 'eval'}",
            f"--data_url={OFFLINE}"]
    assert_refused(cli.call("cifar10-eval", *args), (
        f"cifar10-eval: error: --checkpoint_dir={never} does not exist: check the path, or "
        f"give --wait_for_run to wait for cifar10-train to start there"))
    # Waited for, its --eval_timeout ends the wait.
    result = cli.call("cifar10-eval", *args, "--wait_for_run", "--eval_timeout=0")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-eval: error: no training run started in {never} within --eval_timeout=0 "
        f"seconds: check --checkpoint_dir, or start cifar10-train --train_dir={never}"]
    assert set(result.stdout.splitlines()) <= {WAITING.format(never)}
    assert not (tmp_path / "eval").exists() and not never.exists()


def test_a_long_wait_says_every_5_minutes_how_long_it_has_lasted(tmp_path):
    # (The evaluator's wait for a first checkpoint says it alike: polling.py.)
    run_dir = tmp_path / "train"
    run_dir.mkdir()  # an empty folder: a run may start there
    sleep, lines = FakeSleep(*[lambda: None] * 10,
                             lambda: (run_dir / "model.ckpt-5.index").write_bytes(b"")), []
    run_data.wait_for_run(str(run_dir), None, lines.append, poll_secs=60, clock=sleep.clock,
                          sleep=sleep)
    assert lines == [WAITING.format(run_dir), *(
        f"Still no training run in {run_dir} after {minutes} min; waiting (--eval_timeout "
        f"ends the wait)." for minutes in (5, 10))]
    assert len(sleep.calls) == 11


def test_an_evaluator_started_before_its_trainer_scores_the_data_the_run_trains_on(tmp_path):
    train_dir, eval_dir = tmp_path / "train", tmp_path / "eval"
    evaluator = cli.start("cifar10-eval", f"--checkpoint_dir={train_dir}", "--wait_for_run",
                          f"--eval_dir={eval_dir}", "--eval_interval_secs=1",
                          "--eval_timeout=120", f"--data_url={OFFLINE}")
    try:
        first = evaluator.stdout.readline()
        assert first.startswith(f"No training run in {train_dir} yet; waiting"), first
        trained = cli.call("cifar10-train", "--synthetic_data", "--synthetic_records=20",
                           f"--data_dir={tmp_path / 'data'}", f"--train_dir={train_dir}",
                           "--max_steps=2", "--batch_size=8")
        assert trained.returncode == 0, trained.stderr
        out, err = evaluator.communicate(timeout=180)
    finally:
        evaluator.kill()
    assert evaluator.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("NOTE: using SYNTHETIC CIFAR-10-format data in "), out
    assert any(EVAL_LINE.match(line) for line in lines), out
    assert lines[-1] == (f"Training in {train_dir} is complete and its final checkpoint is "
                         f"evaluated; stopping.")


# ---- cifar10-train goes on with a run on its own kind of data -----------------------

def recorded_run(train_dir, flag_lines: str):
    """A run in ``train_dir``: the trainer's start recorded with ``flag_lines``, and the
    files of a checkpoint."""
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
    assert_refused(result, f"cifar10-train: error: --train_dir={train_dir} {error}")
    assert sorted(os.listdir(train_dir)) == before


def test_the_kinds_of_cifar100_are_its_labels_and_a_run_without_checkpoints_is_new(tmp_path):
    values = flags_beside_a_run(tmp_path, "--dataset=cifar100\n--label=coarse\n",
                                "--dataset=cifar100", program="cifar10-train")
    run_data.refuse_other_kind_of_data(values, str(tmp_path))  # no checkpoint: a new run
    (tmp_path / "model.ckpt-10.index").write_bytes(b"")
    with pytest.raises(Cifar10Error, match=re.escape(
            "holds a run trained on CIFAR-100's coarse labels (--dataset=cifar100 "
            "--label=coarse), and this start would go on with it on CIFAR-100's fine labels "
            "(--dataset=cifar100 --label=fine): pass --dataset=cifar100 --label=coarse")):
        run_data.refuse_other_kind_of_data(values, str(tmp_path))
    values["label"].value = "coarse"
    run_data.refuse_other_kind_of_data(values, str(tmp_path))


def test_a_run_whose_flags_txt_records_no_data_is_resumed_with_a_warning(tmp_path):
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    (train_dir / "model.ckpt-5.index").write_bytes(b"")
    (train_dir / "flags.txt").write_text("")
    # (Then the download from nothing fails: the start ends before TensorFlow loads.)
    result = cli.call("cifar10-train", f"--train_dir={train_dir}",
                      f"--data_dir={tmp_path / 'd10'}", f"--data_url={OFFLINE}", "--max_steps=6")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"cifar10-train: warning: --train_dir={train_dir} holds checkpoints, but neither its "
        f"flags.txt nor its environment.jsonl records the data the run was trained on: this "
        f"start's data is not checked against the run's")


def test_a_resume_without_the_runs_data_dir_does_not_download_another_data_set(
        tmp_path, monkeypatch):
    tarball = tmp_path / "cifar-10-binary.tar.gz"
    tarball.write_bytes(synthetic.tarball_bytes(records_per_file=10))
    mine, default = tmp_path / "data" / "mine", tmp_path / "default_data"
    train_dir = recorded_run(tmp_path / "train", f"--data_dir={mine}\n--nosynthetic_data\n")
    module = cli.ENTRY_POINTS["cifar10-train"]
    define = module.define_flags

    def define_flags(values):  # --data_dir's default not the shared /tmp/cifar10_data
        define(values)
        values.set_default("data_dir", str(default))

    monkeypatch.setattr(module, "define_flags", define_flags)
    result = cli.call("cifar10-train", f"--train_dir={train_dir}", "--max_steps=4",
                      f"--data_url=file://{tarball}")
    flags_txt = train_dir / "flags.txt"
    assert_refused(result,
        f"cifar10-train: error: the run in --train_dir={train_dir} was trained on "
        f"--data_dir={mine} ({flags_txt}), and this start, not given --data_dir, would "
        f"download CIFAR-10 into {default} instead: pass --data_dir={mine} (or "
        f"--flagfile={flags_txt}) to go on with the run's data, or --data_dir={default} to "
        f"download CIFAR-10 there")
    assert not default.exists() and not mine.exists()
    # cifar10-launch refuses it for its workers too.
    values = flags_beside_a_run(train_dir, None, f"--train_dir={train_dir}",
                                f"--data_url={OFFLINE}", program="cifar10-train")
    with pytest.raises(DataError, match=re.escape(f"the run in --train_dir={train_dir} was")):
        launch.fetch_data(values)
    assert not default.exists()


def test_only_a_download_for_an_unasked_data_dir_of_a_run_with_checkpoints_is_refused(tmp_path):
    mine = tmp_path / "mine"
    recorded_run(tmp_path / "train", f"--data_dir={mine}\n")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "flags.txt").write_text(START + f"--data_dir={mine}\n")

    def refusal(run_dir, *argv):
        values = flags_beside_a_run(tmp_path, None, *argv, program="cifar10-train")
        return run_data.download_refusal(values, str(tmp_path / run_dir))

    assert refusal("train").startswith(f"the run in --train_dir={tmp_path / 'train'} was "
                                       f"trained on --data_dir={mine} (")
    assert refusal("train", f"--data_dir={tmp_path / 'other'}") == ""  # asked for
    assert refusal("train", f"--data_dir={mine}") == ""  # the run's own
    assert refusal("new") == ""  # no checkpoint yet: a new run
    assert refusal("none") == ""  # no run
    # The refusal stands in for a download only: data that is there is taken.
    batches = synthetic.write_dataset(str(tmp_path / "there"), records_per_file=10)
    assert getdata.prepare(str(tmp_path / "there"), no_download="no",
                           print_fn=lambda line: None)[0] == batches
    with pytest.raises(DataError, match="^no$"):
        getdata.prepare(str(tmp_path / "missing"), no_download="no")
    assert not (tmp_path / "missing").exists()


# ---- cifar10-predict given CIFAR-format data ----------------------------------------

FILE = ("is CIFAR-format data (records of labelled 32x32 images), not an image: score the "
        "model on it with cifar10-eval")
FOLDER = ("is a folder of CIFAR-format data, not of images: score the model on it with "
          "cifar10-eval")


@pytest.mark.parametrize("named, said", [
    ("data/cifar-10-batches-bin/test_batch.bin", f"{FILE} --checkpoint_dir=runs/a/train "
                                                 f"--data_dir=data --run_once"),
    ("data/cifar-10-batches-bin/data_batch_3.bin",
     f"{FILE} --checkpoint_dir=runs/a/train --data_dir=data --eval_data=train_eval --run_once"),
    ("data/cifar-10-batches-bin/", f"{FOLDER} --checkpoint_dir=runs/a/train --data_dir=data "
                                   f"--run_once"),
    ("data", f"{FOLDER} --checkpoint_dir=runs/a/train --data_dir=data --run_once")])
def test_a_record_file_or_a_data_folder_is_one_line_naming_cifar10_eval(
        tmp_path, monkeypatch, named, said):
    monkeypatch.chdir(tmp_path)
    synthetic.write_dataset("data", records_per_file=2)
    assert_refused(cli.call("cifar10-predict", "--checkpoint_dir=runs/a/train", "cat.png",
                            named), f"cifar10-predict: error: {named} {said}")


def test_the_command_takes_the_checkpoint_given_and_images_are_not_refused(tmp_path,
                                                                         monkeypatch):
    synthetic.write_dataset(str(tmp_path / "data"), records_per_file=2)
    monkeypatch.chdir(tmp_path / "data" / "cifar-10-batches-bin")
    assert_refused(cli.call("cifar10-predict", "--checkpoint=../../my run/model.ckpt-5",
                            "test_batch.bin"),
                   f"cifar10-predict: error: test_batch.bin {FILE} "
                   f"--checkpoint='../../my run/model.ckpt-5' --data_dir=.. --run_once")
    # Images beside it, and a file only named as a record file, are not refused.
    (tmp_path / "data" / "photos").mkdir(exist_ok=True)
    (tmp_path / "data" / "photos" / "cat.png").write_bytes(b"")
    (tmp_path / "data" / "test.bin").write_bytes(b"not records")
    run_data.refuse_cifar_data(["-", str(tmp_path / "data"), str(tmp_path / "data" / "test.bin")],
                               "--checkpoint_dir=runs/a/train")

