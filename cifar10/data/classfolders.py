"""A folder of class folders, split into training and test: cifar10-prepare's
input.  Its layouts: class folders alone (``image_dir/<class>/``), split at random,
or split folders (``image_dir/train/<class>/`` beside ``test/``, ``val/``, ``valid/``
or ``validation/``), whose split is kept.  The image files in each class folder are
found as a command line's folders are (``imagefiles.find_images``).

Kept free of TensorFlow, so that a program can check its arguments before
loading it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import numpy as np

from cifar10.data import fileformat as ff
from cifar10.core.errors import Cifar10Error, io_error, listed
from cifar10.data.imagefiles import IMAGE_EXTENSIONS, METADATA_FOLDER, find_images, images_in

DEFAULT_TEST_FRACTION = 1 / 6  # 10,000 of CIFAR-10's 60,000 images
TRAIN_FOLDER = "train"
TEST_FOLDERS = ("test", "val", "valid", "validation")  # any of these is the test set
_ONE_FOLDER_PER_CLASS = "the folder that holds one folder of images per class"


@dataclasses.dataclass(frozen=True)
class Source:
    """The images of a folder: class names, and (path, label) pairs per split."""

    class_names: tuple[str, ...]
    train: tuple[tuple[str, int], ...]
    test: tuple[tuple[str, int], ...]
    layout: str = ""  # one line: the layout found and where the test set comes from
    skipped: tuple[str, ...] = ()  # the metadata folders passed over (METADATA_FOLDER)
    left_out: tuple[str, ...] = ()  # the class folders' images of formats not read
    unfiled: tuple[str, ...] = ()  # images in no class folder (beside the class folders)
    split: tuple[str, str] | None = None  # the split folders (train, test) kept, if any


def find_source(image_dir: str, test_fraction: float = DEFAULT_TEST_FRACTION,
                seed: int = 0) -> Source:
    """The classes and images of ``image_dir``, split into train and test.

    With split folders (``split_folders``) their split is kept; otherwise each
    class folder is split at random (``seed``), ``test_fraction`` of its images
    (rounded) going to the test set.

    Raises:
      Cifar10Error: ``image_dir`` is not a folder, its layout is ambiguous, it has
        no class folders or more than 256, a class holds no images, or the test
        folder holds none.
    """
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if not os.path.isdir(image_dir):
        state = "is a file, not a folder" if os.path.exists(image_dir) else "does not exist"
        raise Cifar10Error(f"{image_dir} {state}: point --image_dir at {_ONE_FOLDER_PER_CLASS}")
    top = _subfolders(image_dir)
    splits = split_folders(image_dir, top)
    left_out: list[str] = []
    source = (_kept_split(image_dir, *splits, left_out) if splits
              else _random_split(image_dir, top, test_fraction, seed, left_out))
    check_counts(len(source.train), len(source.test), image_dir,
                 "" if splits else f"--test_fraction={test_fraction:g}")
    return dataclasses.replace(source, skipped=_metadata_folders(image_dir, splits or ()),
                               left_out=tuple(left_out),
                               unfiled=_unfiled(image_dir, splits or ()))


def _unfiled(image_dir: str, splits: Sequence[str]) -> tuple[str, ...]:
    """The image files in ``image_dir`` itself and in its ``splits`` folders, beside the
    class folders: in no class, so not taken (hidden ones aside)."""
    return images_in([image_dir, *(os.path.join(image_dir, name) for name in splits)])


def _metadata_folders(image_dir: str, splits: Sequence[str]) -> tuple[str, ...]:
    """The METADATA_FOLDER folders in ``image_dir`` and its ``splits`` folders, which
    are passed over as hidden folders are (``_subfolders``)."""
    folders = [image_dir, *(os.path.join(image_dir, name) for name in splits)]
    return tuple(os.path.join(folder, METADATA_FOLDER) for folder in folders
                 if os.path.isdir(os.path.join(folder, METADATA_FOLDER)))


def check_counts(train: int, test: int, image_dir: str, split: str = "") -> None:
    """Raises Cifar10Error unless there are images enough for a data folder the trainer
    and the evaluator take: one training image per data_batch file, and a test image."""
    if not test:
        how = (f"{split} gives no image of any class to the test set" if split
               else "the test folder holds no image that could be read")
        raise Cifar10Error(f"no test images in {image_dir}: {how}; the evaluator needs some: "
                           f"add images, or raise --test_fraction")
    if train < len(ff.TRAIN_FILES):
        raise Cifar10Error(f"{train} training image(s) in {image_dir}: a data folder needs at "
                           f"least {len(ff.TRAIN_FILES)}, one per data_batch file; add images")


def split_folders(image_dir: str, names: Sequence[str]) -> tuple[str, str] | None:
    """(training folder, test folder) of a folder whose subfolders are ``names``;
    None when they are class folders alone (none is named as a split folder).

    ``train`` and the test folders (``TEST_FOLDERS``) are recognised in any case.

    Raises:
      Cifar10Error: an ambiguous layout: two test folders (``test/`` and ``val/``),
        ``train/`` beside class folders, ``train/`` without a test folder, or a
        test folder without ``train/``.
    """
    train = [name for name in names if name.lower() == TRAIN_FOLDER]
    tests = [name for name in names if name.lower() in TEST_FOLDERS]
    others = [name for name in names if name not in train + tests]
    if not train and not tests:
        return None
    if len(tests) > 1:
        raise Cifar10Error(
            f"{image_dir} has {'both ' if len(tests) == 2 else ''}{_slashed(tests)}: which "
            f"one is the test set is unclear; keep one and move the others out of {image_dir}")
    if not train:
        raise Cifar10Error(
            f"{image_dir} has {tests[0]}/ but no train/ beside it: put the training images "
            f"in {os.path.join(image_dir, 'train', '<class>')}/, or rename {tests[0]}/ if it "
            f"is a class")
    if others:
        raise Cifar10Error(
            f"{image_dir} has {train[0]}/ beside other folders ({listed(others)}): it can hold "
            f"split folders or class folders, not both; move one or the other out of it")
    if not tests:
        raise Cifar10Error(
            f"{image_dir} has {train[0]}/ but no {_slashed(TEST_FOLDERS, 'or')} beside it: "
            f"add the test images as {os.path.join(image_dir, 'test', '<class>')}/, or point "
            f"--image_dir at {os.path.join(image_dir, train[0])} to split its classes by "
            f"--test_fraction")
    return train[0], tests[0]


def _slashed(names: Sequence[str], last: str = "and") -> str:
    """'test/ and val/'; 'test/, val/, valid/ or validation/'."""
    names = [f"{name}/" for name in names]
    return f"{', '.join(names[:-1])} {last} {names[-1]}"


def _kept_split(image_dir: str, train_name: str, test_name: str,
                left_out: list[str]) -> Source:
    train_dir, test_dir = (os.path.join(image_dir, name) for name in (train_name, test_name))
    names = _subfolders(train_dir)
    _check_classes(train_dir, names)
    unknown = sorted(set(_subfolders(test_dir)) - set(names))
    if unknown:
        advice = _unknown_classes_advice(unknown, names, image_dir, train_name, test_name)
        raise Cifar10Error(f"{test_dir} has classes that {train_dir} lacks: "
                           f"{listed(unknown)}; {advice}")
    train = _labelled(train_dir, names, required=True, left_out=left_out)
    test = _labelled(test_dir, names, required=False, left_out=left_out)
    if not test:
        raise Cifar10Error(
            f"{test_dir} holds no images in class folders: put the test images in "
            f"{os.path.join(test_dir, '<class>')}/ as in {train_dir}, or point --image_dir at "
            f"{train_dir} to split its classes by --test_fraction")
    return Source(tuple(names), tuple(train), tuple(test),
                  f"Found split folders {train_name}/ and {test_name}/: {test_name}/ is the "
                  f"test set.", split=(train_name, test_name))


def _unknown_classes_advice(unknown: Sequence[str], names: Sequence[str], image_dir: str,
                            train_name: str, test_name: str) -> str:
    """What to do with the classes ``unknown`` of the test folder ``test_name`` that the
    training folder ``train_name`` (its classes ``names``) lacks: rename those that
    differ from one of ``names`` only in case (``Cat`` beside ``cat`` would be a class
    of its own); give the others training images, or move them out."""
    train_dir, test_dir = (os.path.join(image_dir, name) for name in (train_name, test_name))
    give_or_move = (f"add their training images to {train_dir}, or move them out of "
                    f"{test_dir}")
    same: dict[str, str] = {}  # a class's name in no case: the class
    for name in names:
        same.setdefault(name.casefold(), name)
    pairs = [(name, same[name.casefold()]) for name in unknown if name.casefold() in same]
    if not pairs:
        return give_or_move
    (test_class, train_class), more = pairs[0], [name for name, _ in pairs[1:]]
    advice = (f"{test_class} (in {test_name}/) differs from {train_class} (in {train_name}/) "
              f"only in case{_as_do(more)}: rename one"
              f"{' of each pair' if more else ''} so that the names match")
    if len(pairs) < len(unknown):
        advice += f"; for the others, {give_or_move}"
    return advice


def _as_do(names: Sequence[str]) -> str:
    """', as does Dog'; ', as do Dog, Bird'; '' for no names."""
    if not names:
        return ""
    return f", as {'does' if len(names) == 1 else 'do'} {listed(names)}"


def _random_split(image_dir: str, names: Sequence[str], test_fraction: float,
                  seed: int, left_out: list[str]) -> Source:
    _check_classes(image_dir, names)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label, name in enumerate(names):
        images = _images(os.path.join(image_dir, name), required=True, left_out=left_out)
        order = rng.permutation(len(images))
        cut = int(round(len(images) * test_fraction))
        test += [(images[i], label) for i in order[:cut]]
        train += [(images[i], label) for i in order[cut:]]
    split = (f"{100 * test_fraction:.3g}% of each class's images, chosen at random, go to "
             f"the test set (--test_fraction, --seed)")
    return Source(tuple(names), tuple(train), tuple(test),
                  f"Found class folders and no split folders: {split}.")


def _storable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return name.strip() == name and "\n" not in name and "\r" not in name


def _subfolders(folder: str) -> list[str]:
    """The names of the folders in ``folder`` that can be classes or splits: not hidden
    ones, not METADATA_FOLDER."""
    try:
        return sorted(entry.name for entry in os.scandir(folder)
                      if entry.is_dir() and not entry.name.startswith(".")
                      and entry.name != METADATA_FOLDER)
    except OSError as e:
        raise io_error("cannot read the folder", folder, e) from e


def _check_classes(folder: str, names: Sequence[str]) -> None:
    unstorable = [name for name in names if not _storable(name)]
    if unstorable:
        raise Cifar10Error(
            f"class folder {os.fsencode(unstorable[0])!r} in {folder}: its name holds a line "
            f"break, a space at an end or bytes that are not UTF-8, which the class names file "
            f"({ff.META_FILE}, one UTF-8 name per line) cannot hold; rename the folder")
    data = [name for name in names
            if name == ff.BATCHES_DIRNAME or name.startswith("cifar-100-")]
    if data:
        raise Cifar10Error(f"{folder} holds CIFAR-format data ({data[0]}/), not image folders: "
                           f"it needs no converting; pass --data_dir={folder} to cifar10-train")
    if not names:
        raise Cifar10Error(f"no class folders in {folder}: put the images of each class in a "
                           f"folder of its own ({folder}/cat/*.jpg, {folder}/dog/*.jpg, ...)")
    if len(names) == 1:
        raise Cifar10Error(f"{folder} has one class folder ({names[0]}): a classifier needs "
                           f"at least 2 classes, each in a folder of its own")
    if len(names) > ff.MAX_CLASSES:
        raise Cifar10Error(f"{folder} has {len(names)} class folders; a CIFAR record's one "
                           f"label byte holds at most {ff.MAX_CLASSES} classes: merge classes, "
                           f"or move {len(names) - ff.MAX_CLASSES} of the folders out of "
                           f"{folder}")


def _images(folder: str, required: bool, left_out: list[str] | None = None) -> list[str]:
    try:
        return find_images([folder], left_out)
    except Cifar10Error:
        if required:
            raise Cifar10Error(f"the class folder {folder} holds no images "
                               f"({', '.join(IMAGE_EXTENSIONS)}): add the class's images to "
                               f"it, or move it out of {os.path.dirname(folder)}") from None
        return []


def _labelled(split_dir: str, names: Sequence[str], required: bool,
              left_out: list[str] | None = None) -> list[tuple[str, int]]:
    pairs = []
    for label, name in enumerate(names):
        folder = os.path.join(split_dir, name)
        if os.path.isdir(folder) or required:
            pairs += [(path, label) for path in _images(folder, required, left_out)]
    return pairs
