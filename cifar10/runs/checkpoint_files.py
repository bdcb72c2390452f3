"""A run's checkpoint files, found by their names alone (no TensorFlow is imported,
so that a program can check what it was given before TensorFlow loads).

``checkpoints`` reads them; this module only finds them: the complete checkpoints
of a directory (``scan``, ``find``, ``latest``).
"""

from __future__ import annotations

import dataclasses
import os
import re

from cifar10.core.errors import Cifar10Error, io_error, listed

PREFIX = "model.ckpt"

# The exact names TensorFlow gives a checkpoint (group 1 is its step) and its files.
CHECKPOINT_NAME = re.compile(r"model\.ckpt-(\d+)")
INDEX_FILE = re.compile(r"model\.ckpt-(\d+)\.index")
DATA_FILE = re.compile(r"model\.ckpt-(\d+)\.data-(\d{5})-of-(\d{5})")
TEMP_DIR = re.compile(r"model\.ckpt-(\d+)_temp")

# The trainer's other files beside its checkpoints: the mark of a run that reached
# --max_steps, and the class names it trains on.
COMPLETE_FILE = "training_complete.json"
CLASSES_FILE = "class_names.txt"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a run: ``path`` is the prefix ``<dir>/model.ckpt-<step>``."""

    step: int
    path: str

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def checkpoint_path(directory: str, step: int) -> str:
    """The prefix of the checkpoint after ``step`` updates."""
    return os.path.join(directory, f"{PREFIX}-{step}")


def listdir(directory: str) -> list[str]:
    """The names in ``directory``; none when it does not exist.

    Raises:
      Cifar10Error: the directory cannot be read.
    """
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise io_error("cannot read the directory", directory, e) from e


def scan(directory: str) -> tuple[list[int], dict[int, str]]:
    """(the steps of the complete checkpoints, sorted; {step: what is missing} of the rest)."""
    names = set(listdir(directory))
    shards: dict[int, list[re.Match]] = {}
    for match in filter(None, map(DATA_FILE.fullmatch, names)):
        shards.setdefault(int(match[1]), []).append(match)
    indexed = {int(m[1]) for m in map(INDEX_FILE.fullmatch, names) if m}
    complete, incomplete = [], {}
    for step in sorted(indexed | set(shards)):
        counts = {int(m[3]) for m in shards.get(step, [])}
        if step not in indexed:
            incomplete[step] = "no .index file"
        elif not counts:
            incomplete[step] = "no .data file"
        elif len(counts) != 1 or len(shards[step]) != counts.pop():
            incomplete[step] = "some .data files are missing"
        else:
            complete.append(step)
    return complete, incomplete


def holds_checkpoints(directory: str) -> bool:
    """Whether ``directory`` holds a checkpoint's files (a whole one or not)."""
    complete, incomplete = scan(directory)
    return bool(complete or incomplete)


