"""Tests of cifar10.evaluation.polling: one checkpoint (--run_once, --checkpoint), the
polling loop beside a trainer (each checkpoint scored once, also across restarts;
intervals, timeout, unreadable checkpoints, the run's end) and the --eval_dir it made."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from cli import scalar_values
from conftest import EVAL_LINE
from evalruns import DATA_SUFFIX, config_of, results_lines, run_of

from cifar10.core.errors import Cifar10Error, DataError
from cifar10.evaluation import polling, recording, scoring
from cifar10.evaluation.result import class_table
from cifar10.runs import layout

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here


@pytest.fixture(scope="module")
def run(trained_run):
    return run_of(trained_run)


def copy_run(run, tmp_path, complete=True):
    """A copy of the trained run's directory (optionally without the COMPLETE marker)."""
    train_dir = str(tmp_path / "train_copy")
    shutil.copytree(run.train_dir, train_dir)
    if not complete:
        os.remove(os.path.join(train_dir, layout.COMPLETE_FILE))
    return train_dir


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def set_checkpoints(train_dir, steps):
    """Leaves exactly the checkpoints of ``steps`` in ``train_dir``, as a trainer saving
    them would; the files of the others wait in ``<train_dir>.aside``."""
    aside = train_dir + ".aside"
    os.makedirs(aside, exist_ok=True)
    for source, dest in ((train_dir, aside), (aside, train_dir)):
        for name in os.listdir(source):
            step = re.match(r"model\.ckpt-(\d+)\.", name)
            if step and (int(step[1]) in steps) == (dest == train_dir):
                os.replace(os.path.join(source, name), os.path.join(dest, name))


def mark_complete(train_dir, step):
    with open(os.path.join(train_dir, layout.COMPLETE_FILE), "w") as f:
        json.dump({"step": step, "time": time.time()}, f)


class FakeSleep:
    """Records the waits asked for and advances ``clock`` by them, without waiting;
    runs ``actions[i]`` at the i-th call."""

    def __init__(self, *actions, limit=20):
        self.calls = []
        self.actions = actions
        self.limit = limit
        self.now = 1000.0

    def clock(self):
        return self.now

    def __call__(self, seconds):
        self.calls.append(seconds)
        self.now += seconds
        if len(self.calls) <= len(self.actions):
            self.actions[len(self.calls) - 1]()
        if len(self.calls) > self.limit:
            raise AssertionError(f"the poller did not stop: sleeps {self.calls}")


# --- run_once ----------------------------------------------------------------


def test_run_once_finds_the_checkpoints_whatever_the_state_file_says(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    for text in ("", "garbage {", 'model_checkpoint_path: "model.ckpt-99"\n', None):
        state = os.path.join(train_dir, "checkpoint")
        if text is None:
            os.remove(state)
        else:
            with open(state, "w") as f:
                f.write(text)
        [result] = polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                              run_once=True), print_fn=lambda line: None)
        assert result.checkpoint == os.path.join(train_dir, "model.ckpt-6")


def test_run_once_scores_the_latest_checkpoint_and_writes_the_scalar(run, tmp_path):
    lines = []
    results = polling.evaluate(config_of(run, tmp_path, run_once=True, num_examples=37,
                                         batch_size=10), print_fn=lines.append)
    assert len(results) == 1
    result = results[0]
    assert (result.step, result.checkpoint, result.examples) == (6, run.ckpt6, 37)
    # The precision line, then the class table (a header and 10 rows) and the
    # confusion matrix (a title, the column numbers and 10 rows).
    assert len(lines) == 1 + 11 + 12
    assert lines[1:] == class_table(result)
    match = EVAL_LINE.match(lines[0])
    assert match, lines[0]
    # Generated data (the folder has cifar10.data.synthetic's marker): the line says so.
    assert match.groups()[1:] == ("6", "model.ckpt-6", "37", "averages")
    assert lines[0].endswith(") on SYNTHETIC data")
    assert result.synthetic
    assert f"precision @ 1 = {result.precision:.3f} " in lines[0]
    assert scalar_values(str(tmp_path), recording.PRECISION_TAG) == {
        6: pytest.approx(result.precision)}
    assert results_lines(tmp_path) == [result.as_record()]


