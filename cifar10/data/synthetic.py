"""Generated CIFAR-format data for tests and offline demos (``write_dataset``): striped
squares in each class's colour and period on a random background, classes in look-alike
pairs a model never learns perfectly (``separable``: the easy data of tests)."""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np

from cifar10.core import atomic
from cifar10.data import fileformat as ff

SYNTHETIC_MARKER = "SYNTHETIC_DATA.txt"

# One colour per class, far apart in RGB so that standardisation keeps them apart.
_PALETTE = np.array(
    [
        [230, 40, 40], [40, 230, 40], [40, 40, 230], [230, 230, 40], [230, 40, 230],
        [40, 230, 230], [240, 140, 20], [120, 40, 200], [140, 140, 140], [20, 120, 60],
    ],
    dtype=np.float32,
)
# Each class's look-alike, as in CIFAR-10's most confused pairs (cat-dog, ...).
PARTNER = np.array([8, 9, 6, 5, 7, 3, 2, 4, 0, 1])
# An image's share of its partner's colour and period: 1 in 11 takes more than half,
# so even a perfect model gets about 9% wrong.
MAX_BLEND = 0.55
COLOUR_JITTER = 40.0  # standard deviation of each image's colour around its class's
SQUARE_SIZES = (12, 24)  # the striped square's side in pixels, smallest and largest
NOISE = 50.0  # uniform pixel noise in [-NOISE, NOISE]
SEPARABLE_NOISE = 25.0


def make_records(labels: np.ndarray, seed: int = 0, separable: bool = False) -> bytes:
    """CIFAR-format records for ``labels``: label ``k``'s image has horizontal stripes
    (flip-invariant) of period ``3 + k`` in the class colour, blended with the partner's."""
    labels = np.asarray(labels, dtype=np.uint8)
    if labels.size and labels.max() >= ff.NUM_CLASSES:
        raise ValueError(f"labels must be in 0-{ff.NUM_CLASSES - 1}, got {labels.max()}")
    rng = np.random.default_rng(seed)
    n = labels.shape[0]
    phase = rng.uniform(0, 2 * np.pi, size=n).astype(np.float32)
    amplitude = SEPARABLE_NOISE if separable else NOISE
    noise = rng.uniform(-amplitude, amplitude,
                        size=(n, ff.NUM_CHANNELS, ff.IMAGE_SIZE, ff.IMAGE_SIZE))
    if separable:
        images = _stripes(labels, np.zeros(n, np.float32), phase, _PALETTE[labels])
    else:
        blend = rng.uniform(0, MAX_BLEND, size=n).astype(np.float32)
        colour = _mix(_PALETTE[labels], _PALETTE[PARTNER[labels]], blend[:, None])
        colour = colour + rng.normal(0, COLOUR_JITTER, size=colour.shape).astype(np.float32)
        images = _on_background(_stripes(labels, blend, phase, colour), rng)
    images = np.clip(images + noise, 0, 255).astype(np.uint8).reshape(n, ff.IMAGE_BYTES)
    return np.concatenate([labels[:, None], images], axis=1).tobytes()


def _mix(own: np.ndarray, partner: np.ndarray, blend: np.ndarray) -> np.ndarray:
    return (1 - blend) * own + blend * partner


def _stripes(labels: np.ndarray, blend: np.ndarray, phase: np.ndarray,
             colour: np.ndarray) -> np.ndarray:
    """[n, channel, row, col]: full-frame stripes of the blended period in ``colour``."""
    rows = np.arange(ff.IMAGE_SIZE, dtype=np.float32)
    period = _mix(3.0 + labels.astype(np.float32), 3.0 + PARTNER[labels].astype(np.float32),
                  blend)  # [n]
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * rows[None, :] / period[:, None] + phase[:, None])
    return colour[:, :, None, None] * (0.35 + 0.65 * stripes[:, None, :, None])


