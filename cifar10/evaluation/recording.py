"""A checkpoint's score recorded in ``eval_dir`` (summaries, PNG files, a line of
``results.jsonl``, which also says what is scored) and printed.  Nothing in ``eval_dir``
is overwritten; TensorFlow loads only to record."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import unicodedata
from typing import TYPE_CHECKING, Callable

from absl import logging

from cifar10.core.config import LOSS_TAG, PRECISION_TAG
from cifar10.core.errors import io_error

if TYPE_CHECKING:
    from cifar10.evaluation.scoring import EvalResult

RESULTS_FILE = "results.jsonl"  # in --eval_dir: one result a line
SYNTHETIC_TITLE = "SYNTHETIC data (generated, not CIFAR-10)"  # heads its pictures' titles
# The settings a score depends on, as results.jsonl records them and as flags.
SETTINGS = ("weights", "eval_data", "num_examples", "compute_dtype")


def record(result: EvalResult, eval_dir: str, writer) -> None:
    """Writes the summaries and pictures at the checkpoint's step, and appends the
    result to results.jsonl; Cifar10Error where they cannot be written."""
    import tensorflow as tf

    try:
        with writer.as_default():
            _summaries(tf, result, eval_dir)
        writer.flush()
        _append(os.path.join(eval_dir, RESULTS_FILE),
                (json.dumps(result.as_record()) + "\n").encode())
    except (OSError, tf.errors.OpError) as e:
        raise io_error(f"cannot record the result of {result.checkpoint} in", eval_dir,
                       e) from e


def _append(path: str, line: bytes) -> None:
    """Appends ``line`` in one write under a lock (``lockf``: NFS honours it too), after
    a line break where a crash cut the last line short."""
    with open(path, "a+b") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)  # released as the file closes
        end = f.seek(0, os.SEEK_END)
        if end and (f.seek(end - 1), f.read(1))[1] != b"\n":
            line = b"\n" + line
        f.write(line)


def lines(result: EvalResult, table: bool = False) -> list[str]:
    """The lines printed: the original's precision line, with what it scored; why there
    is no grid of misclassified images; with ``table``, ``class_table``."""
    printed = ["%s: precision @ 1 = %.3f (step %d, %s, %d %sexamples, %s weights)%s" % (
        datetime.datetime.now(), result.precision, result.step,
        os.path.basename(result.checkpoint), result.examples,
        "training " if result.eval_data == "train_eval" else "", result.weights,
        " on SYNTHETIC data" if result.synthetic else "")]
    if result.misclassified is not None and not len(result.misclassified.labels):
        printed.append(f"No misclassified images to show for "
                       f"{os.path.basename(result.checkpoint)}: all {result.examples} "
                       f"examples were classified right.")
    return printed + class_table(result) if table else printed


def class_table(result: EvalResult, max_matrix_classes: int = 20) -> list[str]:
    """The per-class figures as text, and the confusion matrix up to
    ``max_matrix_classes``; names padded by the terminal columns they take."""
    width = max(_width("class"), *(_width(c["name"]) for c in result.per_class))
    pad = lambda name: name + " " * (width - _width(name))  # noqa: E731
    figure = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    table = [f"{pad('class')}  {'count':>6}  {'recall':>6}  {'precision':>9}"]
    table += [f"{pad(c['name'])}  {c['count']:>6}  {figure(c['recall']):>6}  "
              f"{figure(c['precision']):>9}" for c in result.per_class]
    if len(result.per_class) <= max_matrix_classes:
        cell = max(5, len(str(max(max(row) for row in result.confusion_matrix)))) + 1
        table.append("confusion matrix (rows: true class; columns: predicted class, "
                     "as numbered):")
        table.append(" " * (width + 4) + "".join(
            f"{i:>{cell}}" for i in range(len(result.per_class))))
        table += [f"{i:>2}  {pad(c['name'])}" + "".join(f"{n:>{cell}}" for n in row)
                  for i, (c, row) in enumerate(zip(result.per_class, result.confusion_matrix))]
    return table


def _width(text: str) -> int:
    """The terminal columns of ``text``: 2 for a wide character, 0 for a combining one."""
    return sum(0 if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf")
               else 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def _summaries(tf, result: EvalResult, eval_dir: str) -> None:
    """Precision @ 1 and the test loss; each class's recall, precision and PR curve; the
    confusion matrix and the misclassified images as pictures, also as PNG files."""
    tf.summary.scalar(PRECISION_TAG, result.precision, step=result.step)
    if result.loss is not None:
        tf.summary.scalar(LOSS_TAG, result.loss, step=result.step)
    for figures in result.per_class:
        for kind in ("recall", "precision"):
            if figures[kind] is not None:
                tf.summary.scalar(f"per_class/{kind}/{figures['name']}", figures[kind],
                                  step=result.step)
    if result.probability_histograms is not None:
        import numpy as np
        from tensorboard.plugins.pr_curve import summary as pr_curve

        own, others = result.probability_histograms
        for figures, positives, negatives in zip(result.per_class, own, others):
            # At threshold i / (T - 1): the examples whose probability is that or more.
            tp = np.cumsum(positives[::-1])[::-1].astype(np.float64)
            fp = np.cumsum(negatives[::-1])[::-1].astype(np.float64)
            summary = pr_curve.raw_data_pb(
                f"pr_curve/{figures['name']}", true_positive_counts=tp,
                false_positive_counts=fp, true_negative_counts=negatives.sum() - fp,
                false_negative_counts=positives.sum() - tp,
                precision=np.divide(tp, tp + fp, out=np.ones_like(tp), where=tp + fp > 0),
                recall=tp / max(positives.sum(), 1), num_thresholds=len(positives),
                display_name=figures["name"])
            tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=result.step)
    if not result.confusion_matrix:
        return
    from cifar10.evaluation import plots  # matplotlib: the evaluator's alone

    names = [c["name"] for c in result.per_class]
    titles = picture_titles(result)
    pictures = {"confusion_matrix": plots.confusion_png(
        result.confusion_matrix, names, titles["confusion_matrix"])}
    wrong = result.misclassified
    if wrong is not None and len(wrong.labels):
        pictures["misclassified"] = plots.misclassified_png(
            wrong.images, [names[i] for i in wrong.labels], [names[i] for i in wrong.predicted],
            titles["misclassified"])
    for tag, png in pictures.items():
        tf.summary.image(tag, tf.io.decode_png(png, channels=3)[None], step=result.step)
        plots.write_new(eval_dir, f"{tag}-step{result.step}", png)


def picture_titles(result: EvalResult) -> dict[str, str]:
    """{image tag: title} of the pictures; on generated data a first line says so."""
    where = f"{os.path.basename(result.checkpoint)}, {result.weights} weights"
    head = f"{SYNTHETIC_TITLE}\n" if result.synthetic else ""
    return {"confusion_matrix": f"{head}Confusion matrix, {where}: precision @ 1 = "
                                f"{result.precision:.3f}",
            "misclassified": f"{head}Misclassified test images (true → predicted), {where}"}


def result_key(checkpoint: str, mtime_ns: int, settings: tuple) -> str:
    """What tells one scoring from another: the checkpoint, its file time (a new run's
    model.ckpt-N is not the earlier run's) and the settings (``settings_of``)."""
    return "|".join(map(str, (os.path.basename(checkpoint), mtime_ns, *settings)))


def settings_of(record: dict) -> tuple:
    """``SETTINGS`` of a results.jsonl line or of an ``EvalResult``'s fields; a line
    recorded before the last two were has the examples it scored and float32."""
    return (record["weights"], record["eval_data"],
            record.get("num_examples") or record["examples"],
            record.get("compute_dtype", "float32"))


def _read(eval_dir: str, get: Callable[[dict], object]) -> tuple[list, int]:
    """(``get`` of each line of results.jsonl that it takes, how many non-blank lines it
    does not); nothing without the file; OSError where it cannot be read."""
    found, failed = [], 0
    try:
        with open(os.path.join(eval_dir, RESULTS_FILE), "rb") as f:
            for line in filter(bytes.strip, f):
                try:
                    found.append(get(json.loads(line)))
                except (ValueError, KeyError, TypeError, AttributeError):
                    failed += 1
    except FileNotFoundError:
        pass
    return found, failed


def scored_checkpoints(eval_dir: str) -> set[str]:
    """Keys (``result_key``) of the results in ``eval_dir``; one warning counts the lines
    that do not read, whose checkpoints are scored again."""
    path = os.path.join(eval_dir, RESULTS_FILE)
    try:
        keys, damaged = _read(eval_dir, lambda r: result_key(
            r["checkpoint"], r["checkpoint_mtime_ns"], settings_of(r)))
    except OSError as e:
        raise io_error("cannot read", path, e) from e
    if damaged:
        logging.warning("%s: skipped %d damaged line(s); the checkpoints they recorded, if "
                        "any, are scored again.", path, damaged)
    return set(keys)


def warn_of_other_settings(eval_dir: str, settings: tuple) -> None:
    """One warning where results.jsonl holds scores of other ``settings``: they go on
    the same TensorBoard curves."""
    try:
        found, _ = _read(eval_dir, lambda r: tuple(map(str, settings_of(r))))
    except OSError:
        return
    others = sorted(set(found) - {tuple(map(str, settings))})
    if others:
        said = lambda values: ", ".join(f"{n}={v}" for n, v in zip(SETTINGS, values))  # noqa
        logging.warning("--eval_dir=%s holds results scored with other settings (%s) than "
                        "these (%s): they go on the same TensorBoard curves; pass another "
                        "--eval_dir to keep them apart", eval_dir,
                        "; ".join(map(said, others)), said(settings))


def results_of_checkpoints_before(eval_dir: str, run_dir: str, before_s: float) -> int:
    """How many results scored a checkpoint of ``run_dir`` written before ``before_s``
    (the file system's clock); 0 where results.jsonl cannot be read."""
    try:
        found, _ = _read(eval_dir, lambda r: (os.path.dirname(r["checkpoint"]),
                                              int(r["checkpoint_mtime_ns"])))
    except OSError:
        return 0
    return sum(0 <= mtime_ns < before_s * 1e9 and os.path.realpath(folder)
               == os.path.realpath(run_dir) for folder, mtime_ns in found)
