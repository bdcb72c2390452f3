"""A data folder (``cifar-10-batches-bin``: ``data_batch_1..5.bin``, ``test_batch.bin``,
``batches.meta.txt`` for other classes than CIFAR-10's): its files, whether they are
sound, and what is wrong with a --data_dir that is none.  No TensorFlow."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from cifar10.core.errors import DataError
from cifar10.data import fileformat as ff
from cifar10.data import imagefiles
from cifar10.data import synthetic

_FIX = "list one class name per line, in label order"


def batches_dir_of(data_dir: str) -> str:
    """The ``cifar-10-batches-bin`` folder under ``data_dir``."""
    return os.path.join(data_dir, ff.BATCHES_DIRNAME)


def split_files(batches_dir: str, split: str) -> list[str]:
    """Paths of the ``.bin`` files of ``split`` ('train', 'train_eval' or 'test')."""
    if split not in ff.SPLIT_FILES:
        raise ValueError(f"split must be one of {sorted(ff.SPLIT_FILES)}, got {split!r}")
    return [os.path.join(batches_dir, name) for name in ff.SPLIT_FILES[split]]


def class_names(batches_dir: str) -> tuple[str, ...]:
    """The class names of a data folder in label order (CIFAR-10's where it has no
    ``batches.meta.txt``); DataError where that file is unsound or lists one name."""
    path = os.path.join(batches_dir, ff.META_FILE)
    names, problem, fix = class_names_in(path)
    if names is not None and len(names) == 1:
        problem, fix = (f"lists one class name ({names[0]}), and a classifier needs at least "
                        f"2 classes"), f"{_FIX}, a name for each label in the data files"
    if problem:
        raise DataError(f"{path} {problem}: {fix}" if fix else
                        f"{path} {problem}; {_how_to_redo(batches_dir)}")
    return names or ff.CLASS_NAMES


def class_names_in(path: str) -> tuple[tuple[str, ...] | None, str, str]:
    """(the names in the class names file ``path`` or None, what is wrong or '', the fix
    or '')."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None, "", ""
    except IsADirectoryError:
        return None, "is a folder, not a class names file", ""
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})", ""
    try:
        names = tuple(line.strip() for line in raw.decode("utf-8").splitlines() if line.strip())
    except UnicodeDecodeError as e:
        where = f"byte 0x{raw[e.start]:02x} at offset {e.start}"
        return None, f"is not UTF-8 text ({where})", f"{_FIX}, in UTF-8"
    if not names:
        return None, "lists no class names", _FIX
    if len(names) > ff.MAX_CLASSES:
        return None, (f"lists {len(names)} class names and a record's one label byte holds "
                      f"{ff.MAX_CLASSES}"), f"{_FIX}, at most {ff.MAX_CLASSES}"
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        return None, f"lists {', '.join(twice)} more than once", f"{_FIX}, each once"
    return names, "", ""


def validate_files(paths: Sequence[str], num_classes: int = ff.NUM_CLASSES) -> int:
    """The records in ``paths``; DataError for a missing file, a partial record or a
    label of ``num_classes`` or more."""
    total = 0
    for path in paths:
        if not os.path.isfile(path):
            _refuse(path, f"missing data file {path}: expected a CIFAR-10-format binary file "
                          f"of {ff.RECORD_BYTES:,}-byte records")
        size = os.path.getsize(path)
        if size == 0 or size % ff.RECORD_BYTES:
            _refuse(path, f"truncated or corrupt data file {path}: {size:,} bytes is not a "
                          f"whole number of {ff.RECORD_BYTES:,}-byte records")
        labels = np.fromfile(path, dtype=np.uint8).reshape(-1, ff.RECORD_BYTES)[:, 0]
        bad = np.flatnonzero(labels >= num_classes)
        if bad.size:
            named = (f" ({ff.META_FILE} names {num_classes} classes)"
                     if num_classes < ff.NUM_CLASSES else "")
            _refuse(path, f"corrupt data file {path}: record {bad[0]} has label "
                          f"{labels[bad[0]]}, expected 0-{num_classes - 1}{named}")
        total += labels.shape[0]
    return total


def _refuse(path: str, problem: str) -> None:
    raise DataError(f"{problem}; {_how_to_redo(os.path.dirname(path))}")


