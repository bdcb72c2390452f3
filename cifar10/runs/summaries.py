"""TensorBoard summaries of training, with the original tutorial's tags: the learning
rate, the losses (smoothed and raw), each layer's activations and sparsity, each
variable and its gradient, the first images; the run's settings (``run_config``, and
a session of the HParams dashboard); the model's graph."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api
from tensorboard.plugins.histogram import metadata as histogram_metadata

from cifar10.core.config import CROP_SIZE, EVAL_DATA, LOSS_TAG, PRECISION_TAG, WEIGHTS
from cifar10.core.errors import io_advice, io_error
from cifar10.data.fileformat import NUM_CHANNELS

MAX_IMAGES = 3  # as tf.summary.image's default in the original
HISTOGRAM_BUCKETS = 30  # as tf.summary.histogram's default
# The HParams dashboard's columns, alike in every run (the plugin reads one run's): the
# settings users compare, domains where they are fixed; the scores in a session's own
# run folder (group ""), which validation writes in train_dir and cifar10-eval in eval_dir.
HPARAMS = [hparams_api.HParam(name) for name in (
    "learning_rate", "learning_rate_decay_factor", "num_epochs_per_decay",
    "moving_average_decay", "weight_decay", "batch_size", "num_replicas", "max_steps",
    "max_epochs", "seed")] + [
    hparams_api.HParam("precision", hparams_api.Discrete(["float32", "float16", "bfloat16"]),
                       display_name="compute dtype"),  # beside the metric precision @ 1
    hparams_api.HParam("weights", hparams_api.Discrete(list(WEIGHTS))),  # cifar10-eval's
    hparams_api.HParam("eval_data", hparams_api.Discrete(list(EVAL_DATA)))]
METRICS = [hparams_api.Metric(PRECISION_TAG, group="", display_name="precision @ 1"),
           hparams_api.Metric(LOSS_TAG, group="", display_name="test loss")]


def histogram(tag: str, values: tf.Tensor, step) -> None:
    """A histogram summary as ``tf.summary.histogram`` writes it (the plugin's rows of
    left edge, right edge, count), counted in place instead of through its float64
    one-hot matrix of [values, buckets] (over a gigabyte for conv1's activations)."""
    tf.summary.write(tag, _buckets(tf.reshape(tf.cast(values, tf.float64), [-1])), step=step,
                     metadata=histogram_metadata.create_summary_metadata(tag, ""))


# One small function for every histogram of a step: traced once, not once a histogram.
@tf.function(input_signature=[tf.TensorSpec([None], tf.float64)])
def _buckets(values):
    # Non-finite values (a step --use_fp16 skips) have no bucket: left out.
    values = tf.boolean_mask(values, tf.math.is_finite(values))
    some = tf.size(values) > 0
    low = tf.where(some, tf.reduce_min(values), tf.constant(0.0, tf.float64))
    high = tf.where(some, tf.reduce_max(values), tf.constant(0.0, tf.float64))
    high = tf.where(high > low, high, low + 1.0)  # one distinct value: a unit-wide range
    counts = tf.histogram_fixed_width(values, tf.stack([low, high]), nbins=HISTOGRAM_BUCKETS)
    edges = tf.linspace(low, high, HISTOGRAM_BUCKETS + 1)
    return tf.stack([edges[:-1], edges[1:], tf.cast(counts, tf.float64)], axis=1)


def displayable(images: tf.Tensor) -> tf.Tensor:
    """Rescales standardised images to [0, 1] per image for the image dashboard."""
    images = tf.cast(images, tf.float32)
    low = tf.reduce_min(images, axis=[1, 2, 3], keepdims=True)
    high = tf.reduce_max(images, axis=[1, 2, 3], keepdims=True)
    return (images - low) / tf.maximum(high - low, 1e-6)


def write_train_summaries(step, learning_rate, losses, loss_averages, activations,
                          variables, gradients, images) -> None:
    """Writes one step's summaries to the default writer (inside a tf.function)."""
    tf.summary.scalar("learning_rate", learning_rate, step=step)
    for name, value in losses.items():
        tf.summary.scalar(f"{name} (raw)", value, step=step)
        tf.summary.scalar(name, loss_averages[name], step=step)
    for layer, x in activations.items():
        histogram(f"{layer}/activations", x, step=step)
        tf.summary.scalar(f"{layer}/sparsity", tf.math.zero_fraction(x), step=step)
    for var, grad in zip(variables, gradients):
        tag = var.name.split(":")[0]  # 'conv1/weights' for 'conv1/weights:0'
        histogram(tag, var, step=step)
        histogram(f"{tag}/gradients", grad, step=step)
    tf.summary.image("images", displayable(images[:MAX_IMAGES]), step=step,
                     max_outputs=MAX_IMAGES)


def write_run_config(settings: Mapping[str, Any], step: int,
                     hparams: Mapping[str, Any] | None = None) -> None:
    """Records a run's settings: a markdown table as the text summary ``run_config``,
    and the HParams dashboard's columns with this run's session: the ``HPARAMS`` that
    ``hparams`` (default: ``settings``) holds (None, an unset one, is left out)."""
    hparams = settings if hparams is None else hparams
    rows = "\n".join(f"| {key} | `{value}` |" for key, value in sorted(settings.items()))
    tf.summary.text("run_config", f"| setting | value |\n|---|---|\n{rows}", step=step)
    hparams_api.hparams_config(HPARAMS, METRICS)
    hparams_api.hparams({hp.name: hparams[hp.name] for hp in HPARAMS if isinstance(
        hparams.get(hp.name), (bool, int, float, str))})


def write_graph(model, batch_size: int) -> None:
    """The model's forward pass from a batch of images to the logits, its layers by
    name, for TensorBoard's Graphs tab (traced, not run)."""
    images = tf.TensorSpec([batch_size, CROP_SIZE, CROP_SIZE, NUM_CHANNELS], tf.float32)
    forward = tf.function(lambda x: model.stage_outputs(x)["softmax_linear"])
    tf.summary.graph(forward.get_concrete_function(images).graph)


@contextlib.contextmanager
def file_writer(logdir: str | None) -> Iterator[tf.summary.SummaryWriter]:
    """A summary writer for ``logdir`` (None: one that writes nothing) as the default
    writer, closed at the end; failing to write the event file is a Cifar10Error
    (unless another error is on its way out)."""
    if logdir is None:
        writer = tf.summary.create_noop_writer()
    else:
        try:
            writer = tf.summary.create_file_writer(logdir)
        except tf.errors.OpError as e:
            raise io_error("cannot write summaries in", logdir, e,
                           io_advice(e) or "choose a directory you can write") from e
    failed = False
    try:
        with writer.as_default():
            yield writer
    except BaseException:
        failed = True
        raise
    finally:
        try:
            writer.close()
        except tf.errors.OpError as e:
            if not failed:
                raise io_error("cannot write summaries in", logdir, e) from e