def test_a_given_checkpoint_is_scored_once_instead_of_the_latest(run, tmp_path):
    lines = []
    [result] = polling.evaluate(config_of(run, tmp_path, checkpoint=run.ckpt3, weights="raw"),
                                print_fn=lines.append)
    assert (result.step, result.checkpoint, result.weights) == (3, run.ckpt3, "raw")
    assert EVAL_LINE.match(lines[0]).groups()[1:] == ("3", "model.ckpt-3", str(result.examples),
                                                 "raw")
    assert results_lines(tmp_path) == [result.as_record()]
    missing = os.path.join(os.path.dirname(run.ckpt3), "model.ckpt-4")
    with pytest.raises(Cifar10Error, match=f"^cannot evaluate checkpoint {re.escape(missing)}: "):
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint=missing))


def test_run_once_without_a_checkpoint_raises_no_checkpoint_error(run, tmp_path):
    missing = tmp_path / "no_such_run"
    with pytest.raises(polling.NoCheckpointError) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(missing),
                                   run_once=True))
    assert isinstance(err.value, Cifar10Error)
    assert str(err.value).startswith(f"No checkpoint file found in {missing}")
    assert results_lines(tmp_path / "eval") == []
    # The --eval_dir it created is removed; one that was there is kept, with its files.
    assert not (tmp_path / "eval").exists()
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "notes.txt").write_text("the user's")
    with pytest.raises(polling.NoCheckpointError):
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(missing),
                                   run_once=True))
    assert (tmp_path / "eval" / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize("part", [
    ".index",
    DATA_SUFFIX,
])
def test_run_once_scores_the_newest_checkpoint_that_reads_and_says_which_do_not(
        run, tmp_path, caplog, part):
    train_dir = copy_run(run, tmp_path)
    truncate(os.path.join(train_dir, "model.ckpt-6" + part))
    [result] = polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                          run_once=True), print_fn=lambda line: None)
    assert result.step == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"Using {train_dir}/model.ckpt-3, the newest checkpoint in {train_dir} that reads: "
        f"model.ckpt-6 cannot be read (")
    # None reads: one line naming each, and nothing recorded.
    truncate(os.path.join(train_dir, "model.ckpt-3" + part))
    with pytest.raises(Cifar10Error, match=f"^no checkpoint in {re.escape(train_dir)} can be "
                                           f"read: model.ckpt-6 cannot be read .*; model.ckpt-3 "
                                           f"cannot be read "):
        polling.evaluate(config_of(run, tmp_path / "eval2", checkpoint_dir=train_dir,
                                   run_once=True))
    assert not (tmp_path / "eval2").exists()


# --- polling -----------------------------------------------------------------


def completion_line(train_dir):
    return (f"Training in {train_dir} is complete and its final checkpoint is evaluated; "
            f"stopping.")


@pytest.mark.slow  # the poller's schedule alone: see below
def test_a_new_run_with_the_same_checkpoint_names_is_scored_again(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    eval_dir = tmp_path / "eval"
    config = config_of(run, eval_dir, checkpoint_dir=train_dir)
    assert [r.step for r in polling.evaluate(config, print_fn=lambda line: None,
                                             sleep=FakeSleep())] == [6]
    # A new run (e.g. after --fresh_start) writes model.ckpt-6 again.
    for name in os.listdir(train_dir):
        if name.startswith("model.ckpt-6"):
            path = os.path.join(train_dir, name)
            os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    again = polling.evaluate(config, print_fn=lambda line: None, sleep=FakeSleep())
    assert [r.step for r in again] == [6]
    assert len(results_lines(eval_dir)) == 2


# The poller's schedule alone (slow): on TensorFlow 2.16 its evaluations are
# the run_once tests' and its unreadable checkpoints the tests that name them.
@pytest.mark.slow
def test_poll_scores_the_final_checkpoint_once_and_a_restart_scores_nothing(run, tmp_path):
    eval_dir = tmp_path / "eval"
    lines, sleep = [], FakeSleep()
    results = polling.evaluate(config_of(run, eval_dir), print_fn=lines.append, sleep=sleep)
    assert [r.step for r in results] == [6]
    assert EVAL_LINE.match(lines[0])[3] == "model.ckpt-6"
    assert lines[1:] == [completion_line(run.train_dir)]
    assert sleep.calls == []

    # Restarted on the same eval_dir: results.jsonl says ckpt-6 is scored already.
    lines, sleep = [], FakeSleep()
    assert polling.evaluate(config_of(run, eval_dir), print_fn=lines.append, sleep=sleep) == []
    assert lines == [completion_line(run.train_dir)]
    assert sleep.calls == []
    assert [r["step"] for r in results_lines(eval_dir)] == [6]
    assert scalar_values(str(eval_dir), recording.PRECISION_TAG) == {
        6: pytest.approx(results[0].precision)}

    # The raw weights are another record: scored once too.
    raw = polling.evaluate(config_of(run, eval_dir, weights="raw"), print_fn=lines.append,
                           sleep=sleep)
    assert [(r.step, r.weights) for r in raw] == [(6, "raw")]
    assert [r["weights"] for r in results_lines(eval_dir)] == ["averages", "raw"]


def test_an_eval_dir_reused_with_other_settings_scores_again_with_one_warning(
        run, tmp_path, caplog):
    eval_dir = tmp_path / "eval"
    polling.evaluate(config_of(run, eval_dir), print_fn=lambda line: None, sleep=FakeSleep())
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    # Fewer examples: another score, not "its final checkpoint is evaluated; stopping."
    fewer = polling.evaluate(config_of(run, eval_dir, num_examples=20),
                             print_fn=lambda line: None, sleep=FakeSleep())
    assert [(r.step, r.examples, r.num_examples) for r in fewer] == [(6, 20, 20)]
    assert [(r["num_examples"], r["compute_dtype"]) for r in results_lines(eval_dir)] == [
        (50, "float32"), (20, "float32")]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"--eval_dir={eval_dir} holds results scored with other settings (weights=averages, "
        f"eval_data=test, num_examples=50, compute_dtype=float32) than these "
        f"(weights=averages, eval_data=test, num_examples=20, compute_dtype=float32): they "
        f"go on the same TensorBoard curves; pass another --eval_dir to keep them apart"]


