"""Small CIFAR-format data sets for tests and offline demos, learned the way CIFAR-10 is.

``write_dataset`` writes a ``cifar-10-batches-bin`` folder of any size.  Each image
is a striped square in its class's colour and stripe period, at a random place and
size on a random background, with noise; classes come in look-alike pairs (as
CIFAR-10's airplane and ship), each image taking a random share of up to
``MAX_BLEND`` of its partner's colour and period, so the model learns them over
hundreds of steps, never perfectly.  ``separable=True`` gives the easy data of tests
(full-frame stripes, no blending), learned perfectly in a few dozen steps.  The
folder holds ``SYNTHETIC_MARKER``, so programs say it is not CIFAR-10.
"""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np

from cifar10.core import atomic
from cifar10.data import fileformat as ff

# Marker file so that tools (and people) can tell generated data from the real one.
SYNTHETIC_MARKER = "SYNTHETIC_DATA.txt"

# One colour per class, far apart in RGB so that standardisation keeps them apart.
_PALETTE = np.array(
    [
        [230, 40, 40], [40, 230, 40], [40, 40, 230], [230, 230, 40], [230, 40, 230],
        [40, 230, 230], [240, 140, 20], [120, 40, 200], [140, 140, 140], [20, 120, 60],
    ],
    dtype=np.float32,
)
# Each class's look-alike, as in CIFAR-10's most confused pairs: airplane-ship,
# automobile-truck, bird-frog, cat-dog, deer-horse.
PARTNER = np.array([8, 9, 6, 5, 7, 3, 2, 4, 0, 1])
# An image takes a uniform random share in [0, MAX_BLEND] of its partner's colour
# and stripe period: 1 in 11 takes more than half, so even a perfect model gets
# about 9% wrong, the way CIFAR-10's best scores stay below 100%.
MAX_BLEND = 0.55
COLOUR_JITTER = 40.0  # standard deviation of each image's colour around its class's
SQUARE_SIZES = (12, 24)  # the striped square's side in pixels, smallest and largest
NOISE = 50.0  # uniform pixel noise in [-NOISE, NOISE]
SEPARABLE_NOISE = 25.0


def make_records(labels: np.ndarray, seed: int = 0, separable: bool = False) -> bytes:
    """CIFAR-format records for ``labels``: label ``k``'s image has horizontal stripes
    (invariant to flips) of period ``3 + k`` in the class colour, both blended with the
    partner class's (``separable``: full-frame, not blended), plus noise."""
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
    """[n, channel, row, col] float: full-frame stripes of the blended period, in
    ``colour`` ([n, channel])."""
    rows = np.arange(ff.IMAGE_SIZE, dtype=np.float32)
    period = _mix(3.0 + labels.astype(np.float32), 3.0 + PARTNER[labels].astype(np.float32),
                  blend)  # [n]
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * rows[None, :] / period[:, None] + phase[:, None])
    return colour[:, :, None, None] * (0.35 + 0.65 * stripes[:, None, :, None])


def _on_background(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A square of ``images`` at a random place and size on a random background: one
    colour per image with vertical streaks, which carry nothing of the class."""
    n, size = images.shape[0], ff.IMAGE_SIZE
    side = rng.integers(SQUARE_SIZES[0], SQUARE_SIZES[1] + 1, size=n)
    top, left = rng.integers(0, size - side + 1), rng.integers(0, size - side + 1)
    at = np.arange(size)
    rows = (at[None, :] >= top[:, None]) & (at[None, :] < (top + side)[:, None])
    cols = (at[None, :] >= left[:, None]) & (at[None, :] < (left + side)[:, None])
    background = (rng.uniform(30, 220, size=(n, ff.NUM_CHANNELS, 1, 1)) *
                  (0.8 + 0.4 * rng.uniform(size=(n, 1, 1, size))))
    return np.where((rows[:, :, None] & cols[:, None, :])[:, None], images, background)


def _file_bytes(num_records: int, seed: int, separable: bool) -> bytes:
    # Labels cycle through the classes so every file holds all of them evenly.
    labels = np.arange(num_records) % ff.NUM_CLASSES
    labels = np.random.default_rng(seed).permutation(labels)
    return make_records(labels, seed=seed + 1, separable=separable)


def dataset_files(records_per_file: int = 1000, seed: int = 0,
                  separable: bool = False) -> dict[str, bytes]:
    """Returns {file name: contents} of a complete generated batches folder."""
    if records_per_file < 1:
        raise ValueError(f"records_per_file must be at least 1, got {records_per_file}")
    files = {}
    for i, name in enumerate(ff.TRAIN_FILES + ff.TEST_FILES):
        files[name] = _file_bytes(records_per_file, seed * 100 + 2 * i, separable)
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
    """Writes a generated ``cifar-10-batches-bin`` folder under ``data_dir`` (made if
    missing), ``records_per_file`` records in each ``.bin`` file; returns its path."""
    batches_dir = os.path.join(data_dir, ff.BATCHES_DIRNAME)
    files = dataset_files(records_per_file, seed, separable)
    os.makedirs(data_dir, exist_ok=True)
    if os.path.isdir(batches_dir):  # rewrite in place, each file replaced whole
        _write_files(batches_dir, files)
        return batches_dir
    # Renamed into place whole: another process never sees it half-written (if it got
    # there first, its folder is kept).
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
    """Returns a gzipped tarball laid out like ``cifar-10-binary.tar.gz``."""
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
    """True when ``batches_dir``'s generated data has look-alike classes (not the
    separable data of tests or of earlier versions)."""
    try:
        with open(os.path.join(batches_dir, SYNTHETIC_MARKER), encoding="utf-8",
                  errors="replace") as f:
            return "look-alike classes" in f.read()
    except OSError:
        return False
