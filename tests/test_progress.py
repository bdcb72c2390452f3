"""How the trainer words its progress lines and the end of a run (cifar10.training.progress).

What train measures for them (steps, epochs, rates, time left) is tested in
test_train.py; the lines of a real run in test_train_main.py.
"""

import os

import pytest

from cifar10.training import progress
from conftest import TRAIN_LINE


@pytest.mark.parametrize("seconds, text", [
    (0.04, "0.0s"), (4.24, "4.2s"), (59.94, "59.9s"), (59.96, "1m 00s"), (125, "2m 05s"),
    (3599.4, "59m 59s"), (3600, "1h 00m"), (140_520, "39h 02m"),
])
def test_durations_read_as_people_say_them(seconds, text):
    assert progress.duration(seconds) == text


def report(**overrides):
    figures = dict(step=500, loss=1.0249, examples_per_sec=1950.34, sec_per_batch=0.0656,
                   learning_rate=0.1, max_steps=1_000_000, epoch=1.28, seconds_left=140_520.0)
    return progress.StepReport(**{**figures, **overrides})


def test_the_progress_line_is_the_originals_then_where_the_run_is():
    line = report().line()
    assert line.endswith(": step 500, loss = 1.02 (1950.3 examples/sec; 0.066 sec/batch) "
                         "[step 500/1000000, 0.0%, epoch 1.28, 39h 02m left]")
    assert TRAIN_LINE.match(line).groups() == ("500", "1000000", "0.0", "1.28", "39h 02m")


@pytest.mark.parametrize("step, max_steps, percent", [
    (1, 3, "33.3"), (2, 3, "66.6"), (999_999, 1_000_000, "99.9"), (3, 3, "100.0"),
    (10, 1_000_000, "0.0"), (1000, 1_000_000, "0.1"),
])
def test_the_percentage_is_rounded_down_so_that_100_means_done(step, max_steps, percent):
    where = report(step=step, max_steps=max_steps).where()
    assert where.startswith(f"[step {step}/{max_steps}, {percent}%, epoch 1.28, ")


def test_an_unknown_time_left_is_left_out():
    assert report(seconds_left=None).where() == "[step 500/1000000, 0.0%, epoch 1.28]"


def result(**overrides):
    fields = dict(start_step=300, step=500, complete=True,
                  last_checkpoint="/runs/a/train/model.ckpt-500", train_dir="/runs/a/train",
                  seconds=65.2, examples_per_sec=1950.34, start_epoch=0.768, epoch=1.28,
                  loss=1.0249)
    return progress.TrainResult(**{**fields, **overrides})


FIGURES = ("This run: 200 steps (epoch 0.77 to 1.28) in 1m 05s, 1950.3 examples/sec on "
           "average, final loss 1.02.")


def test_the_chief_says_where_it_saved_and_how_to_evaluate():
    assert result().summary() == [
        "Training complete at step 500; saved /runs/a/train/model.ckpt-500.", FIGURES,
        "Evaluate it: cifar10-eval --checkpoint_dir=/runs/a/train --run_once"]
    assert result(complete=False).summary() == [
        "Stopped at step 500; saved /runs/a/train/model.ckpt-500. Run the same command "
        "again to resume.", FIGURES,
        "Evaluate it: cifar10-eval --checkpoint_dir=/runs/a/train --run_once"]


def test_a_fresh_start_is_told_to_resume_without_it():
    assert result(complete=False, fresh_start=True).summary()[0] == (
        "Stopped at step 500; saved /runs/a/train/model.ckpt-500. Run the same command "
        "without --fresh_start to resume.")
    assert result(fresh_start=True).summary()[0] == (
        "Training complete at step 500; saved /runs/a/train/model.ckpt-500.")


def test_another_worker_does_not_claim_a_save():
    worker = dict(is_chief=False, task="worker 1")
    assert result(**worker).summary() == [
        "Training complete at step 500 (this is worker 1: the chief saves the checkpoints "
        "in /runs/a/train).", FIGURES]
    assert result(complete=False, **worker).summary() == [
        "Stopped at step 500 (this is worker 1: the chief saves the checkpoints in "
        "/runs/a/train). Run the same command again to resume.", FIGURES]


def test_the_evaluation_command_names_the_eval_dir_it_is_given():
    assert result().summary("/runs/a/eval")[-1] == (
        "Evaluate it: cifar10-eval --checkpoint_dir=/runs/a/train --eval_dir=/runs/a/eval "
        "--run_once")
    assert result(is_chief=False, task="worker 1").summary("/runs/a/eval") == [
        "Training complete at step 500 (this is worker 1: the chief saves the checkpoints "
        "in /runs/a/train).", FIGURES]


def test_the_evaluation_command_names_the_run_absolutely_and_quoted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert result(train_dir="my runs/a").summary()[-1] == (
        f"Evaluate it: cifar10-eval --checkpoint_dir='{os.path.join(tmp_path, 'my runs/a')}' "
        f"--run_once")
    assert result(train_dir="my runs/a").summary("my runs/a-eval")[-1] == (
        f"Evaluate it: cifar10-eval --checkpoint_dir='{os.path.join(tmp_path, 'my runs/a')}' "
        f"--eval_dir='{os.path.join(tmp_path, 'my runs/a-eval')}' --run_once")


def test_one_step_is_one_step():
    assert result(start_step=499, examples_per_sec=20.0, loss=2.5).figures() == (
        "This run: 1 step (epoch 0.77 to 1.28) in 1m 05s, 20.0 examples/sec on average, "
        "final loss 2.50.")


class _Terminal:
    """A stream that says it is a terminal and keeps what is written to it."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return True


def _screen(text):
    """The last line a terminal shows for ``text``: each \\r goes back to its start
    and overwrites only as far as the new text reaches."""
    line = ""
    for part in text.rstrip("\n").split("\n")[-1].split("\r"):
        line = part + line[len(part):]
    return line


def test_a_shorter_progress_line_on_a_terminal_leaves_nothing_of_the_longer_one():
    from cifar10.core.logs import ProgressLine

    rates = {10: "1,234", 20: "850", 30: "91,000"}
    terminal = _Terminal()
    line = ProgressLine(lambda done, s: f"{done}/100 images ({rates[done]} images/s)", 100,
                        stream=terminal)
    line.show(10)
    line.show(20)
    assert _screen(terminal.text).rstrip() == "20/100 images (850 images/s)"
    line.show(30)
    line.end()
    assert _screen(terminal.text) == "30/100 images (91,000 images/s)"
    assert terminal.text.endswith("\n") and "\x1b" not in terminal.text
