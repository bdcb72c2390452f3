"""A program's --checkpoint_dir: the newest checkpoint in it that reads, else the error
that says where to look.  No TensorFlow until a checkpoint is read.
"""

from __future__ import annotations

import os
import shlex

from absl import logging

from cifar10.cli import outdirs
from cifar10.cli.flags import pasted
from cifar10.core.errors import Cifar10Error
from cifar10.runs import layout
from cifar10.runs import records


def checkpoint_to_use(checkpoint_dir: str) -> str:
    """The newest checkpoint of ``checkpoint_dir`` that reads, else Cifar10Error."""
    from cifar10.runs import checkpoints

    newest = checkpoints.newest_that_reads(checkpoint_dir)
    if newest is None:
        raise no_checkpoint(checkpoint_dir)
    return newest.path


def checkpoint_that_reads(given: str | None, checkpoint_dir: str) -> str:
    """``given`` (a --checkpoint) if it reads, else the newest of ``checkpoint_dir``."""
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
    """The error for a --checkpoint_dir without a checkpoint, saying where to look or to
    train first (``or_instead``: the program's other way while its trainer runs)."""
    run = layout.run_of(checkpoint_dir)
    if run != checkpoint_dir:
        return Cifar10Error(f"{lead} in {checkpoint_dir}: the run in {run} keeps its best "
                            f"checkpoint there from its first validation (cifar10-train "
                            f"--eval_every_steps); pass {pasted('checkpoint_dir', run)} for "
                            f"the run's newest")
    holder = layout.held_by(checkpoint_dir)
    if holder is not None:
        also = f", or {or_instead}" if or_instead else ""
        return Cifar10Error(
            f"No checkpoint in {checkpoint_dir} yet: its trainer is running ({holder}) and "
            f"has not saved one; run again after its first save (every --checkpoint_steps "
            f"steps){also}")
    holders = layout.subfolders_with_checkpoints(checkpoint_dir)
    if holders:
        return Cifar10Error(f"{lead} in {checkpoint_dir}; {holders[0]} holds checkpoints: "
                            f"pass {pasted('checkpoint_dir', holders[0])}")
    train = f"cifar10-train --train_dir={shlex.quote(checkpoint_dir)}"
    if not os.path.lexists(checkpoint_dir):
        return Cifar10Error(f"{lead} in {checkpoint_dir}: there is no such folder; point "
                            f"--checkpoint_dir at a training run's --train_dir, or train first "
                            f"({train})")
    owner = outdirs.whose(checkpoint_dir)
    if owner in ("", outdirs.TRAIN):  # a run to start there
        return Cifar10Error(f"{lead} in {checkpoint_dir}: train first ({train}) or point "
                            f"--checkpoint_dir at a training run")
    what = f"{owner}'s folder" if owner else "a folder of other files"
    return Cifar10Error(f"{lead} in {checkpoint_dir}, {what}, not a training run: point "
                        f"--checkpoint_dir at a training run's --train_dir")


def refuse_a_folder_that_is_no_run(checkpoint_dir: str, wait_for_run: bool) -> None:
    """Refuses a folder an evaluator would wait on for ever: no trainer's, or none
    (a mistyped path) unless ``wait_for_run``."""
    if not wait_for_run and not os.path.exists(checkpoint_dir):
        raise Cifar10Error(f"{pasted('checkpoint_dir', checkpoint_dir)} does not exist: check "
                           f"the path, or give --wait_for_run to wait for cifar10-train to "
                           f"start there")
    done_without_one = not layout.latest(checkpoint_dir) and os.path.exists(
        os.path.join(layout.run_of(checkpoint_dir), layout.COMPLETE_FILE))
    if done_without_one or outdirs.whose(checkpoint_dir) not in ("", outdirs.TRAIN):
        raise no_checkpoint(checkpoint_dir, "No checkpoint file found")


def warn_if_trained_on_synthetic_data(checkpoint: str) -> None:
    """A warning where the run of ``checkpoint`` recorded --synthetic_data."""
    run_dir = layout.run_of(os.path.dirname(os.path.abspath(checkpoint)))
    recorded = records.recorded_flags(run_dir)
    if recorded is not None and recorded.get("synthetic_data") == "true":
        logging.warning("the model of %s was trained on SYNTHETIC data (--synthetic_data in "
                        "%s): its classes say nothing about real images", run_dir,
                        os.path.join(run_dir, records.FLAGS_FILE))
