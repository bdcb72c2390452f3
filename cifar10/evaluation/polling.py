"""The evaluator (``evaluate``): one checkpoint scored, or each new checkpoint of a run
scored once as the trainer saves it, until the run is complete; results.jsonl
remembers what is scored across restarts."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core import logs
from cifar10.core.config import EvalConfig, compute_dtype
from cifar10.core.errors import Cifar10Error, first_line, io_advice, io_error
from cifar10.distribute import devices
from cifar10.evaluation import recording, scoring
from cifar10.evaluation.scoring import EvalResult
from cifar10.runs import checkpoints, layout, records, summaries

POLL_SECS = 2.0  # how often the loop looks for a new checkpoint


def evaluate(config: EvalConfig, print_fn: Callable[[str], None] = print,
             sleep: Callable[[float], None] = time.sleep,
             should_stop: Callable[[], bool] = lambda: False,
             clock: Callable[[], float] = time.monotonic,
             flags_text: str | None = None, command: Sequence[str] = ()) -> list[EvalResult]:
    """Scores checkpoints of ``config.checkpoint_dir``; returns this call's results.

    With ``run_once`` (or ``checkpoint``), the newest checkpoint that reads (or that one).
    Otherwise polls: each new checkpoint once, ``eval_interval_secs`` apart, until the
    run's final checkpoint is scored, ``eval_timeout`` passes without a new one, or
    ``should_stop()``.  An ``eval_dir`` this call made goes if it fails before a result.
    """
    compute_dtype(config)
    created = not os.path.lexists(config.eval_dir)
    try:
        os.makedirs(config.eval_dir, exist_ok=True)
    except OSError as e:
        raise io_error("cannot create --eval_dir", config.eval_dir, e,
                       io_advice(e) or "choose a directory you can write") from e
    try:
        gpus = [device.name for device in tf.config.list_logical_devices("GPU")]
        records.record_start(config.eval_dir, records.environment(
            "cifar10-eval", command, devices.describe(gpus[:1] or ["/device:CPU:0"]),
            tf.__version__), flags_text)
        with summaries.file_writer(config.eval_dir) as writer:
            summaries.write_run_config(
                {**dataclasses.asdict(config), "eval_files": ", ".join(config.eval_files)},
                step=0, hparams=_hparams(config))
            recording.warn_of_other_settings(config.eval_dir, _settings(config))
            if config.run_once or config.checkpoint or config.model:
                return [_run_once(config, writer, print_fn)]
            return _Poller(config, writer, print_fn, sleep, clock).run(should_stop)
    except BaseException:
        if created and not os.path.exists(os.path.join(config.eval_dir,
                                                       recording.RESULTS_FILE)):
            shutil.rmtree(config.eval_dir, ignore_errors=True)
        raise


def _run_once(config: EvalConfig, writer, print_fn) -> EvalResult:
    if config.model:
        return _recorded(scoring.evaluate_model(config.model, config), config, writer, print_fn)
    newest = None if config.checkpoint else checkpoints.newest_that_reads(config.checkpoint_dir)
    checkpoint = config.checkpoint or (newest.path if newest else None)
    if not checkpoint:
        raise Cifar10Error(
            f"No checkpoint file found in {config.checkpoint_dir}: train first "
            f"(cifar10-train --train_dir={config.checkpoint_dir}) or point "
            f"--checkpoint_dir at a training run")
    return _recorded(scoring.evaluate_checkpoint(checkpoint, config), config, writer,
                     print_fn)


def _recorded(result: EvalResult, config: EvalConfig, writer, print_fn) -> EvalResult:
    recording.record(result, config.eval_dir, writer)
    for line in recording.lines(result, table=True):
        print_fn(line)
    return result


# Not tf.train.checkpoints_iterator, which goes by names alone: this also scores a new
# run's same-named checkpoint, skips an unreadable one and remembers across restarts.
class _Poller:
    """The polling loop of one ``evaluate`` call and what it remembers."""

    def __init__(self, config: EvalConfig, writer, print_fn, sleep, clock):
        self.config, self.writer, self.print_fn = config, writer, print_fn
        self.sleep, self.clock = sleep, clock
        self.results: list[EvalResult] = []
        self.done = recording.scored_checkpoints(config.eval_dir)  # result keys
        self.failed: set[tuple[str, int]] = set()  # (checkpoint, mtime) that did not read
        self.waiting = logs.WaitLines(print_fn, config.eval_timeout, clock)  # for a first checkpoint
        self.last_start: float | None = None  # when the last one scored started
        self.last_new = clock()  # when a checkpoint to score was last seen

    def run(self, should_stop: Callable[[], bool]) -> list[EvalResult]:
        while not should_stop():
            candidate = self._candidate()
            if candidate and self._key(candidate) not in self.done:
                self._score(candidate)
            elif self._stopping():
                break
            else:
                self.sleep(min(POLL_SECS, self.config.eval_interval_secs) or POLL_SECS)
        return self.results

    def _score(self, checkpoint: str) -> None:
        """Scores ``checkpoint``, or the newest once ``eval_interval_secs`` have passed
        since the last evaluation started; one that does not read is skipped once."""
        self.waiting.over()
        self.last_new = self.clock()
        if self.last_start is not None:
            wait = self.last_start + self.config.eval_interval_secs - self.clock()
            if wait > 0:
                self.sleep(wait)
            checkpoint = self._candidate() or checkpoint  # newer ones came meanwhile
        started = self.clock()
        try:
            result = scoring.evaluate_checkpoint(checkpoint, self.config)
        except scoring.UnreadableCheckpoint as e:
            if not os.path.exists(checkpoint + ".index"):  # the trainer's retention
                logging.info("Checkpoint %s was removed before it was scored.", checkpoint)
                return
            logging.warning("Skipping checkpoint %s: %s; it is not tried again unless its "
                            "files change, and the newest older checkpoint that reads is "
                            "scored instead if it is not scored yet.", checkpoint,
                            first_line(e.error))
            self.failed.add((checkpoint, scoring.checkpoint_mtime_ns(checkpoint)))
            return
        self.last_start = started
        recording.record(result, self.config.eval_dir, self.writer)
        self.done.add(self._key(checkpoint, result.checkpoint_mtime_ns))
        self.results.append(result)
        for line in recording.lines(result):
            self.print_fn(line)

    def _candidate(self) -> str | None:
        """The newest of the ``checkpoints.TRIED`` newest not known not to read."""
        for checkpoint in reversed(layout.find(self.config.checkpoint_dir)
                                   [-checkpoints.TRIED:]):
            if not self._unreadable(checkpoint.path):
                return checkpoint.path
        return None

    def _unreadable(self, checkpoint: str) -> bool:
        return (checkpoint, scoring.checkpoint_mtime_ns(checkpoint)) in self.failed

    def _stopping(self) -> bool:
        """Whether to stop, nothing being left to score now (saying why)."""
        checkpoint_dir, timeout = self.config.checkpoint_dir, self.config.eval_timeout
        run = layout.run_of(checkpoint_dir)
        what, how = ("final", "") if run == checkpoint_dir else (
            "best", " (a run's best/ gets one as it validates: cifar10-train "
                    "--eval_every_steps)")
        found = layout.find(checkpoint_dir)
        if not found:
            self.waiting.waiting(f"No checkpoint file found in {checkpoint_dir}; waiting for "
                                 f"the trainer to write one{how}.",
                                 f"Still no checkpoint in {checkpoint_dir}")
        final_step = checkpoints.completed_step(checkpoint_dir)
        if final_step is not None:  # the run is complete: its newest up to there is final
            final = [c.path for c in found if c.step <= final_step][-1:]
            if final and not self._unreadable(final[0]):
                self.print_fn(f"Training in {run} is complete and its {what} checkpoint is "
                              f"evaluated; stopping.")
                return True
            self._refuse_if_nothing_scored(found, f"and the run in {run} is complete{how}")
            self.print_fn(f"Training in {run} is complete but its {what} checkpoint "
                          f"{''.join(final)} could not be evaluated; stopping.")
            return True
        if timeout is not None and self.clock() - self.last_new > timeout:
            self._refuse_if_nothing_scored(
                found, f"within --eval_timeout={timeout:g} seconds: check --checkpoint_dir, "
                       f"and that its trainer is running")
            self.print_fn(f"No new checkpoint in {timeout:g} s; stopping.")
            return True
        return False

    def _refuse_if_nothing_scored(self, found: list, why: str) -> None:
        """Raises where this call scored nothing and no checkpoint that reads is left
        (``why``: why none comes, where none appeared)."""
        checkpoint_dir = self.config.checkpoint_dir
        if self.results or self._candidate():
            return
        if not found:
            raise Cifar10Error(f"no checkpoint appeared in {checkpoint_dir} {why}")
        checkpoints.newest_that_reads(checkpoint_dir, warn=lambda line: None)
        raise Cifar10Error(f"nothing was scored in {checkpoint_dir}")  # (one reads now)

    def _key(self, checkpoint: str, mtime_ns: int | None = None) -> str:
        mtime_ns = scoring.checkpoint_mtime_ns(checkpoint) if mtime_ns is None else mtime_ns
        return recording.result_key(checkpoint, mtime_ns, _settings(self.config))


def _settings(config: EvalConfig) -> tuple:
    """The settings a score depends on (``recording.SETTINGS``)."""
    return ("exported" if config.model else config.weights, config.eval_data,
            config.num_examples, compute_dtype(config))


def _hparams(config: EvalConfig) -> dict:
    """This session's hyperparameters in the HParams dashboard: the scored run's, as its
    last start recorded them (none from a run that did not), and how it is scored."""
    folder = layout.run_of(layout.run_folder(config.checkpoint or config.model,
                                             config.checkpoint_dir))
    run = (records.last_record(folder) or {}).get("settings")
    return {**(run if isinstance(run, dict) else {}), "weights": config.weights,
            "eval_data": config.eval_data}
