"""Image files as CIFAR-10 images: decoded by TensorFlow (PNG, JPEG, GIF's first
frame, BMP) into RGB, resized to 32x32 with area averaging and rounded to uint8,
as a CIFAR-10 record holds them.  cifar10-prepare converts folders of images with
it, cifar10-predict classifies image files, and the exported SavedModel decodes
the images it is sent with the same functions, in the graph.  A BMP is read apart
(``_decode_bmp``): an 8-bit BMP's colour palette, which TensorFlow's decoder
ignores (it gives the palette indices as grey levels), is applied, and a BMP the
decoder would refuse or decode wrong (``imageheader.bmp_refusal``) fails saying why.
An image whose header gives more than ``imageheader.MAX_PIXELS`` pixels fails before
it is decoded, in the graph as well (``_refused_if_too_large``): the exported model
refuses it as cifar10-predict does.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf

from cifar10.data import fileformat as ff
from cifar10.data import imageheader as ih
from cifar10.data import pipeline

DECODE_PARALLEL = 2  # images decoded at once
NOT_REGULAR = "not a regular file"  # a FIFO, a socket, a device, a folder
EMPTY = "an empty file (0 bytes): a download or copy that did not finish?"
# How a failed tf.debugging.Assert's message reads: ``assertion failed: [<why>]``.
_ASSERTION = re.compile(r"assertion failed: \[([^\]\n]+)\]")


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


# A graph function even when called eagerly: its BMP checks read alike everywhere.
@tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
def decode_image(encoded: tf.Tensor) -> tf.Tensor:
    """An encoded PNG, JPEG, GIF (first frame) or BMP as uint8 RGB [32, 32, 3].

    Raises (when run):
      tf.errors.InvalidArgumentError: not an image, or a damaged one; an image whose
        header gives more than ``ih.MAX_PIXELS`` pixels (refused before it is decoded)
        or a BMP that ``_decode_bmp`` refuses, its message ``assertion failed: [<why>]``.
    """
    encoded = _refused_if_too_large(encoded)
    image = tf.cond(tf.strings.substr(encoded, 0, 2) == b"BM",
                    lambda: _decode_bmp(encoded),
                    lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False))
    return tf.ensure_shape(resize_to_cifar(image[None])[0], [ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3])


def _refused_if_too_large(encoded: tf.Tensor) -> tf.Tensor:
    """``encoded``, once its header (``_header_size``) gives at most ``ih.MAX_PIXELS``
    pixels: what decodes it waits for the check, so that an image too large fails an
    assertion saying so (``ih.TOO_LARGE_SIZE``) and is never decoded."""
    width, height = tf.unstack(_header_size(encoded))
    # Sizes past 2**31 (a damaged PNG's) are capped: their product stays in int64.
    count = tf.minimum(width, 2 ** 31) * tf.minimum(height, 2 ** 31)
    why = tf.strings.format(ih.TOO_LARGE_SIZE, (width, height))
    with tf.control_dependencies([tf.debugging.Assert(count <= ih.MAX_PIXELS, [why])]):
        return tf.identity(encoded)


def _header_size(encoded: tf.Tensor) -> tf.Tensor:
    """int64 [width, height] of the image ``encoded`` from its header, as
    ``imageheader.pixels`` reads it (a JPEG's by ``tf.image.extract_jpeg_shape``, which
    reads its headers only); [0, 0] when its format or header is not recognised (the
    decoder then says)."""
    field = _fields(encoded, 32)
    head = _head(encoded, 32)

    def starts(prefix: bytes, at: int = 0) -> tf.Tensor:
        return tf.strings.substr(head, at, len(prefix)) == prefix

    is_bmp = starts(b"BM")
    os2 = is_bmp & (field(14, 4) == ih.OS2_HEADER)
    sizes = [  # (when, [width, height]), the first that holds
        (starts(b"\x89PNG\r\n\x1a\n") & starts(b"IHDR", 12),
         [field(16, 4, big_endian=True), field(20, 4, big_endian=True)]),
        (starts(b"GIF87a") | starts(b"GIF89a"), [field(6, 2), field(8, 2)]),
        (os2, [field(18, 2), field(20, 2)]),
        (is_bmp, [tf.abs(field(18, 4, signed=True)), tf.abs(field(22, 4, signed=True))]),
    ]
    size = tf.zeros([2], tf.int64)
    for when, found in reversed(sizes):
        size = tf.where(when, tf.stack(found), size)
    return tf.cond(starts(b"\xff\xd8"),
                   lambda: tf.cast(tf.image.extract_jpeg_shape(encoded)[1::-1], tf.int64),
                   lambda: size)


def _decode_bmp(encoded: tf.Tensor) -> tf.Tensor:
    """A BMP as uint8 RGB [H, W, 3], by TensorFlow's decoder, with the header read here
    as ``imageheader.bmp_refusal`` reads it: an 8-bit BMP's pixels (palette indices)
    get its palette's colours; a BMP that the decoder refuses or would decode into
    wrong pixels fails an assertion whose message says why (the same words as
    ``bmp_refusal``'s, in the same order); bytes after the pixels, which the decoder
    refuses, are left out.  TensorFlow's ops only: the SavedModel runs it without
    this package.
    """
    length = tf.cast(tf.strings.length(encoded), tf.int64)
    field = _fields(encoded, ih.BMP_HEAD)
    width, height, bits = field(18, 4, signed=True), tf.abs(field(22, 4, signed=True)), field(28, 2)
    needed = field(10, 4) + (width * bits + 31) // 32 * 4 * height  # the pixels' end
    why = _bmp_refusal(field, length, needed)
    with tf.control_dependencies([tf.debugging.Assert(tf.equal(why, ""), [why])]):
        # (The decoder refuses a file longer than its pixels: the rest is left out.)
        pixels = tf.io.decode_bmp(tf.strings.substr(encoded, tf.constant(0, tf.int64),
                                                    tf.minimum(needed, length)))
    return tf.cond(tf.shape(pixels)[2] == 1,
                   lambda: _palette_colours(encoded, field, length, pixels),
                   lambda: pixels[..., :3])


def _head(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """The first ``size`` bytes of ``encoded``, padded with zeros past its end."""
    return tf.strings.substr(tf.strings.join([tf.strings.substr(encoded, 0, size),
                                              b"\0" * size]), 0, size)


def _fields(encoded: tf.Tensor, size: int):
    """field(offset, length, signed=False, big_endian=False): the number of ``length``
    bytes at ``offset`` in the first ``size`` bytes of ``encoded`` (little-endian, as a
    BMP's header, unless ``big_endian``; 0 past the file's end)."""
    head = tf.cast(tf.io.decode_raw(_head(encoded, size), tf.uint8), tf.int64)

    def field(offset: int, length: int, signed: bool = False,
              big_endian: bool = False) -> tf.Tensor:
        places = range(length - 1, -1, -1) if big_endian else range(length)
        value = sum(head[offset + i] * 256 ** place for i, place in enumerate(places))
        if signed:  # two's complement
            value -= tf.cast(value >= 2 ** (8 * length - 1), tf.int64) * 2 ** (8 * length)
        return value

    return field


def _bmp_refusal(field, length: tf.Tensor, needed: tf.Tensor) -> tf.Tensor:
    """Why the decoder would refuse the BMP or decode it wrong, as a string tensor ('' when
    it would not): ``imageheader.bmp_refusal``'s checks, in its order and words."""
    info_size, bits, compression = field(14, 4), field(28, 2), field(30, 4)
    width, height = field(18, 4, signed=True), tf.abs(field(22, 4, signed=True))
    masks = tf.stack([field(54, 4), field(58, 4), field(62, 4)])
    bitfields = (compression == ih.BI_BITFIELDS) | (compression == ih.BI_ALPHABITFIELDS)
    checks = [  # (refused when, why), in bmp_refusal's order
        (info_size == ih.OS2_HEADER, ih.BMP_OS2),
        (_any_of(bits, (1, 2, 4, 16)), tf.strings.format(ih.BMP_DEPTH, bits)),
        ((bits == 8) & (compression == ih.BI_RLE8), ih.BMP_RLE8),
        (_any_of(bits, ih.BMP_BITS) & (compression != ih.BI_RGB) & ~((bits == 32) & bitfields),
         tf.strings.format(ih.BMP_COMPRESSION, (bits, compression))),
        (_any_of(bits, ih.BMP_BITS) & (compression != ih.BI_RGB)
         & tf.reduce_any(masks != ih.BMP_MASKS), ih.BMP_MASKS_WRONG),
        (_any_of(bits, ih.BMP_BITS) & (width > 0) & (length < needed),
         tf.strings.format(ih.BMP_CUT_SHORT, (width, height, needed, length))),
    ]
    why = tf.constant("")
    for refused, reason in reversed(checks):
        why = tf.where(refused, reason, why)
    return why


def _palette_colours(encoded: tf.Tensor, field, length: tf.Tensor,
                     pixels: tf.Tensor) -> tf.Tensor:
    """An 8-bit BMP's ``pixels`` (palette indices, [H, W, 1]) as uint8 RGB [H, W, 3]: the
    palette follows the headers, up to the pixels, 4 bytes (B, G, R, 0) per colour, as
    many colours as the header says (0: 256) and the file holds (none: grey levels).
    An index past the palette fails an assertion saying so."""
    start = tf.minimum(14 + field(14, 4), length)
    count = field(46, 4)
    count = tf.where(count == 0, tf.constant(256, tf.int64), tf.minimum(count, 256))
    count = tf.maximum(tf.minimum(count, (tf.minimum(field(10, 4), length) - start) // 4), 0)
    table = tf.reshape(tf.io.decode_raw(tf.strings.substr(encoded, start, 4 * count),
                                        tf.uint8), [-1, 4])[:, 2::-1]
    indices = tf.cast(pixels[..., 0], tf.int64)
    if_grey = tf.repeat(tf.cast(tf.range(256), tf.uint8)[:, None], 3, axis=1)
    colours = tf.cond(count > 0, lambda: table, lambda: if_grey)
    top = tf.reduce_max(tf.concat([tf.reshape(indices, [-1]), [0]], 0))
    colour_count = tf.cast(tf.shape(colours)[0], tf.int64)
    with tf.control_dependencies([tf.debugging.Assert(
            top < colour_count, [tf.strings.format(ih.BMP_PALETTE_INDEX, (top, colour_count))])]):
        return tf.gather(colours, tf.minimum(indices, colour_count - 1))


def _any_of(value: tf.Tensor, options) -> tf.Tensor:
    return tf.reduce_any(tf.equal(value, tf.constant(options, tf.int64)))


def decode_files(paths: Sequence[str], contents: Mapping[str, bytes] | None = None
                 ) -> Iterator[tuple[str, np.ndarray | None, str]]:
    """(path, uint8 [32, 32, 3] image or None, why not) of each file, in order.

    The files are read and decoded by tf.data, ``DECODE_PARALLEL`` at a time, by
    their names' bytes (a name that is not UTF-8 is read as any other);
    a file that is empty, cannot be read or decoded, whose header gives more pixels than
    ``ih.MAX_PIXELS``, or that is of a kind the decoder does not take or would
    decode wrong (a 1-bit BMP, an OS/2 one: ``ih.unsupported``), gives None and a
    one-line reason, and the others go on.  A file that is not a regular one (a
    FIFO, a socket, a device) is not opened at all: reading a FIFO would wait for a
    writer for ever.  The files of ``contents`` (path: bytes; standard input read, as
    ``-``) are decoded from those bytes instead of read.
    """
    contents = contents or {}
    checked = [(ih.examine_bytes(contents[p]) if contents[p] else EMPTY) if p in contents
               else _before_decoding(os.fsencode(p)) for p in paths]  # why not, of each
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


def _before_decoding(path: bytes) -> str:
    """Why the file ``path`` is not decoded, '' when it may be, read from its header
    before it is decoded (``ih.examine``)."""
    try:
        found = os.stat(path)
    except OSError:
        # (missing, or not to be looked at: reading it says which; a link, where to)
        return _broken_link(path)
    if not stat.S_ISREG(found.st_mode):
        return NOT_REGULAR
    if not found.st_size:
        return EMPTY
    return ih.examine(path)


def _broken_link(path: str | bytes) -> str:
    """``a link to <target>, which does not exist`` where ``path`` is a link whose target
    is missing (a folder of links whose images were moved); '' otherwise."""
    try:
        target = os.readlink(path)
        if os.path.exists(path):
            return ""
    except OSError:
        return ""
    shown = os.fsencode(target).decode("utf-8", "backslashreplace")
    return f"a link to {shown}, which does not exist"


def _reason(error: tf.errors.OpError) -> str:
    if isinstance(error, tf.errors.NotFoundError):
        return "no such file"
    if isinstance(error, tf.errors.PermissionDeniedError):
        return "permission denied"
    if isinstance(error, tf.errors.FailedPreconditionError):
        return NOT_REGULAR
    refused = _ASSERTION.search(error.message)  # (_decode_bmp's refusal, saying why)
    if refused:
        return refused[1]
    return "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one"
