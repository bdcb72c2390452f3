"""TensorFlow's op determinism for a ``--deterministic`` run, for its own time
(``op_determinism``): the setting is the whole process's, and is left as it was
found once the run ends.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import tensorflow as tf


@contextlib.contextmanager
def op_determinism(enabled: bool) -> Iterator[None]:
    """A context in which TensorFlow runs every op deterministically, or raises for
    an op that has no deterministic kernel, if ``enabled`` (``--deterministic``).

    TensorFlow's setting is the whole process's: it is turned on for the context
    only, and left at its end as it was found (on where the caller or
    ``TF_DETERMINISTIC_OPS=1`` turned it on), so that a deterministic run does not
    make what the process does next (another run, the benchmark's next figure)
    deterministic and slower.  With ``enabled`` False it is left as it is.
    """
    if not enabled:
        yield
        return
    was_on = _set_op_determinism(True)
    try:
        yield
    finally:
        _set_op_determinism(was_on)


def _set_op_determinism(on: bool) -> bool:
    """Turns TensorFlow's op determinism on or off; returns whether it was on.

    TensorFlow's public API only turns it on
    (``tf.config.experimental.enable_op_determinism``); reading it and turning it
    off are in its private ``tensorflow.python.framework.config``
    (``is_op_determinism_enabled``, ``disable_op_determinism``, in every
    TensorFlow this package supports).  This is the one place that reaches there.
    """
    from tensorflow.python.framework import config as tf_config

    was_on = tf_config.is_op_determinism_enabled()
    if on:
        tf.config.experimental.enable_op_determinism()
    elif was_on:
        tf_config.disable_op_determinism()
    return was_on
