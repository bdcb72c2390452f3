"""cifar10-eval follows the run it scores: the data flags its command line leaves
unset come from the run's flags.txt (cifar10.cli.follow, cifar10.runs.records)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import tensorflow as tf
from absl import flags

import cli
from conftest import EVAL_LINE
from cifar10.cli import eval_main
from cifar10.runs import records as runrecord
from cifar10.core.errors import Cifar10Error
from cifar10.cli import follow
from cifar10.data import synthetic

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here

OFFLINE = "http://127.0.0.1:9/cifar-10-binary.tar.gz"  # nothing listens on port 9


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{'synthetic': (data_dir, train_dir) of a --synthetic_data run of 2 steps, 'own':
    the same of a run on a data folder of its own}, both trained with cifar10-train."""
    root = tmp_path_factory.mktemp("rundata")
    synthetic.write_dataset(str(root / "own_data"), records_per_file=20)
    made = {}
    for kind, extra in (("synthetic", ("--synthetic_data", "--synthetic_records=20")),
                        ("own", ())):
        data_dir, train_dir = root / f"{kind}_data", root / f"{kind}_train"
        result = cli.call("cifar10-train", f"--data_dir={data_dir}", f"--train_dir={train_dir}",
                          "--max_steps=2", "--batch_size=8", *extra)
        assert result.returncode == 0, result.stderr
        made[kind] = data_dir, train_dir
    return made


def test_the_latest_start_of_the_trainer_is_read(tmp_path):
    (tmp_path / runrecord.FLAGS_FILE).write_text(
        "# cifar10-train, started 2026-11-25T10:00:00+00:00 on h at step 0\n"
        "--data_dir=/first\n--synthetic_data\n--max_steps=5\n"
        "# cifar10-eval, started 2026-11-25T10:01:00+00:00 on h\n--data_dir=/eval\n"
        "# cifar10-train, started 2026-11-25T10:02:00+00:00 on h at step 5\n"
        "--data_dir=/second\n--nosynthetic_data\nnot a flag\n--label=fine\n")
    assert runrecord.recorded_flags(str(tmp_path)) == {
        "data_dir": "/second", "synthetic_data": "false", "label": "fine"}
    assert runrecord.recorded_flags(str(tmp_path), "cifar10-eval") == {"data_dir": "/eval"}
    assert runrecord.recorded_flags(str(tmp_path / "none")) is None


def test_unset_flags_take_the_runs_values_and_given_ones_win_with_a_notice(tmp_path, caplog):
    (tmp_path / runrecord.FLAGS_FILE).write_text(
        "# cifar10-train, started 2026-11-25T10:00:00+00:00 on h at step 0\n"
        "--data_dir=/runs/data\n--synthetic_data\n--synthetic_records=20\n--batch_size=8\n")
    values = flags.FlagValues()
    eval_main.define_flags(values)
    values(["cifar10-eval", "--synthetic_records=30"])
    followed = follow.follow_run(values, str(tmp_path), "cifar10-eval")
    assert (values.data_dir, values.synthetic_data, values.synthetic_records) == (
        "/runs/data", True, 30)
    assert values.batch_size == 128  # not a data flag: the evaluator's own
    assert followed.taken == {"synthetic_data": "true", "data_dir": "/runs/data"}
    assert followed.describe() == (f"--synthetic_data --data_dir=/runs/data, from "
                                   f"{tmp_path / 'flags.txt'}")
    assert [r.getMessage() for r in caplog.records] == [
        f"--synthetic_records=30 differs from the run it scores (--synthetic_records=20 in "
        f"{tmp_path / 'flags.txt'}); using --synthetic_records=30."]


