"""Image files on disk: those named on a command line (files as given, folders
searched), and the warnings for the images a search left out.

Kept free of TensorFlow, so that a program can check its arguments before
loading it.
"""

from __future__ import annotations

import os
from typing import Sequence

from cifar10.core.errors import Cifar10Error, listed, shown_path

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".jfif", ".jpe")  # (JPEG's too)
# Images of the formats not taken, which a search of folders names as left out rather
# than passing over them unsaid as it does other files (notes.txt, Thumbs.db).
OTHER_IMAGE_EXTENSIONS = (".webp", ".tif", ".tiff", ".heic", ".heif", ".avif", ".jxl",
                          ".jp2", ".ico", ".psd", ".svg", ".dng", ".cr2",
                          ".nef", ".arw")
METADATA_FOLDER = "__MACOSX"  # macOS's zip metadata (its ._ files), beside the zipped folders
# Folders of no images of a class, inside a class folder too: the above, and the
# thumbnails a Synology NAS keeps in each folder.
SKIPPED_FOLDERS = (METADATA_FOLDER, "@eaDir")
STDIN = "-"  # an image file read from standard input, named on a command line
PROGRAM_RECORD = "flags.txt"  # each program folder's record (runs.records.FLAGS_FILE)


def find_images(paths: Sequence[str], left_out: list[str] | None = None) -> list[str]:
    """The image files named by ``paths``: files as given, folders searched recursively.

    In folders only files ending in one of ``IMAGE_EXTENSIONS`` (any case) are
    taken, in sorted order, but for hidden files and folders (their names start with
    '.': macOS's ``._`` copies of each image among them) and the metadata folders of
    macOS's zip files and Synology's thumbnails (``SKIPPED_FOLDERS``); a file named
    directly is taken whatever its name; ``STDIN`` ("-") is taken as it is, for
    standard input, each time it is given.  Links to folders are followed, and within
    one folder given each real folder is searched once (``_images_under``); each real
    file is taken once across all of ``paths``, under the first path that names or
    reaches it, in the order given (photos/ photos/, or cat.png ./cat.png, take each
    image once).  A file that is not a regular one (a FIFO, a socket, a device) is
    listed like any other: decoding refuses it without opening it.
    The files in folders whose names end in one of ``OTHER_IMAGE_EXTENSIONS``, images
    of a format not taken, are appended to ``left_out`` (when given), each once, so
    that the program can say they were left out.

    Raises:
      Cifar10Error: a path does not exist, or a folder holds no image.
    """
    found: list[str] = []
    taken: set[object] = set()  # the real files found, and those left out
    for path in paths:
        if path == STDIN:  # (a file named "-" is ./-)
            found.append(path)
            continue
        others: list[str] = []
        found += _first_time(_images_named(path, others), taken)
        if left_out is not None:
            left_out += _first_time(others, taken)
    return found


def _images_named(path: str, left_out: list[str]) -> list[str]:
    """The image files ``path`` names: itself, or those in it, a folder (``find_images``)."""
    if os.path.isdir(path):
        images = _images_under(path, left_out)
        if not images:
            raise Cifar10Error(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in the folder "
                               f"{path} or its subfolders")
        return images
    if os.path.exists(path):
        return [path]
    if os.path.islink(path):
        raise Cifar10Error(f"{path} is a link to {os.readlink(path)}, which does not exist")
    raise Cifar10Error(f"no such file or folder: {path}")


def _first_time(paths: Sequence[str], taken: set[object]) -> list[str]:
    """Those of ``paths`` whose real file is not in ``taken`` yet, in order; ``taken``
    gets theirs.  A real file is its (device, inode), a hard link's and a link's too;
    a broken link's, the path it resolves to."""
    first = []
    for path in paths:
        try:
            identity: object = _identity(os.stat(path))
        except OSError:
            identity = os.path.realpath(path)
        if identity not in taken:
            taken.add(identity)
            first.append(path)
    return first


