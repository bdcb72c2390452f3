"""Image files as CIFAR-10 images (cifar10.data.images): each format decoded, area
resizing, RGB from any colour mode, BMPs TensorFlow decodes wrong refused, too large
images refused before decoding, files that are not images never opened."""

from __future__ import annotations

import os
import struct
import tempfile
import zlib

import numpy as np
import pytest
import tensorflow as tf

from cifar10.data import images as image_files
from specialfiles import unix_socket, watched_fifos


def image(seed, height=32, width=32):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def decoded(encoded: bytes) -> np.ndarray:
    return image_files.decode_image(tf.constant(encoded)).numpy()


def gif_bytes(frames: list[np.ndarray], palette: np.ndarray) -> bytes:
    """A GIF89a of palette-index frames [H, W] (values 0-3) over a 4-colour palette:
    LZW with 3-bit codes, a clear code before every two pixels (the simplest valid)."""
    height, width = frames[0].shape
    out = [b"GIF89a", struct.pack("<HHBBB", width, height, 0x91, 0, 0), palette.tobytes()]
    for frame in frames:
        codes = []
        pixels = frame.ravel().tolist()
        for i in range(0, len(pixels), 2):
            codes += [4, *pixels[i:i + 2]]  # 4: clear
        codes.append(5)  # end of information
        bits = sum(code << (3 * i) for i, code in enumerate(codes))
        packed = bits.to_bytes((3 * len(codes) + 7) // 8, "little")
        blocks = b"".join(bytes([len(packed[i:i + 255])]) + packed[i:i + 255]
                          for i in range(0, len(packed), 255))
        out += [b"\x2c", struct.pack("<HHHHB", 0, 0, width, height, 0), b"\x02", blocks, b"\x00"]
    out.append(b"\x3b")
    return b"".join(out)


def png_header(width: int, height: int) -> bytes:
    """The start of a PNG that claims ``width`` x ``height`` (its pixel data left out)."""
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
            + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0) + b"\0" * 4)


def grey_png(width: int, height: int) -> bytes:
    """A whole 8-bit grey PNG of black pixels: small compressed (8000x8000: 62 KB)."""
    compress = zlib.compressobj(9)
    row = b"\0" * (width + 1)  # the filter byte, then the pixels
    pixels = b"".join(compress.compress(row) for _ in range(height)) + compress.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                                 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


def palette_bmp(indices: np.ndarray, palette: np.ndarray, top_down: bool = False,
                compression: int = 0, pixels: bytes | None = None) -> bytes:
    """An 8-bit BMP: headers, the palette ([colours, 3] RGB, stored B, G, R, 0) and the
    palette indices [H, W] (rows padded to 4 bytes), or ``pixels`` as given."""
    height, width = indices.shape
    pad = b"\0" * ((4 - width % 4) % 4)
    rows = [indices[y].astype(np.uint8).tobytes() + pad for y in range(height)]
    if pixels is None:
        pixels = b"".join(rows if top_down else rows[::-1])
    table = b"".join(bytes([b, g, r, 0]) for r, g, b in palette.tolist())
    offset = 14 + 40 + len(table)
    header = struct.pack("<2sIHHI", b"BM", offset + len(pixels), 0, 0, offset)
    info = struct.pack("<IiiHHIIiiII", 40, width, -height if top_down else height, 1, 8,
                       compression, len(pixels), 2835, 2835, len(palette), 0)
    return header + info + table + pixels


# A palette of colours far from grey: entry i is (i, 255 - i, 7i mod 256).
COLOURS = np.stack([np.arange(256), 255 - np.arange(256), np.arange(256) * 7 % 256],
                   axis=1).astype(np.uint8)
# The colour masks (red, green, blue, alpha) of 32-bit BMPs whose pixels' bytes are
# blue, green, red, alpha (what TensorFlow's decoder reads), and red, green, blue, alpha.
BGRA_MASKS = (0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000)
RGBA_MASKS = (0x000000FF, 0x0000FF00, 0x00FF0000, 0xFF000000)