def test_a_given_data_dir_naming_the_runs_folder_otherwise_is_no_notice(
        tmp_path, caplog, monkeypatch):
    # --data_dir=d1 run from the folder the run recorded as /.../d1 (and through a link).
    (tmp_path / "d1").mkdir()
    os.symlink(tmp_path / "d1", tmp_path / "link")
    (tmp_path / runrecord.FLAGS_FILE).write_text(
        "# cifar10-train, started 2026-11-25T10:00:00+00:00 on h at step 0\n"
        f"--data_dir={tmp_path / 'd1'}\n")
    monkeypatch.chdir(tmp_path)
    for given in ("d1", "./d1/", "link"):
        values = flags.FlagValues()
        eval_main.define_flags(values)
        values(["cifar10-eval", f"--data_dir={given}"])
        follow.follow_run(values, str(tmp_path), "cifar10-eval")
        assert values.data_dir == given
    assert [r.getMessage() for r in caplog.records] == []
    values(["cifar10-eval", "--data_dir=other"])
    follow.follow_run(values, str(tmp_path), "cifar10-eval")
    assert [r.getMessage() for r in caplog.records] == [
        f"--data_dir=other differs from the run it scores (--data_dir={tmp_path / 'd1'} in "
        f"{tmp_path / 'flags.txt'}); using --data_dir=other."]


# On TensorFlow 2.16: the trainer's process on generated data, test_output's runs;
# an evaluator following the run's flags.txt, test_a_run_on_its_own_data_folder...
@pytest.mark.slow
def test_the_readme_offline_sequence_evaluates_without_repeating_the_data_flags(tmp_path):
    """README: cifar10-train --synthetic_data ..., then cifar10-eval --checkpoint_dir=...
    --run_once, and neither prints a warning on a machine without a GPU.  The trainer
    runs as a process (TensorFlow's start on generated data says nothing); the
    evaluator in this process: test_output.py checks its process, following a run's
    flags.txt too, prints nothing on stderr."""
    train_dir = tmp_path / "train"
    trained = cli.run("cifar10-train", "--synthetic_data", "--synthetic_records=40",
                      "--max_steps=3", "--batch_size=16", f"--data_dir={tmp_path / 'data'}",
                      f"--train_dir={train_dir}")
    assert trained.returncode == 0, trained.stderr
    scored = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                     f"--eval_dir={tmp_path / 'eval'}")
    assert scored.returncode == 0, scored.stderr
    lines = scored.stdout.splitlines()
    assert lines[0] == (f"NOTE: using SYNTHETIC CIFAR-10-format data in "
                        f"{tmp_path / 'data' / 'synthetic' / 'cifar-10-batches-bin'} (generated, "
                        f"not the real CIFAR-10 images; results say nothing about CIFAR-10).")
    match = next(EVAL_LINE.match(line) for line in lines if EVAL_LINE.match(line))
    assert match[2] == "3" and match[4] == "40"  # the whole test split of the run's data
    if not tf.config.list_physical_devices("GPU"):
        assert trained.stderr == "" and scored.stderr == ""


def test_a_run_on_its_own_data_folder_is_scored_on_it(runs, tmp_path):
    data_dir, train_dir = runs["own"]
    result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                      f"--eval_dir={tmp_path / 'eval'}")
    assert result.returncode == 0, result.stderr
    assert "20 examples, averages weights" in result.stdout
    # The evaluator's own flags.txt records what it used.
    assert f"--data_dir={data_dir}\n" in (tmp_path / "eval" / "flags.txt").read_text()


def test_data_that_moved_is_an_error_naming_the_runs_setting(runs, tmp_path):
    data_dir, train_dir = runs["own"]
    moved = tmp_path / "moved"
    shutil.copytree(data_dir, moved)
    shutil.rmtree(data_dir)
    try:
        result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                          f"--eval_dir={tmp_path / 'eval'}", f"--data_url={OFFLINE}")
    finally:
        shutil.copytree(moved, data_dir)
    last = result.stderr.splitlines()[-1]
    assert result.returncode == 1
    assert last.startswith(f"cifar10-eval: error: no CIFAR-10 data: --data_dir={data_dir}, as "
                           f"the run it scores recorded (--data_dir={data_dir}, from "
                           f"{train_dir / 'flags.txt'}) does not exist")
    assert not (tmp_path / "eval").exists()


