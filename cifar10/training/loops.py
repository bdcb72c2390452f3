"""The loops of a run (``LoopController``), each ending where the host has work
(``loop_end``): progress and the metrics file, checkpoints, validation, the profiler's
window (``StepWindow``), a stop; a loop that does not end in time ends the process
(``watchdog``)."""

from __future__ import annotations

import contextlib
import math
import os
from typing import Callable, Iterator

from absl import logging
import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import DivergedError
from cifar10.distribute import workers
from cifar10.runs import summaries
from cifar10.runs.metrics import MetricsFile
from cifar10.runs.rundir import RunDirectory
from cifar10.training.engine import Trainer
from cifar10.training.progress import ProgressMeter, StepReport
from cifar10.training.validation import Validation
from cifar10.training.watchdog import Watchdog


def loop_end(done: int, start: int, config: TrainConfig) -> int:
    """The last step of the loop after step ``done``: ``steps_per_loop`` steps on, or
    sooner where the host has work (each step inside the profile window is one loop).
    The log lines' figures wait on the device for the loop's end.  A run's first two
    steps are loops of their own: the first warms up, the second times a step for the
    ``Watchdog``."""
    cfg = config

    def next_multiple(k):
        return (done // k + 1) * k
    ends = [done + cfg.steps_per_loop, cfg.max_steps, next_multiple(cfg.summary_steps),
            next_multiple(cfg.checkpoint_steps)]
    if cfg.eval_every_steps:
        ends.append(next_multiple(cfg.eval_every_steps))
    if done < start + 2:
        ends.append(done + 1)
    if cfg.profile_steps:
        first, last = cfg.profile_steps
        ends += [step for step in (first - 1, last) if step > done]
        if first <= done + 1 <= last:
            ends.append(done + 1)
    return min(ends)


class LoopController:
    """Runs ``trainer``'s loops from step ``start``; the host reads the steps' figures,
    checks for a stop and saves only where a loop ends (a stop waits up to
    ``steps_per_loop``).  The chief appends each loop's logged and validated steps to
    the metrics file."""

    def __init__(self, trainer: Trainer, cluster: workers.Coordinator,
                 run_dir: RunDirectory, start: int, print_fn: Callable[[str], None],
                 on_report: Callable[[StepReport], None] | None,
                 validation: Validation | None = None):
        cfg = trainer.config
        self.trainer, self.cluster, self.run_dir = trainer, cluster, run_dir
        self.start = self.done = start  # the step the run started at; the last one done
        self.logdir = cfg.train_dir if cluster.is_chief else None  # the others write nothing
        self.validation, self.on_report = validation, on_report
        self.metrics = MetricsFile(cfg.train_dir, start) if cluster.is_chief else None
        self.rows: dict[int, dict] = {}  # the metrics file's rows of this loop, by step
        self.meter = ProgressMeter(trainer, start, print_fn, self._reported)
        self.profile = StepWindow(cfg.profile_steps, self.logdir, start, print_fn)

    def run(self, files, settings: dict) -> int:
        """Trains on ``files`` until ``max_steps`` or a stop; returns the step reached.
        ``settings`` are shown in TensorBoard."""
        cfg, trainer = self.trainer.config, self.trainer
        iterator = None
        try:
            # Inside: making the iterator reads the files, which may fail as a step does.
            iterator = iter(trainer.dataset(files, self.start))
            self.cluster.watch(lambda: self.save(int(trainer.state.step.numpy())))
            watchdog = Watchdog(cfg.step_timeout_secs, self._hung, trainer.replay_batches)
            with summaries.file_writer(self.logdir), watchdog:
                summaries.write_run_config(settings, step=self.start)
                if self.logdir:
                    summaries.write_graph(trainer.state.model, cfg.batch_size)
                self.meter.steps_begin()
                while self.done < cfg.max_steps:
                    end = loop_end(self.done, self.start, cfg)
                    alone = self._before_loop(iterator, end)
                    # (A worker's loop after a validation waits out the chief's pass too.)
                    with self.profile.marker(end), watchdog.watching(self.done, end):
                        figures, diverged = trainer.run_steps(
                            iterator, end - self.done,
                            with_summaries=end % cfg.summary_steps == 0, alone=alone)
                    self._loop_ended(end, figures, diverged)
                    if self.cluster.should_stop():
                        break
                self.save(self.done)  # stopped between checkpoints: keep the work done
                self.meter.steps_end()
        except tf.errors.OpError as e:
            raise self.cluster.failure(e, self.done, self.run_dir.saved_path()) from e
        finally:
            self.profile.close()
            # Stops the input pipeline now (the traced step keeps this frame alive).
            del iterator
        return self.done

    def _before_loop(self, iterator, end: int) -> bool:
        """Builds the loop's step functions (all the window's before the profiler starts)
        with the clock stopped; starts the profiler.  Returns whether it is a step alone."""
        every = self.trainer.config.summary_steps
        alone = self.profile.covers(end)
        kinds = [end % every == 0]
        if alone and not self.profile.covers(self.done):  # the window begins
            first, last = self.profile.window
            with_summaries = last // every - (first - 1) // every  # summary steps in it
            kinds = ([False] if with_summaries <= last - first else []) + (
                [True] if with_summaries else [])
        with self.meter.clock_stopped():
            for kind in kinds:
                self.trainer.prepare(iterator, with_summaries=kind, alone=alone)
        self.profile.before(self.done + 1)
        return alone

    def _loop_ended(self, end: int, figures: dict, diverged: int) -> None:
        if diverged:  # the loop ran on; the lines before it, then the error
            self.meter.steps_done(figures, last=diverged - 1)
            self._write_rows()
            loss = figures["total_loss"][diverged - self.done - 1]
            what = "with loss = NaN" if math.isnan(loss) else f"with an infinite loss ({loss})"
            raise DivergedError(f"Model diverged {what} at step {diverged}; "
                                f"{self.run_dir.describe_latest('the last good checkpoint')}")
        self.profile.after(end)
        self.meter.steps_done(figures)
        self.done = end
        cfg = self.trainer.config
        if end % cfg.checkpoint_steps == 0 or end == cfg.max_steps:
            self.save(end)
        if self._validates(end) and self.cluster.is_chief:
            with self.meter.clock_stopped():  # in no rate, nor in the watchdog's calls
                self.rows.setdefault(end, {}).update(self.validation(end),
                                                     epoch=self.meter.epoch())
        self._write_rows()

    def _write_rows(self) -> None:
        """Appends the loop's rows to the metrics file (the chief's)."""
        if self.metrics and self.rows:
            self.metrics.append(list(self.rows.values()))
        self.rows.clear()

    def _validates(self, step: int) -> bool:
        return self.validation is not None and step > self.start and self.validation.due(step)

    def _reported(self, report: StepReport) -> None:
        """A logged step: a row of the metrics file, and the caller's ``on_report``."""
        self.rows[report.step] = {
            "step": report.step, "epoch": report.epoch, "loss": report.loss,
            "learning_rate": report.learning_rate, "examples_per_sec": report.examples_per_sec}
        if self.on_report:
            self.on_report(report)

    def save(self, step: int) -> None:
        """A checkpoint, only from weights that are all finite (a finite loss does not
        prove that the update it led to was)."""
        if not all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.trainer.variables):
            raise DivergedError(
                f"Model diverged: weights are not finite (NaN or infinite) at step {step}; "
                f"{self.run_dir.describe_latest('the last good checkpoint')}")
        self.run_dir.save(step)

    def _hung(self, done: int, end: int, seconds: float) -> str:
        """The error line of the loop of steps ``done`` + 1 to ``end``, not done after
        ``seconds``."""
        timeout = self.trainer.config.step_timeout_secs
        steps = f"step {end}" if end == done + 1 else f"steps {done + 1} to {end}"
        plus = (f"plus {Watchdog.SLACK} times the slowest step so far for each of its steps"
                if done > self.start else
                f"plus {Watchdog.REPLAY_SECS * 1000:g} ms for each of the "
                f"{self.trainer.replay_batches} batches a --deterministic resume replays")
        limit = (f"{timeout:g} s (--step_timeout_secs)" if seconds <= timeout else
                 f"{seconds:.0f} s (--step_timeout_secs={timeout:g}, {plus})")
        peers = ("; under several workers, also a worker gone or out of reach (see the "
                 "others' errors)" if self.cluster.multi_worker else "")
        return (f"training hung: {steps} did not finish within {limit}; on GPUs most often "
                f"in NCCL's all-reduce: try --all_reduce=one_device, or "
                f"NCCL_P2P_DISABLE=1 where the GPUs' peer-to-peer copies hang{peers}; "
                f"{self.run_dir.describe_latest()}")