def test_poll_stops_after_eval_timeout_without_a_new_checkpoint(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    lines = []
    sleep = FakeSleep()
    results = polling.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_timeout=1.0,
                  eval_interval_secs=0.25), print_fn=lines.append, sleep=sleep,
        clock=sleep.clock)
    assert [r.step for r in results] == [6]
    assert lines[-1] == "No new checkpoint in 1 s; stopping."
    assert len(lines) == 2
    assert sleep.calls == [0.25] * 5  # polls until more than 1 s has passed


def test_poll_that_times_out_before_any_checkpoint_is_an_error(run, tmp_path):
    # It scored nothing: not a stop with exit status 0. The --eval_dir it made goes too.
    train_dir = tmp_path / "started"  # a run that started and has saved nothing yet
    train_dir.mkdir()
    lines, sleep = [], FakeSleep()
    with pytest.raises(polling.NoCheckpointError) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(train_dir),
                                   eval_timeout=1.0, eval_interval_secs=0.25),
                         print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert str(err.value) == (f"no checkpoint appeared in {train_dir} within "
                              f"--eval_timeout=1 seconds: check --checkpoint_dir, and that its "
                              f"trainer is running")
    assert lines == [f"No checkpoint file found in {train_dir}; waiting for the trainer to "
                     f"write one."]
    assert not (tmp_path / "eval").exists()


def timed_out(run, tmp_path, train_dir) -> str:
    """The error of an evaluator of ``train_dir`` that reached its --eval_timeout of 0.5 s
    (a fake clock's) without a checkpoint that reads."""
    sleep = FakeSleep()
    with pytest.raises(polling.NoCheckpointError) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                   eval_timeout=0.5, eval_interval_secs=0.1),
                         print_fn=lambda line: None, sleep=sleep, clock=sleep.clock)
    return str(err.value)


def moved_out(train_dir) -> str:
    """The advice for a run whose .index files of steps 3 and 6 were cut short: moved
    out first, since --fresh_start refuses to delete them (not whole: perhaps not the
    trainer's), and does not start over while they are there."""
    return (f"move model.ckpt-3.data-00000-of-00001, model.ckpt-3.index, "
            f"model.ckpt-6.data-00000-of-00001, model.ckpt-6.index out of {train_dir} "
            f"(damaged, or not the trainer's: --fresh_start deletes only the checkpoints it "
            f"wrote whole), then cifar10-train --train_dir={train_dir} --fresh_start deletes "
            f"the rest")


