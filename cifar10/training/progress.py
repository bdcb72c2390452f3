"""A run's progress: its clock (``ProgressMeter``), its lines (``StepReport``: the original
tutorial's, then where the run is) and its end (``TrainResult``):

    2026-11-25 10:00:00.000000: step 500, loss = 1.02 (1950.3 examples/sec; 0.066 sec/batch) [step 500/1000000, 0.0%, epoch 1.28, 39h 02m left]
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import os
import shlex
import time
from typing import Callable

import numpy as np
import tensorflow as tf

from cifar10.core import logs
from cifar10.runs.best import Best
from cifar10.training.step import learning_rate


def duration(seconds: float) -> str:
    """'4.2s', '2m 05s', '39h 02m'."""
    if seconds < 59.95:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


@dataclasses.dataclass(frozen=True)
class StepReport:
    """The figures of a logged step (every ``log_frequency`` steps, the first and the last)."""

    step: int
    loss: float  # the step's total loss over the global batch
    examples_per_sec: float  # over all replicas, since the previous report
    sec_per_batch: float  # a step's time shared among the replicas, as the original
    learning_rate: float  # the rate of the step's update
    max_steps: int
    epoch: float  # epochs of examples trained once the step is done
    seconds_left: float | None  # to max_steps at the run's pace; None where not known
    # When the step ended: read where its loop ended, less its share of the loop's time.
    when: datetime.datetime = dataclasses.field(default_factory=datetime.datetime.now)

    def line(self) -> str:
        return "%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch) %s" % (
            self.when, self.step, self.loss, self.examples_per_sec,
            self.sec_per_batch, self.where())

    def where(self) -> str:
        """'[step 500/1000000, 0.0%, epoch 1.28, 39h 02m left]': the percentage rounded
        down, so that 100.0% means done; no time left where it is not known."""
        percent = math.floor(1000 * self.step / self.max_steps) / 10
        parts = [f"step {self.step}/{self.max_steps}", f"{percent:.1f}%",
                 f"epoch {self.epoch:.2f}"]
        if self.seconds_left is not None:
            parts.append(f"{duration(self.seconds_left)} left")
        return "[" + ", ".join(parts) + "]"


@dataclasses.dataclass
class TrainResult:
    """How a call of ``train`` ended, with the figures of its summary."""

    start_step: int  # the step the call started from (the restored one)
    step: int  # the step reached
    complete: bool  # max_steps reached; else a stop was requested before it
    last_checkpoint: str | None  # the newest checkpoint of train_dir
    train_dir: str = ""
    is_chief: bool = True  # this process saves the checkpoints
    task: str = "chief"  # this process's task in a multi-worker run ('worker 1')
    seconds: float = 0.0  # wall time of the training, from the restore to the last save
    examples_per_sec: float = 0.0  # the steps run over that time, after tracing
    start_epoch: float = 0.0  # epochs of examples trained when the call started
    epoch: float = 0.0  # and when it ended
    loss: float | None = None  # the total loss of the last step run
    fresh_start: bool = False  # its rerun would delete the run
    best: Best | None = None  # the kept best checkpoint, where validation ran

    @property
    def steps_run(self) -> int:
        return self.step - self.start_step

    @property
    def stopped(self) -> bool:
        return not self.complete

    def summary(self, eval_dir: str | None = None) -> list[str]:
        """The lines that end a call that ran steps: how it ended (and the checkpoint),
        its figures, and how to evaluate it (into ``eval_dir`` when given)."""
        ended = (f"Training complete at step {self.step}" if self.complete
                 else f"Stopped at step {self.step}")
        if not self.is_chief:
            ended += f" (this is {self.task}: the chief saves the checkpoints in {self.train_dir})"
        elif self.last_checkpoint:
            ended += f"; saved {self.last_checkpoint}"
        if self.complete:
            ended += "."
        else:  # --fresh_start again would delete what it saved
            ended += (". Run the same command without --fresh_start to resume."
                      if self.fresh_start else ". Run the same command again to resume.")
        steps = f"{self.steps_run} step{'s' if self.steps_run != 1 else ''}"
        loss = "" if self.loss is None else f", final loss {self.loss:.2f}"
        lines = [ended, f"This run: {steps} (epoch {self.start_epoch:.2f} to {self.epoch:.2f}) "
                        f"in {duration(self.seconds)}, {self.examples_per_sec:.1f} "
                        f"examples/sec on average{loss}."]
        if self.best is not None:
            lines.append(f"Best: precision @ 1 = {self.best.precision:.3f} at step "
                         f"{self.best.step} ({self.best.path}).")
        if self.is_chief and self.last_checkpoint:
            into = f" --eval_dir={shlex.quote(os.path.abspath(eval_dir))}" if eval_dir else ""
            lines.append(f"Evaluate it: {logs.runnable('cifar10-eval')} --checkpoint_dir="
                         f"{shlex.quote(os.path.abspath(self.train_dir))}{into} --run_once")
        return lines


class ProgressMeter:
    """Times a run's steps for its reports and figures; no rate counts building a step
    function (``clock_stopped``).  A loop's lines come where it ends, each step timed as
    if the loop's time were shared evenly among its steps."""

    def __init__(self, trainer, start: int, print_fn: Callable[[str], None],
                 on_report: Callable[[StepReport], None] | None = None):
        self.trainer, self.print_fn, self.on_report = trainer, print_fn, on_report
        self.start_step = self.step = start
        self.began = time.monotonic()  # the run's wall time counts from here
        self.start_epoch = self.epoch()
        # Steps began, ended; the last report's step time, and the last loop's end.
        self.clock = self.ended = self.last = self.loop_ended = self.began
        self.last_step = start  # the last report's step
        self.first: tuple[float, int] | None = None  # (time, step) of the first report
        self.loss: float | None = None
        self.skipped = 0  # steps skipped for non-finite gradients (--use_fp16), so far

    def epoch(self) -> float:
        """Epochs of examples trained so far."""
        return int(self.trainer.state.examples_seen.numpy()) / self.trainer.examples_per_epoch

    def steps_begin(self) -> None:
        self.clock = self.last = self.loop_ended = time.monotonic()

    @contextlib.contextmanager
    def clock_stopped(self):
        """A context whose time no rate counts (building a step function)."""
        began = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - began
            self.clock, self.last = self.clock + spent, self.last + spent
            self.loop_ended += spent
            if self.first:
                self.first = (self.first[0] + spent, self.first[1])

    def steps_done(self, figures: dict[str, np.ndarray], last: int | None = None) -> None:
        """A loop's steps are done, each with its ``figures`` (``engine.FIGURES``): a line
        for each step every ``log_frequency`` steps, the first and ``max_steps`` (up to
        step ``last``, where given)."""
        now, wall, began = time.monotonic(), datetime.datetime.now(), self.loop_ended
        steps = figures["step"].astype(int)
        self.step, self.loss = int(steps[-1]), float(figures["total_loss"][-1])
        cfg = self.trainer.config
        for i, step in enumerate(steps):
            if (step % cfg.log_frequency and step not in (self.start_step + 1, cfg.max_steps)
                    or last is not None and step > last):
                continue
            at = began + (now - began) * (i + 1) / len(steps)
            row = {name: values[i] for name, values in figures.items()}
            report = self._report(step, row, at, wall - datetime.timedelta(seconds=now - at))
            self.print_fn(report.line())
            tf.summary.scalar("examples_per_sec", report.examples_per_sec, step=step)
            if self.trainer.loss_scale is not None:
                self._loss_scale(step, int(row["skipped_steps"]), float(row["loss_scale"]))
            if self.on_report:
                self.on_report(report)
            self.last, self.last_step = at, step
        spent = time.monotonic() - now  # saying the lines: in no line's rate
        self.last, self.loop_ended = self.last + spent, now + spent

    def _report(self, step: int, row: dict, now: float, wall: datetime.datetime
                ) -> StepReport:
        trainer, duration_, steps = self.trainer, now - self.last, step - self.last_step
        before = int(row["examples_seen"]) - trainer.global_batch  # this update's rate
        if self.first is None:
            self.first = (now, step)
        first_time, first_step = self.first
        left = (None if step in (first_step, trainer.config.max_steps) else
                (trainer.config.max_steps - step) * (now - first_time) / (step - first_step))
        return StepReport(
            step=step, loss=float(row["total_loss"]),
            examples_per_sec=steps * trainer.global_batch / duration_,
            sec_per_batch=duration_ / steps / trainer.num_replicas,
            learning_rate=float(learning_rate(before, trainer.examples_per_epoch,
                                              trainer.config)),
            max_steps=trainer.config.max_steps,
            epoch=int(row["examples_seen"]) / trainer.examples_per_epoch, seconds_left=left,
            when=wall)

    def _loss_scale(self, step: int, skipped: int, value: float) -> None:
        """--use_fp16: says how many steps were skipped since the last line, if any."""
        if skipped > self.skipped:
            self.print_fn(f"{skipped - self.skipped} step(s) had non-finite gradients and were "
                          f"skipped since the last line; loss scale now {value:g}.")
        self.skipped = skipped
        tf.summary.scalar("loss_scale", value, step=step)
        tf.summary.scalar("skipped_steps", skipped, step=step)

    def steps_end(self) -> None:
        self.ended = time.monotonic()

    def figures(self) -> dict:
        """The run's figures, as ``TrainResult``'s fields, once the steps ended."""
        steps = self.step - self.start_step
        return {"seconds": time.monotonic() - self.began, "start_epoch": self.start_epoch,
                "epoch": self.epoch(), "loss": self.loss,
                "examples_per_sec": (steps * self.trainer.global_batch
                                     / max(self.ended - self.clock, 1e-9))}
