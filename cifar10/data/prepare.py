"""cifar10-prepare's library: ``convert`` writes a ``imagefiles.Source`` as a data folder,
the images decoded as cifar10-predict does.  Only ``convert`` loads TensorFlow."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Sequence

import numpy as np

from cifar10.core import atomic
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.core.errors import Cifar10Error, io_advice, io_error
from cifar10.data.imagefiles import Source


@dataclasses.dataclass(frozen=True)
class Summary:
    """What ``convert`` wrote."""

    batches_dir: str
    class_names: tuple[str, ...]
    train_records: int
    test_records: int
    skipped: tuple[tuple[str, str], ...]  # (path, why) of each unreadable image


class TooFewReadable(Cifar10Error):
    """Too few images could be read (nothing written); ``skipped``: (path, why) of each."""

    def __init__(self, message: str, skipped: Sequence[tuple[str, str]]):
        super().__init__(message)
        self.skipped = tuple(skipped)


def check_output(data_dir: str, image_dir: str = "") -> str:
    """The new data folder to write under ``data_dir``; Cifar10Error where it exists, is
    in a data folder or inside ``image_dir``."""
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise Cifar10Error(f"--data_dir={data_dir} is a file, not a folder: name a folder "
                           f"to write the data set in (it is made if missing)")
    found = datafolder.data_files_in(data_dir)
    if found:
        raise Cifar10Error(
            f"--data_dir={data_dir} is a data folder itself (it holds {', '.join(found[:2])}"
            f"{', ...' if len(found) > 2 else ''}): pass its parent or a new folder as "
            f"--data_dir")
    batches_dir = os.path.join(data_dir, ff.BATCHES_DIRNAME)
    if os.path.lexists(batches_dir):
        raise Cifar10Error(f"{batches_dir} exists: it is not replaced; move it aside or "
                           f"choose another --data_dir")
    if image_dir and _inside(data_dir, image_dir):
        raise Cifar10Error(f"--data_dir {data_dir} is inside --image_dir {image_dir}, where "
                           f"the data set would be taken for images; choose a --data_dir "
                           f"outside it")
    return batches_dir  # (whether it can be written, its first write says: ``convert``)


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def convert(source: Source, data_dir: str, seed: int = 0, strict: bool = False,
            progress: Callable[[int, int], None] | None = None) -> Summary:
    """Writes ``source`` as ``<data_dir>/cifar-10-batches-bin/``, whole: training records
    shuffled (``seed``) over the five files, test records in class order; an unreadable
    image skipped (``strict``: Cifar10Error).  TooFewReadable where too few could be read."""
    batches_dir = check_output(data_dir)
    # The scratch folder first: an unwritable data_dir is found before any decoding.
    try:
        with atomic.made_folders_removed_on_failure(data_dir), \
                atomic.new_folder(batches_dir) as scratch:
            files, summary = _records(source, seed, strict, progress)
            for name, content in files.items():
                with open(os.path.join(scratch, name), "wb") as f:
                    f.write(content)
    except OSError as e:
        raise io_error("cannot write the data folder", batches_dir, e,
                       io_advice(e) or "choose another --data_dir") from e
    return dataclasses.replace(summary, batches_dir=batches_dir)


def _records(source: Source, seed: int, strict: bool, progress
             ) -> tuple[dict[str, bytes], Summary]:
    from cifar10.data import images as image_files  # TensorFlow, loaded only to decode the images

    pairs = source.train + source.test
    records, skipped = [], []
    every = max(1, len(pairs) // 100)  # often enough for a progress line's tenths
    if progress:
        progress(0, len(pairs))
    decoded = image_files.decode_files([path for path, _ in pairs])
    for done, ((path, label), (_, image, why)) in enumerate(zip(pairs, decoded), 1):
        if image is None:
            if strict:
                raise Cifar10Error(f"cannot read {path}: {why} (--strict: nothing written)")
            skipped.append((path, why))
            records.append(None)
        else:
            records.append(bytes([label]) + image.transpose(2, 0, 1).tobytes())
        if progress and (done % every == 0 or done == len(pairs)):
            progress(done, len(pairs))
    train = [r for r in records[:len(source.train)] if r is not None]
    test = [r for r in records[len(source.train):] if r is not None]
    if not train:
        raise TooFewReadable("no training image could be read: nothing written", skipped)
    present = {record[0] for record in train}
    empty = [label for label in range(len(source.class_names)) if label not in present]
    if empty:
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise TooFewReadable(
            f"class {source.class_names[empty[0]]}{more} has no training image that could "
            f"be read: add readable images to its folder (or lower --test_fraction); "
            f"nothing written", skipped)
    if len(train) < len(ff.TRAIN_FILES) or not test:
        raise TooFewReadable(
            f"{len(train)} training and {len(test)} test images could be read: a data folder "
            f"needs at least {len(ff.TRAIN_FILES)} training images (one per data_batch file) "
            f"and a test image; nothing written", skipped)
    order = np.random.default_rng(seed).permutation(len(train))
    files = {name: b"".join(train[i] for i in part) for name, part in
             zip(ff.TRAIN_FILES, np.array_split(order, len(ff.TRAIN_FILES)))}
    files[ff.TEST_FILES[0]] = b"".join(test)
    files[ff.META_FILE] = ("\n".join(source.class_names) + "\n").encode()
    return files, Summary("", source.class_names, len(train), len(test), tuple(skipped))
