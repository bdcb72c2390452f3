"""How the trainer words its progress lines and a run's end (what it measures: test_train)."""

import io
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core import config
from cifar10.training import progress
from conftest import TRAIN_LINE


@pytest.mark.parametrize("seconds, text", [
    (4.24, "4.2s"), (59.94, "59.9s"), (59.96, "1m 00s"), (125, "2m 05s"),
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
    assert report(seconds_left=None).where() == "[step 500/1000000, 0.0%, epoch 1.28]"


@pytest.mark.parametrize("step, max_steps, percent", [
    (2, 3, "66.6"), (999_999, 1_000_000, "99.9"), (3, 3, "100.0"), (1000, 1_000_000, "0.1"),
])
def test_the_percentage_is_rounded_down_so_that_100_means_done(step, max_steps, percent):
    where = report(step=step, max_steps=max_steps).where()
    assert where.startswith(f"[step {step}/{max_steps}, {percent}%, epoch 1.28, ")


def result(**overrides):
    fields = dict(start_step=300, step=500, complete=True,
                  last_checkpoint="/runs/a/train/model.ckpt-500", train_dir="/runs/a/train",
                  seconds=65.2, examples_per_sec=1950.34, start_epoch=0.768, epoch=1.28,
                  loss=1.0249)
    return progress.TrainResult(**{**fields, **overrides})


FIGURES = ("This run: 200 steps (epoch 0.77 to 1.28) in 1m 05s, 1950.3 examples/sec on "
           "average, final loss 1.02.")
SAVED = "saved /runs/a/train/model.ckpt-500"
EVALUATE = "Evaluate it: cifar10-eval --checkpoint_dir=/runs/a/train --run_once"
WORKER = "(this is worker 1: the chief saves the checkpoints in /runs/a/train)"


@pytest.mark.parametrize("overrides, lines", [
    ({}, [f"Training complete at step 500; {SAVED}.", FIGURES, EVALUATE]),
    ({"complete": False}, [f"Stopped at step 500; {SAVED}. Run the same command again to "
                           f"resume.", FIGURES, EVALUATE]),
    ({"complete": False, "fresh_start": True}, [
        f"Stopped at step 500; {SAVED}. Run the same command without --fresh_start to "
        f"resume.", FIGURES, EVALUATE]),
    ({"fresh_start": True}, [f"Training complete at step 500; {SAVED}.", FIGURES, EVALUATE]),
    ({"is_chief": False, "task": "worker 1"}, [f"Training complete at step 500 {WORKER}.",
                                               FIGURES]),
    ({"is_chief": False, "task": "worker 1", "complete": False}, [
        f"Stopped at step 500 {WORKER}. Run the same command again to resume.", FIGURES]),
    ({"start_step": 499, "examples_per_sec": 20.0, "loss": 2.5}, [
        f"Training complete at step 500; {SAVED}.", "This run: 1 step (epoch 0.77 to 1.28) "
        "in 1m 05s, 20.0 examples/sec on average, final loss 2.50.", EVALUATE]),
])
def test_the_end_of_a_run_says_how_it_ended_its_figures_and_how_to_evaluate_it(overrides,
                                                                                 lines):
    assert result(**overrides).summary() == lines


def test_the_evaluation_command_names_the_run_and_eval_dir_absolutely_and_quoted(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert result(train_dir="my runs/a").summary("my runs/a-eval")[-1] == (
        f"Evaluate it: cifar10-eval --checkpoint_dir='{os.path.join(tmp_path, 'my runs/a')}' "
        f"--eval_dir='{os.path.join(tmp_path, 'my runs/a-eval')}' --run_once")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _screen(text):
    """The last line a terminal shows for ``text`` (a \\r overwrites as far as it reaches)."""
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
    assert _screen(terminal.getvalue()).rstrip() == "20/100 images (850 images/s)"
    line.show(30)
    line.end()
    assert _screen(terminal.getvalue()) == "30/100 images (91,000 images/s)"
    assert terminal.getvalue().endswith("\n") and "\x1b" not in terminal.getvalue()


def test_a_loops_lines_come_at_its_end_with_each_logged_steps_own_figures(monkeypatch):
    """Steps 2 to 20 as one loop of --use_fp16 (step 4 and steps 15-16 skipped): the lines
    of steps 10 and 20 from their own rows, each after the skipped steps it follows."""
    clock = iter([0.0, 0.0, 1.0, 1.0, 20.0, 20.0])  # the run and its steps began; each
    # loop's end, and when its lines were said
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    trainer = types.SimpleNamespace(
        config=config.TrainConfig(train_dir="x", max_steps=20), loss_scale=object(),
        global_batch=10, num_replicas=1, examples_per_epoch=100,
        state=types.SimpleNamespace(examples_seen=tf.zeros((), tf.int64)))
    lines = []
    meter = progress.ProgressMeter(trainer, 0, lines.append)
    meter.steps_begin()
    skipped = np.cumsum([s in (4, 15, 16) for s in range(1, 21)])
    rows = {"step": np.arange(1, 21), "total_loss": np.linspace(4.0, 2.1, 20),
            "examples_seen": 10 * (np.arange(1, 21) - skipped),
            "loss_scale": 2.0 ** (15 - skipped), "skipped_steps": skipped}
    meter.steps_done({name: values[:1] for name, values in rows.items()})
    meter.steps_done({name: values[1:] for name, values in rows.items()})
    said = [line if "loss scale" in line else TRAIN_LINE.match(line)[0].split(": ", 1)[1]
            for line in lines]
    assert said == [
        "step 1, loss = 4.00 (10.0 examples/sec; 1.000 sec/batch) [step 1/20, 5.0%, epoch 0.10]",
        "step 10, loss = 3.10 (10.0 examples/sec; 1.000 sec/batch) [step 10/20, 50.0%, "
        "epoch 0.90, 10.0s left]",
        "1 step(s) had non-finite gradients and were skipped since the last line; loss scale "
        "now 16384.",
        "step 20, loss = 2.10 (10.0 examples/sec; 1.000 sec/batch) [step 20/20, 100.0%, "
        "epoch 1.70]",
        "2 step(s) had non-finite gradients and were skipped since the last line; loss scale "
        "now 4096."]
