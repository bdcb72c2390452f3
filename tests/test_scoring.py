"""cifar10.evaluation.scoring: exactly num_examples counted, the figures, its errors."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from evalruns import (RECORDS, always_cat_run, cat_config, config_of, results_lines,
                      run_of)

from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import fileformat as ff
from cifar10.data import pipeline as data
from cifar10.evaluation import polling, scoring
from cifar10.model import Model


@pytest.fixture(scope="module")
def run(trained_run):
    return run_of(trained_run)


@pytest.mark.parametrize("weights, num_examples, batch_size, expected", [
    ("averages", 37, 10, 37),  # a last partial batch of 7 counted, nothing twice
    ("raw", RECORDS, 16, RECORDS),
    ("averages", 1000, 16, RECORDS),  # more than the files hold: each example once
])
def test_precision_equals_a_direct_computation(run, tmp_path, weights, num_examples,
                                               batch_size, expected):
    result = scoring.evaluate_checkpoint(run.ckpt6, config_of(
        run, tmp_path, weights=weights, num_examples=num_examples, batch_size=batch_size))
    model = Model()
    tf.train.Checkpoint(**{"averages" if weights == "averages" else "model": model}).read(
        run.ckpt6).expect_partial()
    images, labels = zip(*list(data.read_records(run.test_files).take(num_examples)))
    logits = model(data.eval_batch(tf.stack(images))).numpy()
    correct = int(np.sum(np.argmax(logits, axis=1) == np.array(labels)))
    assert (result.correct, result.examples) == (correct, expected)
    assert result.precision == correct / expected
    assert (result.step, result.checkpoint, result.weights) == (6, run.ckpt6, weights)


def test_a_model_that_always_says_cat_gives_the_exact_figures(tmp_path):
    """Every image predicted cat: the class counts in cat's column."""
    test_files = always_cat_run(tmp_path)
    counts = [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]  # 23 records
    [result] = polling.evaluate(cat_config(tmp_path, test_files), print_fn=lambda line: None)
    want = np.zeros((10, 10), int)
    want[:, 3] = counts
    assert result.confusion_matrix == want.tolist()
    assert (result.correct, result.examples, result.precision) == (2, 23, 2 / 23)
    assert result.per_class == [
        {"name": name, "count": count, "recall": 1.0 if i == 3 else 0.0,
         "precision": 2 / 23 if i == 3 else None}
        for i, (name, count) in enumerate(zip(ff.CLASS_NAMES, counts))]
    assert results_lines(tmp_path / "eval") == [result.as_record()]


@pytest.mark.parametrize("error, kind, says", [
    (tf.errors.ResourceExhaustedError(
        None, None, "Graph execution error:\n\nOOM when allocating tensor with "
        "shape[128,24,24,64] and type float on /device:GPU:0 by allocator GPU_0_bfc"),
     Cifar10Error, "out of memory scoring checkpoint {ckpt} (OOM when allocating tensor with "
     "shape[128,24,24,64]); a smaller --batch_size fits, or fewer programs beside it"),
    (tf.errors.InternalError(None, None, "Graph execution error:\n\nCUDA error: launch failed"),
     Cifar10Error, "scoring checkpoint {ckpt} failed: CUDA error: launch failed"),
    (tf.errors.NotFoundError(None, None, "/d/test_batch.bin; No such file or directory"),
     DataError, "cannot read the data to evaluate on ("),
])
def test_an_error_while_scoring_blames_the_data_or_the_device_not_the_checkpoint(
        run, tmp_path, monkeypatch, error, kind, says):
    def failing(*model):
        def scorer(dataset):
            raise error
        return scorer

    monkeypatch.setattr(scoring, "make_scorer", failing)
    with pytest.raises(Cifar10Error) as err:
        scoring.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path))
    assert type(err.value) is kind
    assert str(err.value).startswith(says.format(ckpt=run.ckpt6))
