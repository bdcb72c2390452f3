"""Image sizes read from file headers (cifar10.data.imageheader), and the bound on the
pixels an image may have, as cifar10-prepare and cifar10-predict meet it."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from cli import call

from cifar10.data import imageheader

IMAGE = np.zeros((37, 53, 3), np.uint8)  # height 37, width 53


def bmp(width: int, height: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 0, 0, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + info


def png_header(width: int, height: int) -> bytes:
    """The start of a PNG that claims ``width`` x ``height`` (its pixel data left out)."""
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
            + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0) + b"\0" * 4)


def grey_png(width: int, height: int) -> bytes:
    """A whole 8-bit grey PNG of ``width`` x ``height`` black pixels: small compressed (an
    8000x8000 one is 62 KB), and as large as its size decoded (192 MB as RGB)."""
    compress = zlib.compressobj(9)
    row = b"\0" * (width + 1)  # the filter byte, then the pixels
    pixels = b"".join(compress.compress(row) for _ in range(height)) + compress.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                                 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


def os2_bmp(width: int, height: int) -> bytes:
    """The headers of an OS/2 BMP: a BITMAPCOREHEADER, its sizes 16-bit."""
    return b"BM" + struct.pack("<IHHI", 26, 0, 0, 26) + struct.pack("<IHHHH", 12, width,
                                                                     height, 1, 24)


@pytest.mark.parametrize("name, content", [
    ("a.png", lambda: tf.io.encode_png(IMAGE).numpy()),
    ("a.jpg", lambda: tf.io.encode_jpeg(IMAGE).numpy()),
    ("a.gif", lambda: b"GIF89a" + struct.pack("<HH", 53, 37) + b"\0" * 20),
    ("a.bmp", lambda: bmp(53, -37)),  # a top-down BMP has a negative height
    ("os2.bmp", lambda: os2_bmp(53, 37)),
])
def test_the_size_comes_from_the_header(tmp_path, name, content):
    (tmp_path / name).write_bytes(content())
    assert imageheader.pixels(str(tmp_path / name)) == 37 * 53
    assert imageheader.too_large(str(tmp_path / name)) == ""
    assert imageheader.too_large(str(tmp_path / name), limit=1000) == (
        "1,961 pixels, more than the 1,000 an image may have here; scale it down first")


def test_unknown_or_unreadable_files_are_left_to_the_decoder(tmp_path):
    (tmp_path / "a.png").write_bytes(b"not an image")
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8\xff")  # cut short
    for name in ("a.png", "b.jpg", "missing.png"):
        assert imageheader.pixels(str(tmp_path / name)) is None
        assert imageheader.too_large(str(tmp_path / name)) == ""


def photo_folders(folder) -> None:
    """Class folders cat/ and dog/ in ``folder``, four small PNG images in each."""
    for label in ("cat", "dog"):
        (folder / label).mkdir(parents=True)
        for i in range(4):
            tf.io.write_file(str(folder / label / f"{i}.png"), tf.io.encode_png(IMAGE))


def test_an_image_beyond_the_bound_is_skipped_by_prepare_and_named(tmp_path):
    """A 12000x12000 PNG (its header) is not decoded; the others are converted."""
    photo_folders(tmp_path / "photos")
    huge = tmp_path / "photos" / "cat" / "huge.png"
    huge.write_bytes(png_header(12000, 12000))
    result = call("cifar10-prepare", f"--image_dir={tmp_path / 'photos'}",
                  f"--data_dir={tmp_path / 'data'}", "--test_fraction=0.25")
    assert result.returncode == 0, result.stderr
    assert (f"cifar10-prepare: warning: skipped {huge}: 144,000,000 pixels, more than the 50,000,000 an "
            f"image may have here; scale it down first") in result.stderr.splitlines()
    assert "Wrote 6 training and 2 test records" in result.stdout


def test_an_image_beyond_the_bound_is_named_by_predict_and_the_others_classified(
        trained_run, tmp_path):
    train_dir, _ = trained_run
    tf.io.write_file(str(tmp_path / "small.png"), tf.io.encode_png(IMAGE))
    (tmp_path / "huge.png").write_bytes(png_header(12000, 12000))
    result = call("cifar10-predict", f"--checkpoint_dir={train_dir}", "--top_k=1",
                  str(tmp_path / "huge.png"), str(tmp_path / "small.png"))
    assert result.returncode == 1
    assert result.stdout.startswith(f"{tmp_path / 'small.png'}: ")
    assert result.stderr.splitlines() == [
        f"cifar10-predict: warning: cannot read {tmp_path / 'huge.png'}: 144,000,000 pixels, more than "
        f"the 50,000,000 an image may have here; scale it down first",
        "cifar10-predict: error: 1 of 2 images could not be read (see above)"]


def test_an_os2_bmp_is_skipped_by_prepare_saying_so(tmp_path):
    """Not as too large: its sizes are 16-bit fields where a BITMAPINFOHEADER's are
    32-bit, and TensorFlow's decoder reads them as the latter."""
    photo_folders(tmp_path / "photos")
    os2 = tmp_path / "photos" / "cat" / "os2.bmp"
    os2.write_bytes(os2_bmp(53, 37) + bytes(37 * 160))
    result = call("cifar10-prepare", f"--image_dir={tmp_path / 'photos'}",
                  f"--data_dir={tmp_path / 'data'}", "--test_fraction=0.25")
    assert result.returncode == 0, result.stderr
    assert (f"cifar10-prepare: warning: skipped {os2}: an OS/2 BMP (a 12-byte "
            f"BITMAPCOREHEADER), which TensorFlow does not decode: save it as PNG or as a "
            f"24-bit BMP") in result.stderr.splitlines()
    assert "Wrote 6 training and 2 test records" in result.stdout
