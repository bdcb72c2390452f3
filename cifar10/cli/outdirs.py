"""The folders the programs write to, each kept to its own program: the trainer's
``--train_dir`` is neither an evaluator's folder, an export folder, a data folder nor
a folder of data sets (a --data_dir), the evaluator's ``--eval_dir`` neither a
training run's directory, an export folder nor one of data, and the exporter's
``--export_dir`` none of a run's, an evaluator's, one of data or one of images; and
every program's folder flags name folders (``refuse_folders_that_are_not``, as the
flags are parsed).
Without these checks one program would write its records among the other's, and
``--fresh_start`` would remove files of the same names that the trainer did not
write (``runs.cleanup``).

Checked before TensorFlow loads: no TensorFlow here.
"""

from __future__ import annotations

import datetime
import os
import re

from absl import flags
from absl import logging

from cifar10.cli.flags import pasted
from cifar10.cli import suggestions
from cifar10.cli import whose
from cifar10.core.errors import Cifar10Error
from cifar10.data import folder as datafolder
from cifar10.data import getdata
from cifar10.data import imagefiles
from cifar10.evaluation import recording
from cifar10.runs import layout
from cifar10.runs import records


def refuse_foreign_eval_dir(eval_dir: str, checkpoint_dir: str) -> None:
    """Raises Cifar10Error when ``eval_dir`` is a training run's directory
    (``refuse_training_dir``), an export folder, a data folder or a folder of data sets."""
    refuse_training_dir(eval_dir, checkpoint_dir)
    suggested = suggestions.eval_dir_for(checkpoint_dir)
    _refuse_export_folder("eval_dir", eval_dir, "a directory of the evaluator's own", suggested)
    _refuse_data_folder("eval_dir", eval_dir, "the evaluator's results", suggested)


def refuse_training_dir(eval_dir: str, checkpoint_dir: str) -> None:
    """Raises Cifar10Error when ``eval_dir`` is a training run's directory (the run
    scored, ``checkpoint_dir``, or another): the evaluator would write into the
    trainer's records.  The folder it suggests is one for the run scored."""
    _refuse_run_folder("eval_dir", eval_dir, checkpoint_dir, "scores",
                       "a directory of the evaluator's own", suggestions.eval_dir_for(checkpoint_dir))


def _refuse_run_folder(flag: str, folder: str, run_dir: str, verb: str, choose: str,
                       suggested: str) -> None:
    """Raises Cifar10Error when ``folder`` (the value of --``flag``) is the directory
    of the run the program ``verb``s (``run_dir``) or of another training run: ``choose``
    one, such as ``suggested``."""
    trainer_files = whose.trainer_files(folder)
    same = whose.same(folder, run_dir)
    if same or trainer_files:
        what = f"the run it {verb}" if same else f"a training run ({', '.join(trainer_files)})"
        raise Cifar10Error(
            f"--{flag}={folder} is the directory of {what}, where cifar10-train keeps its "
            f"checkpoints and records: choose {choose}, such as {suggested}")


def _refuse_evaluators_folder(flag: str, folder: str, choose: str, suggested: str) -> None:
    """Raises Cifar10Error when ``folder`` (the value of --``flag``) is an evaluator's:
    its flags.txt records a cifar10-eval start."""
    if records.recorded_flags(folder, "cifar10-eval") is not None:
        raise Cifar10Error(
            f"--{flag}={folder} is an evaluator's folder (its {records.FLAGS_FILE} records "
            f"cifar10-eval): choose {choose}, such as {suggested}")


# What a program that fetches data into --data_dir says to do instead of a run's folder.
FETCH_INSTEAD = ("pass the folder that holds the data (cifar-10-batches-bin/), or a new "
                 "folder to download it into")


def refuse_run_as_data_dir(data_dir: str, followed: str = "", fix: str = FETCH_INSTEAD) -> None:
    """Raises Cifar10Error when ``data_dir`` (--data_dir, ``followed`` from a run's
    flags.txt if it says so) is a training run's folder (``whose.trainer_files``) or an
    evaluator's: data fetched, generated or written there would go among the run's
    checkpoints and records, which ``--fresh_start`` and the leftovers' cleanup take
    for the run's own.  Called before the data is looked for; ``fix`` says what to pass
    instead."""
    if not os.path.isdir(data_dir):
        return
    found = whose.trainer_files(data_dir)
    if found:
        what = f"a training run's folder ({', '.join(found)})"
    elif records.recorded_flags(data_dir, "cifar10-eval") is not None:
        what = f"an evaluator's folder (its {records.FLAGS_FILE} records cifar10-eval)"
    else:
        return
    origin = f" ({followed})" if followed else ""
    raise Cifar10Error(f"--data_dir={data_dir}{origin} is {what}, not a data folder: {fix}")


