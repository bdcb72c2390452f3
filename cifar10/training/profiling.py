"""``--profile_steps``: a TensorFlow profiler trace of a window of training steps.

The trace goes where TensorBoard's Profile tab looks for it:
``<train_dir>/plugins/profile/<date_time>/<host>.xplane.pb`` (the tab comes with
the optional ``profile`` install extra, tensorboard-plugin-profile).  It covers
every device of this machine, so every replica; under several workers only the
chief traces, into the run directory it writes.

Each step of the window is marked in the trace with its number
(``tf.profiler.experimental.Trace('train', step_num=step, _r=1)``, TensorFlow's
step marker), so that the Profile tab's overview_page shows step times.  The
trainer runs each step of the window as a call of its own without a TensorFlow
loop: the profiler takes the iterations of a traced loop for the steps, which
then carry no marker, and finds no step at all.

A profiler that cannot start or save (another one is running in the process, the
directory is full) costs the trace, never the training: one warning says so.
"""

from __future__ import annotations

import contextlib
import os

from absl import logging
import tensorflow as tf


class StepWindow:
    """Starts the profiler before step ``first`` and stops it after step ``last``.

    The trainer calls ``before(step)`` before running a step, runs it inside
    ``marker(step)`` and calls ``after(step)`` once it is done; ``close()`` at the
    end stops a profiler still running (a run stopped inside the window keeps the
    trace of the steps it ran).  ``covers(step)`` says, on every worker, whether the
    step lies in the window.

    Args:
      window: (first, last) steps to trace, both included; None traces nothing.
      logdir: the run directory, or None where this worker writes nothing.
      start_step: the step the run resumes from: a window that ended before it
        is not traced (one warning), one that began before it is traced from it.
      print_fn: where the line saying where the trace went goes.
    """

    def __init__(self, window: tuple[int, int] | None, logdir: str | None, start_step: int,
                 print_fn=print):
        self.first, self.last = window if window else (0, -1)
        self.logdir = logdir
        self.print_fn = print_fn
        self.running = False
        self.done = 0  # the last step traced while running
        if window and logdir and self.last <= start_step:
            logging.warning(f"--profile_steps={self.first},{self.last} lies before step "
                            f"{start_step + 1}, where this run resumes: no profile is "
                            f"taken. Pass a later window to profile this run.")
            self.first, self.last = 0, -1
        self.first = max(self.first, start_step + 1)
        # The window's steps in this run, on every worker, traced or not.
        self.window = (max(window[0], start_step + 1), window[1]) if window else (0, -1)

    def covers(self, step: int) -> bool:
        """Whether ``step`` lies in the window (a step the trainer runs alone)."""
        return self.window[0] <= step <= self.window[1]

    def marker(self, step: int):
        """A context that marks step ``step`` in the trace while the profiler runs."""
        if not self.running:
            return contextlib.nullcontext()
        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def active(self) -> bool:
        """Whether some step is still to be traced."""
        return self.logdir is not None and self.first <= self.last

    def before(self, step: int) -> None:
        if step == self.first and self.active():
            try:
                tf.profiler.experimental.start(self.logdir)
            except tf.errors.OpError as e:
                logging.warning(f"cannot start the profiler for --profile_steps "
                                f"({e.message}); training goes on without a profile.")
                self.first, self.last = 0, -1
                return
            self.running, self.done = True, step - 1

    def after(self, step: int) -> None:
        if self.running:
            self.done = step
            if step == self.last:
                self.close()

    def close(self) -> None:
        """Stops and saves the trace, if the profiler is running."""
        if not self.running:
            return
        first, self.running = self.first, False
        self.first, self.last = 0, -1
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
