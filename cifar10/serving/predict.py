"""cifar10-predict's library: class predictions for image files, resized to 32x32 and
then fed as the evaluator's (a test record saved losslessly is classified as in eval)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf

from cifar10.core.errors import shown_path
from cifar10.data import pipeline as data
from cifar10.data import fileformat as ff
from cifar10.data import images as image_files
from cifar10.model import Model


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The ``top_k`` classes of one image, most probable first."""

    path: str
    labels: tuple[int, ...]
    probabilities: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Failure:
    """An image that could not be read, and why (one line)."""

    path: str
    reason: str


def make_classifier(model: Model, num_classes: int = ff.NUM_CLASSES):
    """A function: uint8 images [N, 32, 32, 3] -> the softmax of the first ``num_classes``
    logits.  No images give [0, num_classes] without running the model (oneDNN fails)."""

    def run(images):
        logits = tf.cast(model(data.eval_batch(images)), tf.float32)
        return tf.nn.softmax(logits[:, :num_classes])

    @tf.function(input_signature=[tf.TensorSpec([None, ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3],
                                                tf.uint8)])
    def probabilities(images):
        return tf.cond(tf.shape(images)[0] > 0, lambda: run(images),
                       lambda: tf.zeros([0, num_classes], tf.float32))

    return probabilities


def predict_files(model: Model, paths: Sequence[str], batch_size: int = 128,
                  top_k: int = 3, num_classes: int = ff.NUM_CLASSES,
                  contents: Mapping[str, bytes] | None = None
                  ) -> Iterator[Prediction | Failure]:
    """Classifies image files in order, ``batch_size`` at a time; a file that does not
    decode is a ``Failure`` at once.  ``contents``: path -> bytes (standard input: ``-``)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    classify = make_classifier(model, num_classes)
    top_k = min(top_k, num_classes)
    pending: list[tuple[str, np.ndarray]] = []

    def flush():
        probs = classify(np.stack([image for _, image in pending])).numpy()
        order = np.argsort(-probs, axis=1, kind="stable")[:, :top_k]
        for (path, _), labels, row in zip(pending, order, probs):
            yield Prediction(path, tuple(int(i) for i in labels),
                             tuple(float(row[i]) for i in labels))
        pending.clear()

    for path, image, reason in image_files.decode_files(paths, contents):
        if image is None:
            yield Failure(path, reason)
            continue
        pending.append((path, image))
        if len(pending) == batch_size:
            yield from flush()
    if pending:
        yield from flush()


def format_text(prediction: Prediction, class_names: Sequence[str]) -> str:
    """``path: cat 0.912, dog 0.051, ...``"""
    ranked = ", ".join(f"{class_names[label]} {p:.3f}"
                       for label, p in zip(prediction.labels, prediction.probabilities))
    return f"{shown_path(prediction.path)}: {ranked}"


def format_jsonl(prediction: Prediction, class_names: Sequence[str]) -> str:
    """One JSON object: the path and the ranked classes (label, name, probability)."""
    return json.dumps({"path": shown_path(prediction.path, line=False), "top_k": [
        {"label": label, "class": class_names[label], "probability": p}
        for label, p in zip(prediction.labels, prediction.probabilities)]})


def csv_header(top_k: int, num_classes: int = ff.NUM_CLASSES) -> str:
    """The header row of ``format_csv``'s rows."""
    columns = ["path"]
    for rank in range(1, min(top_k, num_classes) + 1):
        columns += [f"class_{rank}", f"probability_{rank}"]
    return ",".join(columns)


def format_csv(prediction: Prediction, class_names: Sequence[str]) -> str:
    """One CSV row: the path, then class name and probability for each rank."""
    row: list[object] = [shown_path(prediction.path, line=False)]
    for label, p in zip(prediction.labels, prediction.probabilities):
        row += [class_names[label], f"{p:.6f}"]
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(row)
    return out.getvalue()[:-2]


FORMATTERS = {"text": format_text, "jsonl": format_jsonl, "csv": format_csv}
