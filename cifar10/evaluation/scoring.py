"""One checkpoint scored: precision @ 1 of its moving-average (or raw) weights over
``num_examples`` examples, the test loss, the confusion matrix, each class's figures, the PR curves'
histograms and the misclassified images (``EvalResult``)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from cifar10.core.config import EvalConfig, compute_dtype
from cifar10.core.errors import Cifar10Error, DataError, first_line, listed
from cifar10.data import pipeline as data
from cifar10.data import synthetic
from cifar10.distribute import workers
from cifar10.evaluation import exported
from cifar10.model import Model
from cifar10.runs import checkpoints, layout

PR_THRESHOLDS = 201  # the PR curves' thresholds, 0 to 1 in steps of 0.005


@dataclasses.dataclass
class Misclassified:
    """Test images the model got wrong: uint8 [n, 32, 32, 3], their labels, the guesses."""

    images: np.ndarray
    labels: list[int]
    predicted: list[int]


@dataclasses.dataclass
class EvalResult:
    """The score of one checkpoint; its fields but the last two are a results.jsonl line."""

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
    synthetic: bool = False  # generated data, not CIFAR-10: the line and pictures say so
    num_examples: int | None = None  # asked for (None in a line recorded before it was)
    compute_dtype: str = "float32"
    loss: float | None = None  # mean cross entropy (None in a line recorded before it was)
    confusion_matrix: list[list[int]] = dataclasses.field(default_factory=list)  # [true][guess]
    per_class: list[dict] = dataclasses.field(default_factory=list)  # ``per_class``
    # Not recorded: ``make_scorer``'s histograms, and the misclassified images.
    probability_histograms: np.ndarray | None = dataclasses.field(default=None, repr=False,
                                                                 compare=False)
    misclassified: Misclassified | None = dataclasses.field(default=None, repr=False,
                                                           compare=False)

    def as_record(self) -> dict:
        """The line of results.jsonl."""
        record = dataclasses.asdict(self)
        del record["probability_histograms"], record["misclassified"]
        return record


def evaluate_checkpoint(checkpoint: str, config: EvalConfig) -> EvalResult:
    """Scores one checkpoint on ``config.num_examples`` examples of the eval files.

    Raises:
      OtherClasses, UnreadableCheckpoint (that alone), DataError (the eval files),
      Cifar10Error (the device failed or ran out of memory).
    """
    start = time.monotonic()
    mtime = checkpoint_mtime_ns(checkpoint)
    names = _run_classes(checkpoint, config.class_names)
    try:
        model, step = checkpoints.load_model(checkpoint, config.weights,
                                             tf.as_dtype(compute_dtype(config)))
    except checkpoints.READ_ERRORS as e:
        raise UnreadableCheckpoint(checkpoint, e) from e
    return _evaluate(checkpoint, step, mtime, config.weights, classifier(model),
                     model.num_classes, names, config, start)


def evaluate_model(path: str, config: EvalConfig) -> EvalResult:
    """Scores an exported model (``exported.load``) as ``evaluate_checkpoint`` does a
    checkpoint, its weights 'exported'; Cifar10Error where it does not load or gives
    another number of classes than the data holds."""
    start = time.monotonic()
    model, num_classes, step = exported.load(path)
    if config.class_names and num_classes != len(config.class_names):
        raise Cifar10Error(f"--model={path} gives {num_classes} classes and --data_dir holds "
                           f"{len(config.class_names)} ({listed(config.class_names)}): score "
                           f"it on the data it was trained on")
    main_file = os.path.join(path, "saved_model.pb") if os.path.isdir(path) else path
    return _evaluate(path, step, os.stat(main_file).st_mtime_ns, "exported", model,
                     num_classes, config.class_names, config, start, probabilities=True)


def _evaluate(checkpoint: str, step: int, mtime: int, weights: str, model: Callable,
              num_classes: int, names: Sequence[str], config: EvalConfig, start: float,
              probabilities: bool = False) -> EvalResult:
    """The ``EvalResult`` of ``model`` (``make_scorer``'s) named ``checkpoint``."""
    try:
        scored = score(make_scorer(model, num_classes, probabilities), config.eval_files,
                       config.batch_size, config.num_examples)
        wrong = (misclassified(model, num_classes, config.eval_files, config.num_examples,
                               config.misclassified_images, config.batch_size)
                 if config.misclassified_images else None)
    except tf.errors.OpError as e:
        raise _scoring_error(e, f"{'model' if weights == 'exported' else 'checkpoint'} "
                                f"{checkpoint}", config) from e
    return EvalResult(
        checkpoint=checkpoint, step=step, checkpoint_mtime_ns=mtime,
        precision=scored.precision, correct=scored.correct, examples=scored.examples,
        weights=weights, eval_data=config.eval_data, wall_time=time.time(),
        seconds=time.monotonic() - start, synthetic=scored.synthetic,
        num_examples=config.num_examples, compute_dtype=compute_dtype(config),
        loss=scored.loss, confusion_matrix=scored.confusion.tolist(),
        per_class=per_class(scored.confusion, names),
        probability_histograms=scored.histograms, misclassified=wrong)


class UnreadableCheckpoint(Cifar10Error):
    """``checkpoint`` cannot be read (``error``: one of ``checkpoints.READ_ERRORS``)."""

    def __init__(self, checkpoint: str, error: BaseException):
        self.checkpoint, self.error = checkpoint, error
        super().__init__(f"cannot evaluate checkpoint {checkpoint}: {first_line(error)}")


# The errors of reading files: gone, not readable, cut short, a file system that stopped.
_READING_ERRORS = (tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
                   tf.errors.DataLossError, tf.errors.UnavailableError,
                   tf.errors.FailedPreconditionError, tf.errors.OutOfRangeError)


def _scoring_error(error: tf.errors.OpError, checkpoint: str, config: EvalConfig
                   ) -> Cifar10Error:
    """The one-line error of ``error`` while ``checkpoint`` ('checkpoint PATH' or
    'model PATH'), which read, was scored."""
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return Cifar10Error(f"out of memory scoring {checkpoint} "
                            f"({workers.oom_cause(error)}); a smaller --batch_size fits, "
                            f"or fewer programs beside it")
    cause = workers.tensorflow_cause(error)
    if not isinstance(error, _READING_ERRORS):  # a device's or a kernel's
        return Cifar10Error(f"scoring {checkpoint} failed: {cause}")
    named = any(path in cause for path in config.eval_files)
    files = "" if named else f" ({listed(config.eval_files)})"
    return DataError(f"cannot read the data to evaluate on{files}: {cause}; the "
                     f"{checkpoint} is not at fault: check --data_dir and run the same "
                     f"command again")


def classifier(model: Model) -> Callable[[tf.Tensor], tf.Tensor]:
    """``model`` as ``make_scorer`` takes it: the records' uint8 images -> logits."""
    return lambda images: model(data.eval_batch(images))


def make_scorer(model: Callable[[tf.Tensor], tf.Tensor], num_classes: int,
                probabilities: bool = False
                ) -> Callable[[tf.data.Dataset], tuple[np.ndarray, np.ndarray, float]]:
    """A function: dataset -> (the confusion matrix, int64 [true, predicted]; the
    histograms of each class's probability over its own examples and over the others',
    int64 [2, classes, PR_THRESHOLDS]; the cross entropy summed over the examples).
    ``model``: uint8 images [b, 32, 32, 3] -> logits, or ``probabilities`` (an exported
    model's). No AutoGraph, which needs the source file."""

    def add(totals, batch):
        confusion, histograms, loss = totals
        images, labels = batch
        labels = tf.cast(labels, tf.int32)
        outputs = tf.cast(model(images), tf.float32)
        probs = outputs if probabilities else tf.nn.softmax(outputs)
        # Where the model gives probabilities, -log of the label's (floored: log 0 is -inf).
        loss += tf.reduce_sum(tf.cast(
            -tf.math.log(tf.maximum(tf.gather(probs, labels, batch_dims=1), 1e-38))
            if probabilities else tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=outputs), tf.float64))
        predicted = tf.argmax(outputs, axis=1, output_type=tf.int32)
        confusion += tf.math.confusion_matrix(labels, predicted, num_classes=num_classes,
                                              dtype=tf.int64)
        # Bucket i holds probabilities in [i, i + 1) / (PR_THRESHOLDS - 1).
        buckets = tf.clip_by_value(
            tf.cast(tf.floor(probs * (PR_THRESHOLDS - 1)), tf.int32),
            0, PR_THRESHOLDS - 1)
        counts = tf.one_hot(buckets, PR_THRESHOLDS, dtype=tf.int64)  # [batch, classes, T]
        own = tf.one_hot(labels, num_classes, dtype=tf.int64)[:, :, None]
        histograms += tf.stack([tf.reduce_sum(counts * own, 0),
                                tf.reduce_sum(counts * (1 - own), 0)])
        return confusion, histograms, loss

    @tf.function(autograph=False)
    def score(dataset):
        return dataset.reduce(
            (tf.zeros([num_classes, num_classes], tf.int64),
             tf.zeros([2, num_classes, PR_THRESHOLDS], tf.int64), tf.zeros([], tf.float64)),
            add)

    def scorer(dataset: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray, float]:
        confusion, histograms, loss = score(dataset)
        return confusion.numpy(), histograms.numpy(), float(loss)

    return scorer


