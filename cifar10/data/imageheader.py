"""An image file's size in pixels, read from its header without decoding it, so that
an image too large to decode safely is refused before it takes the memory (a small
PNG can hold 12000x12000 pixels: 430 MB decoded, and more once resized).  PNG, GIF,
BMP and JPEG; and a BMP that TensorFlow's decoder refuses, told as such rather than
as a damaged file, or that it would decode wrong (RLE-compressed, colour masks in
another order), or that is cut short.  No TensorFlow.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import struct

# The most pixels an image may have to be decoded: 50 megapixels (e.g. 8660x5773),
# about 150 MB as 8-bit RGB and 600 MB while it is resized in float32.
MAX_PIXELS = 50_000_000

# Why an image is not decoded in the graph (``images.decode_image``, the exported
# model's): "{}" are its width and height, filled in by tf.strings.format.
TOO_LARGE_SIZE = (f"an image of {{}}x{{}} pixels, more than the {MAX_PIXELS:,} an image may "
                  f"have here; scale it down first")

# JPEG start-of-frame markers (they hold the size): C0-CF but C4, C8 and CC.
_JPEG_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def examine(path: str | bytes, limit: int = MAX_PIXELS) -> str:
    """Why the image in ``path`` is not decoded: ``too_large``'s or ``unsupported``'s
    reason, '' when it may be; from one opening of the file: what a folder of images
    costs before it is decoded."""
    try:
        with _opened(path) as f:
            if f is None:
                return ""
            return _too_large(_pixels_of(f), limit) or _unsupported_of(f)
    except OSError:
        return ""


def examine_bytes(data: bytes, limit: int = MAX_PIXELS) -> str:
    """``examine`` of an image file's bytes ``data`` (an image read from standard input)."""
    f = io.BytesIO(data)
    return _too_large(_pixels_of(f), limit) or _unsupported_of(f)


def pixels(path: str | bytes) -> int | None:
    """Width x height of the image in ``path`` from its header; None when the file
    cannot be read or its format or header is not recognised (the decoder then says)."""
    return _read(path, _pixels_of, None)


