"""What is wrong with a --data_dir that is no data folder, in one line each: a file
(the tarball, say), a data set's Python version, a folder of images (which
cifar10-prepare converts first), a data folder that holds another, a folder that
does not exist and could not be filled.  No TensorFlow, as ``folder``.
"""

from __future__ import annotations

import os

from cifar10.data import classfolders
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.data.imagefiles import IMAGE_EXTENSIONS, SKIPPED_FOLDERS
from cifar10.core.errors import Cifar10Error, DataError


def refuse_two_data_folders(data_dir: str, followed: str = "") -> None:
    """Raises DataError when ``data_dir`` is a data folder itself and holds another one,
    ``cifar-10-batches-bin/`` (cifar10-prepare wrote one into a data folder given as its
    --data_dir before it refused to): either could be the data meant.

    Neither is clearly meant, so neither is taken.  The nested one is the newer and
    what --data_dir's first reading (the folder that holds ``cifar-10-batches-bin/``)
    finds; but the files the user pointed at are the folder's own.  A run's record
    cannot tell either: flags.txt keeps --data_dir as given, the same for both.  A run
    on the other data would go on without a word, with results that are not of the
    data meant, so the user chooses, and nothing is moved here.
    """
    nested = os.path.join(data_dir, ff.BATCHES_DIRNAME)
    if not (datafolder.holds_records(data_dir) and os.path.isdir(nested)
            and datafolder.holds_records(nested)):
        return
    if os.path.realpath(nested) == os.path.realpath(data_dir):
        return  # a link to the folder itself: one data set
    origin = f" ({followed})" if followed else ""
    found = datafolder.data_files_in(data_dir)
    aside = _unused_name(data_dir, "-nested")
    raise DataError(
        f"--data_dir={data_dir}{origin} is a data folder (it holds {', '.join(found[:2])}"
        f"{', ...' if len(found) > 2 else ''}) and holds another one, {nested}: which one is "
        f"meant is unclear; move {nested} out of it (e.g. to {aside}), then pass "
        f"--data_dir={data_dir} for the first or --data_dir={aside} for the other")


def _unused_name(path: str, suffix: str) -> str:
    """A path beside ``path`` named after it with ``suffix`` (a number added if need
    be) that does not exist."""
    base = os.path.normpath(path)
    if os.path.basename(base) in ("", ".", ".."):
        base = os.path.abspath(base)
    name, number = base + suffix, 2
    while os.path.lexists(name):
        name, number = f"{base}{suffix}{number}", number + 1
    return name


def refuse_non_data(data_dir: str, followed: str = "") -> None:
    """Raises DataError when ``data_dir`` cannot be where data is downloaded: a file, or
    a folder of images (which cifar10-prepare converts) — instead of a download error."""
    origin = f" ({followed})" if followed else ""
    _refuse_file(data_dir, origin)
    _refuse_python_version(data_dir, origin)
    _refuse_images(data_dir, origin)


def _refuse_file(data_dir: str, origin: str) -> None:
    """A file given as --data_dir (the tarball, say), not the folder that holds it."""
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        if os.path.basename(data_dir) in (ff.CIFAR10.tarball, ff.CIFAR100.tarball):
            parent = os.path.dirname(os.path.normpath(data_dir)) or "."
            raise DataError(f"--data_dir={data_dir}{origin} is the tarball, not a folder: pass "
                            f"the folder that holds it, --data_dir={parent}, where it is "
                            f"extracted")
        raise DataError(f"--data_dir={data_dir}{origin} is a file, not a folder: pass the "
                        f"folder that holds {ff.BATCHES_DIRNAME}/")


def _refuse_python_version(data_dir: str, origin: str) -> None:
    """A folder of the data set's Python (pickled) version, which is not read here."""
    python_files = _python_version_files(data_dir)
    if python_files:
        parent = os.path.dirname(os.path.normpath(data_dir)) or "."
        raise DataError(
            f"--data_dir={data_dir}{origin} holds a data set's Python version "
            f"({', '.join(python_files)}: pickled batches), not the binary version read here: "
            f"pass another folder to download the binary version into, such as "
            f"--data_dir={parent} (its data folder goes beside this one)")