@dataclasses.dataclass(frozen=True)
class Score:
    """``score``'s figures: precision @ 1, the mean cross entropy, the confusion matrix and
    histograms of ``make_scorer``; ``synthetic``: scored on generated data."""

    precision: float
    loss: float
    correct: int
    examples: int
    synthetic: bool
    confusion: np.ndarray
    histograms: np.ndarray


def score(scorer, files: Sequence[str], batch_size: int, num_examples: int | None = None
          ) -> Score:
    """The first ``num_examples`` (or all) examples of ``files`` scored by ``scorer``
    (``make_scorer``'s): cifar10-eval's figures, and validation's in training."""
    records = data.read_records(files).take(-1 if num_examples is None else num_examples)
    confusion, histograms, loss = scorer(records.batch(batch_size).prefetch(tf.data.AUTOTUNE))
    correct, examples = int(np.trace(confusion)), int(confusion.sum())
    return Score(precision=correct / max(examples, 1), loss=loss / max(examples, 1),
                 correct=correct, examples=examples,
                 synthetic=any(synthetic.is_synthetic(os.path.dirname(f)) for f in files),
                 confusion=confusion, histograms=histograms)


def per_class(confusion: np.ndarray, names: Sequence[str]) -> list[dict]:
    """Each class's {name, count, recall, precision} (None where none was predicted as
    it); outputs beyond ``names`` are named ``output <i>``."""
    rows = []
    for i in range(confusion.shape[0]):
        count, predicted, right = (int(confusion[i].sum()), int(confusion[:, i].sum()),
                                   int(confusion[i, i]))
        rows.append({"name": names[i] if i < len(names) else f"output {i}", "count": count,
                     "recall": right / count if count else None,
                     "precision": right / predicted if predicted else None})
    return rows


