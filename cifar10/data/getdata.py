"""The data a program reads: generated, found on disk, or downloaded; then checked.

``prepare`` is what cifar10-train and cifar10-eval call with their data flags.  No
TensorFlow: it runs before TensorFlow loads, so that a data mistake (a path that
does not exist, a folder of images, the data folder itself, damaged files) is
answered within a second, in one line that names the problem and the fix.
"""

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
from cifar10.data import wrong_data_dir
from cifar10.core.errors import DataError

# Where --synthetic_data keeps its generated data, under --data_dir.
SYNTHETIC_SUBDIR = "synthetic"
# Seconds between two looks for the data that another process fetches (``fetched_by``).
POLL_S = 0.5


class NotDownloaded(DataError):
    """The data is not on disk, and ``prepare``'s ``no_download`` (this error's
    message) rules out downloading it."""


def prepare(data_dir: str, url: str | None = None, md5: str | None = None,
            use_synthetic: bool = False, synthetic_records: int = 1000, print_fn=print,
            dataset: str = "cifar10", label: str = "fine",
            followed: str = "", no_download: str = "", fetched_by: str = "",
            wait_s: float = 300.0) -> tuple[str, dict[str, int]]:
    """Finds, fetches if needed, and validates the data of a program, without TensorFlow.

    With ``use_synthetic``, generated data in ``<data_dir>/synthetic`` is used
    (written when missing) and a notice says so; otherwise the real data set
    (``dataset``: 'cifar10' or 'cifar100', the latter with its ``label``: 'fine' or
    'coarse') is downloaded and extracted under ``data_dir`` when missing.  A
    ``data_dir`` that is itself a CIFAR-10-format data folder is taken as it is, and
    one that is CIFAR-100's extracted folder as that.
    ``followed`` (``cli.follow.Followed.describe()``) names the run settings the data
    flags came from, for the error that says the data is missing.  ``no_download``,
    when given, is the message of the ``NotDownloaded`` error raised where the data
    would be downloaded (a resumed run's own data not asked for:
    ``cli.kind_of_data.download_refusal``; cifar10-eval's look on disk alone).
    ``fetched_by``, when given, names another process of this machine that fetches
    the data (under srun: the first task of the node, ``cluster.data_fetcher``):
    where this one would download, extract, convert or generate it, it waits for the
    data to appear whole instead, saying so once, for as long as that process is at
    it and ``wait_s`` seconds more (cifar10-train's --worker_timeout_secs, which the
    error names).

    Returns:
      (the ``cifar-10-batches-bin`` folder, {'train': records, 'test': records}).

    Raises:
      NotDownloaded: the data would be downloaded, and ``no_download`` is given.
      DataError: the data cannot be fetched or a file is missing or corrupt, or the
        process ``fetched_by`` did not fetch it; a --data_dir that is a training run's
        or an evaluator's folder is the programs' to refuse first
        (``cli.outdirs.refuse_run_as_data_dir``).
    """
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
    """Whether ``path`` is a data folder, or the folder that holds one (the
    ``--data_dir`` of a data set downloaded, converted or generated there)."""
    held = (ff.BATCHES_DIRNAME, ff.CIFAR100.folder, *ff.CIFAR100_BATCHES_DIRS.values(),
            os.path.join(SYNTHETIC_SUBDIR, ff.BATCHES_DIRNAME))
    return (any(os.path.isdir(os.path.join(path, name)) for name in held)
            or datafolder.find_batches_dir(path) is not None or cifar100.holds_source(path))