def _how_to_redo(batches_dir: str) -> str:
    if os.path.basename(batches_dir) in ff.CIFAR100_BATCHES_DIRS.values():
        return (f"delete {batches_dir} so that it is made again from the extracted "
                f"CIFAR-100 data")
    if synthetic.is_synthetic(batches_dir):
        return f"delete {batches_dir} so that --synthetic_data generates it again"
    names, problem, _ = class_names_in(os.path.join(batches_dir, ff.META_FILE))
    if problem or names not in (None, ff.CLASS_NAMES):  # cifar10-prepare's
        return f"run cifar10-prepare again to make {batches_dir} from your images"
    tarball = os.path.join(os.path.dirname(os.path.normpath(batches_dir)), ff.TARBALL_NAME)
    if os.path.isfile(tarball):
        return f"delete {batches_dir} so that it is extracted again from {tarball}"
    return f"delete {batches_dir} so that it is downloaded and extracted again"


def find_batches_dir(data_dir: str, folder: str = ff.BATCHES_DIRNAME,
                     itself: bool = True) -> str | None:
    """``data_dir/folder`` if it is a directory, else (with ``itself``) ``data_dir`` if it
    is a data folder, else None."""
    batches_dir = os.path.join(data_dir, folder)
    if os.path.isdir(batches_dir):
        return batches_dir
    if itself and holds_records(data_dir):
        return data_dir
    return None


def data_files_in(path: str) -> list[str]:
    return sorted(name for name in ff.DATA_FILES if os.path.isfile(os.path.join(path, name)))


def holds_records(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name))
               for name in (*ff.TRAIN_FILES, *ff.TEST_FILES))


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")


def refuse_two_data_folders(data_dir: str, followed: str = "") -> None:
    """DataError where ``data_dir`` is a data folder that holds another one."""
    nested = os.path.join(data_dir, ff.BATCHES_DIRNAME)
    if not (holds_records(data_dir) and os.path.isdir(nested) and holds_records(nested)) \
            or os.path.realpath(nested) == os.path.realpath(data_dir):
        return
    origin = f" ({followed})" if followed else ""
    raise DataError(
        f"--data_dir={data_dir}{origin} is a data folder (it holds "
        f"{_shown(data_files_in(data_dir))}) and holds another one, {nested}: which one is "
        f"meant is unclear; move {nested} out of it, then pass the folder meant as --data_dir")


_PYTHON_VERSIONS = (("data_batch_1", "batches.meta"), ("train", "test", "meta"))  # pickled


def refuse_non_data(data_dir: str, followed: str = "") -> None:
    """DataError where ``data_dir`` is no place to download to: a file, a data set's
    Python version, a folder of images."""
    origin = f" ({followed})" if followed else ""
    parent = os.path.dirname(os.path.normpath(data_dir)) or "."
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        if os.path.basename(data_dir) in (ff.CIFAR10.tarball, ff.CIFAR100.tarball):
            raise DataError(f"--data_dir={data_dir}{origin} is the tarball, not a folder: pass "
                            f"the folder that holds it, --data_dir={parent}, where it is "
                            f"extracted")
        raise DataError(f"--data_dir={data_dir}{origin} is a file, not a folder: pass the "
                        f"folder that holds {ff.BATCHES_DIRNAME}/")
    for names in _PYTHON_VERSIONS:
        if all(os.path.isfile(os.path.join(data_dir, name)) for name in names):
            raise DataError(
                f"--data_dir={data_dir}{origin} holds a data set's Python version "
                f"({', '.join(names)}: pickled batches), not the binary version read here: "
                f"pass another folder to download the binary version into, such as "
                f"--data_dir={parent} (its data folder goes beside this one)")
    images = imagefiles.image_folders(data_dir)
    if images:
        folders = [name for name in images if name != "."]
        what = f"image folders ({', '.join(folders)})" if folders else "image files"
        raise DataError(
            f"--data_dir={data_dir}{origin} holds {what}, not CIFAR-format data: put each "
            f"class's images in a folder of its own, convert them with cifar10-prepare "
            f"--image_dir={data_dir} --data_dir=<a new folder>, then pass that folder as "
            f"--data_dir")


def missing_data_dir(data_dir: str, archive: ff.Archive, followed: str,
                     error: Exception) -> str:
    origin = f", as the run it scores recorded ({followed})" if followed else ""
    return (f"no {archive.title} data: --data_dir={data_dir}{origin} does not exist, and "
            f"downloading it there failed: {str(error).rstrip('.')}. Pass --data_dir=<the "
            f"folder that holds {archive.folder}/> (or that folder itself), or "
            f"--synthetic_data to try the programs on generated data")
