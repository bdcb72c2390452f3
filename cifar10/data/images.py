"""Image files as CIFAR-10 images (PNG, JPEG, GIF, BMP to RGB, area-resized to 32x32):
one graph for cifar10-prepare, cifar10-predict and the SavedModel, which refuses an
image of more than ``MAX_PIXELS`` before decoding it and fixes or refuses what
TensorFlow's BMP decoder gets wrong."""

from __future__ import annotations

import os
import re
import stat
from typing import Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf

from cifar10.data import fileformat as ff
from cifar10.data import pipeline

MAX_PIXELS = 50_000_000  # to be decoded: 150 MB as RGB, 600 MB resized in float32
TOO_LARGE_SIZE = (f"an image of {{}}x{{}} pixels, more than the {MAX_PIXELS:,} an image may "
                  f"have here; scale it down first")  # (filled in by tf.strings.format)
BMP_REFUSED = ("a BMP that TensorFlow does not decode right (OS/2, not of 8, 24 or 32 bits, "
               "compressed, colour masks not blue, green, red, or cut short): save it as PNG "
               "or as a 24-bit BMP")
DECODE_PARALLEL = 2  # images decoded at once
NOT_REGULAR = "not a regular file"  # a FIFO, a socket, a device, a folder: never opened
EMPTY = "an empty file (0 bytes): a download or copy that did not finish?"
_ASSERTION = re.compile(r"assertion failed: \[([^\]\n]+)\]")  # a failed tf.debugging.Assert
_BMP_HEAD = 70  # the bytes of a BMP's headers read (the colour masks end at 66)


def resize_to_cifar(images: tf.Tensor) -> tf.Tensor:
    """RGB images [N, H, W, 3] (0-255) as uint8 [N, 32, 32, 3]: area averaging, as
    ``tf.image.resize(method='area')``, as two matrix products, which TFLite runs too."""
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


@tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
def decode_image(encoded: tf.Tensor) -> tf.Tensor:
    """An encoded PNG, JPEG, GIF (first frame) or BMP as uint8 RGB [32, 32, 3];
    InvalidArgumentError when run on what is refused (``assertion failed: [<why>]``)."""
    width, height = tf.unstack(_header_size(encoded))
    # (Sizes past 2**31, a damaged PNG's, are capped: their product stays in int64.)
    count = tf.minimum(width, 2 ** 31) * tf.minimum(height, 2 ** 31)
    why = tf.strings.format(TOO_LARGE_SIZE, (width, height))
    with tf.control_dependencies([tf.debugging.Assert(count <= MAX_PIXELS, [why])]):
        encoded = tf.identity(encoded)
    image = tf.cond(tf.strings.substr(encoded, 0, 2) == b"BM",
                    lambda: _decode_bmp(encoded),
                    lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False))
    return tf.ensure_shape(resize_to_cifar(image[None])[0], [ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3])


