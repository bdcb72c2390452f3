"""Unpacking a data set's binary tarball safely: every member checked before
anything is written (no absolute paths, no '..', no links or devices, nothing
outside the data directory), and the data folder renamed into place only when
complete (``atomic.new_folder``), so that it never appears half extracted and
what a killed extraction leaves is removed by the next run.  No TensorFlow.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tarfile
import zlib

from cifar10.core import atomic
from cifar10.data import fileformat as ff
from cifar10.core.errors import DataError


def _check_member(member: tarfile.TarInfo, dest: str) -> None:
    """Raises DataError unless ``member`` is a plain file or folder inside ``dest``."""
    name = member.name
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or os.path.isabs(name) or (len(name) > 1 and name[1] == ":"):
        problem = "has an absolute path"
    elif ".." in parts:
        problem = "has a '..' component"
    elif not (member.isreg() or member.isdir()):
        problem = "is a link, device or other special file"
    else:
        root = os.path.realpath(dest)
        target = os.path.realpath(os.path.join(root, name))
        if os.path.commonpath([root, target]) == root:
            return
        problem = "would be written outside the data directory"
    raise DataError(f"unsafe member {name!r}: it {problem}")


def safe_extract(tarball: str, data_dir: str, archive: ff.Archive = ff.CIFAR10) -> str:
    """Extracts the archive's folder (``cifar-10-batches-bin``) from ``tarball`` into
    ``data_dir``.

    Every member is checked before anything is written; the tarball is unpacked
    into a scratch folder of ``atomic.new_folder`` in ``data_dir``, renamed into
    place when complete, so the folder never appears half extracted, and a scratch
    folder that a killed extraction left is removed by the next run
    (``atomic.remove_leftovers``).

    Returns:
      The path of the extracted ``cifar-10-batches-bin`` folder.

    Raises:
      DataError: the tarball is unreadable, holds an unsafe member or lacks the
        folder.
    """
    batches_dir = os.path.join(data_dir, archive.folder)
    try:
        with atomic.new_folder(batches_dir) as scratch:
            _extract_into(tarball, scratch, archive)
    except OSError as e:
        if not os.path.isdir(batches_dir):  # else another process won the race
            raise DataError(f"cannot extract {tarball} into {data_dir}: {_reason(e)}") from e
    return batches_dir


def _extract_into(tarball: str, scratch: str, archive: ff.Archive) -> None:
    """Unpacks ``tarball`` in ``scratch`` and keeps only its ``archive.folder``'s files,
    which become ``scratch``'s own."""
    unpacked = os.path.join(scratch, ".unpacked")
    os.mkdir(unpacked)
    try:
        with tarfile.open(tarball, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                try:
                    _check_member(member, unpacked)
                except DataError as e:
                    raise DataError(f"refusing to extract {tarball}: {e}") from None
            if hasattr(tarfile, "data_filter"):
                tar.extractall(unpacked, members=members, filter="data")
            else:  # Python without extraction filters; members checked above.
                tar.extractall(unpacked, members=members)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DataError(
            f"cannot read {tarball} ({_reason(e)}); it is corrupt or not a tarball. "
            f"Delete it so that it is downloaded again."
        ) from e
    extracted = os.path.join(unpacked, archive.folder)
    if not os.path.isdir(extracted):
        raise DataError(
            f"{tarball} has no {archive.folder}/ folder; it is not the {archive.title} "
            f"binary tarball. Delete it and get {archive.tarball} again."
        )
    for name in os.listdir(extracted):
        os.rename(os.path.join(extracted, name), os.path.join(scratch, name))
    shutil.rmtree(unpacked)


def _reason(error: BaseException) -> str:
    """A one-line description of a file or tarball error."""
    return " ".join(str(error).split()) or type(error).__name__