def bmp_variant(rgb: np.ndarray, bits: int = 24, info_size: int = 40, top_down: bool = False,
                masks: tuple[int, ...] | None = None, trailing: bytes = b"") -> bytes:
    """A 24- or 32-bit BMP of ``rgb``: an OS/2 one (``info_size`` 12), a
    BITMAPINFOHEADER (40) or a V4/V5 header (108, 124); with ``masks`` a BI_BITFIELDS
    one whose pixels' bytes are in the masks' order; ``trailing`` bytes after the pixels."""
    height, width, _ = rgb.shape
    if bits == 24:
        channels = rgb[:, :, ::-1]
    else:
        rgba = np.concatenate([rgb, np.full((height, width, 1), 255, np.uint8)], axis=2)
        order = [int(np.log2(mask) // 8) for mask in (masks or BGRA_MASKS)]
        channels = np.zeros_like(rgba)
        channels[:, :, order] = rgba
    pad = b"\0" * ((4 - width * bits // 8 % 4) % 4)
    rows = [channels[y].tobytes() + pad for y in range(height)]
    pixels = b"".join(rows if top_down else rows[::-1])
    if info_size == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", info_size, width, -height if top_down else height,
                           1, bits, 3 if masks else 0, len(pixels), 2835, 2835, 0, 0)
        if info_size > 40:
            info += struct.pack("<IIII", *(masks or BGRA_MASKS)) + b"\0" * (info_size - 56)
        elif masks:
            info += struct.pack("<III", *masks[:3])
    offset = 14 + len(info)
    header = struct.pack("<2sIHHI", b"BM", offset + len(pixels), 0, 0, offset)
    return header + info + pixels + trailing


def test_each_format_and_colour_mode_becomes_rgb_and_a_gif_its_first_frame():
    rgb = image(1)
    assert np.array_equal(decoded(tf.io.encode_png(rgb).numpy()), rgb)
    gray = rgb[:, :, :1]
    assert np.array_equal(decoded(tf.io.encode_png(gray).numpy()), np.repeat(gray, 3, axis=2))
    rgba = np.concatenate([rgb, np.full((32, 32, 1), 255, np.uint8)], axis=2)
    assert np.array_equal(decoded(tf.io.encode_png(rgba).numpy()), rgb)
    smooth = np.broadcast_to(np.linspace(0, 255, 64, dtype=np.uint8)[:, None, None],
                             (64, 48, 3)).copy()
    from_jpeg = decoded(tf.io.encode_jpeg(smooth, quality=95).numpy()).astype(int)
    want = decoded(tf.io.encode_png(smooth).numpy()).astype(int)
    assert np.abs(from_jpeg - want).max() <= 8  # lossy, but the same picture
    palette = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [20, 40, 250]], np.uint8)
    first, second = np.random.default_rng(3).integers(0, 4, (2, 32, 32))
    assert np.array_equal(decoded(gif_bytes([first, second], palette)), palette[first])


@pytest.mark.parametrize("height, width", [(45, 37), (17, 50), (1, 1), (96, 96)])
def test_resizing_is_tf_image_area_resizing_rounded(height, width):
    images = np.random.default_rng(height).integers(0, 256, (2, height, width, 3))
    want = tf.image.resize(images.astype(np.float32), [32, 32], method="area").numpy()
    got = image_files.resize_to_cifar(images).numpy()
    assert got.shape == (2, 32, 32, 3) and got.dtype == np.uint8
    # Equal up to float rounding: a value within 1e-4 of a half may round either way.
    assert np.all(np.abs(got - want) <= 0.5 + 1e-4)
    assert np.mean(got != np.round(want)) < 1e-3


@pytest.mark.parametrize("top_down", [False, True])
def test_an_8_bit_bmp_gets_its_palettes_colours_and_keeps_its_place(tmp_path, top_down):
    indices = np.random.default_rng(5).integers(0, 256, (45, 30))
    encoded = palette_bmp(indices, COLOURS, top_down)
    # TensorFlow's decoder alone ignores the palette: each index becomes a grey level.
    assert np.array_equal(tf.io.decode_image(encoded, channels=3).numpy(),
                          np.repeat(indices[:, :, None], 3, axis=2))
    (tmp_path / "p.bmp").write_bytes(encoded)
    tf.io.write_file(str(tmp_path / "a.png"), tf.io.encode_png(image(1)))
    paths = [str(tmp_path / "a.png"), str(tmp_path / "p.bmp")]
    results = list(image_files.decode_files(paths))
    assert [(path, why) for path, _, why in results] == [(path, "") for path in paths]
    assert np.array_equal(results[0][1], image(1))
    assert np.array_equal(results[1][1],
                          image_files.resize_to_cifar(COLOURS[indices][None])[0].numpy())


@pytest.mark.parametrize("name, encoded", [
    ("top-down", lambda rgb: bmp_variant(rgb, top_down=True)),
    ("32-bit", lambda rgb: bmp_variant(rgb, bits=32)),
    ("32-bit BI_BITFIELDS BGRA", lambda rgb: bmp_variant(rgb, bits=32, masks=BGRA_MASKS)),
    ("32-bit V4 header", lambda rgb: bmp_variant(rgb, bits=32, info_size=108,
                                                 masks=BGRA_MASKS)),
    ("24-bit V5 header", lambda rgb: bmp_variant(rgb, info_size=124)),
    # Bytes after the pixels, which TensorFlow's decoder alone refuses.
    ("trailing bytes", lambda rgb: bmp_variant(rgb, trailing=b"\0\0")),
])
def test_bmp_variants_are_taken(name, encoded):
    rgb = image(11, 32, 30)  # rows of 90 bytes: padded to 92
    assert np.array_equal(decoded(encoded(rgb)), decoded(tf.io.encode_png(rgb).numpy())), name


@pytest.mark.parametrize("name, encoded", [
    ("OS/2", lambda rgb: bmp_variant(rgb, info_size=12)),
    # TensorFlow alone would swap red and blue, silently.
    ("32-bit RGBA masks", lambda rgb: bmp_variant(rgb, bits=32, masks=RGBA_MASKS)),
    ("RLE-compressed", lambda rgb: palette_bmp(np.zeros((2, 3)), COLOURS, compression=1,
                                               pixels=bytes([3, 5, 0, 0, 3, 9, 0, 1]))),
    ("1-bit", lambda rgb: palette_bmp(np.zeros((2, 3)), COLOURS[:2])[:28] + b"\x01\x00"
     + palette_bmp(np.zeros((2, 3)), COLOURS[:2])[30:]),
    ("cut short", lambda rgb: bmp_variant(rgb)[:-1]),
])
def test_bmps_tensorflow_would_refuse_or_decode_wrong_are_refused_saying_so(tmp_path, name,
                                                                            encoded):
    (tmp_path / "a.bmp").write_bytes(encoded(image(13, 32, 30)))
    [(_, got, why)] = image_files.decode_files([str(tmp_path / "a.bmp")])
    assert (got, why) == (None, image_files.BMP_REFUSED), name


@pytest.mark.parametrize("encoded, width, height", [
    (lambda: png_header(7072, 7071), 7072, 7071),  # 50,006,112
    (lambda: png_header(2 ** 32 - 1, 2 ** 32 - 1), 2 ** 32 - 1, 2 ** 32 - 1),
    (lambda: b"GIF89a" + struct.pack("<HH", 60000, 60000) + b"\0" * 20, 60000, 60000),
    (lambda: bmp_variant(np.zeros((1, 1, 3), np.uint8))[:18]
     + struct.pack("<ii", 10000, -10000), 10000, 10000),  # top-down: a negative height
], ids=["png-just-over", "png-past-2**31", "gif", "bmp"])
def test_an_image_whose_header_gives_over_50_megapixels_is_refused_before_decoding(
        encoded, width, height):
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        decoded(encoded())
    assert (f"assertion failed: [an image of {width}x{height} pixels, more than the "
            f"50,000,000 an image may have here; scale it down first]") in refused.value.message
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        decoded(png_header(5000, 10000))  # 50 megapixels: left to the decoder (no pixels)
    assert "an image of" not in refused.value.message


def test_files_that_cannot_be_decoded_say_why_and_the_others_go_on(tmp_path):
    """A FIFO or a socket is never opened (reading a FIFO waits for a writer)."""
    tf.io.write_file(str(tmp_path / "good.png"), tf.io.encode_png(image(1)))
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "text.png").write_text("not an image")
    good, fifo = str(tmp_path / "good.png"), tmp_path / "feed.png"
    with watched_fifos(fifo) as opened, tempfile.TemporaryDirectory() as short, \
            unix_socket(os.path.join(short, "s.png")) as sock:  # (a socket's path is short)
        paths = [good, str(fifo), sock, str(tmp_path / "empty.jpg"), "-",
                 str(tmp_path / "text.png"), str(tmp_path / "nope.png"), good]
        results = [(path, why) for path, _, why in
                   image_files.decode_files(paths, contents={"-": b""})]
    assert opened == []
    assert [why for _, why in results] == [
        "", "not a regular file", "not a regular file", image_files.EMPTY, image_files.EMPTY,
        "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one",
        "no such file", ""]
