"""CIFAR-100 as the trainer reads it: ``batches_dir`` writes once per label (coarse or
fine) a CIFAR-10-format folder from the extracted data; all after that is the same."""

from __future__ import annotations

import os
import shutil

import numpy as np

from cifar10.core import atomic
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.core.errors import DataError


def batches_dir_name(label: str) -> str:
    return ff.CIFAR100_BATCHES_DIRS[label]


def holds_source(path: str) -> bool:
    """Whether ``path`` is an extracted ``cifar-100-binary`` folder itself."""
    return any(os.path.isfile(os.path.join(path, name)) for name in ff.CIFAR100_FILES.values())


def read_records(path: str, label: str) -> np.ndarray:
    """A CIFAR-100 file's records as CIFAR-10 records ([n, 3,073] uint8) with the
    ``label`` byte; DataError where it is unreadable or cut."""
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
    """The CIFAR-10-format folder of ``label`` in ``data_dir``, written from ``extracted``
    when missing; DataError where ``extracted`` is damaged or it cannot be written."""
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
    """(class names file, training records, test records) of ``extracted``, checked."""
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
    if os.path.abspath(extracted) == os.path.abspath(data_dir):
        return (f"replace {extracted} with a sound copy (extract the published "
                f"{ff.CIFAR100.tarball} again)")
    return (f"delete {extracted} (and {ff.CIFAR100.tarball} beside it, unless it is the "
            f"published one) so that it is extracted or downloaded again")
