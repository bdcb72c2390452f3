"""What a training run prints about itself: its progress lines and its end.

Each progress line is the original tutorial's, followed by where the run is:

    2026-11-25 10:00:00.000000: step 500, loss = 1.02 (1950.3 examples/sec; 0.066 sec/batch) [step 500/1000000, 0.0%, epoch 1.28, 39h 02m left]

The same plain line on a terminal and in a log file: every line stays in the
record (an updating terminal line would overwrite the loss history, and would
tangle with warnings, notices and the ``[worker i]`` prefixes of several workers).

The end of a run that trained is one summary (``TrainResult.summary``): how it
ended and where the checkpoint is, the run's figures, and the command that
evaluates it.  No TensorFlow here: ``meter`` measures, this module words.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import shlex


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
    max_steps: int  # where the run ends
    epoch: float  # epochs of examples trained once the step is done
    seconds_left: float | None  # to max_steps at the run's pace; None where not known

    def line(self) -> str:
        """The original's progress line, then where the run is (``where``)."""
        return "%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch) %s" % (
            datetime.datetime.now(), self.step, self.loss, self.examples_per_sec,
            self.sec_per_batch, self.where())

    def where(self) -> str:
        """'[step 500/1000000, 0.0%, epoch 1.28, 39h 02m left]'.

        The percentage is rounded down, so that 100.0% means done; the time left
        is left out where it is not known.
        """
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
    is_chief: bool = True  # this process saves the checkpoints (one machine, or the chief)
    task: str = "chief"  # this process's task in a multi-worker run ('worker 1')
    seconds: float = 0.0  # wall time of the training, from the restore to the last save
    examples_per_sec: float = 0.0  # the steps run over that time, after tracing
    start_epoch: float = 0.0  # epochs of examples trained when the call started
    epoch: float = 0.0  # and when it ended
    loss: float | None = None  # the total loss of the last step run
    fresh_start: bool = False  # the call started with --fresh_start (its rerun would delete the run)

    @property
    def steps_run(self) -> int:
        return self.step - self.start_step

    @property
    def stopped(self) -> bool:
        return not self.complete

    def summary(self, eval_dir: str | None = None) -> list[str]:
        """The lines that end a call that ran steps: how it ended and (the chief) the
        checkpoint it saved; the call's figures; (the chief) how to evaluate it, into
        ``eval_dir`` when given (None: the evaluator's default)."""
        ended = (f"Training complete at step {self.step}" if self.complete
                 else f"Stopped at step {self.step}")
        if not self.is_chief:
            ended += f" (this is {self.task}: the chief saves the checkpoints in {self.train_dir})"
        elif self.last_checkpoint:
            ended += f"; saved {self.last_checkpoint}"
        ended += "." if self.complete else f". {self.resume_advice()}"
        lines = [ended, self.figures()]
        if self.is_chief and self.last_checkpoint:
            into = f" --eval_dir={shlex.quote(os.path.abspath(eval_dir))}" if eval_dir else ""
            lines.append("Evaluate it: cifar10-eval --checkpoint_dir="
                         f"{shlex.quote(os.path.abspath(self.train_dir))}{into} --run_once")
        return lines

    def resume_advice(self) -> str:
        """How to go on with a stopped run: the same command, unless it started with
        --fresh_start, which would delete what it saved."""
        if self.fresh_start:
            return "Run the same command without --fresh_start to resume."
        return "Run the same command again to resume."

    def figures(self) -> str:
        """'This run: 500 steps (epoch 0.00 to 1.28) in 4m 16s, 250.0 examples/sec on
        average, final loss 1.02.'"""
        steps = f"{self.steps_run} step{'s' if self.steps_run != 1 else ''}"
        loss = "" if self.loss is None else f", final loss {self.loss:.2f}"
        return (f"This run: {steps} (epoch {self.start_epoch:.2f} to {self.epoch:.2f}) in "
                f"{duration(self.seconds)}, {self.examples_per_sec:.1f} examples/sec on "
                f"average{loss}.")
