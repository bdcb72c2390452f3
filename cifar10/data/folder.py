"""A data folder on disk: where its files are, what they hold, and what is wrong
with a folder that is not one.  No TensorFlow: the programs check their data with
it before TensorFlow loads, so that a mistake is answered at once.

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
from cifar10.data import classfolders
from cifar10.data import synthetic
from cifar10.data.imagefiles import IMAGE_EXTENSIONS, SKIPPED_FOLDERS
from cifar10.core.errors import Cifar10Error, DataError


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
    if itself and _holds_records(data_dir):
        return data_dir
    return None


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
    if not (_holds_records(data_dir) and os.path.isdir(nested) and _holds_records(nested)):
        return
    if os.path.realpath(nested) == os.path.realpath(data_dir):
        return  # a link to the folder itself: one data set
    origin = f" ({followed})" if followed else ""
    found = data_files_in(data_dir)
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


def data_files_in(path: str) -> list[str]:
    """The data files (``fileformat.DATA_FILES``) that ``path`` holds, sorted; none when
    it is not a folder."""
    return sorted(name for name in ff.DATA_FILES if os.path.isfile(os.path.join(path, name)))


def _holds_records(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name))
               for name in (*ff.TRAIN_FILES, *ff.TEST_FILES))


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
