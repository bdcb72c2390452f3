"""A run's checkpoints, read: which one a run resumes from (its files on disk; the
state file is a hint), a model from one, the run's class names, whether it completed."""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Callable, Sequence

import tensorflow as tf
from absl import logging

from cifar10.core.config import WEIGHTS
from cifar10.core.errors import Cifar10Error, DataError, first_line, listed
from cifar10.data import fileformat as ff
from cifar10.data.folder import class_names_in
from cifar10.model import Model
from cifar10.runs import layout
from cifar10.runs.cleanup import foreign_checkpoint_files
from cifar10.runs.layout import (CLASSES_FILE, COMPLETE_FILE, PREFIX, Checkpoint,
                                 checkpoint_path, find, latest)

# What reading a missing, partial or foreign checkpoint raises: OpErrors for most
# damage, IndexError for a truncated .data file, AssertionError/ValueError when the
# objects do not match.
READ_ERRORS = (tf.errors.OpError, AssertionError, ValueError, IndexError)
# How many of a run's newest checkpoints ``newest_that_reads`` tries.
TRIED = 3
# TensorFlow's error for objects a checkpoint holds no value for: the count, then
# (on to pages of their values) at most 10 of them.
_UNBOUND = re.compile(r"Found (\d+) Python objects that were not bound to checkpointed values.*"
                      r"Showing (\d+) of", re.DOTALL)
_VARIABLE_NAME = re.compile(r"<tf\.Variable '([^':]+)")
# The last layer's biases: one per class.
_OUTPUTS_KEY = "model/softmax_linear/biases/.ATTRIBUTES/VARIABLE_VALUE"


def restore_cause(error: BaseException) -> str:
    """Why a checkpoint did not restore, in one line: TensorFlow's first line, or for
    its list of unmatched objects, how many and (where it lists all) their names."""
    text = str(error)
    match = _UNBOUND.match(text.strip())
    if not match:
        return first_line(error)
    count = int(match[1])
    names = sorted(set(_VARIABLE_NAME.findall(text))) if int(match[2]) == count else []
    return (f"it is not a checkpoint of this model: {count} of the variables to restore "
            f"{'is' if count == 1 else 'are'} not in it{': ' + ', '.join(names) if names else ''}")


def restore(directory: str, checkpoint: tf.train.Checkpoint, print_fn: Callable[[str], None],
            rewrite_state: bool = True,
            warn: Callable[[str], None] | None = None) -> Checkpoint | None:
    """Restores into ``checkpoint`` the newest checkpoint in ``directory`` that restores
    and returns it (None where there is none; Cifar10Error where none restores).  When
    that is not the one a sound state file names, one ``warn`` line says why, and (with
    ``rewrite_state``: the chief) the state file is rewritten."""
    complete, incomplete = layout.scan(directory)
    named, problem = layout.named_step(directory, set(complete) | set(incomplete))
    if not complete and not incomplete:
        if named is not None:  # every checkpoint of an earlier run was deleted
            print_fn(f"Starting from step 0: no checkpoint is left in {directory} ({problem}).")
        return None
    reasons = [problem] if problem else []
    restored = None
    for step in reversed(complete):
        candidate = Checkpoint(step, checkpoint_path(directory, step))
        try:
            checkpoint.read(candidate.path).assert_existing_objects_matched()
        except READ_ERRORS as e:
            reasons.append(f"{candidate.name} does not restore ({restore_cause(e)})")
            continue
        restored = candidate
        break
    newest = restored.step if restored else -1
    reasons += [f"{PREFIX}-{s} is incomplete ({why})"
                for s, why in sorted(incomplete.items(), reverse=True) if s > newest]
    if restored is None:
        raise Cifar10Error(
            f"no checkpoint in {directory} can be restored: {'; '.join(reasons)}. "
            f"To keep them and start a new run, move them aside or choose another "
            f"--train_dir; to start over, {start_over(directory)}")
    if named is not None and named < restored.step:
        reasons.append(f"the state file names {PREFIX}-{named}, an older one")
    if reasons:
        (warn or logging.warning)(f"Using {restored.path}, the newest checkpoint that restores: "
                                  f"{'; '.join(reasons)}.")
        if rewrite_state:
            layout.write_state(directory, [Checkpoint(s, checkpoint_path(directory, s))
                                           for s in complete if s <= restored.step])
    return restored


def unreadable(checkpoint: str) -> str:
    """Why ``checkpoint`` cannot be read, in one line; '' when each of its tensors reads
    (a truncated ``.data`` file shows only when the tensors past its end are read)."""
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    except READ_ERRORS as e:
        return first_line(e) or type(e).__name__
    return ""


