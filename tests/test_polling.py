"""cifar10.evaluation.polling: one checkpoint (--run_once, --checkpoint), and the polling
loop (each checkpoint once, intervals, timeout, unreadable ones), on a fake clock."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import time

import pytest
from cli import scalar_values
from conftest import EVAL_LINE
from evalruns import FakeSleep, config_of, results_lines, run_of
from rundirs import truncate

from cifar10.core.errors import Cifar10Error, DataError
from cifar10.evaluation import polling, recording, scoring
from cifar10.runs import layout
from cifar10.runs.best import BestCheckpoint

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here


@pytest.fixture(scope="module")
def run(trained_run):
    return run_of(trained_run)


def copy_run(run, tmp_path, complete=True, steps=(3, 6)):
    """A copy of the run holding the checkpoints of ``steps`` (2 and 4 copies of 3); the
    others wait in ``<copy>.aside``."""
    train_dir = str(tmp_path / "train")
    shutil.copytree(run.train_dir, train_dir)
    for step, suffix in itertools.product((2, 4), (".index", ".data-00000-of-00001")):
        shutil.copy(run.ckpt3 + suffix, os.path.join(train_dir, f"model.ckpt-{step}{suffix}"))
    if not complete:
        os.remove(os.path.join(train_dir, layout.COMPLETE_FILE))
    set_checkpoints(train_dir, steps)
    return train_dir


def set_checkpoints(train_dir, steps, complete_at=None):
    """Leaves the checkpoints of ``steps`` in ``train_dir``, complete at ``complete_at``."""
    aside = train_dir + ".aside"
    os.makedirs(aside, exist_ok=True)
    for source, dest in ((train_dir, aside), (aside, train_dir)):
        for name in os.listdir(source):
            step = re.match(r"model\.ckpt-(\d+)\.", name)
            if step and (int(step[1]) in steps) == (dest == train_dir):
                os.replace(os.path.join(source, name), os.path.join(dest, name))
    if complete_at:
        with open(os.path.join(train_dir, layout.COMPLETE_FILE), "w") as f:
            json.dump({"step": complete_at, "time": time.time()}, f)


def poll(run, eval_dir, train_dir, *actions, **settings):
    """(results, lines printed, sleeps) of a polling evaluation of ``train_dir``."""
    lines, sleep = [], FakeSleep(*actions)
    results = polling.evaluate(config_of(run, eval_dir, checkpoint_dir=train_dir, **settings),
                               print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    return [os.path.basename(r.checkpoint) for r in results], lines, sleep.calls


def warnings(caplog):
    """The program's warnings (not TensorFlow's of its retracing)."""
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "absl"]


def complete(train_dir):
    return f"Training in {train_dir} is complete and its final checkpoint is evaluated; stopping."


def final_unreadable(train_dir):
    return (f"Training in {train_dir} is complete but its final checkpoint "
            f"{os.path.join(train_dir, 'model.ckpt-6')} could not be evaluated; stopping.")


def test_run_once_scores_the_latest_checkpoint_whatever_the_state_file_says(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    with open(os.path.join(train_dir, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-99"\n')
    lines = []
    [result] = polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                          run_once=True, num_examples=37, batch_size=10),
                                print_fn=lines.append)
    assert (result.step, result.examples, result.synthetic) == (6, 37, True)
    # The precision line, the class table (11 lines) and the confusion matrix (12).
    assert len(lines) == 1 + 11 + 12 and lines[1:] == recording.class_table(result)
    assert EVAL_LINE.match(lines[0]).groups() == (
        f"{result.precision:.3f}", "6", "model.ckpt-6", "37", "averages")
    assert lines[0].endswith(") on SYNTHETIC data")  # generated data: its folder's marker
    assert scalar_values(str(tmp_path / "eval"), recording.PRECISION_TAG) == {
        6: pytest.approx(result.precision)}
    assert 0 < result.loss < 10 and scalar_values(str(tmp_path / "eval"), recording.LOSS_TAG
                                                  ) == {6: pytest.approx(result.loss)}
    assert results_lines(tmp_path / "eval") == [result.as_record()]
    assert set(result.as_record()) == {
        "checkpoint", "step", "precision", "correct", "examples", "weights", "eval_data",
        "wall_time", "seconds", "checkpoint_mtime_ns", "confusion_matrix", "per_class",
        "synthetic", "num_examples", "compute_dtype", "loss"}  # results.jsonl's fields


def test_a_given_checkpoint_is_scored_once_instead_of_the_latest(run, tmp_path):
    lines = []
    [result] = polling.evaluate(config_of(run, tmp_path, checkpoint=run.ckpt3, weights="raw"),
                                print_fn=lines.append)
    assert EVAL_LINE.match(lines[0]).groups()[1:] == ("3", "model.ckpt-3", "50", "raw")
    assert results_lines(tmp_path) == [result.as_record()]
    missing = os.path.join(run.train_dir, "model.ckpt-4")
    with pytest.raises(Cifar10Error, match=f"^cannot evaluate checkpoint {re.escape(missing)}: "):
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint=missing))


def test_run_once_without_a_checkpoint_is_an_error_and_removes_only_the_eval_dir_it_made(
        run, tmp_path):
    missing = tmp_path / "no_such_run"
    with pytest.raises(Cifar10Error, match=f"^No checkpoint file found in {missing}: "):
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(missing),
                                   run_once=True))
    assert not (tmp_path / "eval").exists()
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "notes.txt").write_text("the user's")
    with pytest.raises(Cifar10Error):
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(missing),
                                   run_once=True))
    assert (tmp_path / "eval" / "notes.txt").read_text() == "the user's"


def scored(lines):
    """The checkpoints named by the precision lines among ``lines``."""
    return [m[3] for m in map(EVAL_LINE.match, lines) if m]


def test_each_checkpoint_is_scored_once_across_restarts_and_again_for_a_new_run(
        run, tmp_path, caplog):
    eval_dir = tmp_path / "eval"
    train_dir = copy_run(run, tmp_path)
    names, lines, sleeps = poll(run, eval_dir, train_dir)
    assert (names, scored(lines), lines[1:], sleeps) == (
        ["model.ckpt-6"], ["model.ckpt-6"], [complete(train_dir)], [])
    # Restarted: results.jsonl says it is scored.
    assert poll(run, eval_dir, train_dir) == ([], [complete(train_dir)], [])
    # Other settings are another score, with one warning that they share the curves.
    assert poll(run, eval_dir, train_dir, weights="raw")[0] == ["model.ckpt-6"]
    assert [m.split(" (")[0] for m in warnings(caplog)] == [
        f"--eval_dir={eval_dir} holds results scored with other settings"]
    # A new run (after --fresh_start) writes model.ckpt-6 again.
    for name in os.listdir(train_dir):
        if name.startswith("model.ckpt-6"):
            path = os.path.join(train_dir, name)
            os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    assert poll(run, eval_dir, train_dir)[0] == ["model.ckpt-6"]
    assert [(r["step"], r["weights"]) for r in results_lines(eval_dir)] == [
        (6, "averages"), (6, "raw"), (6, "averages")]


def test_it_says_once_that_there_is_no_checkpoint_yet_and_waits_eval_interval_secs(
        run, tmp_path):
    """ckpt-3 comes at the second look, then ckpt-4 (never scored: ckpt-6 comes within
    the interval) and ckpt-6, complete."""
    train_dir = copy_run(run, tmp_path, complete=False, steps=())
    recorded = []
    names, lines, sleeps = poll(
        run, tmp_path / "eval", train_dir, lambda: None,
        lambda: set_checkpoints(train_dir, (3,)),
        lambda: set_checkpoints(train_dir, (3, 4)),
        lambda: set_checkpoints(train_dir, (3, 4, 6), complete_at=6) or recorded.extend(
            r["step"] for r in results_lines(tmp_path / "eval")),
        eval_interval_secs=100)
    assert names == ["model.ckpt-3", "model.ckpt-6"]
    assert recorded == [3]  # the interval's wait comes before the second evaluation
    assert sleeps == [polling.POLL_SECS] * 3 + [100 - polling.POLL_SECS]
    assert lines[0] == (f"No checkpoint file found in {train_dir}; waiting for the trainer "
                        f"to write one.")
    assert scored(lines[1:]) == ["model.ckpt-3", "model.ckpt-6"]
    assert lines[-1] == complete(train_dir)


def test_it_stops_after_eval_timeout_without_a_new_checkpoint_also_when_restarted(
        run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    for _ in range(2):
        names, lines, sleeps = poll(run, tmp_path / "eval", train_dir, eval_timeout=1.0,
                                    eval_interval_secs=0.25)
        assert lines[-1] == "No new checkpoint in 1 s; stopping."
        assert sleeps == [0.25] * 5  # until more than 1 s has passed
    assert names == [] and len(results_lines(tmp_path / "eval")) == 1


def test_an_unreadable_checkpoint_is_skipped_once_and_the_one_before_scored_at_once(
        run, tmp_path, caplog):
    """ckpt-3 scored at 1000, ckpt-6 unreadable at 1100, ckpt-4 scored at 1100."""
    train_dir = copy_run(run, tmp_path, complete=False, steps=(3,))
    truncate(os.path.join(train_dir + ".aside", "model.ckpt-6.index"))
    names, lines, sleeps = poll(
        run, tmp_path / "eval", train_dir,
        lambda: set_checkpoints(train_dir, (3, 4, 6), complete_at=6), eval_interval_secs=100)
    assert names == ["model.ckpt-3", "model.ckpt-4"]
    assert sleeps == [polling.POLL_SECS, 100 - polling.POLL_SECS]
    assert lines[-1] == final_unreadable(train_dir)
    [skipped] = warnings(caplog)
    assert skipped.startswith(f"Skipping checkpoint {train_dir}/model.ckpt-6: ")
    assert skipped.endswith("; it is not tried again unless its files change, and the "
                            "newest older checkpoint that reads is scored instead if it is "
                            "not scored yet.")
    # Restarted: nothing is left to do.
    assert poll(run, tmp_path / "eval", train_dir) == ([], [final_unreadable(train_dir)], [])


@pytest.mark.parametrize("complete, older", [(True, False), (False, False), (True, True)])
def test_nothing_scored_and_nothing_that_reads_is_an_error_naming_each(run, tmp_path,
                                                                       complete, older):
    """--run_once's error: only the 3 newest are read; an older one is named to pass."""
    train_dir = copy_run(run, tmp_path, complete=complete, steps=(2, 3, 4, 6)[not older:])
    for step in (3, 4, 6):
        truncate(os.path.join(train_dir, f"model.ckpt-{step}.index"))
    with pytest.raises(Cifar10Error) as err:
        poll(run, tmp_path / "eval", train_dir, eval_timeout=0.5, eval_interval_secs=0.1)
    fix = (rf"pass --checkpoint={train_dir}/model.ckpt-2, an older one not tried, if it reads"
           if older else rf"train again \(move .* out of {train_dir} .*\) or point "
                         rf"--checkpoint_dir at another run")
    assert re.fullmatch(rf"(none of the 3 newest checkpoints|no checkpoint) in {train_dir} can "
                        rf"be read: model.ckpt-6 cannot be read \(.*\); model.ckpt-4 .*; "
                        rf"model.ckpt-3 .*; {fix}", str(err.value)), str(err.value)
    assert str(err.value).startswith("none" if older else "no checkpoint")
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize("folder", ["started", "best"])
def test_no_checkpoint_by_the_timeout_or_the_runs_end_is_an_error(run, tmp_path, folder):
    """A run that has saved nothing yet; a run's best/ as the run ends without a best."""
    train_dir = tmp_path / "started"
    why = ("within --eval_timeout=1 seconds: check --checkpoint_dir, and that its trainer "
           "is running")
    if folder == "best":
        run_dir = copy_run(run, tmp_path, complete=False)
        BestCheckpoint(run_dir, None, 0)  # (as a validating run starts)
        train_dir = tmp_path / "train" / "best"
        why = (f"and the run in {run_dir} is complete (a run's best/ gets one as it validates: "
               f"cifar10-train --eval_every_steps)")
    train_dir.mkdir(exist_ok=True)
    lines, sleep = [], FakeSleep(lambda: folder == "best" and set_checkpoints(
        str(tmp_path / "train"), (6,), complete_at=6))  # (the run ends)
    with pytest.raises(Cifar10Error) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(train_dir),
                                   eval_timeout=1.0 if folder == "started" else None),
                         print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert str(err.value) == f"no checkpoint appeared in {train_dir} {why}"
    assert lines == [f"No checkpoint file found in {train_dir}; waiting for the trainer to "
                     f"write one{why[why.find(' ('):] if folder == 'best' else ''}."]
    assert not (tmp_path / "eval").exists()