# What goes in each program's output folder.
_OUTPUT = {"train_dir": "the run's checkpoints and records", "eval_dir": "the evaluator's results"}


def refuse_output_as_data_dir(flag: str, folder: str, data_dir: str, followed: str = "") -> None:
    """Raises Cifar10Error when ``data_dir`` (--data_dir, ``followed`` from a run's
    flags.txt if it says so) is the same folder as ``folder``, the program's output
    folder (--``flag``: train_dir or eval_dir): the first start would put the data there,
    and every later one refuse the folder, as a run's or an evaluator's folder for data
    (``refuse_run_as_data_dir``) or as a folder of data sets for output.  Data already
    there is left where it is."""
    if not os.path.realpath(data_dir) == os.path.realpath(folder):
        return
    origin = f" ({followed})" if followed else ""
    suggested = suggestions.beside(folder, "data", whose.is_empty_folder)
    raise Cifar10Error(
        f"--data_dir={data_dir}{origin} is the --{flag} too ({_OUTPUT[flag]} would go among "
        f"the data, and later starts would refuse the folder as one or the other): give them "
        f"different folders, such as {pasted('data_dir', suggested)}")


def warn_of_another_runs_results(eval_dir: str, run_dir: str) -> None:
    """A warning when the evaluator's latest start in ``eval_dir`` scored another run
    than ``run_dir``: the results of both would share results.jsonl and TensorBoard's
    curves (the default --eval_dir, /tmp/cifar10_eval, is every run's)."""
    scored = whose.scored_run(eval_dir)
    if scored and not whose.same(scored, run_dir):
        logging.warning("--eval_dir=%s holds the results of another run (%s): this run's go "
                        "beside them, on the same TensorBoard curves; pass --eval_dir=%s to "
                        "keep them apart", eval_dir, scored, suggestions.eval_dir_for(run_dir))


def warn_of_an_earlier_runs_results(eval_dir: str, run_dir: str) -> None:
    """A warning where ``eval_dir`` holds results of ``run_dir``'s checkpoints saved
    before its run started at step 0: an earlier run in the same folder (before a
    --fresh_start, such as the README's quick start on generated data and CIFAR-10
    after it), whose results this run's would join on the same curves.

    The times compared are the file system's, not the evaluator's clock (which may
    differ from the trainer's machine's): each result's ``checkpoint_mtime_ns`` and the
    run's start on the same clock (``_new_run_start_on_disk``)."""
    began = records.last_new_run(run_dir)
    start_s = _new_run_start_on_disk(run_dir, began) if began else None
    earlier = recording.results_of_checkpoints_before(eval_dir, run_dir, start_s) if start_s else 0
    if earlier:
        logging.warning(
            "--eval_dir=%s holds %d result(s) of an earlier run in %s, of checkpoints saved "
            "before this run started there at step 0 (%s): this run's go beside them, on the "
            "same TensorBoard curves; pass --eval_dir=%s to keep them apart", eval_dir, earlier,
            run_dir, began, suggestions.beside(run_dir, "eval", whose.is_empty_folder))


# Seconds by which the run's start on the file system's clock is taken as earlier than
# reckoned: a start's time is recorded to the second (truncated) before its record is
# written, so the reckoning can be up to a second late; a new run's checkpoints, all
# saved after its start, must not pass for an earlier run's.  (An earlier run's last
# save comes more than 2 s before: its trainer ended, and the new one loaded
# TensorFlow before it recorded its start.)
_START_MARGIN_S = 2.0


