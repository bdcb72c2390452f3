"""A run's checkpoint files, found by their names alone (no TensorFlow is imported,
so that a program can check what it was given before TensorFlow loads).

``checkpoints`` reads them; this module only finds them: the complete checkpoints
of a directory (``scan``, ``find``, ``latest``).
"""

from __future__ import annotations

import dataclasses
import os
import re

from cifar10.core.errors import io_error

PREFIX = "model.ckpt"

# The exact names TensorFlow gives a checkpoint (group 1 is its step) and its files.
CHECKPOINT_NAME = re.compile(r"model\.ckpt-(\d+)")
INDEX_FILE = re.compile(r"model\.ckpt-(\d+)\.index")
DATA_FILE = re.compile(r"model\.ckpt-(\d+)\.data-(\d{5})-of-(\d{5})")
TEMP_DIR = re.compile(r"model\.ckpt-(\d+)_temp")


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


def find(directory: str) -> list[Checkpoint]:
    """The complete checkpoints in ``directory`` (index and every data file), oldest first.

    The state file is not consulted: a checkpoint is its files.
    """
    return [Checkpoint(step, checkpoint_path(directory, step)) for step in scan(directory)[0]]


def latest(directory: str) -> Checkpoint | None:
    """The newest complete checkpoint in ``directory``, or None."""
    found = find(directory)
    return found[-1] if found else None
