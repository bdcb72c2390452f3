"""A run directory's state file ``checkpoint``: TensorFlow's record of the latest
checkpoint, kept for TensorFlow's own tools (``tf.train.latest_checkpoint``).

The trainer rewrites it after every save and reads it on resume as a hint only:
the checkpoints are the files on disk, so a state file that is missing, damaged
or out of date costs one notice (``resume``), never the run.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Sequence

from absl import logging

from cifar10.core import atomic
from cifar10.core.errors import io_error
from cifar10.runs.checkpoint_files import CHECKPOINT_NAME, PREFIX, Checkpoint

STATE_FILE = "checkpoint"
# The temporary names of its atomic writes: this module's and TensorFlow's.
TEMP_FILE = re.compile(r"checkpoint\.tmp[0-9a-f]{32}")
# The state files found to be folders, each warned about once per process.
_warned: set[str] = set()
_LATEST_LINE = re.compile(r'^model_checkpoint_path:\s*"([^"]*)"\s*$', re.MULTILINE)


def named_step(directory: str, steps_on_disk: set[int]) -> tuple[int | None, str]:
    """(the step the state file names, or None; what is wrong with it, or '').

    Args:
      directory: the run directory.
      steps_on_disk: the steps of the checkpoints that have files, complete or not.
    """
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None, f"the state file {path} is missing"
    except OSError as e:
        return None, f"the state file {path} cannot be read ({e.strerror})"
    if not text.strip():
        return None, f"the state file {path} is empty"
    match = _LATEST_LINE.search(text)
    named = match and CHECKPOINT_NAME.fullmatch(os.path.basename(match[1]))
    if not named:
        return None, f"the state file {path} cannot be parsed"
    step = int(named[1])
    if step not in steps_on_disk:
        return step, f"the state file names {PREFIX}-{step}, which is gone"
    return step, ""


def write(directory: str, checkpoints: Sequence[Checkpoint]) -> None:
    """Writes the state file: the last of ``checkpoints`` is the latest, all are listed.

    Paths are relative, as TensorFlow's CheckpointManager writes them, so that a
    run directory can be moved.  Written to a temporary file and renamed.  A folder
    of that name (not the trainer's) is left alone, with one warning: the run goes
    on without a state file, which only TensorFlow's own tools need.

    Raises:
      Cifar10Error: the file cannot be written.
    """
    path = os.path.join(directory, STATE_FILE)
    if os.path.isdir(path):
        if path not in _warned:
            _warned.add(path)
            logging.warning("%s is a folder, not TensorFlow's state file: it is left alone "
                            "and the run goes on without a state file (tf.train."
                            "latest_checkpoint will not find its checkpoints); move the "
                            "folder away to have the state file written again.", path)
        return
    lines = [f'model_checkpoint_path: "{checkpoints[-1].name}"']
    lines += [f'all_model_checkpoint_paths: "{c.name}"' for c in checkpoints]
    try:
        atomic.write_text(path, "\n".join(lines) + "\n", f"{path}.tmp{uuid.uuid4().hex}")
    except OSError as e:
        raise io_error("cannot write", path, e) from e
