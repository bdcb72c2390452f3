"""A training run's checkpoints, read: finding them, a model from one, the run's
class names and whether it completed.  Evaluation and serving read runs through
this module; the trainer writes them through ``rundir.RunDirectory``.  Finding the
checkpoint files by name needs no TensorFlow: that is ``checkpoint_files``, where
its callers find those names.

A run directory (``--train_dir``) holds, each written by the module named:

* ``model.ckpt-<step>.index`` and ``model.ckpt-<step>.data-<i>-of-<n>``: the
  checkpoint after ``<step>`` updates (``rundir``).  TensorFlow writes them in a
  ``model.ckpt-<step>_temp/`` folder first and moves them into place at the end.
* ``checkpoint``: the state file naming the latest checkpoint, kept for
  TensorFlow's own tools (``statefile``).  Nothing here trusts it alone: the
  checkpoints are the files on disk.
* ``training_complete.json``: written when the run reaches its ``max_steps``
  (``rundir``).
* ``class_names.txt``: the names of the classes the run trains on, one per line
  in label order (the data's ``batches.meta.txt``), for cifar10-predict and
  cifar10-export (``rundir``).
* ``flags.txt``, ``environment.jsonl``: how each start was made (``records``).
* ``events.out.tfevents.*.v2``: the training summaries.
* ``cifar10-train.lock``: held (``flock``) by the trainer that uses the directory
  (``lock``).

Every file of a user's that merely starts like these names is left alone: the
patterns match exactly what TensorFlow and the trainer write (``cleanup``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Sequence

import tensorflow as tf
from absl import logging

from cifar10.core.config import WEIGHTS
from cifar10.core.errors import Cifar10Error, DataError, first_line, listed
from cifar10.data import fileformat as ff
from cifar10.data.folder import class_names_in, find_batches_dir
from cifar10.model import Model
from cifar10.runs import records
# Finding the checkpoint files needs no TensorFlow: they are in a module of their own.
from cifar10.runs.checkpoint_files import CLASSES_FILE, COMPLETE_FILE, Checkpoint, find, latest
from cifar10.runs.cleanup import foreign_checkpoint_files

# What reading a missing, partial or foreign checkpoint raises: OpErrors for most
# damage, IndexError for a truncated .data file, AssertionError/ValueError when
# the objects do not match.
READ_ERRORS = (tf.errors.OpError, AssertionError, ValueError, IndexError)

# TensorFlow's AssertionError for objects a checkpoint holds no value for: the count,
# then (on one line, and on to pages of their values) at most 10 of them.
_UNBOUND = re.compile(r"Found (\d+) Python objects that were not bound to checkpointed values.*"
                      r"Showing (\d+) of", re.DOTALL)
_VARIABLE_NAME = re.compile(r"<tf\.Variable '([^':]+)")


def restore_cause(error: BaseException) -> str:
    """Why a checkpoint did not restore into a model, in one line: TensorFlow's first
    line, except where that is its list of the objects the checkpoint has no value
    for, cut inside the first (``[MirroredVariable:{``): how many, and their names
    where it lists them all."""
    text = str(error)
    match = _UNBOUND.match(text.strip())
    if not match:
        return first_line(error)
    count = int(match[1])
    names = sorted(set(_VARIABLE_NAME.findall(text))) if int(match[2]) == count else []
    return (f"it is not a checkpoint of this model: {count} of the variables to restore "
            f"{'is' if count == 1 else 'are'} not in it{': ' + ', '.join(names) if names else ''}")

# How many of a run's newest checkpoints ``newest_that_reads`` tries: enough for the
# few a crash or a full disk damages, few enough that a run of many is not read whole.
TRIED = 3


def unreadable(checkpoint: str) -> str:
    """Why ``checkpoint`` cannot be read, in one line; '' when each of its tensors reads.

    Reads the whole checkpoint: a truncated ``.data`` file shows only when the tensors
    past its end are read.
    """
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    except READ_ERRORS as e:
        return first_line(e) or type(e).__name__
    return ""


def newest_that_reads(directory: str, warn=logging.warning,
                      tried: int = TRIED) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` that reads, as the trainer resumes from the
    newest that restores; None when it holds no complete checkpoint.

    When newer ones are damaged, one ``warn`` line names each and says which is used.

    Raises:
      Cifar10Error: none of its ``tried`` newest checkpoints reads: one line naming
        them, and an older one to pass with --checkpoint if there is one.
    """
    found = find(directory)
    failures = []
    for candidate in reversed(found[-tried:]):
        problem = unreadable(candidate.path)
        if not problem:
            if failures:
                warn(f"Using {candidate.path}, the newest checkpoint in {directory} that "
                     f"reads: {'; '.join(failures)}.")
            return candidate
        failures.append(f"{candidate.name} cannot be read ({problem})")
    if not found:
        return None
    older = found[:-tried]
    fix = (f"pass --checkpoint={older[-1].path}, an older one not tried, if it reads"
           if older else
           f"train again ({start_over(directory)}) or point --checkpoint_dir at another run")
    which = f"none of the {len(failures)} newest checkpoints" if older else "no checkpoint"
    raise Cifar10Error(f"{which} in {directory} can be read: {'; '.join(failures)}; {fix}")


def start_over(directory: str) -> str:
    """How to train again in ``directory``, whose checkpoints do not read, as a clause
    of an error's advice: ``--fresh_start`` deletes them; but it deletes only the
    checkpoints the trainer wrote whole, and refuses while another file has a
    checkpoint's name (a .index cut short: ``cleanup.foreign_checkpoint_files``), so
    those are named, to be moved out first."""
    command = f"cifar10-train --train_dir={shlex.quote(directory)} --fresh_start"
    foreign = foreign_checkpoint_files(directory)
    if not foreign:
        return f"{command} deletes them"
    return (f"move {listed(foreign)} out of {directory} (damaged, or not the trainer's: "
            f"--fresh_start deletes only the checkpoints it wrote whole), then {command} "
            f"deletes the rest")


# The last layer's biases: one per class, so their shape tells a run's class count.
_OUTPUTS_KEY = "model/softmax_linear/biases/.ATTRIBUTES/VARIABLE_VALUE"


def num_outputs(checkpoint: str) -> int:
    """The number of classes (logits) of the model in ``checkpoint``.

    Raises:
      One of ``READ_ERRORS``: the checkpoint cannot be read or holds no model of
        this trainer's.
    """
    shapes = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
    if _OUTPUTS_KEY not in shapes:
        raise ValueError(f"{checkpoint} holds no cifar10 model (no softmax_linear layer)")
    return int(shapes[_OUTPUTS_KEY][0])


def load_model(checkpoint: str, weights: str = "averages",
               compute_dtype: tf.DType = tf.float32) -> tuple[Model, int]:
    """A model holding the ``weights`` of ``checkpoint``, and the checkpoint's step.

    Args:
      checkpoint: a checkpoint prefix (``Checkpoint.path``).
      weights: 'averages' (the moving averages) or 'raw' (the trained weights).
      compute_dtype: the model's compute type.

    Raises:
      ValueError: ``weights`` is not 'averages' or 'raw'.
      One of ``READ_ERRORS``: the checkpoint is missing, partial or not one of
        this trainer's.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    model = Model(compute_dtype=compute_dtype, trainable=False,
                  num_classes=num_outputs(checkpoint))
    step = tf.Variable(0, dtype=tf.int64)
    # The trainer stores the averages in a second copy of the model under
    # 'averages': restoring that copy into `model` gives the averaged weights.
    key = "averages" if weights == "averages" else "model"
    ckpt = tf.train.Checkpoint(step=step, **{key: model})
    ckpt.read(checkpoint).assert_existing_objects_matched().expect_partial()
    return model, int(step.numpy())


def read_model(checkpoint: str, weights: str = "averages") -> tuple[Model, int]:
    """``load_model``, with a checkpoint that cannot be read as one ``Cifar10Error`` line."""
    try:
        return load_model(checkpoint, weights)
    except READ_ERRORS as e:
        raise Cifar10Error(f"cannot read checkpoint {checkpoint}: {restore_cause(e)}") from e


def trained_class_names(directory: str, num_classes: int | None = None,
                        fallback: Sequence[str] | None = None) -> tuple[str, ...]:
    """The class names the run in ``directory`` recorded in its class_names.txt (the
    classes it was trained on); CIFAR-10's if it recorded none.

    Not the names of a data folder: those are ``data.folder.class_names``.

    Args:
      directory: the run directory.
      num_classes: the classes of the run's model (``num_outputs``); by default those
        of its newest checkpoint, when one can be read.
      fallback: names to use, with one warning, when the file is damaged and they
        are as many as the model's classes (the evaluator's data's names).

    Raises:
      DataError: the file is damaged (a folder in its place, not UTF-8, no names,
        a name twice) or lists another number of names than the model has classes:
        one line naming it and the fix.
    """
    if num_classes is None:
        num_classes = _newest_model_classes(directory)
    names, problem = recorded_class_names(directory, num_classes)
    if not problem:
        return names or ff.CLASS_NAMES
    path = os.path.join(directory, CLASSES_FILE)
    count = f"{num_classes} " if num_classes else ""
    if fallback is not None and len(fallback) == (num_classes or len(fallback)):
        if path not in _warned:
            _warned.add(path)
            logging.warning("%s %s: the run's %sclasses are taken to be the data's (%s).",
                            path, problem, count, listed(list(fallback)))
        return tuple(fallback)
    if os.path.isdir(path):
        where, meta = "in a file of that name", None  # a cp would copy into the folder
    else:
        where, meta = "in it", _trained_on_meta_file(directory, num_classes)
    source = (f", e.g. cp {shlex.quote(meta)} {shlex.quote(path)}" if meta else
              f" (the {ff.META_FILE} of the data it was trained on)")
    raise DataError(f"{path} {problem}: write the run's {count}class names {where}, one per "
                    f"line in label order{source}")


def _trained_on_meta_file(directory: str, num_classes: int | None) -> str | None:
    """The ``batches.meta.txt`` of the data folder the run in ``directory`` was trained
    on, where its records tell the folder and the file there lists ``num_classes``
    sound names (any number, for None); else None.

    The folder is the one its latest start read (environment.jsonl's ``settings``'
    ``data_dir``), or else the one its flags.txt's --data_dir holds, for a run on data
    of CIFAR-10's format (not --synthetic_data's or CIFAR-100's folders, which are
    made under it) and an absolute --data_dir (a relative one was relative to where
    the trainer started, which is not recorded).
    """
    folders = []
    record = records.last_record(directory) or {}
    settings = record.get("settings")
    read = settings.get("data_dir") if isinstance(settings, dict) else None
    if isinstance(read, str) and read:
        folders.append(read)
    recorded = records.recorded_flags(directory) or {}
    data_dir = recorded.get("data_dir", "")
    if (os.path.isabs(data_dir) and recorded.get("synthetic_data", "false") == "false"
            and recorded.get("dataset", ff.CIFAR10.name) == ff.CIFAR10.name):
        found = find_batches_dir(data_dir)
        if found:
            folders.append(found)
    for folder in folders:
        meta = os.path.join(folder, ff.META_FILE)
        names, problem, _ = class_names_in(meta)
        if names and not problem and num_classes in (None, len(names)):
            return meta
    return None


# The damaged class names files warned about, each once per process.
_warned: set[str] = set()


def recorded_class_names(directory: str, num_classes: int | None = None
                         ) -> tuple[tuple[str, ...] | None, str]:
    """(the names the run in ``directory`` recorded, or None; what is wrong with its
    class_names.txt, or '').

    No file is (None, '') for a model of CIFAR-10's 10 classes (or of unknown
    classes: ``num_classes`` None); it is a problem for a model of another count, as
    a file listing other than ``num_classes`` names is (but for fewer names and 10
    classes: a run of before the model's outputs followed the data's classes).
    """
    names, problem, _ = class_names_in(os.path.join(directory, CLASSES_FILE))
    if problem:
        return None, problem
    if names is None:
        if num_classes in (None, ff.NUM_CLASSES):
            return None, ""
        return None, f"is missing and the run's model has {num_classes} classes"
    # Fewer names than a model of 10 classes: a run of when the model always had
    # CIFAR-10's 10 outputs, whatever the data's classes (it predicts among its own).
    legacy = num_classes == ff.NUM_CLASSES and len(names) < num_classes
    if num_classes is not None and len(names) != num_classes and not legacy:
        return None, (f"lists {len(names)} class names and the run's model has "
                      f"{num_classes} classes")
    return names, ""


def _newest_model_classes(directory: str) -> int | None:
    """The classes of the model of the newest checkpoint in ``directory``; None when
    there is none or it cannot be read."""
    newest = latest(directory)
    try:
        return num_outputs(newest.path) if newest else None
    except READ_ERRORS:
        return None


def completed_step(directory: str) -> int | None:
    """The step at which the run in ``directory`` was marked complete, or None."""
    try:
        with open(os.path.join(directory, COMPLETE_FILE)) as f:
            step = json.load(f)["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) else None