def _new_run_start_on_disk(run_dir: str, began: str) -> float | None:
    """When the run in ``run_dir`` began at step 0 (``began``, its header's time), in
    seconds since the epoch by the clock of the run directory's file system, the clock
    that also stamped its checkpoint files; None where the records do not tell.

    The start a run's records were last written for (environment.jsonl's newest
    record) is stamped twice: its time by the trainer's clock, and the file's
    modification time by the file system's; the offset between the two, applied to
    ``began``, puts the run's start on the file system's clock.  (Were the run
    resumed since on a machine whose clock differs from the one it began on, that
    difference would remain.)"""
    path = os.path.join(run_dir, records.ENVIRONMENT_FILE)
    try:
        written_s = os.stat(path).st_mtime
    except OSError:
        return None
    last = (records.last_record(run_dir) or {}).get("start_time")
    try:
        began_s, last_s = (datetime.datetime.fromisoformat(t).timestamp() for t in (began, last))
    except (TypeError, ValueError):
        return None  # a record edited by hand: nothing to tell the runs apart by
    return written_s - (last_s - began_s) - _START_MARGIN_S


def refuse_foreign_train_dir(train_dir: str) -> None:
    """Raises Cifar10Error when ``train_dir`` holds CIFAR-format data, or when there is
    no sign of a training run in it (no cifar10-train start, no checkpoint, no
    trainer's lock: a run resumes, also one an older evaluator wrote into or one that
    holds its data) and it is an evaluator's folder (its flags.txt records a
    cifar10-eval start), an export folder or a folder of data sets."""
    run = bool(whose.trainer_files(train_dir))
    if not run:
        choose = "a directory of the run's own"
        _refuse_evaluators_folder("train_dir", train_dir, choose,
                                  suggestions.beside(train_dir, "train", whose.is_empty_folder))
        _refuse_export_folder("train_dir", train_dir, choose, suggestions.beside(
            _exports_folder(train_dir), "train", whose.is_empty_folder))
        _refuse_runs_parent(train_dir)
    _refuse_data_folder("train_dir", train_dir, "the run's checkpoints and records",
                        suggestions.train_dir_instead(train_dir), data_sets=not run)


def _refuse_runs_parent(train_dir: str) -> None:
    """Raises Cifar10Error when ``train_dir``, no run itself, holds one in a subfolder
    (runs/a given for runs/a/train): a new run would start beside it, where resuming it
    was meant."""
    runs = layout.subfolders_with_checkpoints(train_dir)
    if runs:
        held = (f"a training run, {runs[0]}" if len(runs) == 1 else
                f"training runs ({', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''})")
        raise Cifar10Error(
            f"--train_dir={train_dir} is no training run but holds {held}: pass "
            f"{pasted('train_dir', runs[0])} to resume it, or a folder of a new "
            f"run's own")


def refuse_foreign_export_dir(export_dir: str, run_dir: str) -> None:
    """Raises Cifar10Error when ``export_dir`` is a training run's directory (the run
    exported, ``run_dir``, or another), an evaluator's folder, a data folder or a folder
    of images: the version folders would go among their files.  A folder of earlier
    exports (numbered version folders) is the exporter's own."""
    suggested = suggestions.export_dir_for(run_dir)
    choose = "a folder for the exports"
    _refuse_run_folder("export_dir", export_dir, run_dir, "exports", choose, suggested)
    _refuse_evaluators_folder("export_dir", export_dir, choose, suggested)
    _refuse_data_folder("export_dir", export_dir, "the exports", suggested)
    _refuse_images_folder("export_dir", export_dir, choose, suggested)


def _refuse_images_folder(flag: str, folder: str, choose: str, suggested: str) -> None:
    """Raises Cifar10Error when ``folder`` (the value of --``flag``) holds image files,
    loose or in class folders (``imagefiles.holds_images``; a program's folder, such as
    an evaluator's with its pictures, is not one): a user's images, among which the
    other programs would then take the folder for the program's."""
    if not imagefiles.holds_images(folder):
        return
    loose = [os.path.basename(path) for path in imagefiles.images_in([folder])]
    held = [name for name in imagefiles.image_folders(folder) if name != "."]
    shown = (", ".join(loose[:2]) + (", ..." if len(loose) > 2 else "") if loose
             else f"in {', '.join(held)}" if held else "")
    raise Cifar10Error(f"--{flag}={folder} is a folder of images{f' ({shown})' if shown else ''}"
                       f": choose {choose}, such as {suggested}")