def test_a_given_data_flag_wins_with_a_notice(runs, tmp_path):
    data_dir, train_dir = runs["synthetic"]
    result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                      f"--eval_dir={tmp_path / 'eval'}", f"--data_dir={tmp_path / 'other'}")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"cifar10-eval: notice: --data_dir={tmp_path / 'other'} differs from the run it scores "
        f"(--data_dir={data_dir} in {train_dir / 'flags.txt'}); using "
        f"--data_dir={tmp_path / 'other'}."]
    assert os.path.isdir(tmp_path / "other" / "synthetic")  # the run's --synthetic_data


def test_the_trainers_flags_txt_given_to_the_evaluator_is_one_clear_error(runs, tmp_path):
    _, train_dir = runs["synthetic"]
    result = cli.call("cifar10-eval", f"--flagfile={train_dir / 'flags.txt'}", "--run_once")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-eval: error: --flagfile={train_dir / 'flags.txt'} holds cifar10-train's "
        f"flags, not cifar10-eval's: pass --checkpoint_dir={train_dir} instead (see "
        f"cifar10-eval --help)"]


def test_a_failed_evaluation_leaves_no_eval_dir_it_created(runs, tmp_path):
    data_dir, _ = runs["synthetic"]
    empty = tmp_path / "no_run"
    empty.mkdir()
    result = cli.call("cifar10-eval", f"--checkpoint_dir={empty}", "--run_once",
                      "--synthetic_data", f"--data_dir={data_dir}",
                      f"--eval_dir={tmp_path / 'eval'}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"cifar10-eval: error: No checkpoint file found in {empty}")
    assert not (tmp_path / "eval").exists()
    # An --eval_dir that was there before stays, with what it held.
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("mine")
    cli.call("cifar10-eval", f"--checkpoint_dir={empty}", "--run_once", "--synthetic_data",
             f"--data_dir={data_dir}", f"--eval_dir={tmp_path / 'kept'}")
    assert (tmp_path / "kept" / "mine.txt").read_text() == "mine"


def test_an_asked_number_of_examples_beyond_the_data_is_still_a_warning(runs, tmp_path):
    _, train_dir = runs["synthetic"]
    result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", "--run_once",
                      f"--eval_dir={tmp_path / 'eval'}", "--num_examples=10000")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "cifar10-eval: warning: --num_examples=10000 but the test data holds 20 examples: "
        "evaluating 20."]


def test_an_eval_dir_that_is_a_training_runs_directory_is_refused(runs, tmp_path):
    _, train_dir = runs["synthetic"]
    flags_txt = (train_dir / "flags.txt").read_text()
    result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", f"--eval_dir={train_dir}",
                      "--run_once")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-eval: error: --eval_dir={train_dir} is the directory of the run it scores, "
        f"where cifar10-train keeps its checkpoints and records: choose a directory of the "
        f"evaluator's own, such as {train_dir.parent / 'synthetic_train-eval'}"]
    _, other = runs["own"]
    result = cli.call("cifar10-eval", f"--checkpoint_dir={train_dir}", f"--eval_dir={other}",
                      "--run_once")
    assert result.stderr.splitlines()[-1].startswith(
        f"cifar10-eval: error: --eval_dir={other} is the directory of a training run "
        f"(cifar10-train.lock, flags.txt, model.ckpt-*), where")
    assert (train_dir / "flags.txt").read_text() == flags_txt  # nothing appended


