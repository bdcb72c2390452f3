"""The check that every worker of a run was started with the same settings.

Workers with another batch size, step limit or loop length would train together
anyway (each its own learning-rate schedule, example count, last step), until their
collectives no longer matched.  One all-gather of each worker's fingerprint of each
setting tells every worker the same; each names, in one line, the settings of its own
that differ and the workers each differs from (``settings_differ``, a pure function).
"""

from __future__ import annotations

import zlib
from typing import Sequence

import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.distribute.coordination import Coordinator

# The most workers a line names for one setting; more are counted (a run of 16
# workers, one started with another flag, would otherwise name 15 on its line).
MOST_NAMED = 3


def check_same_settings(cluster: Coordinator, settings: dict[str, object]) -> None:
    """Stops every worker of ``cluster``, before anything is built or saved, when they
    were not all started with the same settings.  With one worker, nothing to check.

    Args:
      cluster: the workers of the run, as seen from this one.
      settings: {the setting with this worker's value, as the error names it
        ('--batch_size=8'): the value}, in the same order on every worker.

    Raises:
      Cifar10Error: the settings differ (every worker raises it).
    """
    if not cluster.multi_worker:
        return
    tasks = cluster.tasks()
    own = [float(tasks.index(cluster.task))] + [_fingerprint(v) for v in settings.values()]
    with cluster.starting():
        rows = _gather(cluster.strategy, tf.constant([own], tf.float64)).numpy()
    line = settings_differ(cluster.task, [(tasks[int(row[0])], list(row[1:])) for row in rows],
                           list(settings), own[1:])
    if line:
        raise Cifar10Error(line)


def _fingerprint(value: object) -> float:
    """A number for ``value`` that differs where the value does (a 32-bit CRC of its
    repr: exact in a float64, alike in every Python process)."""
    return float(zlib.crc32(repr(value).encode()))


def settings_differ(task: str, workers: Sequence[tuple[str, list[float]]],
                    names: Sequence[str], own: list[float]) -> str | None:
    """The error of ``task``, whose settings (``names``: each with its value here) have
    the fingerprints ``own``, where ``workers`` ([(task, fingerprints)], one or more a
    task, ``task`` among them) have others; None where all agree.

    Each setting that differs is paired with the workers it differs from; settings
    that differ from the same workers share a clause:
    'this is worker 2: its --batch_size=4 differs from worker 0's and worker 1's; its
    --max_steps=2 differs from worker 0's; start every worker with the same flags and
    data'.
    """
    whom: dict[str, list[str]] = {name: [] for name in names}
    for other, fingerprints in workers:
        for name, a, b in zip(names, own, fingerprints):
            if a != b and other not in whom[name]:
                whom[name].append(other)
    clauses: dict[tuple[str, ...], list[str]] = {}  # the workers: the settings differing
    for name in names:
        if whom[name]:
            clauses.setdefault(tuple(whom[name]), []).append(name)
    if not clauses:
        return None
    count = len({other for other, _ in workers} - {task})
    said = [f"its {_and(settings)} {'differs' if len(settings) == 1 else 'differ'} from "
            f"{_whose(others, count)}" for others, settings in clauses.items()]
    return f"this is {task}: {'; '.join(said)}; start every worker with the same flags and data"


def _whose(others: Sequence[str], count: int) -> str:
    """``others`` (workers' names), of the ``count`` other workers, as a line reads
    them: each named up to ``MOST_NAMED``, else counted."""
    if len(others) <= MOST_NAMED:
        return _and([f"{other}'s" for other in others])
    if len(others) == count:
        return f"all {count} other workers'"
    named = [f"{other}'s" for other in others[:MOST_NAMED - 1]]
    return f"{', '.join(named)} and {len(others) - len(named)} other workers'"


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _gather(strategy: tf.distribute.Strategy, value: tf.Tensor) -> tf.Tensor:
    """``value`` of every replica, stacked on its first axis, in one graph."""

    @tf.function
    def gather():
        return strategy.gather(strategy.run(lambda: tf.identity(value)), axis=0)

    return gather()