def misclassified(model: Callable, num_classes: int, files: Sequence[str], num_examples: int,
                  count: int, batch_size: int = 128) -> Misclassified:
    """``count`` of the first ``num_examples`` records that ``model`` (``make_scorer``'s)
    gets wrong: each class's first, then each one's second, ..."""
    quota = -(-count // num_classes)
    found: dict[int, list[tuple[np.ndarray, int]]] = {}
    for batch, batch_labels in data.read_records(files).take(num_examples).batch(batch_size):
        guesses = tf.argmax(model(batch), axis=1, output_type=tf.int32).numpy()
        images, labels = batch.numpy(), batch_labels.numpy()
        for i in np.flatnonzero(guesses != labels):
            wrong = found.setdefault(int(labels[i]), [])
            if len(wrong) < quota:
                wrong.append((images[i], int(guesses[i])))
        if len(found) == num_classes and all(len(w) == quota for w in found.values()):
            break
    ranked = sorted((rank, label) for label in found for rank in range(len(found[label])))
    chosen = sorted((label, rank) for rank, label in ranked[:count])
    picked = [(label, *found[label][rank]) for label, rank in chosen]
    return Misclassified(np.stack([image for _, image, _ in picked]) if picked
                         else np.zeros((0, 32, 32, 3), np.uint8),
                         [label for label, _, _ in picked], [guess for _, _, guess in picked])


def checkpoint_mtime_ns(checkpoint: str) -> int:
    """When ``checkpoint``'s index file was written (-1 if unreadable): it tells a new
    run's model.ckpt-N from an earlier run's of the same name."""
    try:
        return os.stat(checkpoint + ".index").st_mtime_ns
    except OSError:
        return -1


class OtherClasses(Cifar10Error):
    """The data holds other classes than the run was trained on (``what``: without the fix)."""

    def __init__(self, run_dir: str, trained_on: Sequence[str], data_classes: Sequence[str]):
        self.run_dir, self.trained_on = run_dir, tuple(trained_on)
        self.what = (f"the run in {run_dir} was trained on {len(trained_on)} classes "
                     f"({listed(trained_on)}) and --data_dir holds {len(data_classes)} "
                     f"({listed(data_classes)})")
        super().__init__(f"{self.what}: evaluate it on the data it was trained on")


def _run_classes(checkpoint: str, data_classes: Sequence[str]) -> tuple[str, ...]:
    """The run's class names; OtherClasses where ``data_classes`` (if given) differ."""
    run_dir = layout.run_of(os.path.dirname(checkpoint))
    trained_on = checkpoints.trained_class_names(run_dir, fallback=data_classes or None)
    if data_classes and tuple(trained_on) != tuple(data_classes):
        raise OtherClasses(run_dir, trained_on, data_classes)
    return trained_on
