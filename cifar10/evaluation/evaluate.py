"""The evaluator as a library: precision @ 1 of a training run's checkpoints.

What it owns: restoring the moving-average (or raw) weights from a checkpoint,
counting correct top-1 predictions over exactly ``num_examples`` examples, and
the polling loop that scores each new checkpoint once, beside a running trainer.

Every example is counted once (the last partial batch included, nothing counted
twice); a checkpoint already scored is not scored again, also across restarts
(``results.jsonl`` in ``eval_dir`` remembers); ``eval_dir`` is never wiped.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import time
from typing import Callable, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from cifar10.runs import checkpoints
from cifar10.data import pipeline as data
from cifar10.distribute import devices
from cifar10.runs import records as runrecord
from cifar10.runs import summaries
from cifar10.data import synthetic
from cifar10.core.config import EvalConfig, compute_dtype
from cifar10.core.errors import Cifar10Error, first_line, io_advice, io_error, listed
from cifar10.model import Model

RESULTS_FILE = "results.jsonl"
PRECISION_TAG = "Precision @ 1"
PER_CLASS_PREFIX = "per_class"  # per_class/recall/<class>, per_class/precision/<class>
PR_CURVE_PREFIX = "pr_curve"  # pr_curve/<class>/pr_curves (the plugin adds its suffix)
PR_THRESHOLDS = 201  # the PR curves' thresholds, 0 to 1 in steps of 0.005
SYNTHETIC_SUFFIX = " on SYNTHETIC data"  # ends the precision line of generated data
SYNTHETIC_TITLE = "SYNTHETIC data (generated, not CIFAR-10)"  # heads its pictures' titles
# How often the polling loop looks for a new checkpoint (an evaluation still
# waits --eval_interval_secs after the previous one).
POLL_SECS = 2.0


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
    # [true class][predicted class] counts over exactly the evaluated examples: it
    # sums to ``examples`` and its diagonal to ``correct``.
    confusion_matrix: list[list[int]] = dataclasses.field(default_factory=list)
    # {name, count, recall, precision} of each class, in label order (``per_class``).
    per_class: list[dict] = dataclasses.field(default_factory=list)
    # For the PR curves, not results.jsonl: per class, how many of its own examples
    # ([0]) and of the others ([1]) had each probability of it, in PR_THRESHOLDS
    # buckets ([2, classes, PR_THRESHOLDS]).
    probability_histograms: np.ndarray | None = dataclasses.field(default=None, repr=False,
                                                                 compare=False)
    # For the grid of misclassified images, not results.jsonl (``misclassified``).
    misclassified: Misclassified | None = dataclasses.field(default=None, repr=False,
                                                           compare=False)

    def as_record(self) -> dict:
        """The line of results.jsonl."""
        record = dataclasses.asdict(self)
        del record["probability_histograms"], record["misclassified"]
        return record

    def line(self) -> str:
        """The original's output line, plus which step and checkpoint it scored (and
        ``on SYNTHETIC data`` after it when it was generated data)."""
        return "%s: precision @ 1 = %.3f (step %d, %s, %d examples, %s weights)%s" % (
            datetime.datetime.now(), self.precision, self.step,
            os.path.basename(self.checkpoint), self.examples, self.weights,
            SYNTHETIC_SUFFIX if self.synthetic else "")

    def lines(self) -> list[str]:
        """``line()``, then why there is no grid of misclassified images if none was wrong."""
        if self.misclassified is None or len(self.misclassified.labels):
            return [self.line()]
        return [self.line(), f"No misclassified images to show for "
                             f"{os.path.basename(self.checkpoint)}: all {self.examples} "
                             f"examples were classified right."]


def make_scorer(model: Model) -> Callable[[tf.data.Dataset], tuple[np.ndarray, np.ndarray]]:
    """A function: dataset -> (the confusion matrix of ``model`` on it, int64 [true
    class, predicted class], one row and column per output of the model; the
    histograms of each class's softmax probability over its own examples and over
    the others', int64 [2, classes, PR_THRESHOLDS]).

    The prediction is the highest logit (the first class of a tie).  The whole
    pass over the dataset runs in one ``tf.function`` (traced once per model and
    dataset structure), with no Python work per batch.  It is a
    ``Dataset.reduce``, not a loop that AutoGraph converts: AutoGraph needs the
    source file, and without it (changed under a running program, or not
    installed) its fallback would trace the loop forever.
    """
    num_classes = model.num_classes

    def add(totals, batch):
        confusion, histograms = totals
        images, labels = batch
        labels = tf.cast(labels, tf.int32)
        logits = model(images)
        predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
        confusion += tf.math.confusion_matrix(labels, predicted, num_classes=num_classes,
                                              dtype=tf.int64)
        # Bucket i holds probabilities in [i, i + 1) / (PR_THRESHOLDS - 1).
        buckets = tf.clip_by_value(
            tf.cast(tf.floor(tf.nn.softmax(logits) * (PR_THRESHOLDS - 1)), tf.int32),
            0, PR_THRESHOLDS - 1)
        counts = tf.one_hot(buckets, PR_THRESHOLDS, dtype=tf.int64)  # [batch, classes, T]
        own = tf.one_hot(labels, num_classes, dtype=tf.int64)[:, :, None]
        histograms += tf.stack([tf.reduce_sum(counts * own, 0),
                                tf.reduce_sum(counts * (1 - own), 0)])
        return confusion, histograms

    @tf.function(autograph=False)
    def score(dataset):
        return dataset.reduce(
            (tf.zeros([num_classes, num_classes], tf.int64),
             tf.zeros([2, num_classes, PR_THRESHOLDS], tf.int64)), add)

    def scorer(dataset: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
        confusion, histograms = score(dataset)
        return confusion.numpy(), histograms.numpy()

    return scorer


def misclassified(model: Model, files: Sequence[str], num_examples: int, count: int,
                  batch_size: int = 128) -> Misclassified:
    """``count`` of the first ``num_examples`` records of ``files`` that ``model``
    classifies wrong, in class order: each class's first one in file order, then
    each class's second, and so on.  From one checkpoint to the next they are mostly
    the same images, so that their grid can be watched over a run."""
    quota = -(-count // model.num_classes)
    found: dict[int, list[tuple[np.ndarray, int]]] = {}
    for batch, batch_labels in data.read_records(files).take(num_examples).batch(batch_size):
        guesses = tf.argmax(model(data.eval_batch(batch)), axis=1, output_type=tf.int32).numpy()
        images, labels = batch.numpy(), batch_labels.numpy()
        for i in np.flatnonzero(guesses != labels):
            wrong = found.setdefault(int(labels[i]), [])
            if len(wrong) < quota:
                wrong.append((images[i], int(guesses[i])))
        if len(found) == model.num_classes and all(len(w) == quota for w in found.values()):
            break
    chosen = _round_robin(found, count)
    return Misclassified(np.stack([image for _, image, _ in chosen]) if chosen
                         else np.zeros((0, 32, 32, 3), np.uint8),
                         [label for label, _, _ in chosen], [guess for _, _, guess in chosen])


def _round_robin(found: dict[int, list[tuple[np.ndarray, int]]], count: int
                 ) -> list[tuple[int, np.ndarray, int]]:
    """(label, image, guess): each class's first, then each class's second, ...,
    ``count`` in all, in class order."""
    picked = [(rank, label, image, guess) for label in sorted(found)
              for rank, (image, guess) in enumerate(found[label])]
    picked = sorted(picked, key=lambda p: (p[0], p[1]))[:count]
    return [(label, image, guess) for _, label, image, guess in sorted(
        picked, key=lambda p: (p[1], p[0]))]


def per_class(confusion: np.ndarray, names: Sequence[str]) -> list[dict]:
    """Each class's {name, count, recall, precision} from a confusion matrix.

    ``count`` is the class's examples; ``recall`` the share of them predicted as the
    class (its accuracy); ``precision`` the share of the examples predicted as the
    class that are of it, None when none was.  Outputs beyond ``names`` (a run
    trained when the model always had 10) are named ``output <i>``.
    """
    rows = []
    for i in range(confusion.shape[0]):
        count, predicted, right = (int(confusion[i].sum()), int(confusion[:, i].sum()),
                                   int(confusion[i, i]))
        rows.append({"name": names[i] if i < len(names) else f"output {i}", "count": count,
                     "recall": right / count if count else None,
                     "precision": right / predicted if predicted else None})
    return rows


def class_table(result: EvalResult, max_matrix_classes: int = 20) -> list[str]:
    """The per-class figures of ``result`` as text lines, and its confusion matrix
    when it has at most ``max_matrix_classes`` classes (wider would not read)."""
    width = max(len("class"), *(len(c["name"]) for c in result.per_class))
    figure = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [f"{'class':<{width}}  {'count':>6}  {'recall':>6}  {'precision':>9}"]
    lines += [f"{c['name']:<{width}}  {c['count']:>6}  {figure(c['recall']):>6}  "
              f"{figure(c['precision']):>9}" for c in result.per_class]
    if len(result.per_class) <= max_matrix_classes:
        cell = max(5, len(str(max(max(row) for row in result.confusion_matrix))))
        lines.append("confusion matrix (rows: true class; columns: predicted class, "
                     "as numbered):")
        lines.append(f"{'':<{width + 4}}" + "".join(
            f"{i:>{cell + 1}}" for i in range(len(result.per_class))))
        lines += [f"{i:>2}  {c['name']:<{width}}" + "".join(f"{n:>{cell + 1}}" for n in row)
                  for i, (c, row) in enumerate(zip(result.per_class, result.confusion_matrix))]
    return lines


def evaluate_checkpoint(checkpoint: str, config: EvalConfig) -> EvalResult:
    """Scores one checkpoint on ``config.num_examples`` examples of the eval files."""
    start = time.monotonic()
    mtime = _mtime(checkpoint)
    names = _run_classes(checkpoint, config.class_names)
    model, step = checkpoints.load_model(checkpoint, config.weights,
                                         tf.as_dtype(compute_dtype(config)))
    dataset = data.eval_dataset(config.eval_files, config.batch_size, config.num_examples)
    confusion, histograms = make_scorer(model)(dataset)
    correct, examples = int(np.trace(confusion)), int(confusion.sum())
    return EvalResult(checkpoint=checkpoint, step=step, checkpoint_mtime_ns=mtime,
                      precision=correct / max(examples, 1),
                      correct=correct, examples=examples, weights=config.weights,
                      eval_data=config.eval_data, wall_time=time.time(),
                      seconds=time.monotonic() - start, confusion_matrix=confusion.tolist(),
                      synthetic=_generated(config.eval_files),
                      per_class=per_class(confusion, names), probability_histograms=histograms,
                      misclassified=misclassified(model, config.eval_files, config.num_examples,
                                                  config.misclassified_images,
                                                  config.batch_size)
                      if config.misclassified_images else None)


def _generated(files: Sequence[str]) -> bool:
    """``files`` are cifar10.data.synthetic's data (its marker file is beside them)."""
    return any(synthetic.is_synthetic(os.path.dirname(path)) for path in files)


def _run_classes(checkpoint: str, data_classes: Sequence[str]) -> tuple[str, ...]:
    """The class names the run of ``checkpoint`` was trained on.

    Raises:
      Cifar10Error: ``data_classes`` (when given) are other classes.
    """
    run_dir = os.path.dirname(checkpoint)
    trained_on = checkpoints.trained_class_names(run_dir)
    if data_classes and tuple(trained_on) != tuple(data_classes):
        raise Cifar10Error(
            f"the run in {run_dir} was trained on {len(trained_on)} classes "
            f"({listed(trained_on)}) and --data_dir holds {len(data_classes)} "
            f"({listed(data_classes)}): evaluate it on the data it was trained on")
    return trained_on


def _key(checkpoint: str, mtime_ns: int, weights: str, eval_data: str) -> str:
    # The file time keeps a new run's model.ckpt-1000 (after --fresh_start, or in a
    # reused directory) from passing for the earlier run's, already scored.
    return f"{os.path.basename(checkpoint)}|{mtime_ns}|{weights}|{eval_data}"


def scored_checkpoints(eval_dir: str) -> set[str]:
    """Keys of the checkpoints recorded in ``eval_dir/results.jsonl``."""
    keys = set()
    try:
        with open(os.path.join(eval_dir, RESULTS_FILE)) as f:
            for line in f:
                try:
                    r = json.loads(line)
                    keys.add(_key(r["checkpoint"], r["checkpoint_mtime_ns"], r["weights"],
                                  r["eval_data"]))
                except (ValueError, KeyError, TypeError):
                    # A line cut short by a crash, or not one of ours (not an object):
                    # that checkpoint is scored again.
                    continue
    except FileNotFoundError:
        pass
    except OSError as e:
        raise io_error("cannot read", os.path.join(eval_dir, RESULTS_FILE), e) from e
    return keys


def record(result: EvalResult, eval_dir: str, writer) -> None:
    """Writes ``Precision @ 1``, each class's recall and precision and PR curve at the
    checkpoint's step, and appends the result to results.jsonl."""
    path = os.path.join(eval_dir, RESULTS_FILE)
    try:
        with writer.as_default():
            tf.summary.scalar(PRECISION_TAG, result.precision, step=result.step)
            _class_summaries(result)
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


def _class_summaries(result: EvalResult) -> None:
    """Each class's recall and precision (scalars under ``per_class/``) and its
    precision-recall curve (TensorBoard's PR-curve plugin, ``pr_curve/<class>``)."""
    for figures in result.per_class:
        for kind in ("recall", "precision"):
            if figures[kind] is not None:
                tf.summary.scalar(f"{PER_CLASS_PREFIX}/{kind}/{figures['name']}", figures[kind],
                                  step=result.step)
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


CONFUSION_IMAGE_TAG = "confusion_matrix"
MISCLASSIFIED_IMAGE_TAG = "misclassified"


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


class NoCheckpointError(Cifar10Error):
    """--run_once found no checkpoint to evaluate."""


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
    given) to its flags.txt (``runrecord``).

    Returns:
      The results of this call, in order.

    Raises:
      NoCheckpointError: ``run_once`` and no checkpoint in ``checkpoint_dir``.
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
        if created and not os.path.exists(os.path.join(config.eval_dir, RESULTS_FILE)):
            shutil.rmtree(config.eval_dir, ignore_errors=True)
        raise