def _images_under(folder: str, left_out: list[str] | None = None) -> list[str]:
    """The image files in ``folder`` and its subfolders, sorted, hidden ones and
    metadata folders left out (``find_images``); those of other image formats are
    appended to ``left_out``, sorted.

    Links to folders are followed (a class folder gathered from elsewhere by links),
    but each real folder is searched once, under the first path that reaches it in
    a search in name order: a link to a folder above it, or to one searched already,
    adds nothing, so that a cycle of links ends.  Likewise a file reached by two
    paths (a link to an image beside it, two links to one folder) is taken once,
    under the first of them in sorted order.
    """
    seen_folders: set[tuple[int, int]] = set()
    files: list[tuple[str, tuple[int, int] | None]] = []
    others: list[str] = []

    def search(path: str) -> None:
        try:
            identity = _identity(os.stat(path))
            entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        except OSError:
            return  # an unreadable subfolder: as os.walk, passed over
        if identity in seen_folders:
            return
        seen_folders.add(identity)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if _is_dir(entry):
                if entry.name not in SKIPPED_FOLDERS:
                    search(entry.path)
            elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
                files.append((entry.path, _file_identity(entry)))
            elif entry.name.lower().endswith(OTHER_IMAGE_EXTENSIONS):
                others.append(entry.path)

    search(folder)
    if left_out is not None:
        left_out.extend(sorted(others))
    taken, found = set(), []
    for path, identity in sorted(files, key=lambda file: file[0]):
        if identity is not None:
            if identity in taken:
                continue
            taken.add(identity)
        found.append(path)
    return found


def left_out_warning(left_out: Sequence[str]) -> str:
    """The warning for the files of ``left_out`` (images of formats not taken); '' for none."""
    if not left_out:
        return ""
    count = len(left_out)
    them = _one_or_many(count, "it", "them")
    return (f"left out {count} {_one_or_many(count, 'file of a format', 'files of formats')} "
            f"it does not read ({listed([shown_path(p) for p in left_out], 4)}): it reads "
            f"PNG, JPEG, GIF and BMP; convert {them} to one of those to take {them}")


def unfiled_warning(unfiled: Sequence[str]) -> str:
    """The warning for the images ``unfiled`` in no class folder; '' for none."""
    if not unfiled:
        return ""
    count = len(unfiled)
    return (f"left out {count} {_one_or_many(count, 'image', 'images')} in no class folder "
            f"({listed([shown_path(p) for p in unfiled], 4)}): a class's images go in its "
            f"folder, {os.path.join(shown_path(os.path.dirname(unfiled[0])), '<class>')}/")


def _one_or_many(count: int, one: str, many: str) -> str:
    """The warnings' wording of ``count`` things: ``one`` for 1, else ``many``."""
    return one if count == 1 else many


def images_in(folders: Sequence[str]) -> tuple[str, ...]:
    """The image files (of any image format, read or not) in ``folders`` themselves,
    not in their subfolders, each folder's in sorted order, hidden ones aside; an
    unreadable folder holds none."""
    found = []
    for folder in folders:
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        found += [entry.path for entry in entries
                  if not entry.name.startswith(".") and not _is_dir(entry)
                  and entry.name.lower().endswith(IMAGE_EXTENSIONS + OTHER_IMAGE_EXTENSIONS)]
    return tuple(found)


def holds_images(folder: str, depth: int = 2, looked_at: int = 64) -> bool:
    """Whether ``folder`` holds image files (``IMAGE_EXTENSIONS``, not hidden) in it or
    in its subfolders ``depth`` levels down (photos/cat/, photos/train/cat/): a folder of
    images, which a program may be pointed at by mistake.  At most ``looked_at``
    subfolders of each are looked in, so that a large tree costs little.  A program's
    folder (it holds a ``flags.txt``: an evaluator's, with its pictures) and what is
    below it are not looked in: its images are the program's."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    if any(entry.name == PROGRAM_RECORD for entry in entries):
        return False
    if any(not entry.name.startswith(".") and entry.name.lower().endswith(IMAGE_EXTENSIONS)
           and not _is_dir(entry) for entry in entries):
        return True
    subfolders = [entry.path for entry in entries
                  if not entry.name.startswith(".") and _is_dir(entry)]
    return depth > 0 and any(holds_images(path, depth - 1, looked_at)
                             for path in sorted(subfolders)[:looked_at])


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # (through a link too)
    except OSError:
        return False


def _file_identity(entry: os.DirEntry) -> tuple[int, int] | None:
    """The real file's (device, inode); None for a broken link, kept by its name."""
    try:
        return _identity(entry.stat())
    except OSError:
        return None
