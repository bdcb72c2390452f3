"""CIFAR-10 records and the tutorial's two ``tf.data`` input pipelines: ``train_dataset``
(distorted, shuffled, endless) and ``eval_dataset`` (central crops, each example once);
both per replica, with an optional ``tf.distribute.InputContext``."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from cifar10.core.machine import host_cores
from cifar10.data import fileformat as ff
from cifar10.core.config import CONTRAST_RANGE, CROP_SIZE, MAX_BRIGHTNESS_DELTA, MIN_SHUFFLE_BUFFER

TRAIN_PREFETCH_STEPS = 4  # steps' batches kept ready for the train step


def decode_records(records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes a batch of 3,073-byte records: (uint8 images [n, 32, 32, 3], int32 labels [n])."""
    raw = tf.reshape(tf.io.decode_raw(records, tf.uint8), [-1, ff.RECORD_BYTES])
    labels = tf.cast(raw[:, 0], tf.int32)
    # Stored depth-major [channel, row, col]; the model wants [row, col, channel].
    depth_major = tf.reshape(raw[:, ff.LABEL_BYTES:],
                             [-1, ff.NUM_CHANNELS, ff.IMAGE_SIZE, ff.IMAGE_SIZE])
    return tf.transpose(depth_major, [0, 2, 3, 1]), labels


# Records decoded per op (one at a time made the first epoch four times as costly).
_DECODE_BATCH = 1000


def read_records(paths: Sequence[str]) -> tf.data.Dataset:
    """Dataset of (uint8 image [32, 32, 3], int32 label) in file and record order."""
    return _records(paths).batch(_DECODE_BATCH).map(decode_records).unbatch()


def _records(paths: Sequence[str]) -> tf.data.Dataset:
    """The files' raw records, in order."""
    return tf.data.FixedLengthRecordDataset(list(paths), ff.RECORD_BYTES, buffer_size=1 << 20)


