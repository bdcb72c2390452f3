"""CIFAR-10 records and the train/eval ``tf.data`` pipelines.

This module owns decoding the binary format (``fileformat``) and the two input
pipelines of the tutorial (the files are found and checked before a run starts by
``folder``):

* ``train_dataset``: the distorted inputs (random 24x24 crop, left-right flip,
  brightness, contrast, per-image standardisation), shuffled, repeated, batched,
  from the decoded records cached in memory;
* ``eval_dataset``: central 24x24 crop and standardisation, in file order, once,
  with the last partial batch kept so that evaluation counts every example once.

Both take a per-replica batch size and an optional ``tf.distribute.InputContext``
so that they can be handed to ``strategy.distribute_datasets_from_function``.
Downloading lives in ``download``; this module never touches the network.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from cifar10.data import fileformat as ff
from cifar10.core.config import CONTRAST_RANGE, CROP_SIZE, MAX_BRIGHTNESS_DELTA, MIN_SHUFFLE_BUFFER

TRAIN_PARALLEL_BATCHES = 2  # batches distorted at once
TRAIN_PREFETCH_BATCHES = 4  # distorted batches kept ready for the train step


def decode_records(records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes a batch of 3,073-byte records: (uint8 images [n, 32, 32, 3], int32 labels [n])."""
    raw = tf.reshape(tf.io.decode_raw(records, tf.uint8), [-1, ff.RECORD_BYTES])
    labels = tf.cast(raw[:, 0], tf.int32)
    # Stored depth-major [channel, row, col]; the model wants [row, col, channel].
    depth_major = tf.reshape(raw[:, ff.LABEL_BYTES:],
                             [-1, ff.NUM_CHANNELS, ff.IMAGE_SIZE, ff.IMAGE_SIZE])
    return tf.transpose(depth_major, [0, 2, 3, 1]), labels


# Records decoded per op: decoding one record at a time made the first epoch
# (before the cache is full) four times as costly as the later ones.
_DECODE_BATCH = 1000


def read_records(paths: Sequence[str]) -> tf.data.Dataset:
    """Dataset of (uint8 image [32, 32, 3], int32 label) in file and record order."""
    records = tf.data.FixedLengthRecordDataset(list(paths), ff.RECORD_BYTES,
                                               buffer_size=1 << 20)
    return records.batch(_DECODE_BATCH).map(decode_records).unbatch()


def distort_batch(images: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """The tutorial's training distortions of a batch of uint8 images.

    For each image, independently: a random 24x24 crop, a random left-right
    flip, a random brightness change (max delta 63), a random contrast factor
    (0.2-1.8), then per-image standardisation, as ``tf.image``'s
    ``random_crop``, ``random_flip_left_right``, ``random_brightness``,
    ``random_contrast`` and ``per_image_standardization`` do one image at a time.
    Working on the whole batch at once makes the input pipeline several times
    cheaper, which matters when it shares the CPU with training.

    Args:
      images: uint8 [batch, 32, 32, 3].
      seed: int shape-[2] tensor; every random choice derives from it.

    Returns:
      float32 [batch, 24, 24, 3].
    """
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
    """``distort_batch`` with its random choices given, one per image.

    Args:
      images: uint8 [batch, 32, 32, 3].
      top, left: int32 [batch] crop offsets in 0-8.
      flip: bool [batch], flip left-right.
      delta: float32 [batch] brightness change.
      factor: float32 [batch] contrast factor.
    """
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


# The same ops compiled by XLA, which fuses the crop, the contrast and the
# standardisation into a few loops over the batch: a third of the CPU time of
# running them one by one (measured: 0.5 vs 1.9 ms per batch of 128), time the
# training step, which shares the cores, gets back.
apply_distortions_fused = tf.function(apply_distortions, jit_compile=True)


def standardize_batch(images: tf.Tensor) -> tf.Tensor:
    """``tf.image.per_image_standardization`` of each image of a float32 batch."""
    num_values = float(CROP_SIZE * CROP_SIZE * ff.NUM_CHANNELS)
    mean = tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)
    std = tf.math.reduce_std(images, axis=[1, 2, 3], keepdims=True)
    return (images - mean) / tf.maximum(std, 1.0 / num_values ** 0.5)


def eval_batch(images: tf.Tensor) -> tf.Tensor:
    """Central 24x24 crop and standardisation of uint8 images [b, 32, 32, 3].

    The same as ``tf.image.resize_with_crop_or_pad`` to 24x24 and
    ``per_image_standardization`` of each image; float32 [b, 24, 24, 3].
    """
    top = (ff.IMAGE_SIZE - CROP_SIZE) // 2
    crops = images[:, top:top + CROP_SIZE, top:top + CROP_SIZE, :]
    return standardize_batch(tf.cast(crops, tf.float32))


