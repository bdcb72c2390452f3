"""The evaluator as a library (``evaluate``): one checkpoint scored once, or the
polling loop that scores each new checkpoint of a run once, beside a running
trainer, until the trainer marks the run complete.

A checkpoint already scored is not scored again, also across restarts
(``results.jsonl`` in ``eval_dir`` remembers); ``eval_dir`` is never wiped, and one
this call created is removed again if it fails before it recorded a result.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core.config import EvalConfig, compute_dtype
from cifar10.core.errors import Cifar10Error, first_line, io_advice, io_error
from cifar10.distribute import devices
from cifar10.evaluation import recording, scoring
from cifar10.evaluation.result import EvalResult, class_table
from cifar10.runs import checkpoints, layout
from cifar10.runs import records
from cifar10.runs import summaries

# How often the polling loop looks for a new checkpoint (an evaluation still
# waits --eval_interval_secs after the previous one).
POLL_SECS = 2.0


class NoCheckpointError(Cifar10Error):
    """--run_once found no checkpoint to evaluate; or polling scored nothing and nothing
    is left to score, within eval_timeout or at the end of a complete run."""


def evaluate(config: EvalConfig, print_fn: Callable[[str], None] = print,
             sleep: Callable[[float], None] = time.sleep,
             should_stop: Callable[[], bool] = lambda: False,
             clock: Callable[[], float] = time.monotonic,
             flags_text: str | None = None, command: Sequence[str] = ()) -> list[EvalResult]:
    """Scores checkpoints of ``config.checkpoint_dir`` until training is done.

    With ``run_once``, scores the latest checkpoint (or ``checkpoint``, when
    given, which implies ``run_once``) and returns.  Otherwise
    polls: each new checkpoint is scored once (the newest one when several
    appeared meanwhile), at least ``eval_interval_secs`` apart; it returns when
    the trainer has marked the run complete and its final checkpoint is scored,
    after ``eval_timeout`` seconds without a new checkpoint, or when
    ``should_stop()`` is true.  ``sleep`` and ``clock`` (seconds, for the
    intervals and the timeout) are the waiting and the time it uses.  Each call
    appends its start to ``eval_dir``'s environment.jsonl, with the command line
    ``command``, and ``flags_text`` (the program's flags in flagfile format, if
    given) to its flags.txt (``runs.records``).

    Returns:
      The results of this call, in order.

    Raises:
      NoCheckpointError: ``run_once`` and no checkpoint in ``checkpoint_dir``; or
        polling scored nothing and has no checkpoint to score: ``eval_timeout``
        seconds passed (none appeared, or none of them reads), or the run is
        complete and none of its newest checkpoints reads.
      ValueError: both ``use_fp16`` and ``use_bf16``.
    """
    compute_dtype(config)
    created = not os.path.lexists(config.eval_dir)
    try:
        os.makedirs(config.eval_dir, exist_ok=True)
    except OSError as e:
        raise io_error("cannot create --eval_dir", config.eval_dir, e,
                       io_advice(e) or "choose a directory you can write") from e
    try:
        return _evaluate(config, print_fn, sleep, should_stop, clock, flags_text, command)
    except BaseException:
        # An evaluation that failed before it recorded a result leaves no directory
        # it created (its records and event file would only say that it started).
        if created and not os.path.exists(os.path.join(config.eval_dir,
                                                       recording.RESULTS_FILE)):
            shutil.rmtree(config.eval_dir, ignore_errors=True)
        raise


def _evaluate(config, print_fn, sleep, should_stop, clock, flags_text, command):
    gpus = [device.name for device in tf.config.list_logical_devices("GPU")]
    records.record_start(config.eval_dir, records.environment(
        "cifar10-eval", command, devices.describe(gpus[:1] or ["/device:CPU:0"]),
        tf.__version__), flags_text)
    with summaries.file_writer(config.eval_dir) as writer:
        settings = {**dataclasses.asdict(config), "eval_files": ", ".join(config.eval_files)}
        summaries.write_run_config(settings, step=0, hparams=False)
        recording.warn_of_other_settings(config.eval_dir, _settings(config))
        if config.run_once or config.checkpoint:
            return [_run_once(config, writer, print_fn)]
        return _Poller(config, writer, print_fn, sleep, clock).run(should_stop)


def _run_once(config: EvalConfig, writer, print_fn) -> EvalResult:
    # The newest that reads (one warning names newer ones that do not), as the trainer
    # resumes from the newest that restores.
    newest = None if config.checkpoint else checkpoints.newest_that_reads(config.checkpoint_dir)
    latest = config.checkpoint or (newest.path if newest else None)
    if not latest:
        raise NoCheckpointError(
            f"No checkpoint file found in {config.checkpoint_dir}: train first "
            f"(cifar10-train --train_dir={config.checkpoint_dir}) or point "
            f"--checkpoint_dir at a training run")
    # scoring.UnreadableCheckpoint says which checkpoint does not read, a DataError
    # which data: each is the one-line error.
    result = scoring.evaluate_checkpoint(latest, config)
    recording.record(result, config.eval_dir, writer)
    # One evaluation: its classes too (not when polling).
    for line in result.lines() + class_table(result):
        print_fn(line)
    return result


# Not tf.train.checkpoints_iterator, which goes by the state file and names alone: this
# also rescores a new run's same-named checkpoint, skips an unreadable one once (saying
# so, and scoring the newest older one that reads instead), remembers across restarts
# (results.jsonl) and stops when the run is complete (each is tested).
class _Poller:
    """The polling loop of one ``evaluate`` call and what it remembers."""

    def __init__(self, config: EvalConfig, writer, print_fn: Callable[[str], None],
                 sleep: Callable[[float], None], clock: Callable[[], float]):
        self.config, self.writer, self.print_fn = config, writer, print_fn
        self.sleep, self.clock = sleep, clock
        self.results: list[EvalResult] = []
        self.done = recording.scored_checkpoints(config.eval_dir)  # result keys
        self.failed: set[tuple[str, int]] = set()  # (checkpoint, mtime) that could not be read
        self.said_waiting = False
        self.last_start: float | None = None  # when the last one scored started
        self.last_new = clock()  # when a checkpoint to score was last seen

    def run(self, should_stop: Callable[[], bool]) -> list[EvalResult]:
        """Polls until the run is complete, the timeout or ``should_stop()``."""
        while not should_stop():
            latest = _latest(self.config.checkpoint_dir)
            candidate = self._candidate()
            if candidate and self._key(candidate) not in self.done:
                self._score(candidate)
                continue
            if self._stopping(latest):
                break
            self.sleep(min(POLL_SECS, self.config.eval_interval_secs) or POLL_SECS)
        return self.results

    def _score(self, latest: str) -> None:
        """Scores ``latest``, or the newest checkpoint once ``eval_interval_secs`` have
        passed since the previous evaluation started; one that cannot be read is
        skipped with a warning and not tried again.

        A checkpoint that could not be read (or that the trainer removed) was no
        evaluation: the interval still counts from the previous one scored, so the
        newest older checkpoint that reads is scored at once, not an interval later.
        """
        self.said_waiting = False
        self.last_new = self.clock()
        if self.last_start is not None:
            wait = self.last_start + self.config.eval_interval_secs - self.clock()
            if wait > 0:
                self.sleep(wait)
            # A newer checkpoint may have appeared while waiting: take the newest.
            latest = self._candidate() or latest
        started = self.clock()
        try:
            result = scoring.evaluate_checkpoint(latest, self.config)
        except scoring.UnreadableCheckpoint as e:
            # Only the checkpoint's own read errors: one of the data (or of the
            # device) while scoring stops the evaluation, naming it, and marks no
            # checkpoint unreadable.
            if not os.path.exists(latest + ".index"):
                # Deleted by the trainer's retention meanwhile: a newer one is there.
                logging.info("Checkpoint %s was removed by the trainer before it was scored.",
                             latest)
                return
            logging.warning("Skipping checkpoint %s: %s; it is not tried again unless its "
                            "files change, and the newest older checkpoint that reads is "
                            "scored instead if it is not scored yet.", latest, first_line(e.error))
            self.failed.add((latest, scoring.checkpoint_mtime_ns(latest)))
            return
        self.last_start = started
        recording.record(result, self.config.eval_dir, self.writer)
        self.done.add(self._key(latest, result.checkpoint_mtime_ns))
        self.results.append(result)
        for line in result.lines():
            self.print_fn(line)

    def _candidate(self) -> str | None:
        """The newest of the ``checkpoints.TRIED`` newest checkpoints not known to be
        unreadable, or None."""
        for checkpoint in reversed(layout.find(self.config.checkpoint_dir)
                                   [-checkpoints.TRIED:]):
            if not self._unreadable(checkpoint.path):
                return checkpoint.path
        return None

    def _unreadable(self, checkpoint: str) -> bool:
        """``checkpoint`` could not be read, and its files have not changed since."""
        return (checkpoint, scoring.checkpoint_mtime_ns(checkpoint)) in self.failed

    def _stopping(self, latest: str | None) -> bool:
        """Whether to stop now that nothing is left to score (saying why), after
        saying once that there is no checkpoint yet."""
        checkpoint_dir, timeout = self.config.checkpoint_dir, self.config.eval_timeout
        if latest is None and not self.said_waiting:
            self.print_fn(f"No checkpoint file found in {checkpoint_dir}; waiting for the "
                          f"trainer to write one.")
            self.said_waiting = True
        if final := _training_finished(checkpoint_dir):
            unreadable = self._unreadable(final)
            if unreadable and self._scored_nothing():
                raise NoCheckpointError(_none_reads(checkpoint_dir))
            if unreadable:
                self.print_fn(f"Training in {checkpoint_dir} is complete but its final "
                              f"checkpoint {final} could not be evaluated; stopping.")
            else:
                self.print_fn(f"Training in {checkpoint_dir} is complete and its final "
                              f"checkpoint is evaluated; stopping.")
            return True
        if timeout is not None and self.clock() - self.last_new > timeout:
            if self._scored_nothing():
                raise NoCheckpointError(_nothing_to_score(checkpoint_dir, latest, timeout))
            self.print_fn(f"No new checkpoint in {timeout:g} s; stopping.")
            return True
        return False

    def _scored_nothing(self) -> bool:
        """This call scored nothing, and no checkpoint that reads is left that an earlier
        start scored (one restarted after it scored them all has done its work)."""
        return not self.results and self._candidate() is None

    def _key(self, checkpoint: str, mtime_ns: int | None = None) -> str:
        mtime_ns = scoring.checkpoint_mtime_ns(checkpoint) if mtime_ns is None else mtime_ns
        return recording.result_key(checkpoint, mtime_ns, _settings(self.config))


def _settings(config: EvalConfig) -> tuple:
    """The settings a score depends on (``recording.SETTINGS``), as a result records them."""
    return config.weights, config.eval_data, config.num_examples, compute_dtype(config)


def _nothing_to_score(checkpoint_dir: str, latest: str | None, timeout: float) -> str:
    """Why a polling evaluation that timed out scored nothing, and what to do: no
    checkpoint appeared, or none of the newest it tries reads (``latest``: the newest,
    or None), where the trainer may still be running and its next one may read."""
    waited = f"within --eval_timeout={timeout:g} seconds"
    if latest is None:
        return (f"no checkpoint appeared in {checkpoint_dir} {waited}: check --checkpoint_dir, "
                f"and that its trainer is running")
    tried, older = _tried(checkpoint_dir)
    which = (f"none of the {len(tried)} newest checkpoints of {checkpoint_dir}" if older
             else f"no checkpoint of {checkpoint_dir}")
    wait = "raise --eval_timeout if its trainer is still running (its next checkpoint may read)"
    fix = (f"pass --checkpoint={older[-1].path}, an older one not tried, if it reads, or {wait}"
           if older else
           f"{wait}; else train again ({checkpoints.start_over(checkpoint_dir)}) or "
           f"point --checkpoint_dir at another run")
    return (f"{which} could be read {waited} ({', '.join(tried)}; see the warnings above): "
            f"nothing was scored; {fix}")


def _none_reads(checkpoint_dir: str) -> str:
    """Why a polling evaluation of a complete run scored nothing: none of the newest
    checkpoints it tries reads (each was named in a warning); what to do, as
    ``checkpoints.newest_that_reads`` says it to --run_once."""
    tried, older = _tried(checkpoint_dir)
    which = f"none of its {len(tried)} newest checkpoints" if older else "none of its checkpoints"
    fix = (f"pass --checkpoint={older[-1].path}, an older one not tried, if it reads"
           if older else
           f"train again ({checkpoints.start_over(checkpoint_dir)}) or point "
           f"--checkpoint_dir at another run")
    return (f"training in {checkpoint_dir} is complete and {which} could be read "
            f"({', '.join(tried)}; see the warnings above): nothing was scored; {fix}")


def _tried(checkpoint_dir: str) -> tuple[list[str], list[layout.Checkpoint]]:
    """(the names of the ``checkpoints.TRIED`` newest checkpoints, the newest first: those
    the poller tries; the older ones, which it does not)."""
    found = layout.find(checkpoint_dir)
    return ([checkpoint.name for checkpoint in reversed(found[-checkpoints.TRIED:])],
            found[:-checkpoints.TRIED])


def _latest(checkpoint_dir: str) -> str | None:
    latest = layout.latest(checkpoint_dir)
    return latest.path if latest else None


def _training_finished(checkpoint_dir: str) -> str | None:
    """The run's final checkpoint, where the trainer marked the run complete and the
    checkpoint of that step is on disk; else None.  (A newer one may be there: one
    that did not restore, which the trainer left in place and went on before.)"""
    final_step = checkpoints.completed_step(checkpoint_dir)
    final = [c.path for c in layout.find(checkpoint_dir) if c.step == final_step]
    return final[0] if final else None
