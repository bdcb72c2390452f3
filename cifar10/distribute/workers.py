"""The workers of one training run, as one of them sees them: under several workers
each saves (the chief into the run's directory, the others into scratch), checks with
the others that they started alike, stops with them at one step, and names the worker
it lost in a one-line error."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import zlib
from typing import Callable, Sequence

import tensorflow as tf

from cifar10.core.errors import Cifar10Error, StoppedBeforeTraining, first_line
from cifar10.distribute import devices

# What a collective raises when a peer worker is gone or unreachable.
LOST_WORKER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                      tf.errors.AbortedError, tf.errors.CancelledError)


class Coordinator:
    """The workers of ``strategy``'s run; ``stop_event`` set (by a signal handler) stops
    them all after the current loop.  As a context manager it owns the scratch folder."""

    def __init__(self, strategy: tf.distribute.Strategy,
                 stop_event: threading.Event | None = None):
        self.strategy = strategy
        self.stop_event = stop_event or threading.Event()
        self.multi_worker = devices.is_multi_worker(strategy)
        self.is_chief, self.task = devices.worker_role(strategy)
        self._scratch: str | None = None
        self._stop: _AllWorkersStop | None = None

    def __enter__(self) -> "Coordinator":
        if self.multi_worker:
            self._scratch = tempfile.mkdtemp(prefix=f"cifar10-{self.task.replace(' ', '')}-")
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None and self._stop is not None:
                stop, self._stop = self._stop, None
                stop.end(self.task)
        finally:
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def save_dir(self) -> str | None:
        """Where this worker saves: None for the chief (the run's directory)."""
        return None if self.is_chief else os.path.join(self._scratch, "checkpoints")

    @contextlib.contextmanager
    def starting(self):
        """What the workers do together before the loop: a worker lost there is a
        one-line error on the others."""
        try:
            yield
        except LOST_WORKER_ERRORS as e:
            if not self.multi_worker:
                raise
            lost = self._lost()
            see = "see the others' errors" if lost == "another worker" else "see its error"
            raise Cifar10Error(f"this is {self.task}: lost {lost} or the connection to it "
                               f"before training started ({see}); start every worker again "
                               f"once it is fixed") from e

    def watch(self, save: Callable[[], None]) -> None:
        """Makes a stop request on any worker save (with ``save``) on all of them."""
        if self.multi_worker:
            self._stop = _AllWorkersStop(self.strategy, self.stop_event,
                                         os.path.join(self._scratch, "preemption"), save)

    def should_stop(self) -> bool:
        """After a loop: whether the run stops here (under several workers, once all
        have saved)."""
        if self._stop is None:
            return self.stop_event.is_set()
        return self._stop.should_stop()

    def failure(self, error: tf.errors.OpError, step: int,
                checkpoint: str | None) -> Cifar10Error:
        """The one-line error of a run TensorFlow stopped at ``step``; ``checkpoint`` is
        the one the run resumes from (None: none yet)."""
        if self.multi_worker and isinstance(error, LOST_WORKER_ERRORS):
            kept = (f"the last checkpoint, {checkpoint}, is kept" if checkpoint
                    else "no checkpoint was written yet")
            return Cifar10Error(
                f"this is {self.task}: lost {self._lost()} or the connection to it at step "
                f"{step} ({tensorflow_cause(error)}); {kept}; start every worker again with "
                f"the same command to resume")
        last = (f"the last checkpoint is {checkpoint}" if checkpoint
                else "no checkpoint was written yet")
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return Cifar10Error(
                f"training stopped at step {step}: out of memory ({oom_cause(error)}); "
                f"{last}; a smaller --batch_size (examples per replica) fits, or more "
                f"memory: another machine, or fewer programs beside it")
        return Cifar10Error(f"training stopped at step {step}: {tensorflow_cause(error)}; "
                            f"{last}")

    def tasks(self) -> list[str]:
        """Every task, named as ``task`` is: 'chief 0', 'worker 1'."""
        spec = self.strategy.cluster_resolver.cluster_spec().as_dict()
        return [f"{job} {i}" for job in ("chief", "worker") for i in range(len(spec.get(job, ())))]

    def _lost(self) -> str:
        """The task this one lost: the only other one, else 'another worker'."""
        tasks = self.tasks()
        others = [task for task in tasks if task != self.task]
        if len(others) != 1:
            return "another worker"
        if others == ["worker 0"] and "chief 0" not in tasks:
            return "the chief (worker 0)"  # a cluster of workers alone
        return others[0]


def check_same_settings(workers: Coordinator, settings: dict[str, object]) -> None:
    """Stops every worker with a Cifar10Error naming its settings that differ, unless
    all were started with the same ``settings`` ({'--batch_size=8': 8, ...}): one
    all-gather of each worker's fingerprint of each value."""
    if not workers.multi_worker:
        return
    tasks = workers.tasks()
    own = [float(tasks.index(workers.task))] + [
        float(zlib.crc32(repr(value).encode())) for value in settings.values()]

    @tf.function
    def gather():
        value = tf.constant([own], tf.float64)
        return workers.strategy.gather(workers.strategy.run(lambda: tf.identity(value)), 0)

    with workers.starting():
        rows = gather().numpy()
    line = settings_differ(workers.task, [(tasks[int(row[0])], list(row[1:])) for row in rows],
                           list(settings), own[1:])
    if line:
        raise Cifar10Error(line)


def settings_differ(task: str, workers: Sequence[tuple[str, list[float]]],
                    names: Sequence[str], own: list[float]) -> str | None:
    """The error of ``task``, whose settings ``names`` have the fingerprints ``own``,
    where other ``workers`` ([(task, fingerprints)]) have others; None where all agree."""
    differ = [name for i, name in enumerate(names) if any(f[i] != own[i] for _, f in workers)]
    if not differ:
        return None
    others = list(dict.fromkeys(other for other, f in workers if f != own))
    whose = (_and([f"{other}'s" for other in others]) if len(others) <= 3
             else f"{len(others)} other workers'")
    verb = "differs" if len(differ) == 1 else "differ"
    return (f"this is {task}: its {_and(differ)} {verb} from {whose}; start every worker "
            f"with the same flags and data")


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def check_same_start(workers: Coordinator, start: int, train_dir: str) -> None:
    """Stops every worker unless all restored the same step (zero variance): workers
    that do not share ``train_dir`` would train different weights together."""
    if not workers.multi_worker:
        return
    mean, square = mean_and_square(workers.strategy, tf.constant(float(start), tf.float64))
    if float(square) - float(mean) ** 2 > 0.5:
        raise Cifar10Error(
            f"the workers restored different steps (this one {start}, mean "
            f"{float(mean):g}): --train_dir {train_dir} must be one directory shared by "
            f"every worker")


def stop_if_asked_before_training(workers: Coordinator, asked: bool) -> None:
    """Raises StoppedBeforeTraining on every worker when a stop was ``asked`` for on
    any of them before training."""
    if workers.multi_worker:
        mean, _ = mean_and_square(workers.strategy, tf.constant(float(asked), tf.float64))
        asked = float(mean) > 0
    if asked:
        raise StoppedBeforeTraining()


def mean_and_square(strategy: tf.distribute.Strategy, value: tf.Tensor):
    """The means of ``value`` and of its square over all replicas, in one graph."""

    @tf.function
    def reduce():
        per_replica = strategy.run(lambda: (value, value * value))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    return reduce()


class _Preempted(Exception):
    """Raised by the preemption handler's exit_fn once every worker has saved."""


def _raise_preempted():
    raise _Preempted()


class _AllWorkersStop:
    """TensorFlow's ``PreemptionCheckpointHandler``: saves (``save``) on every worker
    at one step once ``stop_event`` is set on any.  Its call count is restored from an
    empty ``folder`` per start, so that every worker counts from 0."""

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
        try:
            self._handler.save_checkpoint_if_preempted()
        except _Preempted:
            return True
        return False

    def end(self, task: str) -> None:
        """Ends the handler's thread that waits on the chief, on every worker before any
        exits (else one outliving the chief prints a traceback); the barrier after it
        keeps the chief up until all have.  Cifar10Error where another is still training."""
        stop = getattr(self._handler, "_stop_cluster_wise_termination_watcher_thread", None)
        if stop is None:
            return
        stop()
        try:
            mean_and_square(self.strategy, tf.constant(0.0, tf.float64))
        except LOST_WORKER_ERRORS:
            pass  # another worker ended otherwise (its error says so)
        except tf.errors.OpError as e:
            raise Cifar10Error(
                f"this is {task}: it ended training, but the other workers did not end with "
                f"it ({tensorflow_cause(e)}); see their errors, and start every worker "
                f"again with the same flags") from e


def _quiet_watcher_errors() -> None:
    """No traceback from the preemption handler's threads when the chief is gone (the
    main thread says so)."""
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


# Lines of TensorFlow's messages that say where, not what: a graph error's header, the
# op's stack, gRPC's detail, the node, a multi-replica error's count and tally, a hint.
_NOT_THE_CAUSE = re.compile(r"Graph execution error:|Detected at node|Node: |Stack trace|"
                            r"File \"|Additional GRPC error|:UNKNOWN:|The error could be from|"
                            r"\[\[|<stack traces unavailable>|Executing non-communication op|"
                            r"\d+ root error\(s\) found|\d+ successful operations|"
                            r"\d+ derived errors ignored|Hint: ")
_ROOT_ERROR = re.compile(r"^\(\d+\)\s+(?:([A-Z_]+):\s+)?")  # '(0) OUT_OF_RANGE:  '
_EAGER_OP = re.compile(r"\s*\[Op:[^\]]*\](?:\s*name:\s*\S*)?\s*$")  # ' [Op:X] name: '


def tensorflow_cause(error: BaseException) -> str:
    """The line of a TensorFlow error that says what went wrong: the first that is not
    a header, a stack or a cancellation, without prefix, error code or op name."""
    lines, cancelled, in_stack = [], [], False
    for raw in str(error).splitlines():
        line = re.sub(r"^(\{\{function_node [^}]*\}\}\s*)+", "", raw.strip())
        root = _ROOT_ERROR.match(line)
        if root:
            line = line[root.end():].strip()
        if raw.startswith("Detected at node"):
            in_stack = True  # the op's stack follows, to a blank line
        elif not line:
            in_stack = False
        if line and not in_stack and not _NOT_THE_CAUSE.match(line):
            (cancelled if root and root[1] == "CANCELLED" else lines).append(line)
    aborted = [line for line in lines if "aborted by:" in line]
    return _EAGER_OP.sub("", (aborted or lines or cancelled or [first_line(error)])[0])


def oom_cause(error: tf.errors.OpError) -> str:
    """'OOM when allocating tensor with shape[...]', without the type and device after it."""
    return tensorflow_cause(error).split(" and type ")[0]