def test_poll_that_times_out_with_no_checkpoint_that_reads_is_an_error(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    for step in (3, 6):
        truncate(os.path.join(train_dir, f"model.ckpt-{step}.index"))
    # The fix: the trainer's next checkpoint, if it still runs; else none of these.
    assert timed_out(run, tmp_path, train_dir) == (
        f"no checkpoint of {train_dir} could be read within --eval_timeout=0.5 seconds "
        f"(model.ckpt-6, model.ckpt-3; see the warnings above): nothing was scored; raise "
        f"--eval_timeout if its trainer is still running (its next checkpoint may read); else "
        f"train again ({moved_out(train_dir)}) or point --checkpoint_dir at another run")
    assert not (tmp_path / "eval").exists()


def test_poll_that_times_out_with_no_newest_checkpoint_that_reads_names_an_older_one(
        run, tmp_path):
    # Only the newest few are tried: an older one is named, as for a complete run.
    train_dir = copy_run(run, tmp_path, complete=False)
    for step in (1, 2):
        for suffix in (".index", DATA_SUFFIX):
            shutil.copy(os.path.join(train_dir, "model.ckpt-3" + suffix),
                        os.path.join(train_dir, f"model.ckpt-{step}{suffix}"))
    for step in (2, 3, 6):
        truncate(os.path.join(train_dir, f"model.ckpt-{step}.index"))
    assert timed_out(run, tmp_path, train_dir) == (
        f"none of the 3 newest checkpoints of {train_dir} could be read within "
        f"--eval_timeout=0.5 seconds (model.ckpt-6, model.ckpt-3, model.ckpt-2; see the "
        f"warnings above): nothing was scored; pass "
        f"--checkpoint={os.path.join(train_dir, 'model.ckpt-1')}, an older one not tried, if "
        f"it reads, or raise --eval_timeout if its trainer is still running (its next "
        f"checkpoint may read)")


def test_a_restarted_poll_with_everything_scored_stops_at_its_timeout_as_before(run, tmp_path):
    # Nothing new to score is not an error: the earlier start scored it.
    train_dir = copy_run(run, tmp_path, complete=False)
    config = config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_timeout=0.5,
                       eval_interval_secs=0.1)
    sleep = FakeSleep()
    polling.evaluate(config, print_fn=lambda line: None, sleep=sleep, clock=sleep.clock)
    lines, sleep = [], FakeSleep()
    assert polling.evaluate(config, print_fn=lines.append, sleep=sleep, clock=sleep.clock) == []
    assert lines == ["No new checkpoint in 0.5 s; stopping."]


@pytest.mark.parametrize("part", [
    ".index",
    DATA_SUFFIX,
])
def test_poll_skips_a_corrupt_checkpoint_with_a_warning_and_scores_the_one_before(
        run, tmp_path, caplog, part):
    train_dir = copy_run(run, tmp_path, complete=False)
    latest = os.path.join(train_dir, "model.ckpt-6")
    truncate(latest + part)
    lines = []
    sleep = FakeSleep()
    results = polling.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_timeout=0.5,
                  eval_interval_secs=0.1), print_fn=lines.append, sleep=sleep,
        clock=sleep.clock)
    assert [r.step for r in results] == [3]
    assert len(results_lines(tmp_path / "eval")) == 1
    assert EVAL_LINE.match(lines[0])[3] == "model.ckpt-3"
    assert lines[1:] == ["No new checkpoint in 0.5 s; stopping."]
    skipped = [r.getMessage() for r in caplog.records if "Skipping checkpoint" in r.getMessage()]
    assert len(skipped) == 1  # tried once, not again at every poll
    assert skipped[0].startswith(f"Skipping checkpoint {latest}: ")
    assert skipped[0].endswith("; it is not tried again unless its files change, and the "
                               "newest older checkpoint that reads is scored instead if it is "
                               "not scored yet.")


def test_poll_on_a_complete_run_with_an_unreadable_final_checkpoint_says_so(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    truncate(os.path.join(train_dir, "model.ckpt-6.index"))
    lines = []
    sleep = FakeSleep()
    results = polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir),
                               print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert [r.step for r in results] == [3]  # the newest that reads, instead
    # At once: the checkpoint that did not read was no evaluation to wait
    # --eval_interval_secs (300 s) after.
    assert sleep.calls == []
    assert len(lines) == 2  # it stops: nothing will ever make ckpt-6 readable
    assert "is evaluated" not in lines[1]
    assert lines[1].endswith("final checkpoint " + os.path.join(train_dir, "model.ckpt-6")
                             + " could not be evaluated; stopping.")


