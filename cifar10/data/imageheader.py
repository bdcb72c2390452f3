"""An image file's size in pixels, read from its header without decoding it, so that
an image too large to decode safely is refused before it takes the memory (a small
PNG can hold 12000x12000 pixels: 430 MB decoded, and more once resized).  PNG, GIF,
BMP and JPEG; a BMP of a bit depth the decoder refuses, told as such rather than
as a damaged file, or of a kind it would decode wrong (RLE-compressed); and the
colour palette of an 8-bit BMP, which the decoder ignores.  No TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct

# The most pixels an image may have to be decoded: 50 megapixels (e.g. 8660x5773),
# about 150 MB as 8-bit RGB and 600 MB while it is resized in float32.
MAX_PIXELS = 50_000_000

# JPEG start-of-frame markers (they hold the size): C0-CF but C4, C8 and CC.
_JPEG_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def examine(path: str | bytes, limit: int = MAX_PIXELS) -> tuple[str, bytes | None]:
    """(why the image in ``path`` is not decoded: ``too_large``'s or ``unsupported``'s
    reason, '' when it may be; its ``bmp_palette`` where it may be), from one opening
    of the file: what a folder of images costs before it is decoded."""
    try:
        with _opened(path) as f:
            if f is None:
                return "", None
            why = _too_large(_pixels_of(f), limit) or _unsupported_of(f)
            return why, None if why else _palette_of(f)
    except OSError:
        return "", None


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
_BI_RGB, _BI_RLE8 = 0, 1


def unsupported(path: str | bytes) -> str:
    """Why the image in ``path``, valid by its header, is of a kind the decoder does not
    take ('' when it is not known to be): a BMP of 1, 2, 4 or 16 bits per pixel, or an
    RLE-compressed 8-bit BMP (which it would decode into wrong pixels, not refuse)."""
    return _read(path, _unsupported_of, "")


def _unsupported_of(f) -> str:
    """``unsupported`` of the open file ``f``."""
    try:
        f.seek(0)
        head = f.read(34)
    except OSError:
        return ""
    if head[:2] != b"BM" or len(head) < 30:
        return ""
    (info_size,) = struct.unpack("<I", head[14:18])
    (bits,) = struct.unpack("<H", head[24:26] if info_size == 12 else head[28:30])
    fix = "save it as PNG or as a 24-bit BMP"
    if bits == 8 and info_size >= 40 and len(head) >= 34 \
            and struct.unpack("<I", head[30:34])[0] == _BI_RLE8:
        return f"an RLE-compressed 8-bit BMP, which TensorFlow does not decode: {fix}"
    if bits not in (1, 2, 4, 16):
        return ""  # (a depth no BMP has: the decoder calls the file damaged)
    return (f"a {bits}-bit BMP, a bit depth TensorFlow does not decode (it takes "
            f"{', '.join(map(str, BMP_BITS[:-1]))} and {BMP_BITS[-1]}-bit BMPs): {fix}")


def bmp_palette(path: str | bytes) -> bytes | None:
    """The colour palette of the uncompressed 8-bit BMP in ``path``, as R, G, B bytes
    per entry in index order, when it is not grey; else None (any other image, a grey
    palette, a file that cannot be read or whose palette is cut short).

    TensorFlow's decoder ignores an 8-bit BMP's palette: it gives each pixel's index
    as its grey level, which is right only where entry i is (i, i, i).
    """
    return _read(path, _palette_of, None)


def _palette_of(f) -> bytes | None:
    """``bmp_palette`` of the open file ``f``."""
    try:
        f.seek(0)
        head = f.read(54)
        if head[:2] != b"BM" or len(head) < 54:
            return None
        info_size, _, _, _, bits, compression = struct.unpack("<IiiHHI", head[14:34])
        (colours,) = struct.unpack("<I", head[46:50])
        if info_size < 40 or bits != 8 or compression != _BI_RGB:
            return None
        colours = min(colours or 256, 256)  # 0: all 256
        f.seek(14 + info_size)  # the palette follows the header: B, G, R, 0 per entry
        entries = f.read(4 * colours)
    except (OSError, struct.error):
        return None
    if len(entries) < 4 * colours:
        return None
    rgb = bytes(entries[i + c] for i in range(0, len(entries), 4) for c in (2, 1, 0))
    grey = bytes(i for i in range(colours) for _ in range(3))
    return None if rgb == grey else rgb


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
