"""Image files on disk: those a command line names, and cifar10-prepare's folder of
class folders (``<class>/``, split at random, or ``train/<class>/`` beside ``test/``
etc., split kept; classes in sorted name order).  No TensorFlow."""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import numpy as np

from cifar10.core.errors import Cifar10Error, io_error, listed, shown_path
from cifar10.data import fileformat as ff

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".jfif", ".jpe")
# Images of formats not read, which a search names as left out.
OTHER_IMAGE_EXTENSIONS = (".webp", ".tif", ".tiff", ".heic", ".heif", ".avif", ".jxl",
                          ".jp2", ".ico", ".psd", ".svg", ".dng", ".cr2", ".nef", ".arw")
# Folders of no images of a class: macOS's zip metadata, a Synology NAS's thumbnails.
SKIPPED_FOLDERS = ("__MACOSX", "@eaDir")
STDIN = "-"  # an image read from standard input, named on a command line
PROGRAM_RECORD = "flags.txt"  # each program folder's record (runs.records.FLAGS_FILE)
DEFAULT_TEST_FRACTION = 1 / 6  # 10,000 of CIFAR-10's 60,000 images
TRAIN_FOLDER = "train"
TEST_FOLDERS = ("test", "val", "valid", "validation")


def _is_image(name: str, extensions=IMAGE_EXTENSIONS) -> bool:
    return not name.startswith(".") and name.lower().endswith(extensions)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # (through a link too)
    except OSError:
        return False


def _identity(path: str) -> object:
    """The real file of ``path``: (device, inode); a broken link's, the path it resolves to."""
    try:
        found = os.stat(path)
        return found.st_dev, found.st_ino
    except OSError:
        return os.path.realpath(path)


def find_images(paths: Sequence[str], left_out: list[str] | None = None) -> list[str]:
    """The image files named by ``paths``: files as given, folders searched (sorted, links
    followed, hidden and ``SKIPPED_FOLDERS`` passed over), each real file once; other
    formats' images go to ``left_out``.  Cifar10Error for a missing path or no image."""
    found: list[str] = []
    taken: set[object] = set()
    for path in paths:
        if path == STDIN:
            found.append(path)
            continue
        others: list[str] = []
        if os.path.isdir(path):
            images = _images_under(path, others)
            if not images:
                raise Cifar10Error(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in the folder "
                                   f"{path} or its subfolders")
        elif os.path.exists(path):
            images = [path]
        elif os.path.islink(path):
            raise Cifar10Error(f"{path} is a link to {os.readlink(path)}, which does not exist")
        else:
            raise Cifar10Error(f"no such file or folder: {path}")
        found += _first_time(images, taken)
        if left_out is not None:
            left_out += _first_time(others, taken)
    return found


def _first_time(paths: Sequence[str], taken: set[object]) -> list[str]:
    """Those of ``paths`` whose real file is not in ``taken`` yet; ``taken`` gets theirs."""
    first = []
    for path in paths:
        identity = _identity(path)
        if identity not in taken:
            taken.add(identity)
            first.append(path)
    return first


def _images_under(folder: str, left_out: list[str]) -> list[str]:
    """The image files under ``folder``, sorted; other formats' go to ``left_out``."""
    seen: set[object] = set()
    files: list[str] = []
    others: list[str] = []

    def search(path: str) -> None:
        identity = _identity(path)
        try:
            entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        except OSError:
            return  # an unreadable subfolder: passed over, as os.walk does
        if identity in seen:  # (a cycle of links ends)
            return
        seen.add(identity)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if _is_dir(entry):
                if entry.name not in SKIPPED_FOLDERS:
                    search(entry.path)
            elif _is_image(entry.name):
                files.append(entry.path)
            elif _is_image(entry.name, OTHER_IMAGE_EXTENSIONS):
                others.append(entry.path)

    search(folder)
    left_out.extend(sorted(others))
    return sorted(files)


def left_out_warning(left_out: Sequence[str]) -> str:
    """The warning for the images of formats not read (``left_out``); '' for none."""
    if not left_out:
        return ""
    many = len(left_out) > 1
    them = "them" if many else "it"
    return (f"left out {len(left_out)} "
            f"{'files of formats' if many else 'file of a format'} it does not read "
            f"({listed([shown_path(p) for p in left_out], 4)}): it reads PNG, JPEG, GIF and "
            f"BMP; convert {them} to one of those to take {them}")


