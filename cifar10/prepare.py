"""A folder of class folders as CIFAR-10 binary files: cifar10-prepare's library.

``image_dir/<class>/*.jpg`` (or ``image_dir/train/<class>/…`` and
``image_dir/test/<class>/…`` to keep a given split) becomes
``<data_dir>/cifar-10-batches-bin/`` with ``data_batch_1..5.bin``,
``test_batch.bin`` and ``batches.meta.txt``, the layout the trainer and the
evaluator read.  Classes are numbered in sorted folder-name order.  Images are
decoded and resized as ``cifar10-predict`` does (``predict.decode_files``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Sequence

import numpy as np

from cifar10 import atomic
from cifar10 import fileformat as ff
from cifar10 import imagefiles
from cifar10 import predict
from cifar10.errors import Cifar10Error, io_advice, io_error

DEFAULT_TEST_FRACTION = 1 / 6  # 10,000 of CIFAR-10's 60,000 images
SPLIT_FOLDERS = ("train", "test")


@dataclasses.dataclass(frozen=True)
class Source:
    """The images of a folder: class names, and (path, label) pairs per split."""

    class_names: tuple[str, ...]
    train: tuple[tuple[str, int], ...]
    test: tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class Summary:
    """What ``convert`` wrote."""

    batches_dir: str
    class_names: tuple[str, ...]
    train_records: int
    test_records: int
    skipped: tuple[tuple[str, str], ...]  # (path, why) of each unreadable image


def find_source(image_dir: str, test_fraction: float = DEFAULT_TEST_FRACTION,
                seed: int = 0) -> Source:
    """The classes and images of ``image_dir``, split into train and test.

    With ``train/`` and ``test/`` folders, their split is kept; otherwise each
    class is split at random (``seed``), ``test_fraction`` of its images (rounded)
    going to the test set.

    Raises:
      Cifar10Error: no class folders, more than 10, or a class without images.
    """
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if not os.path.isdir(image_dir):
        raise Cifar10Error(f"no such folder: {image_dir}")
    top = _subfolders(image_dir)
    if set(SPLIT_FOLDERS) <= set(top):
        names = sorted(set(_subfolders(os.path.join(image_dir, "train"))))
        _check_classes(os.path.join(image_dir, "train"), names)
        unknown = sorted(set(_subfolders(os.path.join(image_dir, "test"))) - set(names))
        if unknown:
            raise Cifar10Error(f"{os.path.join(image_dir, 'test')} has classes that "
                               f"{os.path.join(image_dir, 'train')} lacks: {', '.join(unknown)}")
        train = _labelled(os.path.join(image_dir, "train"), names, required=True)
        test = _labelled(os.path.join(image_dir, "test"), names, required=False)
        return Source(tuple(names), tuple(train), tuple(test))
    _check_classes(image_dir, top)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label, name in enumerate(top):
        images = _images(os.path.join(image_dir, name), required=True)
        order = rng.permutation(len(images))
        cut = int(round(len(images) * test_fraction))
        test += [(images[i], label) for i in order[:cut]]
        train += [(images[i], label) for i in order[cut:]]
    return Source(tuple(top), tuple(train), tuple(test))


def _subfolders(folder: str) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(folder)
                      if entry.is_dir() and not entry.name.startswith("."))
    except OSError as e:
        raise io_error("cannot read the folder", folder, e) from e


def _check_classes(folder: str, names: Sequence[str]) -> None:
    if not names:
        raise Cifar10Error(f"no class folders in {folder}: put the images of each class in a "
                           f"folder of its own ({folder}/cat/*.jpg, {folder}/dog/*.jpg, ...)")
    if len(names) == 1:
        raise Cifar10Error(f"{folder} has one class folder ({names[0]}): a classifier needs "
                           f"at least 2 classes, each in a folder of its own")
    if len(names) > ff.MAX_CLASSES:
        raise Cifar10Error(f"{folder} has {len(names)} class folders; a CIFAR record's one "
                           f"label byte holds at most {ff.MAX_CLASSES} classes")


def _images(folder: str, required: bool) -> list[str]:
    try:
        return imagefiles.find_images([folder])
    except Cifar10Error:
        if required:
            raise Cifar10Error(f"the class folder {folder} holds no images "
                               f"({', '.join(imagefiles.IMAGE_EXTENSIONS)})") from None
        return []


def _labelled(split_dir: str, names: Sequence[str], required: bool) -> list[tuple[str, int]]:
    pairs = []
    for label, name in enumerate(names):
        folder = os.path.join(split_dir, name)
        if os.path.isdir(folder) or required:
            pairs += [(path, label) for path in _images(folder, required)]
    return pairs


def convert(source: Source, data_dir: str, seed: int = 0, strict: bool = False,
            progress: Callable[[int, int, float], None] | None = None) -> Summary:
    """Writes ``source`` as ``<data_dir>/cifar-10-batches-bin/``.

    The training records are shuffled (``seed``) and spread over the five
    ``data_batch`` files; the test records keep class order in ``test_batch.bin``.
    The folder is written under a temporary name and renamed when complete.

    Args:
      progress: called now and then with (images done, images in all, seconds).
      strict: an unreadable image is an error (nothing is written) instead of
        being skipped.

    Raises:
      Cifar10Error: the output folder exists, an image is unreadable (``strict``),
        every image of the training set is unreadable, or ``data_dir`` cannot be
        written.
    """
    batches_dir = os.path.join(data_dir, ff.BATCHES_DIRNAME)
    if os.path.lexists(batches_dir):
        raise Cifar10Error(f"{batches_dir} exists: it is not replaced; move it aside or "
                           f"choose another --data_dir")
    # The scratch folder is made first, so that an unwritable data_dir is found
    # before the images are decoded, not after.
    try:
        with atomic.new_folder(batches_dir) as scratch:
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
    """The contents of the data folder's files, and the summary (without its folder)."""
    pairs = source.train + source.test
    records, skipped = [], []
    start = time.monotonic()
    decoded = predict.decode_files([path for path, _ in pairs])
    for done, ((path, label), (_, image, why)) in enumerate(zip(pairs, decoded), 1):
        if image is None:
            if strict:
                raise Cifar10Error(f"cannot read {path}: {why} (--strict: nothing written)")
            skipped.append((path, why))
            records.append(None)
        else:
            records.append(bytes([label]) + image.transpose(2, 0, 1).tobytes())
        if progress and (done % 1000 == 0 or done == len(pairs)):
            progress(done, len(pairs), time.monotonic() - start)
    train = [r for r in records[:len(source.train)] if r is not None]
    test = [r for r in records[len(source.train):] if r is not None]
    if not train:
        raise Cifar10Error("no training image could be read: nothing written")
    order = np.random.default_rng(seed).permutation(len(train))
    files = {name: b"".join(train[i] for i in part) for name, part in
             zip(ff.TRAIN_FILES, np.array_split(order, len(ff.TRAIN_FILES)))}
    files[ff.TEST_FILES[0]] = b"".join(test)
    files[ff.META_FILE] = ("\n".join(source.class_names) + "\n").encode()
    return files, Summary("", source.class_names, len(train), len(test), tuple(skipped))
