"""The data a program reads (``prepare``): generated, found on disk, or downloaded;
then checked.  No TensorFlow: a data mistake is answered at once, in one line."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from absl import logging

from cifar10.core import atomic
from cifar10.data import cifar100
from cifar10.data import folder as datafolder
from cifar10.data import download
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.core.errors import DataError

SYNTHETIC_SUBDIR = "synthetic"  # --synthetic_data's folder under --data_dir
POLL_S = 0.5  # seconds between two looks for the data another process fetches


class NotDownloaded(DataError):
    """Missing data that ``prepare``'s ``no_download`` (the message) rules out fetching."""


def prepare(data_dir: str, url: str | None = None, md5: str | None = None,
            use_synthetic: bool = False, synthetic_records: int = 1000, print_fn=print,
            dataset: str = "cifar10", label: str = "fine",
            followed: str = "", no_download: str = "", fetched_by: str = "",
            wait_s: float = 300.0) -> tuple[str, dict[str, int]]:
    """(the data folder, {'train': records, 'test': records}): generated data, else the
    real ``dataset`` under or at ``data_dir``, downloaded when missing (or waited for while
    ``fetched_by`` fetches it).  ``followed`` names where the flags came from.  DataError
    where the data cannot be had or is damaged."""
    wait = _Wait(fetched_by, wait_s, print_fn) if fetched_by else None
    if use_synthetic:
        batches_dir, generated = _synthetic_data(data_dir, synthetic_records, print_fn, wait,
                                                 followed)
    else:
        _remove_leftovers(data_dir, print_fn)
        batches_dir = _real_data(data_dir, url, md5, dataset, label, followed, no_download,
                                 wait)
    num_classes = len(datafolder.class_names(batches_dir))
    counts = {split: datafolder.validate_files(datafolder.split_files(batches_dir, split),
                                               num_classes)
              for split in ("train", "test")}
    if use_synthetic:
        _synthetic_notes(batches_dir, generated, counts["test"], synthetic_records, print_fn)
    elif synthetic.is_synthetic(batches_dir):
        print_fn(f"NOTE: {batches_dir} holds SYNTHETIC data (generated, not CIFAR-10).")
    return batches_dir, counts


def is_data_folder(path: str) -> bool:
    """Whether ``path`` is a data folder, or the --data_dir that holds one."""
    held = (ff.BATCHES_DIRNAME, ff.CIFAR100.folder, *ff.CIFAR100_BATCHES_DIRS.values(),
            os.path.join(SYNTHETIC_SUBDIR, ff.BATCHES_DIRNAME))
    return (any(os.path.isdir(os.path.join(path, name)) for name in held)
            or datafolder.find_batches_dir(path) is not None or cifar100.holds_source(path))


class _Wait:
    """The wait for the data that another process, ``fetched_by``, fetches."""

    def __init__(self, fetched_by: str, wait_s: float, print_fn):
        self.fetched_by, self.wait_s, self.print_fn = fetched_by, wait_s, print_fn

    def until(self, ready: Callable[[], bool], folder: str) -> None:
        """Returns once ``ready()``; DataError once no fetch was under way in ``folder``
        for ``wait_s`` seconds."""
        seen, said = time.monotonic(), False
        while not ready():
            if atomic.at_work(folder):
                seen = time.monotonic()
            elif time.monotonic() - seen > self.wait_s and not ready():
                raise DataError(
                    f"no data appeared in {folder} while this task waited for "
                    f"{self.fetched_by} to fetch it, and no fetch was under way there for "
                    f"{self.wait_s:g} s (--worker_timeout_secs): see that task's error, then "
                    f"start the job again (or put the data in {folder} before it starts)")
            if not said:
                self.print_fn(f"Waiting for {self.fetched_by} to fetch the data into "
                              f"{folder}.")
                sys.stdout.flush()
                said = True
            time.sleep(POLL_S)


def _synthetic_data(data_dir: str, records_per_file: int, print_fn,
                    wait: _Wait | None = None, followed: str = "") -> tuple[str, bool]:
    """(the generated data folder under ``data_dir``, whether it was written now)."""
    folder = os.path.join(data_dir, SYNTHETIC_SUBDIR)
    _refuse_file_in_synthetic_path(data_dir, followed)
    _remove_leftovers(folder, print_fn)
    batches_dir = datafolder.batches_dir_of(folder)
    if os.path.isdir(batches_dir):
        return batches_dir, False
    if wait:
        wait.until(lambda: os.path.isdir(batches_dir), folder)
        return batches_dir, False
    try:
        synthetic.write_dataset(folder, records_per_file=records_per_file)
    except OSError as e:
        raise DataError(f"cannot write generated data in {folder} ({e.strerror or e}); "
                        f"choose a --data_dir you can write") from e
    return batches_dir, True


def _refuse_file_in_synthetic_path(data_dir: str, followed: str = "") -> None:
    """DataError where a file stands at ``data_dir`` (or above) or at a folder
    --synthetic_data writes."""
    origin = f" ({followed})" if followed else ""
    folder = os.path.join(data_dir, SYNTHETIC_SUBDIR)
    nearest = os.path.normpath(data_dir)
    while not os.path.exists(nearest) and os.path.dirname(nearest) not in ("", nearest):
        nearest = os.path.dirname(nearest)  # the folder it would be made in, or a file
    for path in (nearest, folder, datafolder.batches_dir_of(folder)):
        if os.path.exists(path) and not os.path.isdir(path):
            raise DataError(f"{path} is a file, where --synthetic_data keeps its generated "
                            f"data (in a folder under --data_dir={data_dir}{origin}): pass a "
                            f"folder as --data_dir (made if missing), or move the file away")