class StepWindow:
    """``--profile_steps``: a profiler trace of a window of steps in
    ``<logdir>/plugins/profile/``.  A profiler that fails costs the trace (a warning), never
    the run; ``logdir`` None (a worker that writes nothing) traces nothing."""

    def __init__(self, window: tuple[int, int] | None, logdir: str | None, start_step: int,
                 print_fn=print):
        first, last = window or (0, -1)
        self.window = (max(first, start_step + 1), last)  # this run's steps of it
        self.logdir, self.print_fn = logdir, print_fn
        self.tracing = bool(window and logdir)  # to trace, or tracing
        self.running, self.done = False, 0  # the profiler runs; the last step traced
        if self.tracing and last <= start_step:
            logging.warning(f"--profile_steps={first},{last} lies before step "
                            f"{start_step + 1}, where this run resumes: no profile is "
                            f"taken. Pass a later window to profile this run.")
            self.tracing = False

    def covers(self, step: int) -> bool:
        """Whether ``step`` lies in the window (a step run alone, on every worker)."""
        return self.window[0] <= step <= self.window[1]

    def marker(self, step: int):
        if not self.running:
            return contextlib.nullcontext()
        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def before(self, step: int) -> None:
        if step == self.window[0] and self.tracing:
            try:
                tf.profiler.experimental.start(self.logdir)
            except tf.errors.OpError as e:
                logging.warning(f"cannot start the profiler for --profile_steps "
                                f"({e.message}); training goes on without a profile.")
                self.tracing = False
                return
            self.running, self.done = True, step - 1

    def after(self, step: int) -> None:
        if self.running:
            self.done = step
            if step == self.window[1]:
                self.close()

    def close(self) -> None:
        """Stops and saves the trace, if the profiler is running."""
        if not self.running:
            return
        first, self.running, self.tracing = self.window[0], False, False
        try:
            tf.profiler.experimental.stop()
        except tf.errors.OpError as e:
            logging.warning(f"cannot save the profile of --profile_steps in {self.logdir} "
                            f"({e.message}); training goes on.")
            return
        steps = (f"steps {first} to {self.done}" if self.done > first else
                 f"step {first}" if self.done == first else f"the start of step {first}")
        self.print_fn(f"Profiled {steps}: the trace is in "
                      f"{os.path.join(self.logdir, 'plugins', 'profile')}, for TensorBoard's "
                      f"Profile tab.")


@contextlib.contextmanager
def op_determinism(enabled: bool) -> Iterator[None]:
    """``--deterministic``: TensorFlow's op determinism for the context's time, then left
    as found."""
    if not enabled:
        yield
        return
    # Reading and turning it off are only in TensorFlow's private config module.
    from tensorflow.python.framework import config as tf_config

    was_on = tf_config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if not was_on:
            tf_config.disable_op_determinism()
