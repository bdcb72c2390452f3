"""Recording a checkpoint's score in ``eval_dir``: TensorBoard scalars (precision @ 1,
each class's recall and precision), PR curves and images, the same pictures as PNG
files, and a line of ``results.jsonl``, which also remembers which checkpoints are
scored (across restarts).  Nothing in ``eval_dir`` is ever overwritten or wiped.
"""

from __future__ import annotations

import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from cifar10.core.errors import io_error
from cifar10.evaluation.result import RESULTS_FILE, EvalResult
from cifar10.evaluation.scoring import PR_THRESHOLDS

PRECISION_TAG = "Precision @ 1"
PER_CLASS_PREFIX = "per_class"  # per_class/recall/<class>, per_class/precision/<class>
PR_CURVE_PREFIX = "pr_curve"  # pr_curve/<class>/pr_curves (the plugin adds its suffix)
CONFUSION_IMAGE_TAG = "confusion_matrix"
MISCLASSIFIED_IMAGE_TAG = "misclassified"
SYNTHETIC_TITLE = "SYNTHETIC data (generated, not CIFAR-10)"  # heads its pictures' titles


def record(result: EvalResult, eval_dir: str, writer) -> None:
    """Writes ``Precision @ 1``, each class's recall and precision and PR curve, and
    the pictures, at the checkpoint's step, and appends the result to results.jsonl.

    Raises:
      Cifar10Error: ``eval_dir`` or its files cannot be written.
    """
    path = os.path.join(eval_dir, RESULTS_FILE)
    try:
        with writer.as_default():
            tf.summary.scalar(PRECISION_TAG, result.precision, step=result.step)
            _class_scalars(result)
            _pr_curves(result)
            _pictures(result, eval_dir)
        writer.flush()
        with open(path, "a+b") as f:
            # A line cut short by a crash must not swallow this one.
            if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                f.write(b"\n")
            f.write((json.dumps(result.as_record()) + "\n").encode())
    except (OSError, tf.errors.OpError) as e:
        raise io_error(f"cannot record the result of {result.checkpoint} in", eval_dir,
                       e) from e


def result_key(checkpoint: str, mtime_ns: int, settings: tuple) -> str:
    """What tells one scoring from another in results.jsonl: the checkpoint, and the
    settings (``settings_of``) it was scored with."""
    # The file time keeps a new run's model.ckpt-1000 (after --fresh_start, or in a
    # reused directory) from passing for the earlier run's, already scored.
    return "|".join(map(str, (os.path.basename(checkpoint), mtime_ns, *settings)))


# The settings a score depends on, as results.jsonl records them and as flags.
SETTINGS = ("weights", "eval_data", "num_examples", "compute_dtype")


def settings_of(record: dict) -> tuple:
    """(weights, eval_data, num_examples, compute_dtype) of a results.jsonl line or of
    an ``EvalResult``'s fields; a line recorded before the last two were has the
    examples it scored and float32."""
    return (record["weights"], record["eval_data"],
            record.get("num_examples") or record["examples"],
            record.get("compute_dtype", "float32"))


def warn_of_other_settings(eval_dir: str, settings: tuple) -> None:
    """One warning where results.jsonl holds scores of other ``settings`` (``SETTINGS``):
    this call's go on the same TensorBoard curves as theirs."""
    others = sorted({tuple(map(str, recorded)) for recorded in _recorded_settings(eval_dir)}
                    - {tuple(map(str, settings))})
    if not others:
        return
    said = lambda values: ", ".join(f"{name}={value}" for name, value  # noqa: E731
                                    in zip(SETTINGS, values))
    logging.warning("--eval_dir=%s holds results scored with other settings (%s) than these "
                    "(%s): they go on the same TensorBoard curves; pass another --eval_dir to "
                    "keep them apart", eval_dir, "; ".join(said(o) for o in others),
                    said(settings))


def scored_checkpoints(eval_dir: str) -> set[str]:
    """Keys (``result_key``) of the checkpoints recorded in ``eval_dir/results.jsonl``.

    Raises:
      Cifar10Error: the file is there but cannot be read.
    """
    keys, damaged = set(), 0
    path = os.path.join(eval_dir, RESULTS_FILE)
    try:
        with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is one damaged line
            for line in f:
                try:
                    r = json.loads(line)
                    keys.add(result_key(r["checkpoint"], r["checkpoint_mtime_ns"],
                                        settings_of(r)))
                except (ValueError, KeyError, TypeError):
                    # A line cut short by a crash, not UTF-8, or not one of ours (not an
                    # object): that checkpoint is scored again.
                    damaged += line.strip() != b""
    except FileNotFoundError:
        pass
    except OSError as e:
        raise io_error("cannot read", path, e) from e
    if damaged:
        logging.warning("%s: skipped %d damaged line(s); the checkpoints they recorded, if "
                        "any, are scored again.", path, damaged)
    return keys


