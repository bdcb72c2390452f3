"""What training on several workers needs besides the train step.

What it owns: each worker's scratch directory (where the workers other than the
chief save, as MultiWorkerMirroredStrategy makes every worker save), the stop
that all workers take at one step (TensorFlow's ``PreemptionCheckpointHandler``),
and which worker this one lost, before training (``starting``) and in it
(``failure``), named by its ``TF_CONFIG`` type and index (``worker 1``, ``chief 0``)
in the one-line error ``failures`` words.  With one worker it only watches the
local stop request.  The workers' checks before training are ``settings_check``'s
(the same settings) and ``start_checks``' (the same restored step, a stop asked
for before training on any of them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from typing import Callable

import tensorflow as tf

from cifar10.distribute import cluster
from cifar10.distribute import devices
from cifar10.distribute import failures
from cifar10.core.errors import Cifar10Error


class _Preempted(Exception):
    """Raised by the preemption handler's exit_fn once every worker has saved."""


def _raise_preempted():
    raise _Preempted()


class Coordinator:
    """The workers of one training run, as seen from one of them.

    Use as a context manager: under a multi-worker strategy, entering makes this
    worker's scratch directory and leaving removes it.

    Args:
      strategy: the run's distribution strategy.
      stop_event: set (e.g. by a signal handler) to stop after the current step.
    """

    def __init__(self, strategy: tf.distribute.Strategy,
                 stop_event: threading.Event | None = None):
        self.strategy = strategy
        self.stop_event = stop_event or threading.Event()
        self.multi_worker = devices.is_multi_worker(strategy)
        self.is_chief, self.task = devices.worker_role(strategy)
        self._scratch: str | None = None
        self._stop: _AllWorkersStop | None = None  # (``watch``)

    def __enter__(self) -> "Coordinator":
        if self.multi_worker:
            self._scratch = tempfile.mkdtemp(prefix=f"cifar10-{self.task.replace(' ', '')}-")
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None and self._stop is not None:
                stop, self._stop = self._stop, None
                stop.end(self.task)
            # After an error the handler's threads are left to the process's end: their
            # wait on the chief's coordination service fails once the chief is gone, which
            # ``_quiet_watcher_errors`` keeps from printing a traceback.
        finally:
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def save_dir(self) -> str | None:
        """Where this worker saves its checkpoints: None for the chief (the run's
        directory), a scratch folder for the others."""
        return None if self.is_chief else os.path.join(self._scratch, "checkpoints")

    def refuse_fresh_start(self, fresh_start: bool, train_dir: str) -> None:
        """Several workers cannot start afresh (``cluster.refuse_fresh_start``)."""
        if fresh_start and self.multi_worker:
            cluster.refuse_fresh_start("multi_worker", train_dir)

    @contextlib.contextmanager
    def starting(self):
        """A context for what the workers do together between the cluster forming and
        the training loop (building the variables, checking the restored step): a
        worker lost there, e.g. the chief that refused ``train_dir``, is a one-line
        error on the others, as ``failure`` is in the loop.

        Raises:
          Cifar10Error: a collective failed because another worker stopped or
            cannot be reached.
        """
        try:
            yield
        except failures.LOST_WORKER_ERRORS as e:
            if not self.multi_worker:
                raise
            raise failures.lost_before_training(self.task, self._lost()) from e

    def watch(self, save: Callable[[], None]) -> None:
        """Makes a stop request on any worker save (with ``save``) on all of them
        (``_AllWorkersStop``).  Saving is the trainer's."""
        if self.multi_worker:
            self._stop = _AllWorkersStop(self.strategy, self.stop_event,
                                         os.path.join(self._scratch, "preemption"), save)

    def should_stop(self) -> bool:
        """After a step: True when the run must stop here (all workers at once).

        One worker alone must not stop: under multi-worker the handler decides,
        and it has saved on every worker when it says so.
        """
        if self._stop is None:
            return self.stop_event.is_set()
        return self._stop.should_stop()

    def failure(self, error: tf.errors.OpError, step: int,
                checkpoint: str | None) -> Cifar10Error:
        """The one-line error of a run that TensorFlow stopped at ``step``, whose newest
        checkpoint is ``checkpoint`` (a path; None where none was written)."""
        if self.multi_worker and isinstance(error, failures.LOST_WORKER_ERRORS):
            return failures.lost_in_training(self.task, self._lost(), error, step, checkpoint)
        return failures.stopped(error, step, checkpoint)

    def tasks(self) -> list[str]:
        """Every task of the cluster, named as ``task`` is ('chief 0', 'worker 1')."""
        return _tasks(self._cluster())

    def _lost(self) -> str:
        """The task this one lost, as ``_lost_worker`` names it."""
        return _lost_worker(self._cluster(), self.task)

    def _cluster(self) -> dict[str, list[str]]:
        return self.strategy.cluster_resolver.cluster_spec().as_dict()