def _evaluate(config, print_fn, sleep, should_stop, clock, flags_text, command):
    gpus = [device.name for device in tf.config.list_logical_devices("GPU")]
    runrecord.record_start(config.eval_dir, runrecord.environment(
        "cifar10-eval", command, devices.describe(gpus[:1] or ["/device:CPU:0"]),
        tf.__version__), flags_text)
    with summaries.file_writer(config.eval_dir) as writer:
        settings = {**dataclasses.asdict(config), "eval_files": ", ".join(config.eval_files)}
        summaries.write_run_config(settings, step=0, hparams=False)
        if config.run_once or config.checkpoint:
            return [_run_once(config, writer, print_fn)]
        return _poll(config, writer, print_fn, sleep, should_stop, clock)


def _run_once(config, writer, print_fn) -> EvalResult:
    latest = config.checkpoint or _latest(config.checkpoint_dir)
    if not latest:
        raise NoCheckpointError(
            f"No checkpoint file found in {config.checkpoint_dir}: train first "
            f"(cifar10-train --train_dir={config.checkpoint_dir}) or point "
            f"--checkpoint_dir at a training run")
    try:
        result = evaluate_checkpoint(latest, config)
    except checkpoints.READ_ERRORS as e:
        raise Cifar10Error(f"cannot evaluate checkpoint {latest}: {first_line(e)}") from e
    record(result, config.eval_dir, writer)
    # One evaluation: its classes too (not when polling).
    for line in result.lines() + class_table(result):
        print_fn(line)
    return result