def _head(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """The first ``size`` bytes of ``encoded``, padded with zeros past its end."""
    return tf.strings.substr(tf.strings.join([tf.strings.substr(encoded, 0, size),
                                              b"\0" * size]), 0, size)


def _fields(encoded: tf.Tensor, size: int):
    """field(offset, length, signed=False, big_endian=False): the number of ``length``
    bytes at ``offset`` of ``encoded``'s first ``size`` bytes (0 past its end)."""
    head = tf.cast(tf.io.decode_raw(_head(encoded, size), tf.uint8), tf.int64)

    def field(offset: int, length: int, signed: bool = False,
              big_endian: bool = False) -> tf.Tensor:
        places = range(length - 1, -1, -1) if big_endian else range(length)
        value = sum(head[offset + i] * 256 ** place for i, place in enumerate(places))
        if signed:  # two's complement
            value -= tf.cast(value >= 2 ** (8 * length - 1), tf.int64) * 2 ** (8 * length)
        return value

    return field


def _header_size(encoded: tf.Tensor) -> tf.Tensor:
    """int64 [width, height] from the image's header; [0, 0] where it is not recognised
    (the decoder then says)."""
    field = _fields(encoded, 32)
    head = _head(encoded, 32)  # (one name per line: TensorFlow 2.16's autograph loses it)

    def starts(prefix: bytes, at: int = 0) -> tf.Tensor:
        return tf.strings.substr(head, at, len(prefix)) == prefix

    is_bmp = starts(b"BM")
    sizes = [  # (when, [width, height]), the first that holds
        (starts(b"\x89PNG\r\n\x1a\n") & starts(b"IHDR", 12),
         [field(16, 4, big_endian=True), field(20, 4, big_endian=True)]),
        (starts(b"GIF87a") | starts(b"GIF89a"), [field(6, 2), field(8, 2)]),
        (is_bmp & (field(14, 4) == 12), [field(18, 2), field(20, 2)]),  # OS/2's header
        (is_bmp, [tf.abs(field(18, 4, signed=True)), tf.abs(field(22, 4, signed=True))]),
    ]
    size = tf.zeros([2], tf.int64)
    for when, found in reversed(sizes):
        size = tf.where(when, tf.stack(found), size)
    return tf.cond(starts(b"\xff\xd8"),
                   lambda: tf.cast(tf.image.extract_jpeg_shape(encoded)[1::-1], tf.int64),
                   lambda: size)


def _decode_bmp(encoded: tf.Tensor) -> tf.Tensor:
    """A BMP as uint8 RGB [H, W, 3]: ``BMP_REFUSED`` where TensorFlow's decoder would
    refuse it or decode it wrong; trailing bytes left out; an 8-bit one in colour."""
    length = tf.cast(tf.strings.length(encoded), tf.int64)
    field = _fields(encoded, _BMP_HEAD)
    width, height, bits = field(18, 4, signed=True), tf.abs(field(22, 4, signed=True)), field(28, 2)
    compression = field(30, 4)
    needed = field(10, 4) + (width * bits + 31) // 32 * 4 * height  # the pixels' end
    bgr = ((field(54, 4) == 0x00FF0000) & (field(58, 4) == 0x0000FF00)
           & (field(62, 4) == 0x000000FF))
    masked = (bits == 32) & ((compression == 3) | (compression == 6)) & bgr  # BI_(ALPHA)BITFIELDS
    refused = ((field(14, 4) == 12) | ~tf.reduce_any(tf.equal(bits, [8, 24, 32]))
               | ((compression != 0) & ~masked) | ((width > 0) & (length < needed)))
    with tf.control_dependencies([tf.debugging.Assert(~refused, [BMP_REFUSED])]):
        pixels = tf.io.decode_bmp(tf.strings.substr(encoded, tf.constant(0, tf.int64),
                                                    tf.minimum(needed, length)))
    return tf.cond(tf.shape(pixels)[2] == 1,
                   lambda: _palette_colours(encoded, field, length, pixels),
                   lambda: pixels[..., :3])


def _palette_colours(encoded: tf.Tensor, field, length: tf.Tensor,
                     pixels: tf.Tensor) -> tf.Tensor:
    """An 8-bit BMP's palette indices [H, W, 1] as uint8 RGB [H, W, 3] (the palette's
    B, G, R, 0 entries after the headers; grey levels where it has none)."""
    start = tf.minimum(14 + field(14, 4), length)
    count = field(46, 4)
    count = tf.where(count == 0, tf.constant(256, tf.int64), tf.minimum(count, 256))
    count = tf.maximum(tf.minimum(count, (tf.minimum(field(10, 4), length) - start) // 4), 0)
    table = tf.reshape(tf.io.decode_raw(tf.strings.substr(encoded, start, 4 * count),
                                        tf.uint8), [-1, 4])[:, 2::-1]
    grey = tf.repeat(tf.cast(tf.range(256), tf.uint8)[:, None], 3, axis=1)
    colours = tf.cond(count > 0, lambda: table, lambda: grey)
    last = tf.cast(tf.shape(colours)[0], tf.int64) - 1  # (an index past it: a damaged file)
    return tf.gather(colours, tf.minimum(tf.cast(pixels[..., 0], tf.int64), last))


def decode_files(paths: Sequence[str], contents: Mapping[str, bytes] | None = None
                 ) -> Iterator[tuple[str, np.ndarray | None, str]]:
    """(path, uint8 [32, 32, 3] image or None, why not) of each file, in order, decoded
    by tf.data.  A file that is not a regular one is never opened (a FIFO would block);
    those of ``contents`` (standard input's, ``-``) are decoded from those bytes."""
    contents = contents or {}
    checked = [_before_decoding(p, contents) for p in paths]  # why not, of each
    decoded = [p for p, why in zip(paths, checked) if not why]
    given = [p in contents for p in decoded]

    def read(path: tf.Tensor, content: tf.Tensor, is_given: tf.Tensor) -> tf.Tensor:
        return decode_image(tf.cond(is_given, lambda: content, lambda: tf.io.read_file(path)))

    images = pipeline.without_autotuning(
        tf.data.Dataset.from_tensor_slices((
            tf.constant([os.fsencode(p) for p in decoded], tf.string, shape=[len(decoded)]),
            tf.constant([contents.get(p, b"") for p in decoded], tf.string,
                        shape=[len(decoded)]),
            tf.constant(given, tf.bool, shape=[len(decoded)])))
        .map(read, num_parallel_calls=DECODE_PARALLEL, deterministic=True)
        .prefetch(2 * DECODE_PARALLEL))
    iterator = iter(images)
    for path, why in zip(paths, checked):
        if why:
            yield path, None, why
            continue
        try:
            yield path, next(iterator).numpy(), ""
        except tf.errors.OpError as e:
            yield path, None, _reason(e)


def _before_decoding(path: str, contents: Mapping[str, bytes]) -> str:
    """Why ``path`` is not decoded at all ('' when it is)."""
    if path in contents:
        return "" if contents[path] else EMPTY
    try:
        found = os.stat(os.fsencode(path))
    except OSError:
        return ""  # (reading it says why)
    if not stat.S_ISREG(found.st_mode):
        return NOT_REGULAR
    return "" if found.st_size else EMPTY


def _reason(error: tf.errors.OpError) -> str:
    if isinstance(error, tf.errors.NotFoundError):
        return "no such file"
    if isinstance(error, tf.errors.PermissionDeniedError):
        return "permission denied"
    if isinstance(error, tf.errors.FailedPreconditionError):
        return NOT_REGULAR
    refused = _ASSERTION.search(error.message)
    if refused:
        return refused[1]
    return "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one"
