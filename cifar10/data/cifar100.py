"""CIFAR-100 as the trainer reads it: its records with the chosen label.

CIFAR-100's binary files hold records of 3,074 bytes: the coarse label (one of 20
superclasses), the fine label (one of 100 classes), then the image as in
CIFAR-10.  ``batches_dir`` writes, once per label kind, a CIFAR-10-format folder
beside the extracted data (or, where --data_dir is the extracted folder itself, in
it): the records with their one chosen label byte, the
training records in five files as CIFAR-10's, and that label's names as
``batches.meta.txt``.  Everything after it (validation, the pipelines, the model
with as many outputs as names, the evaluator) is the same for both data sets.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from cifar10.core import atomic
from cifar10.data import fileformat as ff
from cifar10.core.errors import DataError


def batches_dir_name(label: str) -> str:
    """The folder of CIFAR-10-format data made from CIFAR-100 with ``label``."""
    return f"cifar-100-{label}-batches-bin"


def holds_source(path: str) -> bool:
    """Whether ``path`` is an extracted ``cifar-100-binary`` folder itself (it holds
    ``train.bin`` or ``test.bin``)."""
    return any(os.path.isfile(os.path.join(path, name)) for name in ff.CIFAR100_FILES.values())


def read_records(path: str, label: str) -> np.ndarray:
    """The records of a CIFAR-100 file as CIFAR-10 records ([n, 3,073] uint8), keeping
    the ``label`` ('fine' or 'coarse') byte.

    Raises:
      DataError: the file is missing, empty or not a whole number of records.
    """
    record_bytes = ff.CIFAR100_LABEL_BYTES + ff.IMAGE_BYTES
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise DataError(f"cannot read {path} ({e.strerror or e}); delete "
                        f"{os.path.dirname(path)} so that it is extracted again") from e
    if raw.size == 0 or raw.size % record_bytes:
        raise DataError(f"truncated or corrupt data file {path}: {raw.size:,} bytes is not a "
                        f"whole number of {record_bytes:,}-byte CIFAR-100 records; delete "
                        f"{os.path.dirname(path)} so that it is extracted again")
    records = raw.reshape(-1, record_bytes)
    index = ff.CIFAR100_LABELS[label]
    return np.concatenate([records[:, index:index + 1], records[:, ff.CIFAR100_LABEL_BYTES:]],
                          axis=1)


def batches_dir(extracted: str, data_dir: str, label: str) -> str:
    """The CIFAR-10-format folder of ``label`` in ``data_dir``, written from
    ``extracted`` (the ``cifar-100-binary`` folder, which may be ``data_dir`` itself)
    when missing; returns its path.

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
    names = os.path.join(extracted, ff.CIFAR100_NAMES_FILES[label])
    if not os.path.isfile(names):
        raise DataError(f"missing class names file {names}; delete {extracted} so that it is "
                        f"extracted again")
    train = read_records(os.path.join(extracted, ff.CIFAR100_FILES["train"]), label)
    test = read_records(os.path.join(extracted, ff.CIFAR100_FILES["test"]), label)
    if len(train) < len(ff.TRAIN_FILES):
        raise DataError(f"{extracted} holds {len(train)} training records, fewer than the "
                        f"{len(ff.TRAIN_FILES)} files they are split into")
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