def eval_flags_beside_a_run(run_dir, recorded: str, *argv: str) -> flags.FlagValues:
    """cifar10-eval's flags parsed from ``argv``, and a run in ``run_dir`` whose latest
    start recorded the flag lines ``recorded``."""
    (run_dir / runrecord.FLAGS_FILE).write_text(
        f"# cifar10-train, started 2026-11-25T10:00:00+00:00 on h at step 0\n{recorded}")
    values = flags.FlagValues()
    eval_main.define_flags(values)
    values(["cifar10-eval", *argv])
    return values


def test_the_trainers_flags_whose_header_was_edited_away_are_still_its_start(tmp_path):
    (tmp_path / runrecord.FLAGS_FILE).write_text(
        "--train_dir=/runs/a\n--data_dir=/first\n--synthetic_data\n"
        "# cifar10-eval, started 2026-11-25T10:01:00+00:00 on h\n--eval_dir=/e\n")
    assert [(start.program, start.flags) for start in runrecord.recorded_starts(
        str(tmp_path))] == [("cifar10-train", {"train_dir": "/runs/a", "data_dir": "/first",
                                               "synthetic_data": "true"}),
                            ("cifar10-eval", {"eval_dir": "/e"})]
    # Replayed and commented out by a later start, they are still that start's.
    (tmp_path / runrecord.FLAGS_FILE).write_text(
        "# --train_dir=/runs/a\n# --data_dir=/first\n# a note\n"
        "# cifar10-train, started 2026-11-25T10:02:00+00:00 on h at step 5\n--max_steps=9\n")
    assert [(start.program, start.flags) for start in runrecord.recorded_starts(
        str(tmp_path))] == [("cifar10-train", {"train_dir": "/runs/a", "data_dir": "/first"}),
                            ("cifar10-train", {"max_steps": "9"})]


def test_a_run_whose_flags_txt_lost_its_header_is_followed(tmp_path, caplog):
    values = eval_flags_beside_a_run(tmp_path, "")
    (tmp_path / runrecord.FLAGS_FILE).write_text(
        "--train_dir=/runs/a\n--data_dir=/runs/data\n--synthetic_data\n--max_steps=5\n")
    followed = follow.follow_run(values, str(tmp_path), "cifar10-eval")
    assert (values.data_dir, values.synthetic_data) == ("/runs/data", True)
    assert followed.taken == {"synthetic_data": "true", "data_dir": "/runs/data"}
    assert caplog.records == []


def test_flags_under_no_header_that_are_not_the_trainers_are_a_warning(tmp_path, caplog):
    values = eval_flags_beside_a_run(tmp_path, "", "--synthetic_records=30")
    flags_txt = tmp_path / runrecord.FLAGS_FILE
    flags_txt.write_text("--data_dir=/runs/data\n--synthetic_data\n--synthetic_records=20\n")
    assert follow.follow_run(values, str(tmp_path), "cifar10-eval") is None
    assert (values.data_dir, values.synthetic_data) == ("/tmp/cifar10_data", False)
    # The flag the command line gives is not named: nothing of it is lost.
    assert [r.getMessage() for r in caplog.records] == [
        f"{flags_txt} holds --synthetic_data --data_dir=/runs/data with no '# cifar10-train, "
        f"started ...' line above them and no --train_dir: not taken as the run's flags; "
        f"using --nosynthetic_data --data_dir=/tmp/cifar10_data; put that header line back, "
        f"or pass the run's data flags"]
    # An evaluator's own start recorded there (by an older version) is no warning.
    caplog.clear()
    flags_txt.write_text("# cifar10-eval, started 2026-11-25T10:01:00+00:00 on h\n"
                         "--eval_dir=/e\n--data_dir=/e/data\n")
    assert follow.follow_run(values, str(tmp_path), "cifar10-eval") is None
    assert caplog.records == []


