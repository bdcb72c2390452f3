"""Image files as CIFAR-10 images (cifar10.data.images): decoding of each format,
area resizing, RGB from any colour mode."""

from __future__ import annotations

import os
import struct
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from cifar10.data import imageheader
from cifar10.data import images as image_files
from specialfiles import unix_socket, watched_fifos
from test_imageheader import bmp as bmp_header, os2_bmp, png_header


def image(seed, height=32, width=32):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def decoded(encoded: bytes) -> np.ndarray:
    return image_files.decode_image(tf.constant(encoded)).numpy()


def bmp_bytes(rgb: np.ndarray) -> bytes:
    """A 24-bit uncompressed BMP (rows bottom-up, BGR, padded to 4 bytes)."""
    height, width, _ = rgb.shape
    pad = b"\0" * ((4 - width * 3 % 4) % 4)
    pixels = b"".join(rgb[y, :, ::-1].tobytes() + pad for y in range(height - 1, -1, -1))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835,
                       0, 0)
    return header + info + pixels


def gif_bytes(frames: list[np.ndarray], palette: np.ndarray) -> bytes:
    """A GIF89a of palette-index frames [H, W] (values 0-3) over a 4-colour palette.

    LZW with 3-bit codes: a clear code before every two pixels keeps the code
    table from growing, the simplest valid encoding.
    """
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


def test_a_gif_gives_its_first_frame():
    palette = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [20, 40, 250]], np.uint8)
    rng = np.random.default_rng(3)
    first, second = rng.integers(0, 4, (2, 32, 32))
    assert np.array_equal(decoded(gif_bytes([first, second], palette)), palette[first])


def test_a_32x32_image_is_kept_and_a_larger_one_area_averaged():
    small = image(0)
    assert np.array_equal(decoded(tf.io.encode_png(small).numpy()), small)
    # Each pixel repeated 2x2: the area average of each 2x2 block is the pixel.
    large = np.kron(small, np.ones((2, 2, 1), np.uint8))
    assert np.array_equal(decoded(tf.io.encode_png(large).numpy()), small)
    # Odd sizes: a flat image stays flat.
    flat = np.full((45, 37, 3), 77, np.uint8)
    assert np.array_equal(decoded(tf.io.encode_png(flat).numpy()), np.full((32, 32, 3), 77))


@pytest.mark.parametrize("height, width", [(45, 37), (100, 80), (17, 50), (1, 1), (96, 96)])
def test_resizing_is_tf_image_area_resizing_rounded(height, width):
    images = np.random.default_rng(height).integers(0, 256, (2, height, width, 3))
    want = tf.image.resize(images.astype(np.float32), [32, 32], method="area").numpy()
    got = image_files.resize_to_cifar(images).numpy()
    assert got.shape == (2, 32, 32, 3) and got.dtype == np.uint8
    # Equal up to float rounding: a value within 1e-4 of a half may round either way.
    assert np.all(np.abs(got - want) <= 0.5 + 1e-4)
    assert np.array_equal(got, np.round(want)) or np.mean(got != np.round(want)) < 1e-3


def test_grayscale_rgba_bmp_and_jpeg_become_rgb():
    rgb = image(1)
    gray = rgb[:, :, :1]
    assert np.array_equal(decoded(tf.io.encode_png(gray).numpy()), np.repeat(gray, 3, axis=2))
    rgba = np.concatenate([rgb, np.full((32, 32, 1), 255, np.uint8)], axis=2)
    assert np.array_equal(decoded(tf.io.encode_png(rgba).numpy()), rgb)
    assert np.array_equal(decoded(bmp_bytes(rgb)), rgb)
    smooth = np.broadcast_to(np.linspace(0, 255, 64, dtype=np.uint8)[:, None, None],
                             (64, 48, 3)).copy()
    from_jpeg = decoded(tf.io.encode_jpeg(smooth, quality=95).numpy())
    assert from_jpeg.shape == (32, 32, 3) and from_jpeg.dtype == np.uint8
    want = decoded(tf.io.encode_png(smooth).numpy()).astype(int)
    assert np.abs(from_jpeg.astype(int) - want).max() <= 8  # lossy, but the same picture