def _on_background(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A square of ``images`` at a random place and size on a streaked background."""
    n, size = images.shape[0], ff.IMAGE_SIZE
    side = rng.integers(SQUARE_SIZES[0], SQUARE_SIZES[1] + 1, size=n)
    top, left = rng.integers(0, size - side + 1), rng.integers(0, size - side + 1)
    at = np.arange(size)
    rows = (at[None, :] >= top[:, None]) & (at[None, :] < (top + side)[:, None])
    cols = (at[None, :] >= left[:, None]) & (at[None, :] < (left + side)[:, None])
    background = (rng.uniform(30, 220, size=(n, ff.NUM_CHANNELS, 1, 1)) *
                  (0.8 + 0.4 * rng.uniform(size=(n, 1, 1, size))))
    return np.where((rows[:, :, None] & cols[:, None, :])[:, None], images, background)


def dataset_files(records_per_file: int = 1000, seed: int = 0,
                  separable: bool = False) -> dict[str, bytes]:
    """{file name: contents} of a generated batches folder."""
    if records_per_file < 1:
        raise ValueError(f"records_per_file must be at least 1, got {records_per_file}")
    files = {}
    for i, name in enumerate(ff.TRAIN_FILES + ff.TEST_FILES):
        file_seed = seed * 100 + 2 * i
        # Labels cycle through the classes so every file holds all of them evenly.
        labels = np.random.default_rng(file_seed).permutation(
            np.arange(records_per_file) % ff.NUM_CLASSES)
        files[name] = make_records(labels, seed=file_seed + 1, separable=separable)
    files[ff.META_FILE] = ("\n".join(ff.CLASS_NAMES) + "\n").encode()
    kind = ("separable classes (learned perfectly in a few dozen steps)" if separable else
            f"look-alike classes (pairs blended up to {MAX_BLEND:.0%}; never learned perfectly)")
    files[SYNTHETIC_MARKER] = (
        f"Generated by cifar10.data.synthetic: {records_per_file} records per file, seed {seed}, "
        f"{kind}. This is NOT the real CIFAR-10 data set.\n"
    ).encode()
    return files


def write_dataset(data_dir: str, records_per_file: int = 1000, seed: int = 0,
                  separable: bool = False) -> str:
    """Writes a generated ``cifar-10-batches-bin`` folder under ``data_dir``; its path."""
    batches_dir = os.path.join(data_dir, ff.BATCHES_DIRNAME)
    files = dataset_files(records_per_file, seed, separable)
    os.makedirs(data_dir, exist_ok=True)
    if os.path.isdir(batches_dir):  # rewrite in place, each file replaced whole
        _write_files(batches_dir, files)
        return batches_dir
    # Renamed into place whole (if another process got there first, its folder is kept).
    try:
        with atomic.new_folder(batches_dir) as scratch:
            _write_files(scratch, files)
    except OSError:
        if not os.path.isdir(batches_dir):
            raise
    return batches_dir


def _write_files(directory: str, files: dict[str, bytes]) -> None:
    for name, contents in files.items():
        atomic.write_bytes(os.path.join(directory, name), contents)


def tarball_bytes(records_per_file: int = 10, seed: int = 0, separable: bool = False) -> bytes:
    """A gzipped tarball laid out like ``cifar-10-binary.tar.gz``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, contents in dataset_files(records_per_file, seed, separable).items():
            info = tarfile.TarInfo(f"{ff.BATCHES_DIRNAME}/{name}")
            info.size = len(contents)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(contents))
    return buf.getvalue()


def is_synthetic(batches_dir: str) -> bool:
    """True when ``batches_dir`` was written by this module (of any version)."""
    return os.path.exists(os.path.join(batches_dir, SYNTHETIC_MARKER))


def has_look_alikes(batches_dir: str) -> bool:
    """Whether ``batches_dir``'s generated data has look-alike classes (not separable)."""
    try:
        with open(os.path.join(batches_dir, SYNTHETIC_MARKER), encoding="utf-8",
                  errors="replace") as f:
            return "look-alike classes" in f.read()
    except OSError:
        return False