def test_the_evaluator_scores_a_run_whose_flags_txt_lost_its_header(runs, tmp_path):
    _, trained = runs["synthetic"]
    train_dir = tmp_path / "train"
    shutil.copytree(trained, train_dir)
    flags_txt = train_dir / runrecord.FLAGS_FILE
    lines = flags_txt.read_text().splitlines(keepends=True)
    assert lines[0].startswith("# cifar10-train, started ")
    flags_txt.write_text("".join(lines[1:]))
    args = (f"--checkpoint_dir={train_dir}", "--run_once", f"--eval_dir={tmp_path / 'eval'}",
            f"--data_url={OFFLINE}")
    result = cli.call("cifar10-eval", *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("NOTE: using SYNTHETIC")  # the run's --synthetic_data
    assert result.stderr == ""
    # Without its --train_dir line too, the flags are not taken, with a word; there is
    # no CIFAR-10 data in the --data_dir given, which is the last line.
    flags_txt.write_text("".join(line for line in lines[1:]
                                 if not line.startswith("--train_dir=")))
    result = cli.call("cifar10-eval", *args, f"--data_dir={tmp_path / 'data'}")
    assert result.returncode == 1
    warning, last = result.stderr.splitlines()
    assert warning == (
        f"cifar10-eval: warning: {flags_txt} holds --synthetic_data --synthetic_records=20 "
        f"with no '# cifar10-train, started ...' line above them and no --train_dir: not "
        f"taken as the run's flags; using --nosynthetic_data --synthetic_records=1000; put "
        f"that header line back, or pass the run's data flags")
    assert last.startswith(
        f"cifar10-eval: error: no CIFAR-10 data: --data_dir={tmp_path / 'data'} ")


def test_flags_that_contradict_the_runs_are_one_line_by_the_flags_own_rule(tmp_path):
    values = eval_flags_beside_a_run(tmp_path, "--dataset=cifar100\n--label=coarse\n",
                                     "--synthetic_data")
    with pytest.raises(Cifar10Error) as error:
        follow.follow_run(values, str(tmp_path), "cifar10-eval")
    assert str(error.value) == (
        f"--synthetic_data generates "
        f"CIFAR-10-format data: drop --dataset=cifar100 or --synthetic_data (the run's data "
        f"flags are in {tmp_path / 'flags.txt'})")


class FakeTime:
    """A clock that sleeping moves on, and ``on_sleep`` called at each sleep."""

    def __init__(self, on_sleep=lambda n: None):
        self.now, self.sleeps, self.on_sleep = 0.0, 0, on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        self.on_sleep(self.sleeps)


def test_the_evaluator_waits_for_the_trainer_to_record_its_start(tmp_path):
    run_dir = tmp_path / "train"  # not there yet: the trainer makes it

    def trainer_starts(sleeps):
        if sleeps == 3:
            run_dir.mkdir()
            (run_dir / "flags.txt").write_text("# cifar10-train, started 2026-11-26T10:00:00"
                                               "+00:00 on h at step 0\n--synthetic_data\n")

    time_ = FakeTime(trainer_starts)
    lines = []
    follow.wait_for_run(str(run_dir), None, lines.append, clock=time_.clock, sleep=time_.sleep)
    assert time_.sleeps == 3
    assert lines == [f"No training run in {run_dir} yet; waiting for cifar10-train to start "
                     f"there, to evaluate on the data it trains on."]


def test_a_run_with_a_checkpoint_and_no_flags_txt_is_not_waited_for(tmp_path):
    (tmp_path / "model.ckpt-5.index").write_bytes(b"")
    time_, lines = FakeTime(), []
    follow.wait_for_run(str(tmp_path), 0, lines.append, clock=time_.clock, sleep=time_.sleep)
    assert (time_.sleeps, lines) == (0, [])


def test_waiting_for_a_run_stops_at_the_eval_timeout(tmp_path):
    # An evaluator's own start in the folder is not a training run.
    (tmp_path / "flags.txt").write_text("# cifar10-eval, started 2026-11-26T10:00:00+00:00 "
                                        "on h\n--run_once\n")
    time_, lines = FakeTime(), []
    # The evaluator scored nothing: an error, not a stop.
    with pytest.raises(Cifar10Error) as err:
        follow.wait_for_run(str(tmp_path), 2.5, lines.append, clock=time_.clock,
                            sleep=time_.sleep)
    assert time_.sleeps == 3
    assert str(err.value) == (f"no training run started in {tmp_path} within --eval_timeout=2.5 "
                              f"seconds: check --checkpoint_dir, or start cifar10-train "
                              f"--train_dir={tmp_path}")
    assert lines == [f"No training run in {tmp_path} yet; waiting for cifar10-train to start "
                     f"there, to evaluate on the data it trains on."]


def test_an_evaluator_whose_run_never_starts_is_an_error_at_its_eval_timeout(tmp_path):
    never = tmp_path / "runs" / "typo"
    result = cli.call("cifar10-eval", f"--checkpoint_dir={never}", "--eval_timeout=0",
                      f"--eval_dir={tmp_path / 'eval'}", f"--data_url={OFFLINE}")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-eval: error: no training run started in {never} within --eval_timeout=0 "
        f"seconds: check --checkpoint_dir, or start cifar10-train --train_dir={never}"]
    # At most the line that it waits (none when the timeout is over at the first look).
    assert set(result.stdout.splitlines()) <= {
        f"No training run in {never} yet; waiting for cifar10-train to start there, to "
        f"evaluate on the data it trains on."}
    assert not (tmp_path / "eval").exists() and not never.exists()


