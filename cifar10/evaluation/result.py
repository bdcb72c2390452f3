"""The score of one checkpoint (``EvalResult``) and how it reads: the precision line,
the class table, the line of results.jsonl.  No TensorFlow."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import unicodedata

import numpy as np

SYNTHETIC_SUFFIX = " on SYNTHETIC data"  # ends the precision line of generated data
RESULTS_FILE = "results.jsonl"  # in --eval_dir: one result's record a line


@dataclasses.dataclass
class Misclassified:
    """Test images the model got wrong: uint8 [n, 32, 32, 3], their labels and the
    classes predicted."""

    images: np.ndarray
    labels: list[int]
    predicted: list[int]


@dataclasses.dataclass
class EvalResult:
    """The score of one checkpoint."""

    checkpoint: str
    step: int
    checkpoint_mtime_ns: int  # tells this run's model.ckpt-N from an earlier run's
    precision: float
    correct: int
    examples: int
    weights: str
    eval_data: str
    wall_time: float  # seconds since the epoch when the evaluation ended
    seconds: float  # how long it took
    # The examples are cifar10.data.synthetic's generated data, not CIFAR-10: the line and
    # the pictures say so.
    synthetic: bool = False
    # The examples asked for (--num_examples; ``examples`` is fewer where the data
    # holds fewer) and the model's compute type ('float32', 'bfloat16', 'float16'):
    # with ``weights`` and ``eval_data``, the settings a score depends on.  None and
    # 'float32' in a line recorded before they were.
    num_examples: int | None = None
    compute_dtype: str = "float32"
    # [true class][predicted class] counts over exactly the evaluated examples: it
    # sums to ``examples`` and its diagonal to ``correct``.
    confusion_matrix: list[list[int]] = dataclasses.field(default_factory=list)
    # {name, count, recall, precision} of each class, in label order (``scoring.per_class``).
    per_class: list[dict] = dataclasses.field(default_factory=list)
    # For the PR curves, not results.jsonl: per class, how many of its own examples
    # ([0]) and of the others ([1]) had each probability of it, in PR_THRESHOLDS
    # buckets ([2, classes, PR_THRESHOLDS], ``scoring.make_scorer``).
    probability_histograms: np.ndarray | None = dataclasses.field(default=None, repr=False,
                                                                 compare=False)
    # For the grid of misclassified images, not results.jsonl (``scoring.misclassified``).
    misclassified: Misclassified | None = dataclasses.field(default=None, repr=False,
                                                           compare=False)

    def as_record(self) -> dict:
        """The line of results.jsonl."""
        record = dataclasses.asdict(self)
        del record["probability_histograms"], record["misclassified"]
        return record

    def line(self) -> str:
        """The original's output line, plus which step and checkpoint it scored, on how
        many examples ('training examples' under --eval_data=train_eval) (and ``on
        SYNTHETIC data`` after it when it was generated data)."""
        return "%s: precision @ 1 = %.3f (step %d, %s, %d %sexamples, %s weights)%s" % (
            datetime.datetime.now(), self.precision, self.step,
            os.path.basename(self.checkpoint), self.examples,
            "training " if self.eval_data == "train_eval" else "", self.weights,
            SYNTHETIC_SUFFIX if self.synthetic else "")

    def lines(self) -> list[str]:
        """``line()``, then why there is no grid of misclassified images if none was wrong."""
        if self.misclassified is None or len(self.misclassified.labels):
            return [self.line()]
        return [self.line(), f"No misclassified images to show for "
                             f"{os.path.basename(self.checkpoint)}: all {self.examples} "
                             f"examples were classified right."]


def class_table(result: EvalResult, max_matrix_classes: int = 20) -> list[str]:
    """The per-class figures of ``result`` as text lines, and its confusion matrix
    when it has at most ``max_matrix_classes`` classes (wider would not read).

    Class names are padded by the columns a terminal gives them (``display_width``),
    so that a table of CJK names lines up."""
    width = max(display_width("class"), *(display_width(c["name"]) for c in result.per_class))
    figure = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [f"{pad('class', width)}  {'count':>6}  {'recall':>6}  {'precision':>9}"]
    lines += [f"{pad(c['name'], width)}  {c['count']:>6}  {figure(c['recall']):>6}  "
              f"{figure(c['precision']):>9}" for c in result.per_class]
    if len(result.per_class) <= max_matrix_classes:
        cell = max(5, len(str(max(max(row) for row in result.confusion_matrix))))
        lines.append("confusion matrix (rows: true class; columns: predicted class, "
                     "as numbered):")
        lines.append(f"{'':<{width + 4}}" + "".join(
            f"{i:>{cell + 1}}" for i in range(len(result.per_class))))
        lines += [f"{i:>2}  {pad(c['name'], width)}" + "".join(f"{n:>{cell + 1}}" for n in row)
                  for i, (c, row) in enumerate(zip(result.per_class, result.confusion_matrix))]
    return lines


def display_width(text: str) -> int:
    """The columns ``text`` takes in a terminal: 2 for an East Asian wide or fullwidth
    character, 0 for a combining mark or a format character, 1 for any other."""
    return sum(_char_width(ch) for ch in text)


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def pad(text: str, width: int) -> str:
    """``text`` left-aligned in ``width`` terminal columns (``display_width``)."""
    return text + " " * max(0, width - display_width(text))


def results_of_checkpoints_before(eval_dir: str, run_dir: str, before_s: float) -> int:
    """How many results in ``eval_dir``'s results.jsonl scored a checkpoint of
    ``run_dir`` whose files were modified before ``before_s`` (the file system's
    clock); 0 where the file cannot be read.  Damaged lines are passed over (the
    evaluator warns of them as it reads them)."""
    count = 0
    try:
        with open(os.path.join(eval_dir, RESULTS_FILE), "rb") as f:
            for line in f:
                try:
                    record = json.loads(line)
                    checkpoint, mtime_ns = record["checkpoint"], int(record["checkpoint_mtime_ns"])
                except (ValueError, KeyError, TypeError):
                    continue
                count += (0 <= mtime_ns < before_s * 1e9 and isinstance(checkpoint, str)
                          and os.path.realpath(os.path.dirname(checkpoint))
                          == os.path.realpath(run_dir))
    except OSError:
        return 0
    return count