def jpeg_claiming(width: int, height: int) -> bytes:
    """A small JPEG whose start-of-frame segment says ``width`` x ``height``."""
    data = bytearray(tf.io.encode_jpeg(image(2, 37, 53)).numpy())
    frame = data.index(b"\xff\xc0")  # length 2 bytes, precision 1, then height, width
    data[frame + 5:frame + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def too_large(width: int, height: int) -> str:
    return (f"assertion failed: [an image of {width}x{height} pixels, more than the 50,000,000 "
            f"an image may have here; scale it down first]")


@pytest.mark.parametrize("encoded, width, height", [
    (lambda: png_header(12000, 12000), 12000, 12000),
    (lambda: png_header(7072, 7071), 7072, 7071),  # 50,006,112
    (lambda: png_header(2 ** 32 - 1, 2 ** 32 - 1), 2 ** 32 - 1, 2 ** 32 - 1),
    (lambda: jpeg_claiming(9000, 9000), 9000, 9000),
    (lambda: b"GIF89a" + struct.pack("<HH", 60000, 60000) + b"\0" * 20, 60000, 60000),
    (lambda: bmp_header(10000, -10000), 10000, 10000),  # top-down: a negative height
    (lambda: os2_bmp(60000, 60000), 60000, 60000),
], ids=["png", "png-just-over", "png-past-2**31", "jpeg", "gif", "bmp", "os2-bmp"])
def test_an_image_whose_header_gives_over_50_megapixels_is_refused_saying_so(encoded, width,
                                                                            height):
    """In the graph (the exported model's decoding), as cifar10-predict refuses it from the
    file's header; before any decoder runs (these headers' pixels are not there)."""
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        decoded(encoded())
    assert too_large(width, height) in refused.value.message


def test_an_image_of_50_megapixels_is_left_to_the_decoder():
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        decoded(png_header(5000, 10000))  # its pixels missing: the decoder refuses it
    assert "an image of" not in refused.value.message
    assert "PNG" in refused.value.message


def test_fifos_and_sockets_are_refused_without_being_opened(tmp_path):
    """Reading a FIFO waits for a writer: decoding one would hang the program."""
    tf.io.write_file(str(tmp_path / "good.png"), tf.io.encode_png(image(1)))
    fifo, good = tmp_path / "feed.png", str(tmp_path / "good.png")
    # (A socket's path is short: /tmp, not the test's folder.)
    with watched_fifos(fifo) as opened, tempfile.TemporaryDirectory() as short, \
            unix_socket(os.path.join(short, "s.png")) as sock:
        results = [(path, why) for path, _, why in
                   image_files.decode_files([good, str(fifo), sock, good])]
    assert results == [(good, ""), (str(fifo), "not a regular file"),
                       (sock, "not a regular file"), (good, "")]
    assert opened == []


def test_an_empty_file_is_named_as_such_not_as_damaged(tmp_path):
    tf.io.write_file(str(tmp_path / "good.png"), tf.io.encode_png(image(1)))
    (tmp_path / "empty.jpg").write_bytes(b"")
    good, empty = str(tmp_path / "good.png"), str(tmp_path / "empty.jpg")
    results = [(path, why) for path, _, why in image_files.decode_files(
        [empty, good, "-"], contents={"-": b""})]
    assert results == [
        (empty, "an empty file (0 bytes): a download or copy that did not finish?"), (good, ""),
        ("-", "an empty file (0 bytes): a download or copy that did not finish?")]


def bmp_of_depth(bits: int, width: int = 8, height: int = 2) -> bytes:
    """A valid uncompressed BMP of ``bits`` bits per pixel (a grey palette below 16)."""
    colours = 2 ** bits if bits < 16 else 0
    row = (width * bits + 31) // 32 * 4
    palette = b"".join(bytes([i * 255 // (colours - 1)] * 3 + [0]) for i in range(colours))
    pixels = b"\x55" * row * height
    offset = 54 + len(palette)
    header = struct.pack("<2sIHHI", b"BM", offset + len(pixels), 0, 0, offset)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, 0, len(pixels), 2835, 2835,
                       colours, 0)
    return header + info + palette + pixels


@pytest.mark.parametrize("bits", [1, 4, 16])
def test_a_bmp_of_a_depth_tensorflow_refuses_is_named_as_such_not_as_damaged(tmp_path, bits):
    path = tmp_path / f"{bits}.bmp"
    path.write_bytes(bmp_of_depth(bits))
    with pytest.raises(tf.errors.InvalidArgumentError):  # (the decoder's own refusal)
        decoded(path.read_bytes())
    [(_, image, why)] = image_files.decode_files([str(path)])
    assert image is None
    assert why == (f"a {bits}-bit BMP, a bit depth TensorFlow does not decode (it takes 8, 24 "
                   f"and 32-bit BMPs): save it as PNG or as a 24-bit BMP")
    for depth in (8, 24, 32):  # taken
        (tmp_path / f"{depth}.bmp").write_bytes(bmp_of_depth(depth))
        [(_, image, why)] = image_files.decode_files([str(tmp_path / f"{depth}.bmp")])
        assert image is not None and why == ""


def palette_bmp(indices: np.ndarray, palette: np.ndarray, top_down: bool = False,
                compression: int = 0, pixels: bytes | None = None) -> bytes:
    """An 8-bit BMP, written by hand: BITMAPFILEHEADER, BITMAPINFOHEADER, the palette
    (``palette``: [colours, 3] RGB, stored B, G, R, 0) and the pixels' palette indices
    (``indices``: [H, W], rows padded to 4 bytes, bottom-up unless ``top_down``), or
    ``pixels`` as given."""
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


@pytest.mark.parametrize("top_down", [False, True])
def test_an_8_bit_bmp_with_a_colour_palette_gets_its_colours(tmp_path, top_down):
    indices = np.random.default_rng(5).integers(0, 256, (32, 32))
    encoded = palette_bmp(indices, COLOURS, top_down)
    # TensorFlow's decoder ignores the palette: each index becomes a grey level.
    assert np.array_equal(tf.io.decode_image(encoded, channels=3).numpy(),
                          np.repeat(indices[:, :, None], 3, axis=2))
    assert np.array_equal(decoded(encoded), COLOURS[indices])
    (tmp_path / "p.bmp").write_bytes(encoded)
    [(_, image, why)] = image_files.decode_files([str(tmp_path / "p.bmp")])
    assert why == "" and np.array_equal(image, COLOURS[indices])


def test_a_palette_bmp_of_any_size_among_other_files_keeps_its_place(tmp_path):
    """A 45x30 palette BMP (rows padded by 2 bytes) is resized as any other image, and
    the files around it come in order."""
    indices = np.random.default_rng(6).integers(0, 40, (45, 30))
    (tmp_path / "p.bmp").write_bytes(palette_bmp(indices, COLOURS[:40]))
    tf.io.write_file(str(tmp_path / "a.png"), tf.io.encode_png(image(1)))
    tf.io.write_file(str(tmp_path / "b.png"), tf.io.encode_png(image(2)))
    paths = [str(tmp_path / name) for name in ("a.png", "p.bmp", "b.png")]
    results = list(image_files.decode_files(paths))
    assert [(path, why) for path, _, why in results] == [(path, "") for path in paths]
    assert np.array_equal(results[0][1], image(1)) and np.array_equal(results[2][1], image(2))
    want = image_files.resize_to_cifar(COLOURS[indices][None])[0].numpy()
    assert np.array_equal(results[1][1], want)


def test_a_grey_palette_bmp_decodes_as_its_grey_levels(tmp_path):
    grey = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    indices = np.random.default_rng(7).integers(0, 256, (32, 32))
    (tmp_path / "g.bmp").write_bytes(palette_bmp(indices, grey))
    [(_, image, why)] = image_files.decode_files([str(tmp_path / "g.bmp")])
    assert why == "" and np.array_equal(image, grey[indices])


def test_a_palette_bmp_whose_pixels_pass_its_palette_is_called_damaged(tmp_path):
    indices = np.full((32, 32), 3)
    indices[5, 7] = 9
    (tmp_path / "p.bmp").write_bytes(palette_bmp(indices, COLOURS[:4]))
    [(_, image, why)] = image_files.decode_files([str(tmp_path / "p.bmp")])
    assert image is None
    assert why == ("an 8-bit BMP with pixels of palette index 9, past the end of its "
                   "4-colour palette: a damaged one")


def test_an_rle_compressed_8_bit_bmp_is_refused_not_decoded_wrong(tmp_path):
    """TensorFlow reads the run-length codes as pixels: 3 pixels of colour 5, then of
    colour 9, become 3, 5, 0 and 3, 9, 0."""
    runs = bytes([3, 5, 0, 0, 3, 9, 0, 1])  # (count, index) runs, end of line, end of image
    encoded = palette_bmp(np.zeros((2, 3)), COLOURS, compression=1, pixels=runs)
    assert np.array_equal(tf.io.decode_bmp(encoded, channels=0).numpy()[..., 0],
                          [[3, 9, 0], [3, 5, 0]])
    (tmp_path / "r.bmp").write_bytes(encoded)
    [(_, image, why)] = image_files.decode_files([str(tmp_path / "r.bmp")])
    assert image is None
    assert why == ("an RLE-compressed 8-bit BMP, which TensorFlow does not decode: save it "
                   "as PNG or as a 24-bit BMP")


# The colour masks (red, green, blue, alpha) of a 32-bit BMP whose pixels' bytes are
# blue, green, red, alpha (what TensorFlow's decoder reads), and of one whose bytes
# are red, green, blue, alpha.
BGRA_MASKS = (0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000)
RGBA_MASKS = (0x000000FF, 0x0000FF00, 0x00FF0000, 0xFF000000)


def bmp_variant(rgb: np.ndarray, bits: int = 24, info_size: int = 40, top_down: bool = False,
                masks: tuple[int, ...] | None = None, trailing: bytes = b"") -> bytes:
    """A 24- or 32-bit BMP of ``rgb`` written by hand: an OS/2 one (``info_size`` 12:
    BITMAPCOREHEADER, 16-bit sizes), a BITMAPINFOHEADER (40) or a V4/V5 header (108,
    124); with ``masks`` (red, green, blue, alpha) a BI_BITFIELDS one whose pixels'
    bytes are in the masks' order; ``trailing`` bytes after the pixels."""
    height, width, _ = rgb.shape
    if bits == 24:
        channels = rgb[:, :, ::-1]
    else:
        rgba = np.concatenate([rgb, np.full((height, width, 1), 255, np.uint8)], axis=2)
        # Each channel's byte in the pixel: where its mask's bits are.
        order = [int(np.log2(mask) // 8) for mask in (masks or BGRA_MASKS)]
        channels = np.zeros_like(rgba)
        channels[:, :, order] = rgba
    pad = b"\0" * ((4 - width * bits // 8 % 4) % 4)
    rows = [channels[y].tobytes() + pad for y in range(height)]
    pixels = b"".join(rows if top_down else rows[::-1])
    compression = 3 if masks else 0
    if info_size == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", info_size, width, -height if top_down else height,
                           1, bits, compression, len(pixels), 2835, 2835, 0, 0)
        if info_size > 40:
            info += struct.pack("<IIII", *(masks or BGRA_MASKS)) + b"\0" * (info_size - 56)
        elif masks:
            info += struct.pack("<III", *masks[:3])
    offset = 14 + len(info)
    header = struct.pack("<2sIHHI", b"BM", offset + len(pixels), 0, 0, offset)
    return header + info + pixels + trailing


@pytest.mark.parametrize("name, encoded", [
    ("top-down", lambda rgb: bmp_variant(rgb, top_down=True)),
    ("32-bit", lambda rgb: bmp_variant(rgb, bits=32)),
    ("32-bit top-down", lambda rgb: bmp_variant(rgb, bits=32, top_down=True)),
    ("32-bit BI_BITFIELDS BGRA", lambda rgb: bmp_variant(rgb, bits=32, masks=BGRA_MASKS)),
    ("32-bit V4 header", lambda rgb: bmp_variant(rgb, bits=32, info_size=108,
                                                 masks=BGRA_MASKS)),
    ("24-bit V5 header", lambda rgb: bmp_variant(rgb, info_size=124)),
])
def test_bmp_variants_tensorflow_decodes_right_are_taken(tmp_path, name, encoded):
    rgb = image(11, 32, 30)  # rows of 90 bytes: padded to 92
    (tmp_path / "a.bmp").write_bytes(encoded(rgb))
    assert np.array_equal(tf.io.decode_image(encoded(rgb), channels=3).numpy(), rgb), name
    [(_, got, why)] = image_files.decode_files([str(tmp_path / "a.bmp")])
    assert why == "", name
    assert np.array_equal(got, decoded(tf.io.encode_png(rgb).numpy())), name


def test_a_bmp_with_bytes_after_its_pixels_is_decoded_though_tensorflow_refuses_it(tmp_path):
    """Some programs pad a BMP file past its pixels; TensorFlow's decoder wants the
    file to end where the pixels do."""
    rgb = image(12)
    encoded = bmp_variant(rgb, trailing=b"\0\0")
    with pytest.raises(tf.errors.InvalidArgumentError, match="Input size should match"):
        tf.io.decode_image(encoded, channels=3)
    (tmp_path / "a.bmp").write_bytes(encoded)
    [(_, got, why)] = image_files.decode_files([str(tmp_path / "a.bmp")])
    assert why == "" and np.array_equal(got, rgb)


FIX = "save it as PNG or as a 24-bit BMP"


def bmp_16_bit(width: int, height: int) -> bytes:
    """A 16-bit BI_BITFIELDS BMP (red 5 bits, green 6, blue 5) of one colour."""
    row = b"\x1f\xf8" * width + b"\0" * (width * 2 % 4)
    masks = struct.pack("<III", 0xF800, 0x07E0, 0x001F)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 16, 3, len(row) * height, 0, 0,
                       0, 0) + masks
    offset = 14 + len(info)
    return (struct.pack("<2sIHHI", b"BM", offset + len(row) * height, 0, 0, offset) + info
            + row * height)


@pytest.mark.parametrize("name, encoded, tensorflow, why", [
    # TensorFlow reads an OS/2 header's fields at a BITMAPINFOHEADER's offsets.
    ("OS/2", lambda rgb: bmp_variant(rgb, info_size=12), "error",
     f"an OS/2 BMP (a 12-byte BITMAPCOREHEADER), which TensorFlow does not decode: {FIX}"),
    # TensorFlow ignores the masks: red and blue swapped, silently.
    ("32-bit BI_BITFIELDS RGBA", lambda rgb: bmp_variant(rgb, bits=32, masks=RGBA_MASKS),
     "wrong", "a 32-bit BMP whose colour masks store its channels in another order than "
              f"blue, green, red, which TensorFlow would decode into wrong colours: {FIX}"),
    ("32-bit V5 RGBA", lambda rgb: bmp_variant(rgb, bits=32, info_size=124, masks=RGBA_MASKS),
     "wrong", "a 32-bit BMP whose colour masks store its channels in another order than "
              f"blue, green, red, which TensorFlow would decode into wrong colours: {FIX}"),
    # A 16-bit BMP's masks (5, 6 and 5 bits here) do not make it one TensorFlow decodes.
    ("16-bit BI_BITFIELDS", lambda rgb: bmp_16_bit(rgb.shape[1], rgb.shape[0]), "error",
     "a 16-bit BMP, a bit depth TensorFlow does not decode (it takes 8, 24 and 32-bit "
     f"BMPs): {FIX}"),
    ("cut short by a byte", lambda rgb: bmp_variant(rgb)[:-1], "error",
     "a BMP cut short: its header gives 30x32 pixels, 2998 bytes with the headers, and the "
     "file has 2997: a damaged or partly copied file"),
    ("cut in its header", lambda rgb: bmp_variant(rgb)[:40], "error",
     "a BMP cut short: its header gives 30x32 pixels, 2998 bytes with the headers, and the "
     "file has 40: a damaged or partly copied file"),
])
def test_bmp_variants_tensorflow_refuses_or_decodes_wrong_are_refused_saying_why(
        tmp_path, name, encoded, tensorflow, why):
    rgb = image(13, 32, 30)
    data = encoded(rgb)
    if tensorflow == "error":
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_image(data, channels=3)
    else:
        got = tf.io.decode_image(data, channels=3).numpy()
        assert got.shape == rgb.shape and not np.array_equal(got, rgb)
    (tmp_path / "a.bmp").write_bytes(data)
    assert imageheader.unsupported(str(tmp_path / "a.bmp")) == why
    [(_, got, reason)] = image_files.decode_files([str(tmp_path / "a.bmp")])
    assert (got, reason) == (None, why)
    # The graph's own checks (the SavedModel's), which decode_files's header check
    # spares it: the same words.
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        decoded(data)
    assert f"assertion failed: [{why}]" in error.value.message



def test_a_link_to_a_missing_file_names_where_it_points(tmp_path):
    tf.io.write_file(str(tmp_path / "good.png"), tf.io.encode_png(image(1)))
    (tmp_path / "moved.png").symlink_to(tmp_path / "elsewhere" / "cat.png")
    results = [(path, why) for path, _, why in image_files.decode_files(
        [str(tmp_path / "moved.png"), str(tmp_path / "good.png")])]
    assert results == [
        (str(tmp_path / "moved.png"),
         f"a link to {tmp_path / 'elsewhere' / 'cat.png'}, which does not exist"),
        (str(tmp_path / "good.png"), "")]
    # A missing file that is no link is as it was.
    [(_, _, why)] = image_files.decode_files([str(tmp_path / "nope.png")])
    assert why == "no such file"