def _pixels_of(f) -> int | None:
    """``pixels`` of the open file ``f``."""
    try:
        f.seek(0)
        head = f.read(32)
        if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
            width, height = struct.unpack(">II", head[16:24])
        elif head[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", head[6:10])
        elif head[:2] == b"BM" and head[14:18] == struct.pack("<I", OS2_HEADER):
            width, height = struct.unpack("<HH", head[18:22])
        elif head[:2] == b"BM" and len(head) >= 26:
            width, height = struct.unpack("<ii", head[18:26])
        elif head[:2] == b"\xff\xd8":
            f.seek(2)
            width, height = _jpeg_size(f)
        else:
            return None
    except (OSError, struct.error, ValueError):
        return None
    return abs(width) * abs(height)


def _read(path: str | bytes, reading, default):
    """``reading(f)`` of the file ``path`` opened (``_opened``); ``default`` where it
    cannot be opened or is not a regular file."""
    try:
        with _opened(path) as f:
            return default if f is None else reading(f)
    except OSError:
        return default


def _opened(path: str | bytes):
    """The file ``path`` opened to read (binary), or None when it is not a regular file.
    Opened without blocking: a FIFO put in the file's place since it was looked at
    would wait for a writer.

    Raises:
      OSError: it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return contextlib.nullcontext(None)
    return open(fd, "rb")


# The bits per pixel of the BMPs TensorFlow's decoder takes; 1, 2, 4 and 16 are valid
# BMPs it refuses ("Number of channels inherent in the image must be 1, 3 or 4").
BMP_BITS = (8, 24, 32)

# A BMP's compression field: BI_RGB is none; BI_RLE8, the 8-bit BMP's run-length
# coding, TensorFlow's decoder does not know: it reads the coded bytes as pixels.
# BI_BITFIELDS and BI_ALPHABITFIELDS give each channel's bits as a mask; the decoder
# ignores the masks and reads a 32-bit pixel's bytes as blue, green, red, alpha.
BI_RGB, BI_RLE8, BI_BITFIELDS, BI_ALPHABITFIELDS = 0, 1, 3, 6
# The masks of red, green and blue (at file offset 54: after a 40-byte header, or in
# a larger one) under which a 32-bit pixel's bytes are blue, green, red (and alpha).
BMP_MASKS = (0x00FF0000, 0x0000FF00, 0x000000FF)
OS2_HEADER = 12  # the size of OS/2's BITMAPCOREHEADER: 16-bit sizes, other offsets

# Why a BMP is not decoded (both here and in the graph, ``images.decode_image``;
# "{}" are filled in by str.format or tf.strings.format).
_FIX = "save it as PNG or as a 24-bit BMP"
BMP_OS2 = (f"an OS/2 BMP (a 12-byte BITMAPCOREHEADER), which TensorFlow does not decode: "
           f"{_FIX}")
BMP_DEPTH = ("a {}-bit BMP, a bit depth TensorFlow does not decode (it takes "
             f"{', '.join(map(str, BMP_BITS[:-1]))} and {BMP_BITS[-1]}-bit BMPs): {_FIX}")
BMP_RLE8 = f"an RLE-compressed 8-bit BMP, which TensorFlow does not decode: {_FIX}"
BMP_COMPRESSION = ("a {}-bit BMP of compression type {}, which TensorFlow does not decode: "
                   + _FIX)
BMP_MASKS_WRONG = ("a 32-bit BMP whose colour masks store its channels in another order "
                   "than blue, green, red, which TensorFlow would decode into wrong colours: "
                   + _FIX)
BMP_CUT_SHORT = ("a BMP cut short: its header gives {}x{} pixels, {} bytes with the "
                 "headers, and the file has {}: a damaged or partly copied file")
BMP_PALETTE_INDEX = ("an 8-bit BMP with pixels of palette index {}, past the end of its "
                     "{}-colour palette: a damaged one")
BMP_HEAD = 70  # the bytes of a BMP's headers the checks read (the masks end at 66)


def bmp_row_bytes(width: int, bits: int) -> int:
    """The bytes of one row of a BMP's pixels: padded to a multiple of 4."""
    return (width * bits + 31) // 32 * 4


def unsupported(path: str | bytes) -> str:
    """Why the image in ``path``, a BMP by its header, is one the decoder does not take
    or would decode wrong ('' when it is not known to be): an OS/2 BMP, a BMP of 1, 2,
    4 or 16 bits per pixel, an RLE-compressed 8-bit BMP (which it would decode into
    wrong pixels, not refuse), a compression it does not know, a 32-bit BMP whose
    colour masks are not blue, green, red, or a BMP shorter than its header says."""
    return _read(path, _unsupported_of, "")


def _unsupported_of(f) -> str:
    """``unsupported`` of the open file ``f``."""
    try:
        f.seek(0)
        head = f.read(BMP_HEAD)
        length = f.seek(0, os.SEEK_END)
    except OSError:
        return ""
    if head[:2] != b"BM" or len(head) < 18:
        return ""
    return bmp_refusal(head.ljust(BMP_HEAD, b"\0"), length)


def bmp_refusal(head: bytes, length: int) -> str:
    """Why the BMP whose first ``BMP_HEAD`` bytes are ``head`` (padded with zeros) and
    whose file has ``length`` bytes is not decoded; '' when it may be.
    ``images.decode_image`` makes the same checks in the graph, in the same order."""
    offset, info_size, width, height, _, bits, compression = struct.unpack(
        "<IIiiHHI", head[10:34])
    if info_size == OS2_HEADER:
        return BMP_OS2
    if bits not in BMP_BITS:
        return BMP_DEPTH.format(bits) if bits in (1, 2, 4, 16) else ""  # (else: damaged)
    if bits == 8 and compression == BI_RLE8:
        return BMP_RLE8
    if compression != BI_RGB and not (
            bits == 32 and compression in (BI_BITFIELDS, BI_ALPHABITFIELDS)):
        return BMP_COMPRESSION.format(bits, compression)
    if compression != BI_RGB and struct.unpack("<III", head[54:66]) != BMP_MASKS:
        return BMP_MASKS_WRONG
    needed = offset + bmp_row_bytes(width, bits) * abs(height)
    if width > 0 and length < needed:
        return BMP_CUT_SHORT.format(width, abs(height), needed, length)
    return ""


def _jpeg_size(f) -> tuple[int, int]:
    """(width, height) from the first start-of-frame segment of a JPEG file at ``f``."""
    while True:
        marker = f.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            raise ValueError("not a JPEG segment")
        if marker[1] in _JPEG_FRAMES:
            _, _, height, width = struct.unpack(">HBHH", f.read(7))  # length, precision
            return width, height
        length = struct.unpack(">H", f.read(2))[0]
        f.seek(length - 2, 1)


def too_large(path: str | bytes, limit: int = MAX_PIXELS) -> str:
    """Why the image in ``path`` is not decoded ('' when it may be)."""
    return _too_large(pixels(path), limit)


def _too_large(count: int | None, limit: int) -> str:
    """``too_large``'s reason for an image of ``count`` pixels (None: not known)."""
    if count is None or count <= limit:
        return ""
    return (f"{count:,} pixels, more than the {limit:,} an image may have here; scale it "
            f"down first")