def _refuse_data_folder(flag: str, folder: str, what: str, suggested: str,
                        data_sets: bool = True) -> None:
    """Raises Cifar10Error when ``folder`` (the value of --``flag``) holds data files,
    or (``data_sets``) is a folder of data sets (``_refuse_data_sets_folder``):
    ``what`` goes in a folder outside the data, such as ``suggested``."""
    data = datafolder.data_files_in(folder)
    if data:
        raise Cifar10Error(
            f"--{flag}={folder} holds data files ({', '.join(data[:2])}"
            f"{', ...' if len(data) > 2 else ''}): choose a directory for {what}, outside "
            f"the data, such as {suggested}")
    if data_sets:
        _refuse_data_sets_folder(flag, folder, what, suggested)


def _refuse_data_sets_folder(flag: str, folder: str, what: str, suggested: str) -> None:
    """Raises Cifar10Error when ``folder`` (the value of --``flag``) is a folder of data
    sets, as a --data_dir is: it holds a data folder (cifar-10-batches-bin/, CIFAR-100's,
    cifar10-prepare's, --synthetic_data's synthetic/), where the programs download,
    convert and generate data."""
    held = _data_folders_in(folder)
    if held:
        raise Cifar10Error(
            f"--{flag}={folder} is a folder of data sets, as a --data_dir is (it holds "
            f"{', '.join(held)}): choose a directory for {what}, outside the data, such as "
            f"{suggested}")


def _data_folders_in(folder: str) -> list[str]:
    """The subfolders of ``folder`` that are data folders or hold one ('synthetic/'),
    where ``folder`` is a --data_dir of data downloaded, converted or generated there
    (``getdata.is_data_folder``); none otherwise."""
    if not os.path.isdir(folder) or not getdata.is_data_folder(folder):
        return []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [f"{name}/" for name in names
            if os.path.isdir(os.path.join(folder, name))
            and getdata.is_data_folder(os.path.join(folder, name))]


def _refuse_export_folder(flag: str, folder: str, choose: str, suggested: str) -> None:
    """Raises Cifar10Error when ``folder`` (the value of --``flag``) is an export folder:
    a SavedModel (a version folder cifar10-export wrote), or a folder of exports (it
    holds numbered SavedModel folders, which TensorFlow Serving loads)."""
    what = export_kind(folder)
    if what:
        raise Cifar10Error(f"--{flag}={folder} is {what}: choose {choose}, such as {suggested}")


def export_kind(folder: str) -> str:
    """What export folder ``folder`` is: 'an export (a SavedModel: saved_model.pb)' (a
    version folder cifar10-export wrote), 'a folder of exports (SavedModel version
    folders 5, 10)' (which TensorFlow Serving loads); '' for any other folder."""
    if layout.is_saved_model(folder):
        return "an export (a SavedModel: saved_model.pb)"
    versions = _export_versions(folder)
    if not versions:
        return ""
    return (f"a folder of exports (SavedModel version folder"
            f"{'s' if len(versions) > 1 else ''} {', '.join(versions[:3])}"
            f"{', ...' if len(versions) > 3 else ''})")


_VERSION = re.compile(r"[0-9]+")


def _export_versions(folder: str) -> list[str]:
    """The numbered SavedModel folders in ``folder`` (its exports' versions), in order;
    none when it cannot be read."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted((name for name in names if _VERSION.fullmatch(name)
                   and layout.is_saved_model(os.path.join(folder, name))), key=int)


def _exports_folder(folder: str) -> str:
    """The folder of exports ``folder`` is in, when it is one of their version folders
    (runs/a/export for runs/a/export/100: a folder suggested beside it goes beside
    the exports, not among them); else ``folder``."""
    path = os.path.abspath(folder)
    if _VERSION.fullmatch(os.path.basename(path)) and layout.is_saved_model(path):
        return os.path.dirname(path)
    return folder


# The folder flags; the programs write into the first three (making them if need be).
_OUTPUT_FOLDERS = ("train_dir", "eval_dir", "export_dir")
_FOLDERS = (*_OUTPUT_FOLDERS, "checkpoint_dir", "data_dir", "image_dir")


def refuse_folders_that_are_not(flag_values: flags.FlagValues) -> None:
    """A folder flag given as '' (which would mean the current directory), or an
    output folder that is a file, is a flag error naming it."""
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