def unfiled_warning(unfiled: Sequence[str]) -> str:
    """The warning for the images ``unfiled`` in no class folder; '' for none."""
    if not unfiled:
        return ""
    return (f"left out {len(unfiled)} image{'s' if len(unfiled) > 1 else ''} in no class "
            f"folder ({listed([shown_path(p) for p in unfiled], 4)}): a class's images go in "
            f"its folder, {os.path.join(shown_path(os.path.dirname(unfiled[0])), '<class>')}/")


def images_in(folders: Sequence[str]) -> tuple[str, ...]:
    """The image files (read or not) in ``folders`` themselves, each folder's sorted."""
    found = []
    for folder in folders:
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        found += [entry.path for entry in entries if not _is_dir(entry)
                  and _is_image(entry.name, IMAGE_EXTENSIONS + OTHER_IMAGE_EXTENSIONS)]
    return tuple(found)


def holds_images(folder: str, depth: int = 2, looked_at: int = 64) -> bool:
    """Whether ``folder`` holds image files, in it or ``depth`` levels down (in at most
    ``looked_at`` subfolders of each); not a program's folder (``flags.txt``)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    if any(entry.name == PROGRAM_RECORD for entry in entries):
        return False
    if any(_is_image(entry.name) and not _is_dir(entry) for entry in entries):
        return True
    subfolders = sorted(entry.path for entry in entries
                        if not entry.name.startswith(".") and _is_dir(entry))
    return depth > 0 and any(holds_images(path, depth - 1, looked_at)
                             for path in subfolders[:looked_at])


def image_folders(path: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` of '.' and the subfolders of ``path`` holding images (or one down)."""
    found = ["."] if images_in([path]) else []
    for sub in _subfolders(path, quiet=True):
        if len(found) == limit:
            break
        here = os.path.join(path, sub)
        if images_in([here, *(os.path.join(here, s) for s in _subfolders(here, True)[:20])]):
            found.append(sub + "/")
    return found


def _subfolders(folder: str, quiet: bool = False) -> list[str]:
    """The names of the folders in ``folder`` that can be classes or splits."""
    try:
        return sorted(entry.name for entry in os.scandir(folder)
                      if _is_dir(entry) and not entry.name.startswith(".")
                      and entry.name not in SKIPPED_FOLDERS)
    except OSError as e:
        if quiet:
            return []
        raise io_error("cannot read the folder", folder, e) from e


@dataclasses.dataclass(frozen=True)
class Source:
    """The images of a folder: class names, and (path, label) pairs per split."""

    class_names: tuple[str, ...]
    train: tuple[tuple[str, int], ...]
    test: tuple[tuple[str, int], ...]
    layout: str = ""  # one line: the layout found and where the test set comes from
    left_out: tuple[str, ...] = ()  # the class folders' images of formats not read
    unfiled: tuple[str, ...] = ()  # images in no class folder (beside the class folders)
    split: tuple[str, str] | None = None  # the split folders (train, test) kept, if any


def find_source(image_dir: str, test_fraction: float = DEFAULT_TEST_FRACTION,
                seed: int = 0) -> Source:
    """The classes and images of ``image_dir``, split folders kept, else ``test_fraction``
    of each class's images (by ``seed``) to the test set.  Cifar10Error for a layout that
    cannot make a data set."""
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if not os.path.isdir(image_dir):
        state = "is a file, not a folder" if os.path.exists(image_dir) else "does not exist"
        raise Cifar10Error(f"{image_dir} {state}: point --image_dir at the folder that holds "
                           f"one folder of images per class")
    top = _subfolders(image_dir)
    splits = split_folders(image_dir, top)
    left_out: list[str] = []
    if splits:
        source = _kept_split(image_dir, *splits, left_out)
        how = "the test folder holds no image that could be read"
    else:
        source = _random_split(image_dir, top, test_fraction, seed, left_out)
        how = f"--test_fraction={test_fraction:g} gives no image of any class to the test set"
    if not source.test:
        raise Cifar10Error(f"no test images in {image_dir}: {how}; the evaluator needs some: "
                           f"add images, or raise --test_fraction")
    if len(source.train) < len(ff.TRAIN_FILES):
        raise Cifar10Error(f"{len(source.train)} training image(s) in {image_dir}: a data "
                           f"folder needs at least {len(ff.TRAIN_FILES)}, one per data_batch "
                           f"file; add images")
    unfiled = images_in([image_dir, *(os.path.join(image_dir, name) for name in splits or ())])
    return dataclasses.replace(source, left_out=tuple(left_out), unfiled=unfiled)