def _shard(ds: tf.data.Dataset, input_context: tf.distribute.InputContext | None) -> tf.data.Dataset:
    # Each input pipeline (one per worker) reads a disjoint share of the records.
    if input_context is not None and input_context.num_input_pipelines > 1:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds


def _train_shard(paths: Sequence[str], input_context: tf.distribute.InputContext | None
                 ) -> tf.data.Dataset:
    """This training pipeline's share of the records of ``paths``: a disjoint one
    (``_shard``), or all of them where there are fewer records than pipelines (one
    per worker, or per CPU replica), where some shares would be empty and their
    pipelines would end before the first step."""
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    if pipelines > 1 and _num_records(paths) < pipelines:
        return read_records(paths)
    return _shard(read_records(paths), input_context)


def _num_records(paths: Sequence[str]) -> int:
    """The records of the ``.bin`` files ``paths``, by their sizes."""
    return sum(tf.io.gfile.stat(path).length for path in paths) // ff.RECORD_BYTES


def train_dataset(
    paths: Sequence[str],
    batch_size: int,
    seed: int = 0,
    shuffle_buffer: int = MIN_SHUFFLE_BUFFER,
    input_context: tf.distribute.InputContext | None = None,
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """The distorted, shuffled, endless training batches.

    Args:
      paths: training ``.bin`` files.
      batch_size: examples per batch (per replica under a strategy).
      seed: seed of the shuffling and of the distortions.
      shuffle_buffer: examples in the shuffle buffer (at least the original's 20,000
        is the default; a larger value than the data set shuffles it fully).
      input_context: given by ``distribute_datasets_from_function``; selects this
        pipeline's shard of the records (all of them where there are fewer records
        than pipelines: no pipeline is left without one).
      skip_batches: start after this many batches, exactly where a pipeline made
        with the same arguments would be after giving them (the skipped batches
        are shuffled and batched, not distorted: about 0.3 s per 100,000 records
        on a CPU core). A resumed deterministic run uses it.

    Returns:
      Dataset of (float32 images [batch, 24, 24, 3], int32 labels [batch]).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    # Decoded uint8 images are cached in memory (150 MB for the real training set),
    # so that the files are read once.  The cache holds batches of records (a fill
    # of 50 elements takes a fraction of a second; one of 50,000 took seconds) and
    # is filled to its end here, before training reads it: a memory cache whose
    # first pass stops early, as when training stops within its first epoch, is
    # thrown away with a warning of tf.data's.
    cache = _train_shard(paths, input_context).batch(_DECODE_BATCH).cache()
    _fill(cache)
    ds = cache.unbatch().shuffle(shuffle_buffer, seed=seed + 7919 * pipeline_id,
                                 reshuffle_each_iteration=True)
    ds = ds.repeat()
    # Fixed batch shapes keep one traced train step for the whole run.
    ds = ds.batch(batch_size, drop_remainder=True)
    # A counter gives each batch its own distortion seed [seed, n].
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.counter())).skip(skip_batches)

    def distort(batch, n):
        images, labels = batch
        op_seed = tf.stack([tf.cast(seed + 1_000_003 * pipeline_id, tf.int64), n])
        return distort_batch(images, op_seed), labels

    ds = ds.map(distort, num_parallel_calls=TRAIN_PARALLEL_BATCHES, deterministic=True)
    return without_autotuning(ds.prefetch(TRAIN_PREFETCH_BATCHES))


@tf.autograph.experimental.do_not_convert  # a plain count, nothing to convert
def _count(count: tf.Tensor, _) -> tf.Tensor:
    return count + 1


def _fill(cached: tf.data.Dataset) -> None:
    """Reads ``cached`` to its end once, which completes its in-memory cache; later
    iterations of it read the cache (tf.data shares a memory cache between them)."""
    cached.reduce(tf.constant(0, tf.int64), _count)


def without_autotuning(ds: tf.data.Dataset) -> tf.data.Dataset:
    """``ds`` with tf.data's autotuning off: it runs at the parallelism it was given.

    The autotuning thread makes deleting an iterator that ran a while (at the end
    of training, on Ctrl-C) wait for up to a minute in TensorFlow 2.21, and fixed
    values train as fast here.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)


def eval_dataset(
    paths: Sequence[str],
    batch_size: int,
    num_examples: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Evaluation batches in file order, each example exactly once.

    Args:
      paths: ``.bin`` files to evaluate on.
      batch_size: examples per batch (per replica under a strategy).
      num_examples: take only the first ``num_examples`` records (all if None).
      input_context: given by ``distribute_datasets_from_function``.

    Returns:
      Dataset of (float32 images [<=batch, 24, 24, 3], int32 labels); the last
      batch is partial when the count is not a multiple of ``batch_size``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    ds = read_records(paths)
    if num_examples is not None:
        ds = ds.take(num_examples)
    ds = _shard(ds, input_context).batch(batch_size, drop_remainder=False)
    ds = ds.map(lambda images, labels: (eval_batch(images), labels),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
