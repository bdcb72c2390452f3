"""Resuming a run: which checkpoint it goes on from.

The newest checkpoint that restores completely, whatever the state file says.
A run never silently starts over: when checkpoints exist and none restores, it
stops and says why each does not; when one is skipped, one line says why.
"""

from __future__ import annotations

from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.runs import statefile
from cifar10.runs.checkpoint_files import PREFIX, Checkpoint, checkpoint_path, scan
from cifar10.runs.checkpoints import READ_ERRORS, restore_cause, start_over


def restore(directory: str, checkpoint: tf.train.Checkpoint, print_fn: Callable[[str], None],
            rewrite_state: bool = True,
            warn: Callable[[str], None] | None = None) -> Checkpoint | None:
    """Restores into ``checkpoint`` the newest checkpoint in ``directory`` that restores.

    The state file is a hint: when it is missing, empty, unparsable, or names a
    checkpoint that is gone or does not restore, the newest checkpoint on disk
    that restores is used, one warning says which and why (``warn``: the program's
    ``<program>: warning: ...`` on stderr by default, as predict's and eval's), and (with
    ``rewrite_state``: the chief does) the state file is rewritten.

    Returns:
      The checkpoint restored; None when the directory holds no checkpoint.

    Raises:
      Cifar10Error: the directory holds checkpoints and none restores.
    """
    complete, incomplete = scan(directory)
    named, problem = statefile.named_step(directory, set(complete) | set(incomplete))
    if not complete and not incomplete:
        if named is not None:  # every checkpoint of an earlier run was deleted
            print_fn(f"Starting from step 0: no checkpoint is left in {directory} ({problem}).")
        return None
    restored, failures = _newest_that_restores(directory, checkpoint, complete)
    newest = restored.step if restored else -1
    reasons = ([problem] if problem else []) + failures
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
            statefile.write(directory, [Checkpoint(s, checkpoint_path(directory, s))
                                        for s in complete if s <= restored.step])
    return restored


def _newest_that_restores(directory: str, checkpoint: tf.train.Checkpoint,
                          steps: Sequence[int]) -> tuple[Checkpoint | None, list[str]]:
    """(the newest of ``steps`` that restores into ``checkpoint``, or None; why each
    newer one does not)."""
    failures = []
    for step in reversed(steps):
        candidate = Checkpoint(step, checkpoint_path(directory, step))
        try:
            checkpoint.read(candidate.path).assert_existing_objects_matched()
        except READ_ERRORS as e:
            failures.append(f"{candidate.name} does not restore ({restore_cause(e)})")
            continue
        return candidate, failures
    return None, failures
