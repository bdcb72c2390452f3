"""CIFAR-100 as the trainer reads it: its records with the chosen label.

CIFAR-100's binary files hold records of 3,074 bytes: the coarse label (one of 20
superclasses), the fine label (one of 100 classes), then the image as in
CIFAR-10.  ``batches_dir`` checks the extracted data, then writes, once per label
kind, a CIFAR-10-format folder beside it (or, where --data_dir is the extracted
folder itself, in it): the records with their one chosen label byte, the
training records in five files as CIFAR-10's, and that label's names as
``batches.meta.txt``.  Everything after it (validation, the pipelines, the model
with as many outputs as names, the evaluator) is the same for both data sets.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from cifar10.core import atomic
from cifar10.data import download
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.core.errors import DataError


def batches_dir_name(label: str) -> str:
    """The folder of CIFAR-10-format data made from CIFAR-100 with ``label``."""
    return ff.CIFAR100_BATCHES_DIRS[label]


def holds_source(path: str) -> bool:
    """Whether ``path`` is an extracted ``cifar-100-binary`` folder itself (it holds
    ``train.bin`` or ``test.bin``)."""
    return any(os.path.isfile(os.path.join(path, name)) for name in ff.CIFAR100_FILES.values())


def read_records(path: str, label: str) -> np.ndarray:
    """The records of a CIFAR-100 file as CIFAR-10 records ([n, 3,073] uint8), keeping
    the ``label`` ('fine' or 'coarse') byte.

    Raises:
      DataError: the file is missing, empty or not a whole number of records (what is
        wrong with it, without the fix).
    """
    record_bytes = ff.CIFAR100_LABEL_BYTES + ff.IMAGE_BYTES
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise DataError(f"cannot read {path} ({e.strerror or e})") from e
    if raw.size == 0 or raw.size % record_bytes:
        raise DataError(f"truncated or corrupt data file {path}: {raw.size:,} bytes is not a "
                        f"whole number of {record_bytes:,}-byte CIFAR-100 records")
    records = raw.reshape(-1, record_bytes)
    index = ff.CIFAR100_LABELS[label]
    return np.concatenate([records[:, index:index + 1], records[:, ff.CIFAR100_LABEL_BYTES:]],
                          axis=1)


def batches_dir(extracted: str, data_dir: str, label: str) -> str:
    """The CIFAR-10-format folder of ``label`` in ``data_dir``, written from
    ``extracted`` (the ``cifar-100-binary`` folder, which may be ``data_dir`` itself)
    when missing; returns its path.

    ``extracted`` is checked first (its class names, whole records, labels below the
    number of names), so that a damaged source is named as such, with the way to a
    sound one, and never becomes a damaged folder of its own.

    Raises:
      ValueError: ``label`` is not 'fine' or 'coarse'.
      DataError: a file of ``extracted`` is missing or damaged, or the folder cannot
        be written.
    """
    if label not in ff.CIFAR100_LABELS:
        raise ValueError(f"label must be one of {sorted(ff.CIFAR100_LABELS)}, got {label!r}")
    target = os.path.join(data_dir, batches_dir_name(label))
    if os.path.isdir(target):
        return target
    try:
        names, train, test = _checked_source(extracted, label)
    except DataError as e:
        raise DataError(f"{e}; {_renewal(extracted, data_dir)}") from e
    try:
        with atomic.new_folder(target) as scratch:
            for name, part in zip(ff.TRAIN_FILES, np.array_split(train, len(ff.TRAIN_FILES))):
                part.tofile(os.path.join(scratch, name))
            test.tofile(os.path.join(scratch, ff.TEST_FILES[0]))
            shutil.copyfile(names, os.path.join(scratch, ff.META_FILE))
    except OSError as e:
        if os.path.isdir(target):  # another process wrote it meanwhile
            return target
        raise DataError(f"cannot write {target} ({e.strerror or e}); choose a --data_dir "
                        f"you can write") from e
    return target


def _checked_source(extracted: str, label: str) -> tuple[str, np.ndarray, np.ndarray]:
    """(the class names file, the training records, the test records) of ``extracted``
    with ``label``.

    Raises:
      DataError: what is wrong with one of its files (without the fix).
    """
    names_file = os.path.join(extracted, ff.CIFAR100_NAMES_FILES[label])
    names, problem, _ = datafolder.class_names_in(names_file)
    if problem:
        raise DataError(f"{names_file} {problem}")
    if names is None:
        raise DataError(f"missing class names file {names_file}")
    train, test = (read_records(os.path.join(extracted, ff.CIFAR100_FILES[split]), label)
                   for split in ("train", "test"))
    if len(train) < len(ff.TRAIN_FILES):
        raise DataError(f"{extracted} holds {len(train)} training records, fewer than the "
                        f"{len(ff.TRAIN_FILES)} files they are split into")
    for split, records in (("train", train), ("test", test)):
        bad = np.flatnonzero(records[:, 0] >= len(names))
        if bad.size:
            raise DataError(
                f"corrupt data file {os.path.join(extracted, ff.CIFAR100_FILES[split])}: record "
                f"{bad[0]} has {label} label {records[bad[0], 0]}, expected 0-{len(names) - 1} "
                f"({ff.CIFAR100_NAMES_FILES[label]} names {len(names)} classes)")
    return names_file, train, test


def _renewal(extracted: str, data_dir: str) -> str:
    """How to get a sound ``extracted`` folder: extracted again from the published
    tarball beside it, else downloaded again; a folder given as --data_dir itself is
    the user's to replace."""
    if os.path.abspath(extracted) == os.path.abspath(data_dir):
        return (f"replace {extracted} with a sound copy (extract the published "
                f"{ff.CIFAR100.tarball} again)")
    tarball = os.path.join(data_dir, ff.CIFAR100.tarball)
    if not os.path.isfile(tarball):
        return (f"delete {extracted} so that {ff.CIFAR100.tarball} is downloaded and "
                f"extracted again")
    try:
        published = download.file_md5(tarball) == ff.CIFAR100.md5
    except OSError:
        published = False
    if published:
        return f"delete {extracted} so that it is extracted again from {tarball}"
    return (f"delete {extracted} and {tarball} (not the published tarball: its MD5 is not "
            f"{ff.CIFAR100.md5}), then run again without --data_md5, so that the published "
            f"tarball is downloaded")
