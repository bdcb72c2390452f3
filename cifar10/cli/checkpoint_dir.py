"""A program's --checkpoint_dir: the newest checkpoint in it, and, where it holds none,
the error that says where the checkpoints are (a run's parent folder given for the
run, a data folder, a folder of images) or to train first.  No TensorFlow until a checkpoint is read.
"""

from __future__ import annotations

import os
import shlex

from cifar10.cli import outdirs
from cifar10.cli.flags import pasted
from cifar10.core.errors import Cifar10Error
from cifar10.data import getdata
from cifar10.data import imagefiles
from cifar10.runs import layout


def checkpoint_to_use(checkpoint_dir: str) -> str:
    """The newest checkpoint of ``checkpoint_dir`` that reads (one warning names the
    newer ones that do not: ``checkpoints.newest_that_reads``); a --checkpoint given
    is ``layout.given``'s, checked before TensorFlow loads.

    Raises:
      Cifar10Error: ``checkpoint_dir`` holds no complete checkpoint, or none of its
        newest reads.
    """
    from cifar10.runs import checkpoints

    newest = checkpoints.newest_that_reads(checkpoint_dir)
    if newest is None:
        raise no_checkpoint(checkpoint_dir)
    return newest.path


def checkpoint_that_reads(given: str | None, checkpoint_dir: str) -> str:
    """The one checkpoint a program uses, found to read (TensorFlow loaded): ``given``
    (a --checkpoint, named by ``layout.given``) or else ``checkpoint_to_use``'s
    newest of ``checkpoint_dir``.  Reading it is cheap (the model is a few megabytes)
    beside what a checkpoint that turns out not to read would have cost: a download.

    Raises:
      Cifar10Error: ``given`` does not read, or ``checkpoint_to_use``'s error.
    """
    if not given:
        return checkpoint_to_use(checkpoint_dir)
    from cifar10.runs import checkpoints

    problem = checkpoints.unreadable(given)
    if problem:
        folder = os.path.dirname(given) or "."
        raise Cifar10Error(f"--checkpoint {given} cannot be read ({problem}): pass another "
                           f"checkpoint, or {pasted('checkpoint_dir', folder)} for its newest "
                           f"that reads")
    return given


def no_checkpoint(checkpoint_dir: str, lead: str = "No checkpoint found",
                  or_instead: str = "") -> Cifar10Error:
    """The error for a --checkpoint_dir without a checkpoint: where its trainer is running
    (it holds the run's lock, ``layout.held_by``) and has not saved yet, that it is, with
    ``or_instead`` (a program's other way, such as cifar10-eval's 'leave out
    --run_once ...') after 'run again after its first save'; else ``lead`` ('No
    checkpoint found') in it, and where to look instead, or to train first."""
    holder = layout.held_by(checkpoint_dir)
    if holder is not None:  # "train first" would be wrong: the trainer is at it
        also = f", or {or_instead}" if or_instead else ""
        return Cifar10Error(
            f"No checkpoint in {checkpoint_dir} yet: its trainer is running ({holder}) and "
            f"has not saved one; run again after its first save (every --checkpoint_steps "
            f"steps){also}")
    train = f"cifar10-train --train_dir={shlex.quote(checkpoint_dir)}"
    if not os.path.lexists(checkpoint_dir):
        return Cifar10Error(f"{lead} in {checkpoint_dir}: there is no such folder"
                            f"{_tilde_hint(checkpoint_dir)}; point --checkpoint_dir at a "
                            f"training run's --train_dir, or train first ({train})")
    where = _elsewhere(checkpoint_dir) or (
        f": train first ({train}) or point --checkpoint_dir at a training run")
    return Cifar10Error(f"{lead} in {checkpoint_dir}{where}")


def _tilde_hint(path: str) -> str:
    """Where ``path`` starts with a ~ that the shell left as it is (after '=' it does
    not expand it), how to have it expanded; '' otherwise."""
    if not path.startswith("~"):
        return ""
    return (f" (the shell does not expand a ~ after '=': write --checkpoint_dir "
            f"{path} or {pasted('checkpoint_dir', os.path.expanduser(path))})")


def refuse_a_folder_that_is_no_run(checkpoint_dir: str) -> None:
    """Raises ``no_checkpoint``'s error where ``checkpoint_dir`` holds no checkpoint and
    is a run's parent folder (runs/a for runs/a/train) or a data folder: a polling
    evaluator would wait there for ever.  A folder of no checkpoint otherwise may be
    a run about to start."""
    if not os.path.isdir(checkpoint_dir) or _holds_checkpoints(checkpoint_dir):
        return
    elsewhere = _elsewhere(checkpoint_dir)
    if elsewhere:
        raise Cifar10Error(f"No checkpoint file found in {checkpoint_dir}{elsewhere}")


def _holds_checkpoints(folder: str) -> bool:
    try:
        return layout.holds_checkpoints(folder)
    except Cifar10Error:
        return True  # cannot be read: the evaluator says so as it looks


def _elsewhere(checkpoint_dir: str) -> str:
    """The rest of the error for a --checkpoint_dir without a checkpoint, where it is
    not where the run is: its subfolder that holds checkpoints (a run's parent folder,
    runs/a, given for runs/a/train), or that it is a data folder; '' otherwise."""
    holders = layout.subfolders_with_checkpoints(checkpoint_dir)
    if len(holders) == 1:
        return f"; {holders[0]} holds checkpoints: pass {pasted('checkpoint_dir', holders[0])}"
    if holders:
        names = ", ".join(os.path.basename(folder) for folder in holders)
        return (f"; its subfolders {names} hold checkpoints: pass one of them as "
                f"--checkpoint_dir, such as {pasted('checkpoint_dir', holders[0])}")
    if getdata.is_data_folder(checkpoint_dir):
        return (", a data folder, not a training run: pass the run's --train_dir as "
                "--checkpoint_dir (its data goes in --data_dir)")
    export = outdirs.export_kind(checkpoint_dir)
    if export:
        return (f", {export}, not a training run: pass the --train_dir of the run it was "
                f"exported from as --checkpoint_dir (TensorFlow Serving, saved_model_cli "
                f"and TFLite's converter load the export itself)")
    # (Not "train first" there: the run would be mixed in with the images.)
    if imagefiles.holds_images(checkpoint_dir, depth=0):
        return (", a folder of images, not a training run: pass a run's --train_dir as "
                "--checkpoint_dir")
    if imagefiles.holds_images(checkpoint_dir):  # class folders (or split folders of them)
        one_class = imagefiles.one_class_folder(checkpoint_dir)
        if one_class:  # cifar10-prepare would refuse it: a classifier needs two classes
            return (f", a folder of images, not a training run: pass a run's --train_dir as "
                    f"--checkpoint_dir (to train on it, a classifier needs two or more "
                    f"classes, each in a folder of its own beside {one_class}/, then "
                    f"cifar10-prepare --image_dir={shlex.quote(checkpoint_dir)} "
                    f"--data_dir=<a new folder>)")
        return (f", a folder of images, not a training run: pass a run's --train_dir as "
                f"--checkpoint_dir (to train on its class folders, make a data set of them "
                f"first: cifar10-prepare --image_dir={shlex.quote(checkpoint_dir)} "
                f"--data_dir=<a new folder>)")
    return ""
