"""Image files as CIFAR-10 images: decoded by TensorFlow (PNG, JPEG, GIF's first
frame, BMP) into RGB, resized to 32x32 with area averaging and rounded to uint8,
as a CIFAR-10 record holds them.  cifar10-prepare converts folders of images with
it, cifar10-predict classifies image files, and the exported SavedModel decodes
the images it is sent with the same functions.  The files of an 8-bit BMP with a
colour palette, which TensorFlow decodes as grey levels, are given their colours
here (``decode_files``); the SavedModel, which is sent the bytes, does not.
"""

from __future__ import annotations

import os
import stat
from typing import Iterator, Sequence

import numpy as np
import tensorflow as tf

from cifar10.data import fileformat as ff
from cifar10.data import imageheader
from cifar10.data import pipeline

DECODE_PARALLEL = 2  # images decoded at once
NOT_REGULAR = "not a regular file"  # a FIFO, a socket, a device, a folder


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


def decode_files(paths: Sequence[str]) -> Iterator[tuple[str, np.ndarray | None, str]]:
    """(path, uint8 [32, 32, 3] image or None, why not) of each file, in order.

    The files are read and decoded by tf.data, ``DECODE_PARALLEL`` at a time, by
    their names' bytes (a name that is not UTF-8 is read as any other);
    a file that cannot be read or decoded, whose header gives more pixels than
    ``imageheader.MAX_PIXELS``, or that is of a kind the decoder does not take (a
    1-bit BMP: ``imageheader.unsupported``), gives None and a one-line reason, and the others go on.
    A file that is not a regular one (a FIFO, a socket, a device) is not opened at
    all: reading a FIFO would wait for a writer for ever.  An 8-bit BMP with a
    colour palette is decoded apart, its palette applied (``_palette_image``).
    """
    checked = [_before_decoding(os.fsencode(p)) for p in paths]  # (why not, palette) of each
    decoded = [os.fsencode(p) for p, (why, palette) in zip(paths, checked)
               if not why and palette is None]
    images = pipeline.without_autotuning(
        tf.data.Dataset.from_tensor_slices(tf.constant(decoded, tf.string, shape=[len(decoded)]))
        .map(lambda path: decode_image(tf.io.read_file(path)),
             num_parallel_calls=DECODE_PARALLEL, deterministic=True)
        .prefetch(2 * DECODE_PARALLEL))
    iterator = iter(images)
    for path, (why, palette) in zip(paths, checked):
        if why:
            yield path, None, why
            continue
        if palette is not None:
            yield (path, *_palette_image(os.fsencode(path), palette))
            continue
        try:
            yield path, next(iterator).numpy(), ""
        except tf.errors.OpError as e:
            yield path, None, _reason(e)


def _palette_image(path: bytes, palette: bytes) -> tuple[np.ndarray | None, str]:
    """(uint8 [32, 32, 3] image or None, why not) of the 8-bit BMP ``path`` whose colour
    palette is ``palette`` (``imageheader.bmp_palette``).

    TensorFlow's decoder gives the pixels' palette indices (as grey levels: it
    reads the rows, their padding and order); each index becomes its colour.
    """
    try:
        indices = tf.io.decode_bmp(tf.io.read_file(path), channels=0).numpy()[..., 0]
    except tf.errors.OpError as e:
        return None, _reason(e)
    colours = np.frombuffer(palette, np.uint8).reshape(-1, 3)
    if indices.size and indices.max() >= len(colours):
        return None, (f"an 8-bit BMP with pixels of palette index {indices.max()}, past "
                      f"the end of its {len(colours)}-colour palette: a damaged one")
    return resize_to_cifar(colours[indices][None])[0].numpy(), ""


def _before_decoding(path: bytes) -> tuple[str, bytes | None]:
    """(why the file ``path`` is not decoded, '' when it may be; its BMP colour palette,
    if any), read from its header before it is decoded (``imageheader.examine``)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "", None  # (missing, or not to be looked at: reading it says which)
    if not stat.S_ISREG(mode):
        return NOT_REGULAR, None
    return imageheader.examine(path)


def _reason(error: tf.errors.OpError) -> str:
    if isinstance(error, tf.errors.NotFoundError):
        return "no such file"
    if isinstance(error, tf.errors.PermissionDeniedError):
        return "permission denied"
    if isinstance(error, tf.errors.FailedPreconditionError):
        return NOT_REGULAR
    return "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one"