def distort_batch(images: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """The tutorial's distortions (random crop, flip, brightness, contrast, then
    standardisation) of uint8 images [b, 32, 32, 3] as float32 [b, 24, 24, 3], drawn
    from ``seed`` (int [2]); the ``tf.image`` ops' results for a whole batch at once."""
    seeds = tf.random.experimental.stateless_split(seed, num=5)
    batch = tf.shape(images)[0]
    span = ff.IMAGE_SIZE - CROP_SIZE + 1  # 9 possible offsets per axis
    # The random choices are drawn outside XLA, which may pick another algorithm.
    return apply_distortions_fused(
        images,
        top=tf.random.stateless_uniform([batch], seeds[0], 0, span, tf.int32),
        left=tf.random.stateless_uniform([batch], seeds[1], 0, span, tf.int32),
        flip=tf.random.stateless_uniform([batch], seeds[2]) < 0.5,
        delta=tf.random.stateless_uniform([batch], seeds[3], -MAX_BRIGHTNESS_DELTA,
                                          MAX_BRIGHTNESS_DELTA),
        factor=tf.random.stateless_uniform([batch], seeds[4], *CONTRAST_RANGE))


def apply_distortions(images: tf.Tensor, top: tf.Tensor, left: tf.Tensor, flip: tf.Tensor,
                      delta: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``distort_batch`` with its random choices given, each [batch]: crop offsets
    ``top`` and ``left`` (0-8), ``flip``, brightness ``delta``, contrast ``factor``."""
    steps = tf.range(CROP_SIZE)
    rows = top[:, None] + steps[None, :]
    # A flipped crop reads its columns right to left: crop and flip in one gather.
    cols = left[:, None] + tf.where(flip[:, None], CROP_SIZE - 1 - steps[None, :], steps[None, :])
    crops = tf.gather(images, rows, axis=1, batch_dims=1)  # [b, 24, 32, 3]
    crops = tf.cast(tf.gather(crops, cols, axis=2, batch_dims=1), tf.float32)  # [b, 24, 24, 3]
    crops = crops + delta[:, None, None, None]
    # Contrast as tf.image.adjust_contrast: scale each channel about its mean.
    channel_mean = tf.reduce_mean(crops, axis=[1, 2], keepdims=True)
    crops = (crops - channel_mean) * factor[:, None, None, None] + channel_mean
    return standardize_batch(crops)


# The same ops compiled by XLA, fused into a few loops over the batch: a third of
# the CPU time, which the training step, sharing the cores, gets back.
apply_distortions_fused = tf.function(apply_distortions, jit_compile=True)


def standardize_batch(images: tf.Tensor, min_std: float | None = None) -> tf.Tensor:
    """``tf.image.per_image_standardization`` of each image of a float32 batch; ``min_std``
    replaces its floor of the divisor, 1 / sqrt(number of values)."""
    num_values = float(CROP_SIZE * CROP_SIZE * ff.NUM_CHANNELS)
    mean = tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)
    std = tf.math.reduce_std(images, axis=[1, 2, 3], keepdims=True)
    return (images - mean) / tf.maximum(std, min_std or 1.0 / num_values ** 0.5)


def eval_batch(images: tf.Tensor, min_std: float | None = None) -> tf.Tensor:
    """Central 24x24 crop and standardisation of uint8 images [b, 32, 32, 3]."""
    top = (ff.IMAGE_SIZE - CROP_SIZE) // 2
    crops = images[:, top:top + CROP_SIZE, top:top + CROP_SIZE, :]
    return standardize_batch(tf.cast(crops, tf.float32), min_std)


def _shard(ds: tf.data.Dataset, input_context: tf.distribute.InputContext | None) -> tf.data.Dataset:
    # Each input pipeline (one per worker) reads a disjoint share of the records.
    if input_context is not None and input_context.num_input_pipelines > 1:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds


def _train_share(paths: Sequence[str], input_context: tf.distribute.InputContext | None
                 ) -> tuple[tf.Tensor, tf.Tensor]:
    """This pipeline's disjoint share of the records, decoded in memory (150 MB for
    CIFAR-10); all of them where there are fewer records than pipelines (an empty share
    would end at once)."""
    records = _records(paths)
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    if pipelines > 1 and _num_records(paths) >= pipelines:
        records = _shard(records, input_context)
    with tf.device("/cpu:0"):  # in host memory, for tf.data, where there is a GPU too
        decoded = list(records.batch(_DECODE_BATCH).map(decode_records))
        images, labels = (tf.concat(parts, 0) for parts in zip(*decoded))
    return images, labels


def _num_records(paths: Sequence[str]) -> int:
    return sum(tf.io.gfile.stat(path).length for path in paths) // ff.RECORD_BYTES


def train_dataset(
    paths: Sequence[str],
    batch_size: int,
    seed: int = 0,
    shuffle_buffer: int = MIN_SHUFFLE_BUFFER,
    input_context: tf.distribute.InputContext | None = None,
    skip_batches: int = 0,
    deterministic: bool = True,
    local_pipelines: int = 1,
) -> tf.data.Dataset:
    """The distorted, shuffled, endless training batches (float32 images [batch, 24, 24,
    3], int32 labels), ``seed`` drawing both.  ``skip_batches``: start where the same
    pipeline would be after that many batches (a resumed deterministic run).  Batches
    are distorted on the host's cores (``host_cores``), shared by the ``local_pipelines``
    pipelines of this host; ``deterministic``: in order, else as each is ready (the same
    batches, distortions tied to their number)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    # Read in full before the first batch, so that a run's files can go.
    images, labels = _train_share(paths, input_context)
    # Shuffling the records' numbers gives the order shuffling the records would, at a
    # sixth of the cost of that one stage that runs in a single thread.
    order = tf.data.Dataset.range(labels.shape[0]).shuffle(
        shuffle_buffer, seed=seed + 7919 * pipeline_id, reshuffle_each_iteration=True)
    # Fixed batch shapes keep one traced train step for the whole run.
    order = order.repeat().batch(batch_size, drop_remainder=True)
    # A counter gives each batch its own distortion seed [seed, n].
    ds = tf.data.Dataset.zip((order, tf.data.Dataset.counter())).skip(skip_batches)

    def distort(indices, n):
        op_seed = tf.stack([tf.cast(seed + 1_000_003 * pipeline_id, tf.int64), n])
        return distort_batch(tf.gather(images, indices), op_seed), tf.gather(labels, indices)

    ds = ds.map(distort, num_parallel_calls=max(1, host_cores() // local_pipelines),
                deterministic=deterministic)
    # A pipeline per worker feeds each of its replicas a batch a step.
    replicas = (input_context.num_replicas_in_sync // input_context.num_input_pipelines
                if input_context else 1)
    return without_autotuning(ds.prefetch(TRAIN_PREFETCH_STEPS * max(1, replicas)))


def without_autotuning(ds: tf.data.Dataset) -> tf.data.Dataset:
    """``ds`` with tf.data's autotuning off: its thread can make deleting an iterator
    (at the end of training, on Ctrl-C) wait up to a minute (30 s measured with 2 CPU
    replicas); parallelism from the host's cores trains as fast."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)


def eval_dataset(
    paths: Sequence[str],
    batch_size: int,
    num_examples: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Evaluation batches (float32 images [<=batch, 24, 24, 3], int32 labels) of the first
    ``num_examples`` (or all) in file order, each once, the last batch maybe partial."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    ds = read_records(paths)
    if num_examples is not None:
        ds = ds.take(num_examples)
    ds = _shard(ds, input_context).batch(batch_size, drop_remainder=False)
    ds = ds.map(lambda images, labels: (eval_batch(images), labels),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