class _Wait:
    """The wait of a process for the data that another one, ``fetched_by``, fetches
    (``prepare``'s ``fetched_by``)."""

    def __init__(self, fetched_by: str, wait_s: float, print_fn,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.fetched_by, self.wait_s, self.print_fn = fetched_by, wait_s, print_fn
        self.clock, self.sleep = clock, sleep

    def until(self, ready: Callable[[], bool], folder: str) -> None:
        """Returns once ``ready()``: the data fetched into ``folder`` is there whole
        (it appears by a rename).  Says once that it waits.

        A fetch under way in ``folder`` (a scratch folder whose writer is alive:
        ``atomic.at_work``) keeps the wait going, for the 170 MB download may take
        longer than ``wait_s``; a fetch that failed, or never started, ends it
        ``wait_s`` seconds later.

        Raises:
          DataError: no fetch was under way for ``wait_s`` seconds, and no data came.
        """
        seen, said = self.clock(), False
        while not ready():
            if atomic.at_work(folder):
                seen = self.clock()
            elif self.clock() - seen > self.wait_s and not ready():
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
            self.sleep(POLL_S)


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
    """Raises DataError where a file stands where --synthetic_data keeps its data
    (``<data_dir>/synthetic/cifar-10-batches-bin``): ``data_dir`` itself (a file given
    as --data_dir, the tarball say), a folder above it, or one of that path; instead of
    the error of the write that would fail there ('Not a directory', 'File exists')."""
    origin = f" ({followed})" if followed else ""
    nearest = os.path.normpath(data_dir)
    while not os.path.exists(nearest) and os.path.dirname(nearest) not in ("", nearest):
        nearest = os.path.dirname(nearest)  # the folder it would be made in, or a file
    if os.path.exists(nearest) and not os.path.isdir(nearest):
        what = "is a file" if nearest == os.path.normpath(data_dir) else f"is under a file, {nearest}"
        parent = os.path.dirname(os.path.normpath(nearest)) or "."
        raise DataError(f"--data_dir={data_dir}{origin} {what}, not a folder: "
                        f"--synthetic_data generates its data in a folder under --data_dir "
                        f"({os.path.join('<data_dir>', SYNTHETIC_SUBDIR)}); pass a folder "
                        f"(made if missing), such as --data_dir={parent}")
    folder = os.path.join(data_dir, SYNTHETIC_SUBDIR)
    for path in (folder, datafolder.batches_dir_of(folder)):
        if os.path.exists(path) and not os.path.isdir(path):
            raise DataError(f"{path} is a file, where --synthetic_data keeps its generated "
                            f"data (under --data_dir={data_dir}{origin}): move the file away, "
                            f"or pass another --data_dir")


def _synthetic_notes(batches_dir: str, generated: bool, test_records: int,
                     records_per_file: int, print_fn) -> None:
    """What a run on generated data is told: that it is not CIFAR-10, and whether the
    folder it found is of another kind or size than it would write."""
    if not generated and not synthetic.has_look_alikes(batches_dir):
        print_fn(f"NOTE: {batches_dir} holds generated data of an earlier, easier kind "
                 f"(no look-alike classes: a model scores 1.000 on it); delete the folder "
                 f"to have the current kind generated.")
    if not generated and test_records != records_per_file:
        # A flag's value not taken: the program's warning, on stderr.
        logging.warning(f"{batches_dir} already holds generated data of another size "
                        f"({test_records} records a file); it is used as it is: "
                        f"--synthetic_records={records_per_file} applies only when it is "
                        f"generated (delete the folder to regenerate)")
    print_fn(f"NOTE: using SYNTHETIC CIFAR-10-format data in {batches_dir} "
             f"(generated, not the real CIFAR-10 images; results say nothing about "
             f"CIFAR-10).")


def _remove_leftovers(folder: str, print_fn) -> None:
    """Removes the scratch folders that a download, extraction or conversion killed
    with ``kill -9`` left in ``folder`` (only those it proves are such), and says so."""
    removed = atomic.remove_leftovers(folder)
    if removed:
        print_fn(f"NOTE: removed what an interrupted download or conversion left in "
                 f"{folder}: {', '.join(removed)}.")


def _found(data_dir: str, archive: ff.Archive, followed: str = "") -> str | None:
    """The archive's extracted folder: under ``data_dir``, or ``data_dir`` itself (the
    ``cifar-10-batches-bin`` or ``cifar-100-binary`` folder given as --data_dir).

    Raises:
      DataError: ``data_dir`` is a CIFAR-10-format data folder that holds another one
        (``wrong_data_dir.refuse_two_data_folders``).
    """
    if archive is ff.CIFAR10:
        wrong_data_dir.refuse_two_data_folders(data_dir, followed)
        return datafolder.find_batches_dir(data_dir)
    found = datafolder.find_batches_dir(data_dir, archive.folder, itself=False)
    return found or (data_dir if cifar100.holds_source(data_dir) else None)


def _cifar100_made(data_dir: str, label: str, followed: str) -> str | None:
    """``data_dir`` when it is the CIFAR-10-format folder made from CIFAR-100 for
    ``label`` itself (``cifar-100-fine-batches-bin``), else None.

    Raises:
      DataError: it is the folder made for the other label.
    """
    name = os.path.basename(os.path.normpath(data_dir))
    made = {folder: kind for kind, folder in ff.CIFAR100_BATCHES_DIRS.items()}
    if name not in made or not datafolder.find_batches_dir(data_dir):
        return None
    if made[name] != label:
        origin = f" ({followed})" if followed else ""
        raise DataError(f"--data_dir={data_dir}{origin} holds CIFAR-100's {made[name]} labels, "
                        f"and --label={label} asks for its {label} ones: pass "
                        f"--label={made[name]}, or the folder that holds "
                        f"{ff.CIFAR100.folder}/ as --data_dir")
    return data_dir


def _refuse_cifar100_as_cifar10(data_dir: str, followed: str) -> None:
    """Raises DataError when ``data_dir`` is CIFAR-100's extracted folder and CIFAR-10
    is asked for: a download of CIFAR-10 would go into it."""
    if cifar100.holds_source(data_dir):
        origin = f" ({followed})" if followed else ""
        raise DataError(f"--data_dir={data_dir}{origin} holds CIFAR-100's data "
                        f"({', '.join(ff.CIFAR100_FILES.values())}), not CIFAR-10's: add "
                        f"--dataset=cifar100 to train on it, or pass the folder of "
                        f"CIFAR-10's data")


def _refuse_cifar10_as_cifar100(data_dir: str, followed: str) -> None:
    """Raises DataError when ``data_dir`` holds data of CIFAR-10's format (a data folder,
    or the folder that holds one: own data, say) and CIFAR-100 is asked for (by
    --dataset=cifar100, or the run an evaluator scores): a download of CIFAR-100
    would go into it."""
    found = datafolder.find_batches_dir(data_dir)
    if found:
        origin = f" ({followed})" if followed else ""
        held = (f"{ff.BATCHES_DIRNAME}/" if found != data_dir
                else ", ".join(datafolder.data_files_in(data_dir)[:2]) + ", ...")
        raise DataError(f"--data_dir={data_dir}{origin} holds data of CIFAR-10's format "
                        f"({held}), and --dataset=cifar100 asks for CIFAR-100's: pass the "
                        f"folder that holds {ff.CIFAR100.folder}/ (or a new folder to download "
                        f"CIFAR-100 into); data of CIFAR-10's format is read with "
                        f"--dataset=cifar10")


def _real_data(data_dir: str, url: str | None, md5: str | None, dataset: str, label: str,
               followed: str, no_download: str = "", wait: _Wait | None = None) -> str:
    """The data folder of a real data set under ``data_dir``, downloaded when missing
    (else ``NotDownloaded(no_download)``, when ``no_download`` is given; with ``wait``, by another process)."""
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
    """The archive's extracted folder in ``data_dir``, where it is missing: downloaded
    and extracted (by the process ``wait`` waits for, with ``wait``)."""
    wrong_data_dir.refuse_non_data(data_dir, followed)
    if archive is ff.CIFAR10:
        _refuse_cifar100_as_cifar10(data_dir, followed)
    else:
        _refuse_cifar10_as_cifar100(data_dir, followed)
    if no_download:
        raise NotDownloaded(no_download)
    if wait:
        wait.until(lambda: _found(data_dir, archive, followed) is not None, data_dir)
        return _found(data_dir, archive, followed)  # (it stays: it appeared by a rename)
    existed = os.path.exists(data_dir)
    try:
        # A failure, or Ctrl-C / SIGTERM, leaves no folder made for the download.
        with atomic.made_folders_removed_on_failure(data_dir):
            extracted = download.maybe_download_and_extract(data_dir, url=url, md5=md5,
                                                            archive=archive)
    except download.DownloadFailed as e:
        if existed:
            # Offline, the way to try the programs is the same as for a new folder.
            raise download.DownloadFailed(
                f"{e} Or pass --synthetic_data to try the programs on generated data.") from e
        raise DataError(wrong_data_dir.missing_data_dir(data_dir, archive, followed, e)) from e
    return extracted