# Not tf.train.checkpoints_iterator, which goes by the state file and names alone: this
# also rescores a new run's same-named checkpoint, skips an unreadable one once, remembers
# across restarts (results.jsonl) and stops when the run is complete (each is tested).
def _poll(config, writer, print_fn, sleep, should_stop, clock) -> list[EvalResult]:
    results: list[EvalResult] = []
    done = scored_checkpoints(config.eval_dir)
    failed: set[tuple[str, int]] = set()  # (checkpoint, mtime) that could not be read
    said_waiting = False
    last_start = None  # when the previous evaluation started
    last_new = clock()  # when a checkpoint to score was last seen
    while not should_stop():
        latest = _latest(config.checkpoint_dir)
        todo = latest and _key(latest, _mtime(latest), config.weights,
                               config.eval_data) not in done
        if todo and (latest, _mtime(latest)) not in failed:
            said_waiting = False
            last_new = clock()
            if last_start is not None:
                wait = last_start + config.eval_interval_secs - clock()
                if wait > 0:
                    sleep(wait)
                # A newer checkpoint may have appeared while waiting: take the newest.
                latest = _latest(config.checkpoint_dir) or latest
            last_start = clock()
            try:
                result = evaluate_checkpoint(latest, config)
            except checkpoints.READ_ERRORS as e:
                # Deleted by the trainer's retention meanwhile, or damaged.
                logging.warning("Skipping checkpoint %s: %s", latest, first_line(e))
                failed.add((latest, _mtime(latest)))
                continue
            record(result, config.eval_dir, writer)
            done.add(_key(latest, result.checkpoint_mtime_ns, config.weights,
                          config.eval_data))
            results.append(result)
            for line in result.lines():
                print_fn(line)
            continue
        if latest is None and not said_waiting:
            print_fn(f"No checkpoint file found in {config.checkpoint_dir}; waiting for the "
                     f"trainer to write one.")
            said_waiting = True
        if _training_finished(config.checkpoint_dir, latest):
            if todo:  # it is in `failed`: unreadable
                print_fn(f"Training in {config.checkpoint_dir} is complete but its final "
                         f"checkpoint {latest} could not be evaluated; stopping.")
            else:
                print_fn(f"Training in {config.checkpoint_dir} is complete and its final "
                         f"checkpoint is evaluated; stopping.")
            break
        if config.eval_timeout is not None and clock() - last_new > config.eval_timeout:
            print_fn(f"No new checkpoint in {config.eval_timeout:g} s; stopping.")
            break
        sleep(min(POLL_SECS, config.eval_interval_secs) or POLL_SECS)
    return results


def _mtime(checkpoint: str) -> int:
    try:
        return os.stat(checkpoint + ".index").st_mtime_ns
    except OSError:
        return -1


def _latest(checkpoint_dir: str) -> str | None:
    latest = checkpoints.latest(checkpoint_dir)
    return latest.path if latest else None


def _training_finished(checkpoint_dir: str, latest: str | None) -> bool:
    """The trainer marked the run complete at the step of ``latest``."""
    final_step = checkpoints.completed_step(checkpoint_dir)
    return bool(latest) and final_step is not None and \
        latest == checkpoints.checkpoint_path(checkpoint_dir, final_step)
