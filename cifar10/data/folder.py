"""A data folder on disk: where its files are, what they hold, and what is wrong
with one that is damaged (``wrong_data_dir`` says what is wrong with a --data_dir
that is no data folder).  No TensorFlow: the programs check their data with it
before TensorFlow loads, so that a mistake is answered at once.

A data folder is CIFAR-10's ``cifar-10-batches-bin`` layout: ``data_batch_1.bin``
to ``data_batch_5.bin`` (training), ``test_batch.bin`` and, for data other than
CIFAR-10's, ``batches.meta.txt`` (the class names).  ``--data_dir`` names the
folder that holds it; ``find_batches_dir`` also takes the data folder itself.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.core.errors import DataError


def batches_dir_of(data_dir: str) -> str:
    """The ``cifar-10-batches-bin`` folder under ``data_dir``."""
    return os.path.join(data_dir, ff.BATCHES_DIRNAME)


def split_files(batches_dir: str, split: str) -> list[str]:
    """Paths of the ``.bin`` files of ``split`` ('train', 'train_eval' or 'test')."""
    if split not in ff.SPLIT_FILES:
        raise ValueError(f"split must be one of {sorted(ff.SPLIT_FILES)}, got {split!r}")
    return [os.path.join(batches_dir, name) for name in ff.SPLIT_FILES[split]]


_ONE_CLASS = "lists one class name ({}), and a classifier needs at least 2 classes"
_ONE_CLASS_FIX = "list a name for each label in the data files, one per line, in label order"


def class_names(batches_dir: str) -> tuple[str, ...]:
    """The class names of a data folder in label order, from its ``batches.meta.txt``.

    CIFAR-10's names when the folder has no such file.

    Raises:
      DataError: the file cannot be read (a folder in its place, not UTF-8), or lists
        no names, one name (a classifier needs two classes), more than
        ``MAX_CLASSES`` or one name twice: one line naming it and the fix.
    """
    path = os.path.join(batches_dir, ff.META_FILE)
    names, problem, fix = class_names_in(path)
    if names is not None and len(names) == 1:
        # cifar10-prepare refuses one class: whoever wrote this file, the fix is its text.
        problem, fix = _ONE_CLASS.format(names[0]), _ONE_CLASS_FIX
    if problem:
        raise DataError(f"{path} {problem}: {fix}" if fix else
                        f"{path} {problem}; {_how_to_redo(batches_dir)}")
    return names or ff.CLASS_NAMES


def read_class_names(path: str, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The names in a class names file (one per line, in label order; blank lines ignored).

    Returns ``default`` when the file does not exist (raises DataError if None).
    """
    names, problem, fix = class_names_in(path)
    if problem:
        raise DataError(f"{path} {problem}" + (f": {fix}" if fix else ""))
    if names is None:
        if default is None:
            raise DataError(f"missing class names file {path}")
        return default
    return names


_FIX = "list one class name per line, in label order"


def class_names_in(path: str) -> tuple[tuple[str, ...] | None, str, str]:
    """(the names in the class names file ``path``, or None; what is wrong with it, or '';
    how to fix its text, or '' where the file itself is the problem).

    A missing file is (None, '', ''): no names, and nothing wrong.
    """
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
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", \
            f"{_FIX}, in UTF-8"
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
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
    """Checks that every file exists and holds whole records with labels below ``num_classes``.

    Args:
      paths: the ``.bin`` files to check.
      num_classes: how many classes the data set has (``len(class_names(...))``).

    Returns:
      The total number of records in ``paths``.

    Raises:
      DataError: naming the first bad file, its size and what was expected.
    """
    total = 0
    for path in paths:
        if not os.path.isfile(path):
            _refuse(path, f"missing data file {path}: expected a CIFAR-10-format binary file "
                          f"of {ff.RECORD_BYTES:,}-byte records")
        size = os.path.getsize(path)
        if size == 0:
            _refuse(path, f"empty data file {path} (0 bytes; {_expected_size(path)})")
        if size % ff.RECORD_BYTES:
            _refuse(path, f"truncated or corrupt data file {path}: {size:,} bytes is not a "
                          f"whole number of {ff.RECORD_BYTES:,}-byte records "
                          f"({_expected_size(path)})")
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
    """Raises DataError: ``problem``, and how to get a sound data folder."""
    raise DataError(f"{problem}; {_how_to_redo(os.path.dirname(path))}")