def split_folders(image_dir: str, names: Sequence[str]) -> tuple[str, str] | None:
    """(training folder, test folder) among ``names`` (any case); None for class folders
    alone.  Cifar10Error for an ambiguous layout."""
    train = [name for name in names if name.lower() == TRAIN_FOLDER]
    tests = [name for name in names if name.lower() in TEST_FOLDERS]
    others = [name for name in names if name not in train + tests]
    if not train and not tests:
        return None
    if len(tests) > 1 or not train or not tests or others:
        raise Cifar10Error(
            f"{image_dir} mixes split folders and class folders "
            f"({listed([f'{name}/' for name in names])}): it can hold either class folders, "
            f"or train/ beside one of {', '.join(f'{n}/' for n in TEST_FOLDERS)} (each "
            f"holding class folders); move the others out of it")
    return train[0], tests[0]


def _kept_split(image_dir: str, train_name: str, test_name: str,
                left_out: list[str]) -> Source:
    train_dir, test_dir = (os.path.join(image_dir, name) for name in (train_name, test_name))
    names = _subfolders(train_dir)
    _check_classes(train_dir, names)
    unknown = sorted(set(_subfolders(test_dir)) - set(names))
    if unknown:
        raise Cifar10Error(f"{test_dir} has classes that {train_dir} lacks: {listed(unknown)}; "
                           f"add their training images to {train_dir} (with the same names), "
                           f"or move them out of {test_dir}")
    train = _labelled(train_dir, names, True, left_out)
    test = _labelled(test_dir, names, False, left_out)
    return Source(tuple(names), tuple(train), tuple(test),
                  f"Found split folders {train_name}/ and {test_name}/: {test_name}/ is the "
                  f"test set.", split=(train_name, test_name))


def _random_split(image_dir: str, names: Sequence[str], test_fraction: float,
                  seed: int, left_out: list[str]) -> Source:
    _check_classes(image_dir, names)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label, name in enumerate(names):
        images = _images(os.path.join(image_dir, name), True, left_out)
        order = rng.permutation(len(images))
        cut = int(round(len(images) * test_fraction))
        test += [(images[i], label) for i in order[:cut]]
        train += [(images[i], label) for i in order[cut:]]
    return Source(tuple(names), tuple(train), tuple(test),
                  f"Found class folders and no split folders: {100 * test_fraction:.3g}% of "
                  f"each class's images, chosen at random, go to the test set "
                  f"(--test_fraction, --seed).")


def _check_classes(folder: str, names: Sequence[str]) -> None:
    for name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            name = ""
        if not name or name.strip() != name or "\n" in name or "\r" in name:
            raise Cifar10Error(f"a class folder in {folder} has a name that the class names "
                               f"file ({ff.META_FILE}, one UTF-8 name per line) cannot hold; "
                               f"rename the folder")
    data = [name for name in names if name == ff.BATCHES_DIRNAME or name.startswith("cifar-100-")]
    if data:
        raise Cifar10Error(f"{folder} holds CIFAR-format data ({data[0]}/), not image folders: "
                           f"it needs no converting; pass --data_dir={folder} to cifar10-train")
    if len(names) < 2:
        raise Cifar10Error(f"{folder} has {len(names) or 'no'} class folder"
                           f"{'' if names else 's'}: a classifier needs at least 2 classes, "
                           f"each in a folder of its own ({folder}/cat/*.jpg, "
                           f"{folder}/dog/*.jpg, ...)")
    if len(names) > ff.MAX_CLASSES:
        raise Cifar10Error(f"{folder} has {len(names)} class folders; a CIFAR record's one "
                           f"label byte holds at most {ff.MAX_CLASSES} classes")


def _images(folder: str, required: bool, left_out: list[str]) -> list[str]:
    try:
        return find_images([folder], left_out)
    except Cifar10Error:
        if required:
            raise Cifar10Error(f"the class folder {folder} holds no images "
                               f"({', '.join(IMAGE_EXTENSIONS)}): add the class's images to "
                               f"it, or move it out of {os.path.dirname(folder)}") from None
        return []


def _labelled(split_dir: str, names: Sequence[str], required: bool,
              left_out: list[str]) -> list[tuple[str, int]]:
    return [(path, label) for label, name in enumerate(names)
            if os.path.isdir(os.path.join(split_dir, name)) or required
            for path in _images(os.path.join(split_dir, name), required, left_out)]
