"""cifar10-predict's arguments that are CIFAR-format data, not images: a data set's
record file (test_batch.bin) or a data folder, refused with one line giving the
cifar10-eval command that scores the model on that data.  No TensorFlow."""

from __future__ import annotations

import os
import shlex
from typing import Sequence

from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.data import getdata
from cifar10.data import imagefiles

# The record files by name, with the size of their records (CIFAR-100's hold two labels).
_RECORD_FILES = {**{name: ff.RECORD_BYTES for name in (*ff.TRAIN_FILES, *ff.TEST_FILES)},
                 **{name: ff.RECORD_BYTES + 1 for name in ff.CIFAR100_FILES.values()}}
_TRAINING_FILES = (*ff.TRAIN_FILES, ff.CIFAR100_FILES["train"])
# The data folders the programs make, named so; their --data_dir is the folder above.
_DATA_FOLDER_NAMES = (ff.BATCHES_DIRNAME, ff.CIFAR100.folder, *ff.CIFAR100_BATCHES_DIRS.values())


def refuse_cifar_data(paths: Sequence[str], model_flag: str) -> None:
    """Raises Cifar10Error when one of ``paths`` (cifar10-predict's arguments) is a
    record file of a data set (by its name and a size of whole records) or a data
    folder (``getdata.is_data_folder``) that holds no images: cifar10-eval scores a
    model on such data, and ``model_flag`` (--checkpoint_dir=... or --checkpoint=...)
    goes in the command the line gives."""
    for path in paths:
        if path == imagefiles.STDIN:
            continue
        if os.path.isdir(path):
            if getdata.is_data_folder(path) and not imagefiles.holds_images(path):
                raise Cifar10Error(
                    f"{path} is a folder of CIFAR-format data, not of images: score the "
                    f"model on its test records with "
                    f"{_eval_command(model_flag, _data_dir_of(path))}")
        elif _is_record_file(path):
            name = os.path.basename(path)
            split = " --eval_data=train_eval" if name in _TRAINING_FILES else ""
            folder = os.path.dirname(path) or "."
            raise Cifar10Error(
                f"{path} is CIFAR-format data (records of labelled 32x32 images), not an "
                f"image: score the model on it with "
                f"{_eval_command(model_flag, _data_dir_of(folder), split)}")


def _is_record_file(path: str) -> bool:
    """Whether ``path`` is a data set's record file: one of their names, whole records."""
    record_bytes = _RECORD_FILES.get(os.path.basename(path))
    try:
        size = os.path.getsize(path) if record_bytes and os.path.isfile(path) else 0
    except OSError:
        return False
    return size > 0 and size % record_bytes == 0


def _data_dir_of(folder: str) -> str:
    """The --data_dir that gives ``folder``'s data: the folder above a data folder named
    as the programs name theirs (data for data/cifar-10-batches-bin), else ``folder``."""
    path = os.path.normpath(folder)
    if os.path.basename(os.path.abspath(path)) in _DATA_FOLDER_NAMES:
        return os.path.normpath(os.path.join(path, os.pardir))
    return path


def _eval_command(model_flag: str, data_dir: str, extra: str = "") -> str:
    name, _, value = model_flag.partition("=")
    return (f"cifar10-eval {name}={shlex.quote(value)} --data_dir={shlex.quote(data_dir)}"
            f"{extra} --run_once")
