"""Whose a folder is: each program's output folder holds a marker file naming the
program, written first; a folder of another program or of other files is refused, so
that no program writes among another's files or a user's.  No TensorFlow here.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
from typing import Iterator

from absl import flags
from absl import logging

from cifar10.core import atomic
from cifar10.core.config import TrainConfig, flag_default
from cifar10.core.errors import Cifar10Error, io_error
from cifar10.evaluation import recording
from cifar10.runs import layout
from cifar10.runs import records

MARKER = ".cifar10-folder"  # its text: the program's name
# What an export at work (or killed) leaves beside the version folders.
_EXPORT_SCRATCH = re.compile(r"\.[0-9]+-(incomplete|replaced)-\w+")
TRAIN, EVAL, EXPORT = "cifar10-train", "cifar10-eval", "cifar10-export"


def whose(folder: str) -> str | None:
    """The program whose folder ``folder`` is: its marker's, else (written before
    markers) the one whose files it holds; '' if absent or empty; None for others'."""
    if not os.path.lexists(folder):
        return ""
    try:
        names = set(os.listdir(folder))
    except NotADirectoryError:
        return None
    except OSError:
        return ""  # (unreadable, or a broken link: the program's first write says why)
    if MARKER in names:
        try:
            with open(os.path.join(folder, MARKER), encoding="utf-8") as f:
                marked = f.read().strip()
        except (OSError, UnicodeDecodeError):
            marked = ""
        return marked if marked in (TRAIN, EVAL, EXPORT) else None
    if (names & {layout.STATE_FILE, layout.LOCK_FILE} or _holds_checkpoints(folder)
            or records.recorded_flags(folder, TRAIN) is not None):
        return TRAIN
    if recording.RESULTS_FILE in names or records.recorded_flags(folder, EVAL) is not None:
        return EVAL
    if layout.is_saved_model(folder) or any(
            _EXPORT_SCRATCH.fullmatch(name) or name.isdigit()
            and layout.is_saved_model(os.path.join(folder, name)) for name in names):
        return EXPORT
    return "" if not names else None


def _holds_checkpoints(folder: str) -> bool:
    try:
        return layout.holds_checkpoints(folder)
    except Cifar10Error:
        return False


def same(path: str, other: str | None) -> bool:
    return other is not None and os.path.realpath(path) == os.path.realpath(other)


def refuse_unless_own(flag: str, folder: str, program: str, read: str | None = None) -> None:
    """Refuses ``folder`` unless new, empty or ``program``'s, and not ``read``."""
    owner, run = whose(folder), layout.run_of(folder)
    if same(folder, read):
        what = "the folder of the run it reads"
    elif run != folder:
        what = f"the best checkpoint's folder of the run in {run}"
    elif owner in ("", program):
        return
    elif owner:
        what = f"{owner}'s folder"
    else:
        what = "a folder of other files" if os.path.isdir(folder) else "a file"
    raise Cifar10Error(f"--{flag}={folder} is {what}: choose a new or empty folder for "
                       f"{program} (or one it wrote before)")


@contextlib.contextmanager
def claimed(flag: str, folder: str, program: str, read: str | None = None,
            work: str | None = None) -> Iterator[None]:
    """``folder`` made and marked ``program``'s for the block.  If the block fails, the
    marker goes, and a folder made for it too where it holds no ``work`` file."""
    refuse_unless_own(flag, folder, program, read)
    path = os.path.join(folder, MARKER)
    if os.path.isfile(path):
        yield
        return
    made = not os.path.lexists(folder)
    with atomic.made_folders_removed_on_failure(folder):
        try:
            os.makedirs(folder, exist_ok=True)
            atomic.write_text(path, program + "\n")
        except OSError as e:
            raise io_error(f"cannot write in --{flag}", folder, e,
                           "choose a folder you can write") from None
        try:
            yield
        except BaseException:
            if made and work and not os.path.exists(os.path.join(folder, work)):
                shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.remove(path)
            raise


