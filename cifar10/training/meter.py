"""The clock of a training run: the figures of its progress lines and of its end.

``ProgressMeter`` times the steps, prints each logged step's line (``progress``
words it) and writes its examples_per_sec summary; with ``--use_fp16`` it says
how many steps the loss scale skipped.  At the run's end it gives the figures of
the run's summary (``TrainResult``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import tensorflow as tf

from cifar10.training.engine import Trainer
from cifar10.training.progress import StepReport
from cifar10.training.schedule import learning_rate


class ProgressMeter:
    """Times the steps of a run: prints each report's line (``StepReport``), writes its
    examples_per_sec summary, hands it to ``on_report``, and gives the run's figures
    at its end (``figures``).

    The clock of the rates starts when the steps begin (``steps_begin``) and stops
    while a step function is built (``clock_stopped``), so that no rate includes
    tracing.  The time left is the remaining steps at the pace since the run's first
    line (that line's own step starts the input pipeline: no measure of the rest).

    Args:
      trainer: the trainer whose steps it times.
      start: the step the run starts from.
      print_fn: where the lines go.
      on_report: called with each report, after its line is printed; or None.
    """

    def __init__(self, trainer: Trainer, start: int, print_fn: Callable[[str], None],
                 on_report: Callable[[StepReport], None] | None = None):
        self.trainer, self.print_fn, self.on_report = trainer, print_fn, on_report
        self.start_step = self.step = start
        self.began = time.monotonic()  # the run's wall time counts from here
        self.start_epoch = self._epoch()
        self.clock = self.ended = self.began  # when the steps began and ended
        self.last = self.began  # when the last report was done
        self.steps = 0  # steps since the last report
        self.first: tuple[float, int] | None = None  # (time, step) of the first report
        self.loss: float | None = None
        self.skipped = 0  # steps skipped for non-finite gradients (--use_fp16), so far

    def _epoch(self) -> float:
        return int(self.trainer.state.examples_seen.numpy()) / self.trainer.examples_per_epoch

    def steps_begin(self) -> None:
        """The steps begin: their clock starts."""
        self.clock = self.last = time.monotonic()

    @contextlib.contextmanager
    def clock_stopped(self):
        """A context whose time no rate counts (building a step function)."""
        began = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - began
            self.clock, self.last = self.clock + spent, self.last + spent
            if self.first:
                self.first = (self.first[0] + spent, self.first[1])

    def steps_done(self, step: int, count: int, loss: float) -> None:
        """``count`` more steps are done, the last of them ``step`` with ``loss``.

        A line is due every ``log_frequency`` steps, at the run's first step and at
        ``max_steps``.
        """
        self.steps += count
        self.step, self.loss = step, loss
        cfg = self.trainer.config
        if step % cfg.log_frequency and step not in (self.start_step + 1, cfg.max_steps):
            return
        report = self._report(step, loss, time.monotonic())
        self.print_fn(report.line())
        tf.summary.scalar("examples_per_sec", report.examples_per_sec, step=step)
        if self.trainer.loss_scale is not None:
            self._loss_scale(step)
        if self.on_report:
            self.on_report(report)
        self.last, self.steps = time.monotonic(), 0

    def _report(self, step: int, loss: float, now: float) -> StepReport:
        trainer, duration = self.trainer, now - self.last
        before = trainer.state.examples_seen - trainer.global_batch  # this update's rate
        return StepReport(
            step=step, loss=loss,
            examples_per_sec=self.steps * trainer.global_batch / duration,
            sec_per_batch=duration / self.steps / trainer.num_replicas,
            learning_rate=float(learning_rate(before, trainer.examples_per_epoch,
                                              trainer.config.initial_learning_rate)),
            max_steps=trainer.config.max_steps, epoch=self._epoch(),
            seconds_left=self._seconds_left(step, now))

    def _seconds_left(self, step: int, now: float) -> float | None:
        max_steps = self.trainer.config.max_steps
        if self.first is None:
            self.first = (now, step)
        first_time, first_step = self.first
        if step == first_step or step >= max_steps:
            return None
        return (max_steps - step) * (now - first_time) / (step - first_step)

    def _loss_scale(self, step: int) -> None:
        """--use_fp16: says how many steps were skipped since the last line, if any."""
        scale = self.trainer.loss_scale
        skipped, value = int(scale.skipped.numpy()), float(scale.scale.numpy())
        if skipped > self.skipped:
            self.print_fn(f"{skipped - self.skipped} step(s) had non-finite gradients and were "
                          f"skipped since the last line; loss scale now {value:g}.")
        self.skipped = skipped
        tf.summary.scalar("loss_scale", value, step=step)
        tf.summary.scalar("skipped_steps", skipped, step=step)

    def steps_end(self) -> None:
        """The steps are over and saved: their clock stops."""
        self.ended = time.monotonic()

    def figures(self) -> dict:
        """The run's figures, as ``TrainResult``'s fields, once the steps ended."""
        steps = self.step - self.start_step
        return {"seconds": time.monotonic() - self.began, "start_epoch": self.start_epoch,
                "epoch": self._epoch(), "loss": self.loss,
                "examples_per_sec": (steps * self.trainer.global_batch
                                     / max(self.ended - self.clock, 1e-9))}