def test_a_checkpoint_the_trainer_removed_before_it_was_scored_is_no_warning(
        run, tmp_path, caplog, monkeypatch):
    train_dir = copy_run(run, tmp_path, complete=False)
    score = scoring.evaluate_checkpoint

    def removed_first(checkpoint, config):  # the trainer's retention, just before
        if checkpoint.endswith("-6"):
            set_checkpoints(train_dir, (3,))
        return score(checkpoint, config)

    monkeypatch.setattr(scoring, "evaluate_checkpoint", removed_first)
    assert poll(run, tmp_path / "eval", train_dir, eval_timeout=0.5)[0] == ["model.ckpt-3"]
    assert warnings(caplog) == []


def test_the_data_gone_while_scoring_is_a_data_error_that_blames_no_checkpoint(
        run, tmp_path, caplog):
    gone = str(tmp_path / "data" / "test_batch.bin")
    train_dir = copy_run(run, tmp_path)
    with pytest.raises(DataError) as err:
        poll(run, tmp_path / "eval", train_dir, eval_files=[gone])
    assert str(err.value) == (
        f"cannot read the data to evaluate on: {gone}; No such file or directory; the "
        f"checkpoint {os.path.join(train_dir, 'model.ckpt-6')} is not at fault: check "
        f"--data_dir and run the same command again")
    assert warnings(caplog) == []


def test_it_returns_when_should_stop(run, tmp_path):
    assert polling.evaluate(config_of(run, tmp_path / "eval"), sleep=FakeSleep(),
                            should_stop=lambda: True) == []