def _tasks(cluster: dict[str, list[str]]) -> list[str]:
    """Every task of ``cluster``, named as ``devices.worker_role`` names them."""
    return [f"{job} {i}" for job in ("chief", "worker") for i in range(len(cluster.get(job, ())))]


class _AllWorkersStop:
    """The stop every worker takes at one step: TensorFlow's
    ``PreemptionCheckpointHandler``, which saves (with ``save``) on every worker when
    ``stop_event`` is set on any.

    The handler counts its calls from a variable it restores from its own
    manager (in ``folder``): an empty one per start, so that every worker counts
    from 0 (the chief's would restore the count of an earlier stop, the others' not,
    and a second stop would then never meet).
    """

    def __init__(self, strategy: tf.distribute.Strategy, stop_event: threading.Event,
                 folder: str, save: Callable[[], None]):
        self.strategy = strategy
        _quiet_watcher_errors()
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), folder, max_to_keep=1)
        self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, manager,
            termination_config=tf.distribute.experimental.TerminationConfig(
                termination_watcher_fn=stop_event.is_set, exit_fn=_raise_preempted,
                grace_period=0, save_fn=lambda *_: save()))

    def should_stop(self) -> bool:
        """Whether every worker has saved and must stop here."""
        try:
            self._handler.save_checkpoint_if_preempted()
        except _Preempted:
            return True
        return False

    def end(self, task: str) -> None:
        """At the end of a run: ends the handler's thread that waits on the chief's
        coordination service for another worker's stop request, on every worker
        before any exits.

        TensorFlow ends that thread only when the handler is garbage collected, which
        the thread itself prevents (its target is a method of the handler).  A worker
        still running when the chief, host of the service, had exited got a
        traceback from it: 'Exception in thread PeerTerminationWatcher-1: ...
        UnavailableError: Socket closed'.  Each worker releases every worker's wait
        and joins its own thread; the barrier after it keeps the chief up until all
        have.  Only at a normal end, which every worker reaches at the same step.

        Raises:
          Cifar10Error: the workers did not all end here (``task``, this one, did):
            their collectives no longer matched.
        """
        stop = getattr(self._handler, "_stop_cluster_wise_termination_watcher_thread", None)
        if stop is None:
            return
        stop()
        try:
            mean_and_square(self.strategy, tf.constant(0.0, tf.float64))
        except failures.LOST_WORKER_ERRORS:
            pass  # another worker ended otherwise (its error says so); this one has saved
        except tf.errors.OpError as e:  # another is still training: its next step failed
            raise Cifar10Error(
                f"this is {task}: it ended training, but the other workers did not end with "
                f"it ({failures.tensorflow_cause(e)}); see their errors, and start every "
                f"worker again with the same flags") from e


def _lost_worker(cluster: dict[str, list[str]], task: str) -> str:
    """The task that ``task`` (e.g. 'worker 1') of ``cluster`` ({job: [address]})
    lost, named by its ``TF_CONFIG`` type and index where there is only one other:
    'the chief (worker 0)' (a cluster of workers alone, whose worker 0 is the chief),
    'chief 0', 'worker 1'; else 'another worker' (a failed collective does not say
    which one stopped)."""
    others = [other for other in _tasks(cluster) if other != task]
    if len(others) != 1:
        return "another worker"
    [other] = others
    return "the chief (worker 0)" if other == "worker 0" and "chief" not in cluster else other


def _quiet_watcher_errors() -> None:
    """Keeps the threads of TensorFlow's ``PreemptionCheckpointHandler`` from printing
    a traceback when their wait on the chief's coordination service fails because
    the chief or the connection to it is gone: the main thread says so in its one
    line (``failure``), or has ended with its own.  Other threads' errors are shown
    as before.  Once per process."""
    previous = threading.excepthook
    if getattr(previous, "quiets_watchers", False):
        return

    def hook(args) -> None:
        name = getattr(args.thread, "name", "") or ""
        if (name.startswith(("PeerTerminationWatcher", "WorkerTerminationSignalWatcher"))
                and isinstance(args.exc_value, tf.errors.OpError)):
            return
        previous(args)

    hook.quiets_watchers = True
    threading.excepthook = hook


def mean_and_square(strategy: tf.distribute.Strategy, value: tf.Tensor):
    """The mean of ``value`` and of its square over all replicas, in one graph (a
    collective run eagerly costs more and makes TensorFlow warn): what each worker
    learns of the others' values in one collective."""

    @tf.function
    def reduce():
        per_replica = strategy.run(lambda: (value, value * value))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    return reduce()