def subfolders_with_checkpoints(directory: str) -> list[str]:
    """The folders directly in ``directory`` that hold a complete checkpoint (a run's
    parent folder, runs/a, holds its runs/a/train), sorted; none when it cannot be read."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    folders = [os.path.join(directory, name) for name in names]
    return [folder for folder in folders if os.path.isdir(folder) and _readable_run(folder)]


def _readable_run(folder: str) -> bool:
    """Whether ``folder`` holds a complete checkpoint; False where it cannot be read (a
    hint must not turn into an error about a folder the user did not name)."""
    try:
        return latest(folder) is not None
    except Cifar10Error:
        return False


def find(directory: str) -> list[Checkpoint]:
    """The complete checkpoints in ``directory`` (index and every data file), oldest first.

    The state file is not consulted: a checkpoint is its files.
    """
    return [Checkpoint(step, checkpoint_path(directory, step)) for step in scan(directory)[0]]


def latest(directory: str) -> Checkpoint | None:
    """The newest complete checkpoint in ``directory``, or None."""
    found = find(directory)
    return found[-1] if found else None


# A file of a checkpoint: group 1 is the checkpoint's prefix.
_FILE_OF_CHECKPOINT = re.compile(r"(.+)\.(?:index|data-\d{5}-of-\d{5})")


def given(value: str) -> str:
    """The checkpoint that ``--checkpoint=value`` names: its prefix.

    A checkpoint is named by the prefix of its files (``runs/a/train/model.ckpt-1000``);
    one of its files (``model.ckpt-1000.index``, what shell completion gives, or a
    ``.data-00000-of-00001`` file) names it too.

    Raises:
      Cifar10Error: ``value`` names no complete checkpoint: one line saying what it
        is instead (a folder, a file of another kind, nothing, part of an incomplete
        checkpoint) and what to pass.
    """
    shown = f"--checkpoint {value}"
    if os.path.isdir(value):
        newest = latest(value)
        if newest is None:
            raise Cifar10Error(f"{shown} is a folder and holds no checkpoints: pass a "
                               f"checkpoint, such as runs/a/train/{PREFIX}-1000, or "
                               f"--checkpoint_dir=<a training run> for its newest")
        raise Cifar10Error(f"{shown} is a folder: pass --checkpoint_dir={value} for its "
                           f"newest checkpoint, or --checkpoint={newest.path}")
    match = _FILE_OF_CHECKPOINT.fullmatch(value)
    prefix = value
    if match and not os.path.isfile(value + ".index"):
        prefix = match[1]
    folder = os.path.dirname(prefix)
    name = CHECKPOINT_NAME.fullmatch(os.path.basename(prefix))
    missing = scan(folder or ".")[1].get(int(name[1])) if name else None
    if missing:
        raise Cifar10Error(f"{shown} is incomplete ({missing}): pass another checkpoint; "
                           f"{_holds(folder)}")
    if os.path.basename(prefix) == "variables" and _in_saved_model(folder):
        raise Cifar10Error(f"{shown} is the variables of an export (a SavedModel), not a "
                           f"training checkpoint: pass a checkpoint of the run it was "
                           f"exported from, such as runs/a/train/{PREFIX}-1000, or "
                           f"--checkpoint_dir=<that run> for its newest")
    if os.path.isfile(prefix + ".index"):
        return prefix
    if os.path.lexists(value):
        raise Cifar10Error(f"{shown} is not a TensorFlow checkpoint (a checkpoint is named by "
                           f"the prefix of its .index and .data files, such as "
                           f"runs/a/train/{PREFIX}-1000); {_holds(folder)}")
    if folder and not os.path.isdir(folder):
        raise Cifar10Error(f"{shown} does not exist: there is no folder {folder}")
    raise Cifar10Error(f"{shown} does not exist; {_holds(folder)}")


# The files that make a folder a SavedModel (tf.saved_model.save writes the first).
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def is_saved_model(folder: str) -> bool:
    """Whether ``folder`` is a SavedModel (an export's version folder)."""
    return any(os.path.isfile(os.path.join(folder, name)) for name in SAVED_MODEL_FILES)


def _in_saved_model(folder: str) -> bool:
    """Whether ``folder`` is a SavedModel's variables/ folder (beside its saved_model.pb)."""
    return (os.path.basename(os.path.normpath(folder)) == "variables"
            and is_saved_model(os.path.join(folder, os.pardir)))


def run_folder(checkpoint: str | None, checkpoint_dir: str | None) -> str | None:
    """The folder of the run that cifar10-eval scores: the folder of ``checkpoint``
    (--checkpoint, a checkpoint or one of its files) when given, else
    ``checkpoint_dir`` (--checkpoint_dir)."""
    if checkpoint:
        return os.path.dirname(checkpoint) or "."
    return checkpoint_dir


def not_in_checkpoint_dir(value: str, checkpoint_dir: str) -> str | None:
    """Why ``--checkpoint=value`` does not go with ``--checkpoint_dir=checkpoint_dir``:
    the checkpoint is in another folder, whose run (its class names, its data) the
    programs would use, not the one --checkpoint_dir names; None when it is in that
    folder (links followed), or names no checkpoint (``given`` says what it is)."""
    try:
        checkpoint = given(value)
    except Cifar10Error:
        return None
    folder = os.path.dirname(checkpoint) or "."
    if os.path.realpath(folder) == os.path.realpath(checkpoint_dir):
        return None
    return (f"--checkpoint {value} is not in --checkpoint_dir {checkpoint_dir}: give only "
            f"--checkpoint to use it, or a --checkpoint_dir that holds it "
            f"(--checkpoint_dir={folder})")


def _holds(folder: str) -> str:
    """'runs/a holds model.ckpt-10, model.ckpt-20' (its complete checkpoints)."""
    found = [checkpoint.name for checkpoint in find(folder or ".")]
    where = folder or "the current folder"
    return f"{where} holds {listed(found)}" if found else f"{where} holds no checkpoints"