def _synthetic_notes(batches_dir: str, generated: bool, test_records: int,
                     records_per_file: int, print_fn) -> None:
    """That generated data is not CIFAR-10, and of another kind or size than asked."""
    if not generated and not synthetic.has_look_alikes(batches_dir):
        print_fn(f"NOTE: {batches_dir} holds generated data of an earlier, easier kind "
                 f"(no look-alike classes: a model scores 1.000 on it); delete the folder "
                 f"to have the current kind generated.")
    if not generated and test_records != records_per_file:
        logging.warning(f"{batches_dir} already holds generated data of another size "
                        f"({test_records} records a file); it is used as it is: "
                        f"--synthetic_records={records_per_file} applies only when it is "
                        f"generated (delete the folder to regenerate)")
    print_fn(f"NOTE: using SYNTHETIC CIFAR-10-format data in {batches_dir} "
             f"(generated, not the real CIFAR-10 images; results say nothing about "
             f"CIFAR-10).")


def _remove_leftovers(folder: str, print_fn) -> None:
    """Removes what a download or conversion killed with ``kill -9`` left, and says so."""
    removed = atomic.remove_leftovers(folder)
    if removed:
        print_fn(f"NOTE: removed what an interrupted download or conversion left in "
                 f"{folder}: {', '.join(removed)}.")


def _found(data_dir: str, archive: ff.Archive, followed: str = "") -> str | None:
    """The archive's extracted folder: under ``data_dir``, or ``data_dir`` itself."""
    if archive is ff.CIFAR10:
        datafolder.refuse_two_data_folders(data_dir, followed)
        return datafolder.find_batches_dir(data_dir)
    found = datafolder.find_batches_dir(data_dir, archive.folder, itself=False)
    return found or (data_dir if cifar100.holds_source(data_dir) else None)


def _cifar100_made(data_dir: str, label: str, followed: str) -> str | None:
    """``data_dir`` where it is the folder made from CIFAR-100 for ``label``; DataError
    for the other label's."""
    name = os.path.basename(os.path.normpath(data_dir))
    made = {folder: kind for kind, folder in ff.CIFAR100_BATCHES_DIRS.items()}
    if name not in made or not datafolder.find_batches_dir(data_dir):
        return None
    if made[name] != label:
        raise _other_data(data_dir, followed, f"CIFAR-100's {made[name]} labels",
                          f"--label={label} asks for its {label} ones: pass --label={made[name]}")
    return data_dir


def _other_data(data_dir: str, followed: str, held: str, fix: str) -> DataError:
    origin = f" ({followed})" if followed else ""
    return DataError(f"--data_dir={data_dir}{origin} holds {held}, and {fix}, or the folder "
                     f"that holds (or will hold) the data set asked for")


def _real_data(data_dir: str, url: str | None, md5: str | None, dataset: str, label: str,
               followed: str, no_download: str = "", wait: _Wait | None = None) -> str:
    """The data folder of a real data set under ``data_dir``, fetched when missing."""
    archive = ff.CIFAR100 if dataset == ff.CIFAR100.name else ff.CIFAR10
    if archive is ff.CIFAR100:
        made = _cifar100_made(data_dir, label, followed)
        if made:
            return made
    found = _found(data_dir, archive, followed) or _fetched(data_dir, url, md5, archive,
                                                            followed, no_download, wait)
    if archive is ff.CIFAR10:
        return found
    target = os.path.join(data_dir, cifar100.batches_dir_name(label))
    if wait and not os.path.isdir(target):  # the other process converts it
        wait.until(lambda: os.path.isdir(target), data_dir)
    return cifar100.batches_dir(found, data_dir, label)


def _fetched(data_dir: str, url: str | None, md5: str | None, archive: ff.Archive,
             followed: str, no_download: str, wait: _Wait | None) -> str:
    """The archive's extracted folder in ``data_dir``, downloaded (by another process,
    with ``wait``)."""
    datafolder.refuse_non_data(data_dir, followed)
    if archive is ff.CIFAR10 and cifar100.holds_source(data_dir):
        raise _other_data(data_dir, followed, "CIFAR-100's data", "CIFAR-10's is asked for: "
                          "pass --dataset=cifar100")
    if archive is ff.CIFAR100 and datafolder.find_batches_dir(data_dir):
        raise _other_data(data_dir, followed, "data of CIFAR-10's format",
                          "--dataset=cifar100 asks for CIFAR-100's: pass --dataset=cifar10")
    if no_download:
        raise NotDownloaded(no_download)
    if wait:
        wait.until(lambda: _found(data_dir, archive, followed) is not None, data_dir)
        return _found(data_dir, archive, followed)  # (it stays: it appeared by a rename)
    existed = os.path.exists(data_dir)
    try:
        with atomic.made_folders_removed_on_failure(data_dir):
            extracted = download.maybe_download_and_extract(data_dir, url=url, md5=md5,
                                                            archive=archive)
    except download.DownloadFailed as e:
        if existed:
            # Offline, the way to try the programs is the same as for a new folder.
            raise download.DownloadFailed(
                f"{e} Or pass --synthetic_data to try the programs on generated data.") from e
        raise DataError(datafolder.missing_data_dir(data_dir, archive, followed, e)) from e
    return extracted
