"""Tests of cifar10.evaluation.scoring (and result): restoring the weights, counting
exactly, the confusion matrix and each class's figures, and the class table printed."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from evalruns import RECORDS, always_cat_run, config_of, results_lines, run_of

from cifar10.core.config import EvalConfig
from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import pipeline as data
from cifar10.data import folder as datafolder
from cifar10.evaluation import polling, scoring
from cifar10.model import Model


@pytest.fixture(scope="module")
def run(trained_run):
    return run_of(trained_run)


def direct_counts(checkpoint, files, weights, num_examples=None):
    """(correct, examples) of ``weights`` of ``checkpoint``, computed without the scorer."""
    model = Model()
    key = "averages" if weights == "averages" else "model"
    tf.train.Checkpoint(**{key: model}).read(checkpoint).expect_partial()
    images, labels = [], []
    for image, label in data.read_records(files):
        if num_examples is not None and len(labels) == num_examples:
            break
        images.append(data.eval_batch(image[None])[0].numpy())
        labels.append(int(label))
    logits = model(np.stack(images)).numpy()
    correct = int(np.sum(np.argmax(logits, axis=1) == np.array(labels)))
    return correct, len(labels)


@pytest.mark.parametrize("weights", ["averages", "raw"])
def test_precision_equals_a_direct_computation(run, tmp_path, weights):
    result = scoring.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path, weights=weights))
    correct, examples = direct_counts(run.ckpt6, run.test_files, weights)
    assert (result.correct, result.examples) == (correct, examples) == (correct, RECORDS)
    assert result.precision == correct / RECORDS
    assert (result.step, result.checkpoint, result.weights) == (6, run.ckpt6, weights)


@pytest.mark.parametrize("num_examples, batch_size, expected", [
    (37, 10, 37),  # last partial batch of 7 counted, nothing twice
    (RECORDS, 16, RECORDS),  # 3 full batches and one of 2
    (1000, 16, RECORDS),  # more than the files hold: every example once, no repeat
])
def test_exactly_num_examples_are_counted(run, tmp_path, num_examples, batch_size, expected):
    config = config_of(run, tmp_path, num_examples=num_examples, batch_size=batch_size)
    result = scoring.evaluate_checkpoint(run.ckpt6, config)
    correct, examples = direct_counts(run.ckpt6, run.test_files, "averages", num_examples)
    assert result.examples == examples == expected
    assert result.correct == correct
    assert result.precision == correct / expected


def test_a_model_that_always_says_cat_gives_the_exact_confusion_matrix(tmp_path):
    """Forced outcome: zero last-layer weights and a bias only for cat (3): every
    image is predicted cat, so the matrix has the class counts in cat's column."""
    batches_dir, test_files, train_dir = always_cat_run(tmp_path)
    labels = np.concatenate([labels.numpy() for _, labels in data.eval_dataset(test_files, 50)])
    counts = np.bincount(labels, minlength=10)  # 23 records: 3 of classes 0-2, 2 of the rest
    assert counts.tolist() == [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]
    lines = []
    [result] = polling.evaluate(EvalConfig(
        checkpoint_dir=str(train_dir), eval_dir=str(tmp_path / "eval"), eval_files=test_files,
        num_examples=23, batch_size=8, run_once=True,
        class_names=datafolder.class_names(batches_dir)), print_fn=lines.append)

    want = np.zeros((10, 10), int)
    want[:, 3] = counts
    assert result.confusion_matrix == want.tolist()
    assert (result.correct, result.examples) == (2, 23)  # the diagonal; the sum
    assert result.precision == pytest.approx(2 / 23)
    names = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
             "truck")
    assert result.per_class == [
        {"name": name, "count": int(count), "recall": 1.0 if i == 3 else 0.0,
         "precision": 2 / 23 if i == 3 else None}
        for i, (name, count) in enumerate(zip(names, counts))]
    assert results_lines(tmp_path / "eval") == [result.as_record()]
    assert lines[1:6] == ["class        count  recall  precision",
                          "airplane         3   0.000          -",
                          "automobile       3   0.000          -",
                          "bird             3   0.000          -",
                          "cat              2   1.000      0.087"]
    assert lines[12:15] == [
        "confusion matrix (rows: true class; columns: predicted class, as numbered):",
        "                   0     1     2     3     4     5     6     7     8     9",
        " 0  airplane       0     0     0     3     0     0     0     0     0     0"]
    assert len(lines) == 24


def test_memory_running_out_while_scoring_blames_neither_data_nor_checkpoint(
        run, tmp_path, monkeypatch):
    def out_of_memory(model):
        def scorer(dataset):
            raise tf.errors.ResourceExhaustedError(
                None, None, "Graph execution error:\n\n{{function_node __inference_score_1}} "
                "OOM when allocating tensor with shape[128,24,24,64] and type float on "
                "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
        return scorer

    monkeypatch.setattr(scoring, "make_scorer", out_of_memory)
    with pytest.raises(Cifar10Error) as err:
        scoring.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path))
    assert not isinstance(err.value, (scoring.UnreadableCheckpoint, DataError))
    assert str(err.value) == (
        f"out of memory scoring checkpoint {run.ckpt6} (OOM when allocating tensor with "
        f"shape[128,24,24,64]); a smaller --batch_size fits, or fewer programs beside it")


def test_a_devices_error_while_scoring_is_no_data_error(run, tmp_path, monkeypatch):
    """A kernel's or a device's failure (InternalError: CUDA, XLA) blames neither the
    data nor the checkpoint; a file that cannot be read is the data's."""
    def failing(error):
        def make(model):
            def scorer(dataset):
                raise error
            return scorer
        return make

    monkeypatch.setattr(scoring, "make_scorer", failing(
        tf.errors.InternalError(None, None, "Graph execution error:\n\nCUDA error: launch failed")))
    with pytest.raises(Cifar10Error) as err:
        scoring.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path))
    assert not isinstance(err.value, (scoring.UnreadableCheckpoint, DataError))
    assert str(err.value) == f"scoring checkpoint {run.ckpt6} failed: CUDA error: launch failed"
    monkeypatch.setattr(scoring, "make_scorer", failing(
        tf.errors.NotFoundError(None, None, "/d/test_batch.bin; No such file or directory")))
    with pytest.raises(DataError,
                       match=r"^cannot read the data to evaluate on \(.*\): /d/test_batch"):
        scoring.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path))
