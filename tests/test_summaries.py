"""Tests of cifar10.runs.summaries: histograms TensorBoard can read, image scaling."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from cifar10.runs import summaries


def test_histogram_counts_like_numpy_without_non_finite_values_and_reads_back(tmp_path):
    values = np.random.default_rng(0).normal(size=(64, 12, 12, 8)).astype(np.float32)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        summaries.histogram("layer/activations", tf.constant(values), step=7)
        summaries.histogram("constant", tf.fill([10], 3.0), step=7)
        # Non-finite values (a step --use_fp16 skips) are left out.
        summaries.histogram("some", tf.constant([1.0, np.nan, 3.0, np.inf, -np.inf]), step=7)
        summaries.histogram("none", tf.constant([np.nan, np.nan]), step=7)
    writer.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    assert set(acc.Tags()["tensors"]) == {"layer/activations", "constant", "some", "none"}
    [event] = acc.Tensors("layer/activations")
    assert event.step == 7
    buckets = tf.make_ndarray(event.tensor_proto)
    assert buckets.shape == (30, 3)
    want, edges = np.histogram(values, bins=30, range=(values.min(), values.max()))
    np.testing.assert_allclose(buckets[:, 0], edges[:-1], rtol=1e-5)
    np.testing.assert_allclose(buckets[:, 1], edges[1:], rtol=1e-5)
    assert buckets[:, 2].sum() == values.size
    # Bucket edges computed in float32 vs float64 may move a value or two.
    assert np.abs(buckets[:, 2] - want).max() <= 2
    metadata = acc.SummaryMetadata("layer/activations")
    assert metadata.plugin_data.plugin_name == "histograms"
    constant = tf.make_ndarray(acc.Tensors("constant")[0].tensor_proto)
    assert constant[:, 2].sum() == 10 and constant[0, 0] == 3.0
    some = tf.make_ndarray(acc.Tensors("some")[0].tensor_proto)
    assert some[:, 2].sum() == 2 and (some[0, 0], some[-1, 1]) == (1.0, 3.0)
    none = tf.make_ndarray(acc.Tensors("none")[0].tensor_proto)
    assert none[:, 2].sum() == 0 and np.all(np.isfinite(none))


def test_displayable_rescales_each_image_to_unit_range():
    images = tf.constant(np.random.default_rng(1).normal(size=(3, 4, 4, 3)) * [[[[1.0]]], [[[5.0]]], [[[0.1]]]],
                         tf.float32)
    out = summaries.displayable(images).numpy()
    np.testing.assert_allclose(out.min(axis=(1, 2, 3)), 0.0, atol=1e-6)
    np.testing.assert_allclose(out.max(axis=(1, 2, 3)), 1.0, atol=1e-6)