def test_an_evaluator_started_before_its_trainer_scores_the_data_the_run_trains_on(tmp_path):
    train_dir, eval_dir = tmp_path / "train", tmp_path / "eval"
    evaluator = cli.start("cifar10-eval", f"--checkpoint_dir={train_dir}",
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
    assert lines[-1] == (f"Training in {train_dir} is complete and its final "
                                    f"checkpoint is evaluated; stopping.")


def test_an_eval_dir_holding_another_runs_results_is_a_warning(runs, tmp_path):
    (_, synthetic_run), (_, own_run) = runs["synthetic"], runs["own"]
    eval_dir = tmp_path / "eval"
    for run_dir in (synthetic_run, synthetic_run, own_run):
        result = cli.call("cifar10-eval", f"--checkpoint_dir={run_dir}", "--run_once",
                          f"--eval_dir={eval_dir}")
        assert result.returncode == 0, result.stderr
    # The second scoring of the same run said nothing; the other run's, one warning.
    assert result.stderr.splitlines() == [
        f"cifar10-eval: warning: --eval_dir={eval_dir} holds the results of another run "
        f"({synthetic_run}): this run's go beside them, on the same TensorBoard curves; pass "
        f"--eval_dir={own_run.parent / 'own_train-eval'} to keep them apart"]
    scored = [json.loads(line)["checkpoint"]
              for line in (eval_dir / "results.jsonl").read_text().splitlines()]
    assert {os.path.dirname(path) for path in scored} == {str(synthetic_run), str(own_run)}
    assert os.path.dirname(scored[-1]) == str(own_run)  # the first run's results kept


def test_label_coarse_alone_scores_a_cifar100_run_and_is_refused_without_one(tmp_path):
    # The run's --dataset is not given again.
    values = eval_flags_beside_a_run(tmp_path, "--dataset=cifar100\n--label=fine\n",
                                     "--label=coarse")
    follow.follow_run(values, str(tmp_path), "cifar10-eval")
    assert (values.dataset, values.label) == ("cifar100", "coarse")
    # Without a run that says cifar100, the flags' own rule, as one line.
    result = cli.call("cifar10-eval", "--label=coarse", "--run_once",
                      f"--checkpoint_dir={tmp_path / 'no_run'}", f"--eval_dir={tmp_path / 'e'}")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "cifar10-eval: error: --label=coarse applies to "
        "--dataset=cifar100 only"]
