"""Class predictions of a trained model for image files: cifar10-predict's library.

An image file of any size and colour mode becomes what the evaluator sees:
decoded by TensorFlow (PNG, JPEG, GIF's first frame, BMP) into RGB, resized to
32x32 with area averaging and rounded to uint8 as a CIFAR-10 record holds it,
then ``data.eval_batch`` (central 24x24 crop, per-image standardisation).  A
32x32 image is not resized, so a test record written out losslessly is
classified exactly as ``cifar10-eval`` classifies it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Iterator, Sequence

import numpy as np
import tensorflow as tf

from cifar10.data import pipeline as data
from cifar10.data import fileformat as ff
from cifar10.model import Model

DECODE_PARALLEL = 2  # images decoded at once


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


def resize_to_cifar(images: tf.Tensor) -> tf.Tensor:
    """RGB images [N, H, W, 3] of any size and type (values 0-255) as uint8 [N, 32, 32, 3].

    Area averaging: each output pixel is the mean of the input area it covers,
    with fractional weights at the edges, as ``tf.image.resize(method='area')``;
    then rounded to whole values as a CIFAR-10 record stores them.  A 32x32
    image is only rounded.  Written as two matrix products (rows, then columns)
    so that TFLite, which has no area resizing, runs it too.
    """
    images = tf.cast(images, tf.float32)
    rows = _area_weights(tf.shape(images)[1])
    cols = _area_weights(tf.shape(images)[2])
    out = tf.einsum("ih,nhwc,jw->nijc", rows, images, cols)
    return tf.cast(tf.clip_by_value(tf.round(out), 0.0, 255.0), tf.uint8)


def _area_weights(size: tf.Tensor) -> tf.Tensor:
    """float32 [32, size]: the share of input pixel j in output pixel i, summing to 1."""
    scale = tf.cast(size, tf.float32) / ff.IMAGE_SIZE
    starts = tf.range(ff.IMAGE_SIZE, dtype=tf.float32)[:, None] * scale
    pixels = tf.range(tf.cast(size, tf.float32))[None, :]
    overlap = tf.minimum(starts + scale, pixels + 1.0) - tf.maximum(starts, pixels)
    return tf.maximum(overlap, 0.0) / scale


def decode_image(encoded: tf.Tensor) -> tf.Tensor:
    """An encoded PNG, JPEG, GIF (first frame) or BMP as uint8 RGB [32, 32, 3]."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    return tf.ensure_shape(resize_to_cifar(image[None])[0], [ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3])


def make_classifier(model: Model, num_classes: int = ff.NUM_CLASSES):
    """A function: uint8 images [N, 32, 32, 3] -> float32 class probabilities [N, num_classes].

    A model trained on fewer than 10 classes (labels 0 to ``num_classes - 1``)
    classifies among those: the softmax of their logits, the unused outputs left out.
    """

    @tf.function(input_signature=[tf.TensorSpec([None, ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3],
                                                tf.uint8)])
    def probabilities(images):
        logits = tf.cast(model(data.eval_batch(images)), tf.float32)
        return tf.nn.softmax(logits[:, :num_classes])

    return probabilities


def decode_files(paths: Sequence[str]) -> Iterator[tuple[str, np.ndarray | None, str]]:
    """(path, uint8 [32, 32, 3] image or None, why not) of each file, in order.

    The files are read and decoded by tf.data, ``DECODE_PARALLEL`` at a time;
    a file that cannot be read or decoded gives None and a one-line reason,
    and the others go on.
    """
    images = data.without_autotuning(
        tf.data.Dataset.from_tensor_slices(tf.constant(list(paths), tf.string))
        .map(lambda path: decode_image(tf.io.read_file(path)),
             num_parallel_calls=DECODE_PARALLEL, deterministic=True)
        .prefetch(2 * DECODE_PARALLEL))
    iterator = iter(images)
    for path in paths:
        try:
            yield path, next(iterator).numpy(), ""
        except tf.errors.OpError as e:
            yield path, None, _reason(e)


def predict_files(model: Model, paths: Sequence[str], batch_size: int = 128,
                  top_k: int = 3, num_classes: int = ff.NUM_CLASSES
                  ) -> Iterator[Prediction | Failure]:
    """Classifies image files among ``num_classes`` classes, ``batch_size`` at a time.

    Predictions come in the order of ``paths``, each with its ``top_k`` classes
    (at most ``num_classes``); a file that cannot be read or decoded gives a
    ``Failure`` (as soon as it is met) and the others go on.
    """
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

    for path, image, reason in decode_files(paths):
        if image is None:
            yield Failure(path, reason)
            continue
        pending.append((path, image))
        if len(pending) == batch_size:
            yield from flush()
    if pending:
        yield from flush()


def _reason(error: tf.errors.OpError) -> str:
    if isinstance(error, tf.errors.NotFoundError):
        return "no such file"
    if isinstance(error, tf.errors.PermissionDeniedError):
        return "permission denied"
    if isinstance(error, tf.errors.FailedPreconditionError):
        return "not a regular file"
    return "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one"


def format_text(prediction: Prediction, class_names: Sequence[str]) -> str:
    """``path: cat 0.912, dog 0.051, ...``"""
    ranked = ", ".join(f"{class_names[label]} {p:.3f}"
                       for label, p in zip(prediction.labels, prediction.probabilities))
    return f"{prediction.path}: {ranked}"


def format_jsonl(prediction: Prediction, class_names: Sequence[str]) -> str:
    """One JSON object: the path and the ranked classes (label, name, probability)."""
    return json.dumps({"path": prediction.path, "top_k": [
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
    row: list[object] = [prediction.path]
    for label, p in zip(prediction.labels, prediction.probabilities):
        row += [class_names[label], f"{p:.6f}"]
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(row)
    return out.getvalue()


FORMATTERS = {"text": format_text, "jsonl": format_jsonl, "csv": format_csv}