def test_poll_on_a_complete_run_of_which_no_checkpoint_reads_is_an_error(run, tmp_path):
    # It scored nothing: not a stop with exit status 0, as at --eval_timeout. The
    # --eval_dir it made goes too.
    train_dir = copy_run(run, tmp_path)
    for step in (3, 6):
        truncate(os.path.join(train_dir, f"model.ckpt-{step}.index"))
    lines = []
    with pytest.raises(polling.NoCheckpointError) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir),
                         print_fn=lines.append, sleep=FakeSleep())
    assert str(err.value) == (
        f"training in {train_dir} is complete and none of its checkpoints could be read "
        f"(model.ckpt-6, model.ckpt-3; see the warnings above): nothing was scored; train "
        f"again ({moved_out(train_dir)}) or point --checkpoint_dir at another run")
    assert lines == []
    assert not (tmp_path / "eval").exists()


def test_poll_on_a_complete_run_of_which_no_newest_checkpoint_reads_names_an_older_one(
        run, tmp_path):
    # Only the newest few are tried (as --run_once tries them): an older one is named.
    train_dir = copy_run(run, tmp_path)
    for step in (1, 2):
        for suffix in (".index", DATA_SUFFIX):
            shutil.copy(os.path.join(train_dir, "model.ckpt-3" + suffix),
                        os.path.join(train_dir, f"model.ckpt-{step}{suffix}"))
    for step in (2, 3, 6):
        truncate(os.path.join(train_dir, f"model.ckpt-{step}.index"))
    with pytest.raises(polling.NoCheckpointError) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir),
                         print_fn=lambda line: None, sleep=FakeSleep())
    assert str(err.value) == (
        f"training in {train_dir} is complete and none of its 3 newest checkpoints could be "
        f"read (model.ckpt-6, model.ckpt-3, model.ckpt-2; see the warnings above): nothing "
        f"was scored; pass --checkpoint={os.path.join(train_dir, 'model.ckpt-1')}, an older "
        f"one not tried, if it reads")


def test_a_restarted_poll_on_a_complete_run_with_an_unreadable_final_checkpoint_stops(
        run, tmp_path):
    # The checkpoint before it was scored by the earlier start: nothing is left to do.
    train_dir = copy_run(run, tmp_path)
    truncate(os.path.join(train_dir, "model.ckpt-6.index"))
    config = config_of(run, tmp_path / "eval", checkpoint_dir=train_dir)
    assert [r.step for r in polling.evaluate(config, print_fn=lambda line: None,
                                             sleep=FakeSleep())] == [3]
    lines = []
    assert polling.evaluate(config, print_fn=lines.append, sleep=FakeSleep()) == []
    assert lines == [f"Training in {train_dir} is complete but its final checkpoint "
                     f"{os.path.join(train_dir, 'model.ckpt-6')} could not be evaluated; "
                     f"stopping."]


@pytest.mark.slow  # the poller's schedule alone: see above
def test_poll_waits_eval_interval_secs_between_evaluations(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    set_checkpoints(train_dir, [3])
    lines = []

    def trainer_saves_the_final_checkpoint():
        set_checkpoints(train_dir, [3, 6])
        mark_complete(train_dir, 6)

    def interval_wait():
        # Asked before the second evaluation, not after it.
        assert [EVAL_LINE.match(line)[3] for line in lines] == ["model.ckpt-3"]

    sleep = FakeSleep(trainer_saves_the_final_checkpoint, interval_wait)
    results = polling.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_interval_secs=100),
        print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert [r.step for r in results] == [3, 6]
    assert sleep.calls == [polling.POLL_SECS,  # looking for a new checkpoint
                           100 - polling.POLL_SECS]  # the rest of the interval
    assert lines[-1] == completion_line(train_dir)
    assert [r["step"] for r in results_lines(tmp_path / "eval")] == [3, 6]


def test_poll_scores_the_one_before_an_unreadable_checkpoint_without_another_interval(
        run, tmp_path):
    # The interval runs between evaluations that happened: ckpt-3 scored at 1000, ckpt-6
    # tried at 1100 and unreadable, ckpt-4 scored at 1100, not at 1200.
    train_dir = copy_run(run, tmp_path, complete=False)
    for suffix in (".index", DATA_SUFFIX):
        shutil.copy(os.path.join(train_dir, "model.ckpt-3" + suffix),
                    os.path.join(train_dir, "model.ckpt-4" + suffix))
    truncate(os.path.join(train_dir, "model.ckpt-6.index"))
    set_checkpoints(train_dir, [3])

    def trainer_saves_two_and_ends():
        set_checkpoints(train_dir, [3, 4, 6])
        mark_complete(train_dir, 6)

    lines = []
    sleep = FakeSleep(trainer_saves_two_and_ends)
    results = polling.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_interval_secs=100),
        print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert [os.path.basename(r.checkpoint) for r in results] == ["model.ckpt-3", "model.ckpt-4"]
    assert sleep.calls == [polling.POLL_SECS,  # looking for a new checkpoint
                           100 - polling.POLL_SECS]  # the interval after ckpt-3, before ckpt-6
    assert lines[-1] == (f"Training in {train_dir} is complete but its final checkpoint "
                         f"{os.path.join(train_dir, 'model.ckpt-6')} could not be evaluated; "
                         f"stopping.")


