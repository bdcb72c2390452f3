"""``--eval_every_steps``: validation inside training (``Validation``).  At every multiple
of it and at ``max_steps`` the chief scores the whole test split with the moving-average
weights, as cifar10-eval does (its scorer, in float32); prints one line, writes the
evaluator's tags in train_dir and offers the score to the best checkpoint.  It reads the
weights only: the training input, random state and updates are untouched, so a
--deterministic run saves the same checkpoints with it as without."""

from __future__ import annotations

import datetime
import time
from typing import Callable, Sequence

import tensorflow as tf

from cifar10.core.config import LOSS_TAG, PRECISION_TAG
from cifar10.evaluation import scoring
from cifar10.model import Model
from cifar10.runs.best import Best, BestCheckpoint


class Validation:
    """Scores ``trainer``'s moving-average weights on ``test_files`` where ``due``; every
    worker asks ``due``, the chief alone calls it (the others wait in the next step's
    all-reduce meanwhile)."""

    def __init__(self, trainer, test_files: Sequence[str], best: BestCheckpoint | None,
                 print_fn: Callable[[str], None] = print):
        cfg = trainer.config
        self.every, self.max_steps, self.batch_size = (cfg.eval_every_steps, cfg.max_steps,
                                                       cfg.batch_size)
        self.test_files, self.best, self.print_fn = list(test_files), best, print_fn
        self.trainer = trainer
        # Made at the first pass (a run without validation traces none): a float32 copy of
        # the averages, scored as cifar10-eval scores their checkpoint whatever --use_bf16.
        self._model: Model | None = None
        self._scorer = None
        self.ran = False  # a pass ran in this call of train

    def kept(self) -> Best | None:
        """The best checkpoint kept (``runs.best``), where a pass ran in this call."""
        return self.best.best if self.ran and self.best else None

    def due(self, step: int) -> bool:
        return self.every > 0 and (step % self.every == 0 or step == self.max_steps)

    def __call__(self, step: int) -> dict[str, float]:
        """Scores, prints the line, writes the summaries and offers the best checkpoint:
        the pass's row of the metrics file (step, precision, test_loss)."""
        began = time.monotonic()
        averages = self.trainer.state.averages
        if self._model is None:
            self._model = Model(compute_dtype=tf.float32, trainable=False,
                                num_classes=averages.num_classes)
            self._scorer = scoring.make_scorer(scoring.classifier(self._model),
                                               averages.num_classes)
        for copy, average in zip(self._model.parameters(), averages.parameters()):
            copy.assign(average)
        scored = scoring.score(self._scorer, self.test_files, self.batch_size)
        seconds = time.monotonic() - began
        tf.summary.scalar(PRECISION_TAG, scored.precision, step=step)
        tf.summary.scalar(LOSS_TAG, scored.loss, step=step)
        better = self.best.offer(step, scored.precision, scored.loss) if self.best else False
        kept = self.best.best if self.best else None
        rank = ("the best so far" if better else
                f"best {kept.precision:.3f} at step {kept.step}" if kept else "not kept")
        self.print_fn("%s: step %d, precision @ 1 = %.3f, test loss = %.3f (%d test examples "
                      "in %.1f sec; %s)%s" % (
                          datetime.datetime.now(), step, scored.precision, scored.loss,
                          scored.examples, seconds, rank,
                          " on SYNTHETIC data" if scored.synthetic else ""))
        self.ran = True
        return {"step": step, "precision": scored.precision, "test_loss": scored.loss}
