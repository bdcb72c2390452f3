"""The controller's loops: where each loop of steps ends (``loop_end``), and the
loops of a run from its start to ``max_steps`` or a stop (``LoopController``), with
the small objects that act where each ends: the progress meter (lines, rates;
``meter``), the saver (checkpoints; ``Saver``), the profiler's window
(``profiling``) and the workers' stop (``coordination``).  A NaN or infinite loss
stops the run.
"""

from __future__ import annotations

import math
from typing import Callable

import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import DivergedError
from cifar10.distribute import coordination
from cifar10.runs.rundir import RunDirectory
from cifar10.runs import summaries
from cifar10.training import profiling
from cifar10.training.engine import Trainer
from cifar10.training.meter import ProgressMeter
from cifar10.training.progress import StepReport


def loop_end(done: int, start: int, config: TrainConfig) -> int:
    """The last step of the loop that follows step ``done`` in a run that started
    at ``start``: ``steps_per_loop`` steps on, or sooner where the host has work:
    the first step, a log line, summaries, a checkpoint, ``max_steps``, each edge
    of the profile window (a loop ends before its first step and at its last), and
    each step inside it (a loop of one step, which the profiler's trace marks)."""
    cfg = config

    def next_multiple(k):
        return (done // k + 1) * k
    ends = [done + cfg.steps_per_loop, cfg.max_steps, next_multiple(cfg.log_frequency),
            next_multiple(cfg.summary_steps), next_multiple(cfg.checkpoint_steps)]
    if done == start:
        ends.append(start + 1)
    if cfg.profile_steps:
        first, last = cfg.profile_steps
        ends += [step for step in (first - 1, last) if step > done]
        if first <= done + 1 <= last:
            ends.append(done + 1)
    return min(ends)


class LoopController:
    """Runs ``trainer``'s loops from step ``start`` to ``max_steps`` or a stop, and
    acts where each ends: the progress meter, the saver, the profiler's window and
    the workers' stop.

    The host reads the losses, checks for a stop and saves only where a loop
    ends, so a stop request is honoured within ``steps_per_loop`` steps.
    """

    def __init__(self, trainer: Trainer, cluster: coordination.Coordinator,
                 run_dir: RunDirectory, start: int,
                 print_fn: Callable[[str], None],
                 on_report: Callable[[StepReport], None] | None):
        cfg = trainer.config
        self.trainer, self.cluster, self.run_dir = trainer, cluster, run_dir
        self.start = self.done = start  # the step the run started at; the last one done
        self.logdir = cfg.train_dir if cluster.is_chief else None  # the others write nothing
        self.meter = ProgressMeter(trainer, start, print_fn, on_report)
        self.saver = Saver(trainer, run_dir)
        self.profile = profiling.StepWindow(cfg.profile_steps, self.logdir, start, print_fn)

    def run(self, files, settings: dict) -> int:
        """Steps on the batches of ``files`` until ``max_steps`` or a stop; returns the
        step reached.  ``settings`` are shown in TensorBoard with the run's config."""
        cfg, trainer = self.trainer.config, self.trainer
        iterator = None
        try:
            # Inside: making the iterator reads the files (the cache fills), which
            # may fail as a step does (a file gone since it was checked: one line).
            iterator = iter(trainer.dataset(files, self.start))
            self.cluster.watch(lambda: self.saver.save(int(trainer.state.step.numpy())))
            with summaries.file_writer(self.logdir):
                summaries.write_run_config(settings, step=self.start)
                # The first call records the step's graph for the Graphs dashboard.
                tf.summary.trace_on(graph=True, profiler=False)
                self.meter.steps_begin()
                while self.done < cfg.max_steps:
                    end = loop_end(self.done, self.start, cfg)
                    alone = self._before_loop(iterator, end)
                    with self.profile.marker(end):
                        losses, diverged = trainer.run_steps(
                            iterator, end - self.done,
                            with_summaries=end % cfg.summary_steps == 0, alone=alone)
                    self._loop_ended(end, float(losses["total_loss"]), diverged)
                    if self.cluster.should_stop():
                        break
                self.saver.save(self.done)  # stopped between checkpoints: keep the work done
                self.meter.steps_end()
        except tf.errors.OpError as e:
            raise self.cluster.failure(e, self.done, self.run_dir.saved_path()) from e
        finally:
            self.profile.close()
            # Stop the input pipeline here, not at some later garbage collection (the
            # traced step keeps this frame alive); see devices.input_options for its cost.
            del iterator
        return self.done

    def _before_loop(self, iterator, end: int) -> bool:
        """Before the loop of steps ``done + 1`` to ``end``: builds its step function
        with the progress clock stopped (``Trainer.prepare``), and starts the
        profiler where its window begins.  Returns whether the loop is a step alone
        (inside the window, marked with its number in the trace).

        Every worker runs the window's steps alone, traced or not, so that all run the
        same functions; the window's are built before the profiler starts.
        """
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

    def _loop_ended(self, end: int, loss: float, diverged: int) -> None:
        """The loop up to step ``end`` ran: its loss is checked, then the profiler's
        window, the progress meter and the saver act."""
        if self.done == self.start:
            tf.summary.trace_export("train_step", step=self.start)
        if diverged:
            what = "with loss = NaN" if math.isnan(loss) else f"with an infinite loss ({loss})"
            raise DivergedError(f"Model diverged {what} at step {diverged}; "
                                f"{self.run_dir.describe_latest('the last good checkpoint')}")
        self.profile.after(end)
        self.meter.steps_done(end, end - self.done, loss)
        self.done = end
        self.saver.at_loop_end(end)


class Saver:
    """Saves the run's checkpoints: every ``checkpoint_steps`` steps and at
    ``max_steps`` (``at_loop_end``), and when a run stops (``save``); never from
    weights that are not all finite."""

    def __init__(self, trainer: Trainer, run_dir: RunDirectory):
        self.trainer, self.run_dir = trainer, run_dir

    def at_loop_end(self, step: int) -> None:
        cfg = self.trainer.config
        if step % cfg.checkpoint_steps == 0 or step == cfg.max_steps:
            self.save(step)

    def save(self, step: int) -> None:
        # A finite loss does not prove that the update it led to was finite; a
        # checkpoint is only written from weights that are all finite.
        if not all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.trainer.variables):
            raise DivergedError(
                f"Model diverged: weights are not finite (NaN or infinite) at step {step}; "
                f"{self.run_dir.describe_latest('the last good checkpoint')}")
        self.run_dir.save(step)