def _how_to_redo(batches_dir: str) -> str:
    """Advice for a damaged data folder: download CIFAR-10 again, or make it again."""
    kind = data_kind(batches_dir)
    if kind == "cifar100":
        return (f"delete {batches_dir} so that it is made again from the extracted "
                f"CIFAR-100 data")
    if kind == "own":
        return f"run cifar10-prepare again to make {batches_dir} from your images"
    if synthetic.is_synthetic(batches_dir):
        return f"delete {batches_dir} so that --synthetic_data generates it again"
    tarball = os.path.join(os.path.dirname(os.path.normpath(batches_dir)), ff.TARBALL_NAME)
    if os.path.isfile(tarball):  # (checked against its MD5 before it is extracted)
        return f"delete {batches_dir} so that it is extracted again from {tarball}"
    return f"delete {batches_dir} so that it is downloaded and extracted again"


def data_kind(batches_dir: str) -> str:
    """Whose data a data folder holds: 'cifar10' (CIFAR-10's, or generated with its
    names), 'cifar100' (made from CIFAR-100) or 'own' (made by cifar10-prepare: other
    class names; with a damaged names file, files not of CIFAR-10's size)."""
    if os.path.basename(batches_dir) in ff.CIFAR100_BATCHES_DIRS.values():
        return "cifar100"
    names, problem, _ = class_names_in(os.path.join(batches_dir, ff.META_FILE))
    if problem:
        real = ff.RECORDS_PER_REAL_FILE * ff.RECORD_BYTES
        return "cifar10" if real in _record_file_sizes(batches_dir).values() else "own"
    return "own" if names and names != ff.CLASS_NAMES else "cifar10"


def _expected_size(path: str) -> str:
    """What a data file of its folder's data should hold, for the error about one that
    is empty or cut short: CIFAR-10's size, or what the folder's other files hold."""
    batches_dir, name = os.path.split(path)
    kind = data_kind(batches_dir)
    if kind == "cifar10" and not synthetic.is_synthetic(batches_dir):
        return f"the real files are {ff.RECORDS_PER_REAL_FILE * ff.RECORD_BYTES:,} bytes"
    whose = {"cifar100": "data made from CIFAR-100", "own": "data made by cifar10-prepare",
             "cifar10": "generated data"}[kind]
    sizes = {n: size for n, size in _record_file_sizes(batches_dir).items() if n != name}
    split = ff.TRAIN_FILES if name in ff.TRAIN_FILES else ff.TEST_FILES
    counts = sorted(size // ff.RECORD_BYTES for n, size in sizes.items() if n in split) \
        or sorted(size // ff.RECORD_BYTES for size in sizes.values())
    if not counts:
        return f"{whose}, of whole {ff.RECORD_BYTES:,}-byte records"
    held = f"{counts[0]:,}" if counts[0] == counts[-1] else f"{counts[0]:,} to {counts[-1]:,}"
    return f"{whose}: its other files hold {held} records of {ff.RECORD_BYTES:,} bytes"


def _record_file_sizes(batches_dir: str) -> dict[str, int]:
    """{name: size} of the folder's data files that hold whole records."""
    sizes = {}
    for name in (*ff.TRAIN_FILES, *ff.TEST_FILES):
        try:
            size = os.path.getsize(os.path.join(batches_dir, name))
        except OSError:
            continue
        if size and size % ff.RECORD_BYTES == 0:
            sizes[name] = size
    return sizes


def find_batches_dir(data_dir: str, folder: str = ff.BATCHES_DIRNAME,
                     itself: bool = True) -> str | None:
    """``data_dir/folder`` if it is a directory; with ``itself``, ``data_dir`` when it is
    a data folder itself (it holds a data set's ``.bin`` files); else None."""
    batches_dir = os.path.join(data_dir, folder)
    if os.path.isdir(batches_dir):
        return batches_dir
    if itself and holds_records(data_dir):
        return data_dir
    return None


def data_files_in(path: str) -> list[str]:
    """The data files (``fileformat.DATA_FILES``) that ``path`` holds, sorted; none when
    it is not a folder."""
    return sorted(name for name in ff.DATA_FILES if os.path.isfile(os.path.join(path, name)))


def holds_records(path: str) -> bool:
    """Whether ``path`` holds a data set's ``.bin`` files (any of them)."""
    return any(os.path.isfile(os.path.join(path, name))
               for name in (*ff.TRAIN_FILES, *ff.TEST_FILES))