def newest_that_reads(directory: str, warn=logging.warning,
                      tried: int = TRIED) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` that reads, among its ``tried`` newest
    (one ``warn`` line names those skipped); None where there is none, Cifar10Error
    where none of them reads."""
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
    """How to train again in ``directory``, whose checkpoints do not read: --fresh_start,
    after moving out the files it refuses to delete (``foreign_checkpoint_files``)."""
    command = f"cifar10-train --train_dir={shlex.quote(directory)} --fresh_start"
    foreign = foreign_checkpoint_files(directory)
    if not foreign:
        return f"{command} deletes them"
    return (f"move {listed(foreign)} out of {directory} (damaged, or not the trainer's: "
            f"--fresh_start deletes only the checkpoints it wrote whole), then {command} "
            f"deletes the rest")


def num_outputs(checkpoint: str) -> int:
    """The number of classes of the model in ``checkpoint`` (one of ``READ_ERRORS``
    where it cannot be read or holds no model of this trainer's)."""
    shapes = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
    if _OUTPUTS_KEY not in shapes:
        raise ValueError(f"{checkpoint} holds no cifar10 model (no softmax_linear layer)")
    return int(shapes[_OUTPUTS_KEY][0])


def load_model(checkpoint: str, weights: str = "averages",
               compute_dtype: tf.DType = tf.float32) -> tuple[Model, int]:
    """A model holding the ``weights`` ('averages' or 'raw') of ``checkpoint``, and its
    step (one of ``READ_ERRORS`` where the checkpoint is missing, partial or foreign)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    model = Model(compute_dtype=compute_dtype, trainable=False,
                  num_classes=num_outputs(checkpoint))
    step = tf.Variable(0, dtype=tf.int64)
    # The trainer keeps the averages in a second copy of the model under 'averages'.
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


_warned: set[str] = set()  # the damaged class names files warned about, each once


def trained_class_names(directory: str, num_classes: int | None = None,
                        fallback: Sequence[str] | None = None) -> tuple[str, ...]:
    """The class names the run in ``directory`` recorded (CIFAR-10's if none), for a
    model of ``num_classes`` (default: its newest checkpoint's).  Where the file is
    damaged or lists another count: ``fallback`` (the data's names) with one warning if
    they are as many as the model's classes, else DataError."""
    if num_classes is None:
        newest = latest(directory)
        try:
            num_classes = num_outputs(newest.path) if newest else None
        except READ_ERRORS:
            num_classes = None
    names, problem = recorded_class_names(directory, num_classes)
    if not problem:
        return names or ff.CLASS_NAMES
    path = os.path.join(layout.run_of(directory), CLASSES_FILE)
    count = f"{num_classes} " if num_classes else ""
    if fallback is not None and len(fallback) == (num_classes or len(fallback)):
        if path not in _warned:
            _warned.add(path)
            logging.warning("%s %s: the run's %sclasses are taken to be the data's (%s).",
                            path, problem, count, listed(list(fallback)))
        return tuple(fallback)
    raise DataError(f"{path} {problem}: write the run's {count}class names in a file of "
                    f"that name, one per line in label order (the {ff.META_FILE} of the "
                    f"data it was trained on)")


def recorded_class_names(directory: str, num_classes: int | None = None
                         ) -> tuple[tuple[str, ...] | None, str]:
    """(the names the run in ``directory`` recorded, or None; what is wrong with its
    class_names.txt, or ''), for a model of ``num_classes`` classes (None: unknown).
    No file is sound for 10 classes; fewer names than 10 is a run from when the model
    always had CIFAR-10's 10 outputs."""
    names, problem, _ = class_names_in(os.path.join(layout.run_of(directory), CLASSES_FILE))
    if problem:
        return None, problem
    if names is None:
        if num_classes in (None, ff.NUM_CLASSES):
            return None, ""
        return None, f"is missing and the run's model has {num_classes} classes"
    legacy = num_classes == ff.NUM_CLASSES and len(names) < num_classes
    if num_classes is not None and len(names) != num_classes and not legacy:
        return None, (f"lists {len(names)} class names and the run's model has "
                      f"{num_classes} classes")
    return names, ""


def completed_step(directory: str) -> int | None:
    """The step at which the run of ``directory`` (its folder, or its best/) is marked
    complete, else None: once it is, no new checkpoint comes to ``directory``, and its
    newest up to that step is final."""
    try:
        with open(os.path.join(layout.run_of(directory), COMPLETE_FILE)) as f:
            step = json.load(f)["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) else None