@pytest.mark.slow  # the poller's schedule alone: see above
def test_poll_moves_to_the_newest_checkpoint_after_waiting(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    for suffix in (".index", DATA_SUFFIX):  # a checkpoint 4 that is never read
        shutil.copy(os.path.join(train_dir, "model.ckpt-3" + suffix),
                    os.path.join(train_dir, "model.ckpt-4" + suffix))
    set_checkpoints(train_dir, [3])

    def final():
        set_checkpoints(train_dir, [3, 4, 6])
        mark_complete(train_dir, 6)

    sleep = FakeSleep(lambda: set_checkpoints(train_dir, [3, 4]), final)
    results = polling.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_interval_secs=100),
        print_fn=lambda line: None, sleep=sleep)
    assert [os.path.basename(r.checkpoint) for r in results] == ["model.ckpt-3", "model.ckpt-6"]
    assert len(sleep.calls) == 2


def test_poll_without_a_checkpoint_says_so_once_and_waits(run, tmp_path):
    train_dir = tmp_path / "not_yet"
    lines = []
    sleep = FakeSleep(lambda: None, lambda: None,
                      lambda: shutil.copytree(run.train_dir, str(train_dir)))
    results = polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(train_dir)),
                               print_fn=lines.append, sleep=sleep)
    assert [r.step for r in results] == [6]
    assert lines[0] == (f"No checkpoint file found in {train_dir}; waiting for the trainer "
                        f"to write one.")
    assert sum("No checkpoint file found" in line for line in lines) == 1
    assert len(sleep.calls) == 3
    assert lines[-1] == completion_line(str(train_dir))


def test_poll_returns_when_should_stop(run, tmp_path):
    results = polling.evaluate(config_of(run, tmp_path / "eval"), sleep=FakeSleep(),
                               should_stop=lambda: True)
    assert results == []


def test_a_checkpoint_the_trainer_removed_before_it_was_scored_is_no_warning(
        run, tmp_path, caplog, monkeypatch):
    train_dir = copy_run(run, tmp_path, complete=False)
    newest = os.path.join(train_dir, "model.ckpt-6")
    score = scoring.evaluate_checkpoint

    def removed_first(checkpoint, config):  # the trainer's retention, just before
        if checkpoint == newest:
            for name in os.listdir(train_dir):
                if name.startswith("model.ckpt-6."):
                    os.remove(os.path.join(train_dir, name))
        return score(checkpoint, config)

    monkeypatch.setattr(scoring, "evaluate_checkpoint", removed_first)
    sleep = FakeSleep()
    results = polling.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_timeout=0.5,
                  eval_interval_secs=0.1), print_fn=lambda line: None, sleep=sleep,
        clock=sleep.clock)
    assert [r.step for r in results] == [3]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


# --- the data failing while a checkpoint is scored ------------------------------


@pytest.mark.parametrize("run_once", [True, False])
def test_data_gone_while_scoring_is_a_data_error_and_no_checkpoint_is_blamed(
        run, tmp_path, caplog, run_once):
    # The eval files went away after they were checked (a data folder deleted to be
    # downloaded again, a network file system's hiccup): the checkpoints read, so
    # they are not marked unreadable, and --fresh_start (which deletes them) is not
    # suggested.
    gone = str(tmp_path / "data" / "test_batch.bin")
    train_dir = copy_run(run, tmp_path, complete=True)
    with pytest.raises(DataError) as err:
        polling.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                   eval_files=[gone], run_once=run_once),
                         print_fn=lambda line: None, sleep=FakeSleep())
    assert str(err.value) == (
        f"cannot read the data to evaluate on: {gone}; No such file or directory; the "
        f"checkpoint {os.path.join(train_dir, 'model.ckpt-6')} is not at fault: check "
        f"--data_dir and run the same command again")
    assert not [r for r in caplog.records if "Skipping checkpoint" in r.getMessage()]