def _class_scalars(result: EvalResult) -> None:
    """Each class's recall and precision, scalars under ``per_class/`` (none where the
    figure does not exist)."""
    for figures in result.per_class:
        for kind in ("recall", "precision"):
            if figures[kind] is not None:
                tf.summary.scalar(f"{PER_CLASS_PREFIX}/{kind}/{figures['name']}", figures[kind],
                                  step=result.step)


def _pr_curves(result: EvalResult) -> None:
    """Each class's precision-recall curve, for TensorBoard's PR-curve plugin
    (``pr_curve/<class>``)."""
    if result.probability_histograms is None:
        return
    from tensorboard.plugins.pr_curve import summary as pr_curve

    own, others = result.probability_histograms
    for figures, positives, negatives in zip(result.per_class, own, others):
        # At threshold i / (T - 1): the examples whose probability is that or more.
        tp = np.cumsum(positives[::-1])[::-1].astype(np.float64)
        fp = np.cumsum(negatives[::-1])[::-1].astype(np.float64)
        fn, tn = positives.sum() - tp, negatives.sum() - fp
        precision = np.divide(tp, tp + fp, out=np.ones_like(tp), where=tp + fp > 0)
        recall = np.divide(tp, tp + fn, out=np.zeros_like(tp), where=tp + fn > 0)
        summary = pr_curve.raw_data_pb(
            f"{PR_CURVE_PREFIX}/{figures['name']}", true_positive_counts=tp,
            false_positive_counts=fp, true_negative_counts=tn, false_negative_counts=fn,
            precision=precision, recall=recall, num_thresholds=PR_THRESHOLDS,
            display_name=figures["name"])
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=result.step)


def _pictures(result: EvalResult, eval_dir: str) -> None:
    """The confusion matrix as a heat map and the misclassified images as a grid: as
    TensorBoard images, and as PNG files named by step in ``eval_dir`` (a file of
    that name already there is kept; the new one gets a number)."""
    if not result.confusion_matrix:
        return
    from cifar10.evaluation import plots  # matplotlib: the evaluator's alone

    names = [c["name"] for c in result.per_class]
    titles = picture_titles(result)
    pictures = [(CONFUSION_IMAGE_TAG, plots.confusion_png(
        result.confusion_matrix, names, titles[CONFUSION_IMAGE_TAG]))]
    if result.misclassified is not None and len(result.misclassified.labels):
        wrong = result.misclassified
        pictures.append((MISCLASSIFIED_IMAGE_TAG, plots.misclassified_png(
            wrong.images, [names[i] for i in wrong.labels], [names[i] for i in wrong.predicted],
            titles[MISCLASSIFIED_IMAGE_TAG])))
    for tag, png in pictures:
        tf.summary.image(tag, tf.io.decode_png(png, channels=3)[None], step=result.step)
        plots.write_new(eval_dir, f"{tag}-step{result.step}", png)


def picture_titles(result: EvalResult) -> dict[str, str]:
    """{image tag: title} of the pictures of ``result``; on generated data a first
    line says so."""
    where = f"{os.path.basename(result.checkpoint)}, {result.weights} weights"
    head = f"{SYNTHETIC_TITLE}\n" if result.synthetic else ""
    return {CONFUSION_IMAGE_TAG: f"{head}Confusion matrix, {where}: precision @ 1 = "
                                 f"{result.precision:.3f}",
            MISCLASSIFIED_IMAGE_TAG: f"{head}Misclassified test images (true → predicted), "
                                     f"{where}"}


def _recorded_settings(eval_dir: str) -> set[tuple]:
    """The settings (``settings_of``) of the results in ``eval_dir/results.jsonl`` that
    read (``scored_checkpoints`` warns of the others)."""
    found = set()
    try:
        with open(os.path.join(eval_dir, RESULTS_FILE), "rb") as f:
            for line in f:
                try:
                    found.add(settings_of(json.loads(line)))
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass
    except OSError:
        pass
    return found