def _refuse_images(data_dir: str, origin: str) -> None:
    """A folder of images, in class folders or loose: what cifar10-prepare needs first."""
    images = image_folders(data_dir)
    folders = [name for name in images if name != "."]
    one_class = one_class_folder(data_dir) if folders else None
    if one_class:
        # cifar10-prepare would refuse it (a classifier needs two classes): what to do
        # comes first, not a conversion that cannot be done yet.
        classes_dir = os.path.dirname(os.path.join(data_dir, one_class))
        raise DataError(
            f"--data_dir={data_dir}{origin} holds images of one class alone ({one_class}/), not "
            f"CIFAR-format data: a classifier needs two or more classes, each in a folder of "
            f"its own ({os.path.join(classes_dir, '<class>')}/); add the other classes' "
            f"folders, convert them with cifar10-prepare --image_dir={data_dir} "
            f"--data_dir=<a new folder>, then pass that folder as --data_dir")
    if folders:
        raise DataError(
            f"--data_dir={data_dir}{origin} holds image folders ({', '.join(folders)}), not "
            f"CIFAR-format data: convert them with cifar10-prepare --image_dir={data_dir} "
            f"--data_dir=<a new folder>, then pass that folder as --data_dir")
    if images:
        # Image files loose in the folder: cifar10-prepare takes class folders only,
        # so the fix starts with sorting them into those.
        raise DataError(
            f"--data_dir={data_dir}{origin} holds image files ({_image_files(data_dir)}), not "
            f"CIFAR-format data: to train on your own images, put each class's images in a "
            f"folder of its own ({os.path.join(data_dir, '<class>', '*.jpg')}), convert them "
            f"with cifar10-prepare --image_dir={data_dir} --data_dir=<a new folder>, then pass "
            f"that folder as --data_dir")


def one_class_folder(path: str) -> str | None:
    """The one class folder of a folder of images (``cat``, or ``train/cat`` in a
    split layout), as cifar10-prepare would take its classes; None when it has more
    (or none, or a layout cifar10-prepare refuses for another reason)."""
    top = _subfolders(path)
    try:
        split = classfolders.split_folders(path, top)
    except Cifar10Error:
        return None
    classes = _subfolders(os.path.join(path, split[0])) if split else top
    if len(classes) != 1:
        return None
    return os.path.join(split[0], classes[0]) if split else classes[0]


def image_folders(path: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` names of what in ``path`` holds image files: '.' for ``path``
    itself, then its subfolders that hold images directly (class folders) or in their
    own subfolders (train/<class>/...)."""
    found = ["."] if _holds_images(path) else []
    for sub in _subfolders(path):
        here = os.path.join(path, sub)
        if len(found) == limit:
            break
        if _holds_images(here) or any(_holds_images(os.path.join(here, s))
                                      for s in _subfolders(here)[:20]):
            found.append(sub + "/")
    return found


# The files that mark the Python (pickled) versions of CIFAR-10 and CIFAR-100, as
# their tarballs extract them (cifar-10-batches-py/, cifar-100-python/): what other
# toolkits download, and no data of the binary version this package reads.
_PYTHON_VERSIONS = (("data_batch_1", "batches.meta"), ("train", "test", "meta"))


def _python_version_files(path: str) -> list[str]:
    """The files by which ``path`` is CIFAR-10's or CIFAR-100's Python version; none
    when it is not."""
    for names in _PYTHON_VERSIONS:
        if all(os.path.isfile(os.path.join(path, name)) for name in names):
            return list(names)
    return []


def _image_files(path: str, limit: int = 2) -> str:
    """'a.jpg, b.jpg, ...': the first ``limit`` image files of ``path``, by name."""
    try:
        with os.scandir(path) as entries:
            names = sorted(e.name for e in entries
                           if e.name.lower().endswith(IMAGE_EXTENSIONS) and e.is_file())
    except OSError:
        names = []
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def _subfolders(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith(".")
                          and e.name not in SKIPPED_FOLDERS)
    except OSError:
        return []


def _holds_images(path: str, look_at: int = 200) -> bool:
    try:
        with os.scandir(path) as entries:
            for i, entry in enumerate(entries):
                if i == look_at:
                    break
                if entry.name.lower().endswith(IMAGE_EXTENSIONS) and entry.is_file():
                    return True
    except OSError:
        pass
    return False


def missing_data_dir(data_dir: str, archive: ff.Archive, followed: str,
                     error: Exception) -> str:
    """The error for a ``data_dir`` that does not exist and could not be filled."""
    origin = f", as the run it scores recorded ({followed})" if followed else ""
    return (f"no {archive.title} data: --data_dir={data_dir}{origin} does not exist, and "
            f"downloading it there failed: {str(error).rstrip('.')}. Pass --data_dir=<the "
            f"folder that holds "
            f"{archive.folder}/> (or that folder itself), or --synthetic_data to try the "
            f"programs on generated data")
