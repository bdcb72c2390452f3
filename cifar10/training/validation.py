"""``--eval_every_steps``: validation inside training (``Validation``).  At every multiple
of it and at ``max_steps`` the chief scores the whole test split with the moving-average
weights, with the evaluator's scorer; prints one line, writes the evaluator's tags in
train_dir and offers the score to the best checkpoint.  It reads the weights only: the
training input, random state and updates are untouched, so a --deterministic run saves
the same checkpoints with it as without."""

from __future__ import annotations

import datetime
import os
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.data import pipeline as data
from cifar10.data import synthetic
from cifar10.evaluation import scoring
from cifar10.evaluation.recording import LOSS_TAG, PRECISION_TAG
from cifar10.runs.best import Best, BestCheckpoint


class Validation:
    """Scores ``trainer``'s moving-average weights on ``test_files`` where ``due``; every
    worker asks ``due``, the chief alone calls it (the others wait in the next step's
    all-reduce meanwhile)."""

    def __init__(self, trainer, test_files: Sequence[str], best: BestCheckpoint | None,
                 print_fn: Callable[[str], None] = print):
        cfg = trainer.config
        if not test_files:
            raise Cifar10Error("--eval_every_steps needs the data's test split, and the "
                               "data has none: pass --eval_every_steps=0")
        self.every, self.max_steps, self.batch_size = (cfg.eval_every_steps, cfg.max_steps,
                                                       cfg.batch_size)
        self.test_files, self.best, self.print_fn = list(test_files), best, print_fn
        self.synthetic = any(synthetic.is_synthetic(os.path.dirname(f)) for f in test_files)
        self.trainer = trainer
        self._scorer = None  # made at the first pass: a run without validation traces none
        self.ran = False  # a pass ran in this call of train

    def kept(self) -> Best | None:
        """The best checkpoint kept (``runs.best``), where a pass ran in this call."""
        return self.best.best if self.ran and self.best else None

    def due(self, step: int) -> bool:
        return self.every > 0 and (step % self.every == 0 or step == self.max_steps)

    def __call__(self, step: int) -> dict[str, float]:
        """Scores, prints the line, writes the summaries and offers the best checkpoint:
        the pass's row of the metrics file (step, epoch, precision, test_loss)."""
        began = time.monotonic()
        if self._scorer is None:
            self._scorer = scoring.make_scorer(self.trainer.state.averages)
        confusion, _, loss_sum = self._scorer(data.eval_dataset(self.test_files,
                                                                self.batch_size))
        seconds = time.monotonic() - began
        examples = max(int(confusion.sum()), 1)
        precision, loss = int(np.trace(confusion)) / examples, loss_sum / examples
        tf.summary.scalar(PRECISION_TAG, precision, step=step)
        tf.summary.scalar(LOSS_TAG, loss, step=step)
        better = self.best.offer(step, precision, loss) if self.best else False
        kept = self.best.best if self.best else None
        rank = ("the best so far" if better or kept is None else
                f"best {kept.precision:.3f} at step {kept.step}")
        self.print_fn("%s: step %d, precision @ 1 = %.3f, test loss = %.3f (%d test examples "
                      "in %.1f sec; %s)%s" % (
                          datetime.datetime.now(), step, precision, loss, examples, seconds,
                          rank, " on SYNTHETIC data" if self.synthetic else ""))
        self.ran = True
        epoch = (int(self.trainer.state.examples_seen.numpy())
                 / self.trainer.examples_per_epoch)
        return {"step": step, "epoch": epoch, "precision": precision, "test_loss": loss}