FETCH_INSTEAD = ("pass the folder that holds the data (cifar-10-batches-bin/), or a new "
                 "folder to download it into")


def refuse_as_data_dir(data_dir: str, output: str | None = None, followed: str = "",
                       fix: str = FETCH_INSTEAD) -> None:
    """Refuses a ``data_dir`` that is the program's ``output`` or any program's folder."""
    origin = f" ({followed})" if followed else ""
    if same(data_dir, output):
        raise Cifar10Error(f"--data_dir={data_dir}{origin} is the program's output folder "
                           f"too: give the data a folder of its own")
    owner = whose(data_dir)
    if owner:
        raise Cifar10Error(f"--data_dir={data_dir}{origin} is {owner}'s folder, not a data "
                           f"folder: {fix}")


def eval_dir_for(train_dir: str) -> str | None:
    """The --eval_dir the trainer's closing line suggests: runs/a/eval for runs/a/train,
    /tmp/x-eval for /tmp/x; None for the default --train_dir."""
    if same(train_dir, flag_default(TrainConfig, "train_dir")):
        return None
    path = os.path.abspath(train_dir)
    if os.path.basename(path) == "train":
        return os.path.join(os.path.dirname(path), "eval")
    return f"{path}-eval"


def warn_of_other_results(eval_dir: str, run_dir: str) -> None:
    """A warning where ``eval_dir`` holds results of another run than ``run_dir``, or of
    an earlier run's checkpoints there: this run's would share their curves."""
    recorded = records.recorded_flags(eval_dir, EVAL)
    scored = recorded and layout.run_folder(recorded.get("checkpoint"),
                                                      recorded.get("checkpoint_dir"))
    if scored and not same(scored, run_dir):
        what = f"the results of another run ({scored})"
    else:
        began = records.last_new_run(run_dir)
        start_s = _start_on_disk(run_dir, began) if began else None
        earlier = recording.results_of_checkpoints_before(eval_dir, run_dir, start_s) \
            if start_s else 0
        if not earlier:
            return
        what = (f"{earlier} result(s) of an earlier run in {run_dir}, of checkpoints saved "
                f"before this run started there at step 0 ({began})")
    logging.warning("--eval_dir=%s holds %s: this run's go beside them, on the same "
                    "TensorBoard curves; pass another --eval_dir to keep them apart",
                    eval_dir, what)


def _start_on_disk(run_dir: str, began: str) -> float | None:
    """When the run began (``began``) by its file system's clock, which stamped its
    checkpoints, from the newest start's record (less 2 s: its time is truncated)."""
    try:
        written_s = os.stat(os.path.join(layout.run_of(run_dir),
                                         records.ENVIRONMENT_FILE)).st_mtime
        last = (records.last_record(run_dir) or {}).get("start_time")
        began_s, last_s = (datetime.datetime.fromisoformat(t).timestamp() for t in (began, last))
    except (OSError, TypeError, ValueError):
        return None  # no record, or one edited by hand
    return written_s - (last_s - began_s) - 2.0


_OUTPUT_FOLDERS = ("train_dir", "eval_dir", "export_dir")
_FOLDERS = (*_OUTPUT_FOLDERS, "checkpoint_dir", "data_dir", "image_dir")


def refuse_folders_that_are_not(flag_values: flags.FlagValues) -> None:
    """A folder flag given as '', or an output folder that is a file, is refused."""
    for name in _FOLDERS:
        value = flag_values[name].value if name in flag_values else None
        if value == "":
            default = flag_values[name].default
            raise flags.ValidationError(
                f"--{name} is empty: name a folder{f' (default: {default})' if default else ''}")
        if name in _OUTPUT_FOLDERS and value and os.path.exists(value) \
                and not os.path.isdir(value):
            raise flags.ValidationError(f"--{name}={value} is a file, not a folder: name a "
                                        f"folder for its output")
