"""MultiWorkerMirroredStrategy on the cluster of ``TF_CONFIG`` or of a Slurm job step.

Building it waits in TensorFlow's C++ runtime, holding Python's lock (no Python signal
handler runs), until every worker has registered: a small watchdog process ends the
wait after --worker_timeout_secs with one error line (exit status 1), and turns a
SIGINT or SIGTERM meanwhile into one line and exit status 130.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging as pylogging
import os
import signal
import subprocess
import sys
import threading
from typing import Iterator

from absl import logging
import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.distribute import cluster


class SlurmResolver(tf.distribute.cluster_resolver.SimpleClusterResolver):
    """A Slurm job step's workers, this task among them; its replicas are the GPUs the
    process kept visible, counted as TF_CONFIG's resolver counts them."""

    def __init__(self, task: cluster.SlurmTask, port_base: int):
        super().__init__(tf.train.ClusterSpec({"worker": task.addresses(port_base)}),
                         task_type="worker", task_id=task.rank, rpc_layer="grpc")
        self.slurm_task, self.port_base = task, port_base

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {"GPU": len(tf.config.list_logical_devices("GPU"))}


def from_slurm(port_base: int | None) -> tuple[SlurmResolver | None, list | None]:
    """(the resolver of this Slurm job step, this task's physical GPUs or None where
    Slurm gave none); (None, None) where TF_CONFIG names the cluster or no srun."""
    if cluster.cluster_source() != "slurm":
        return None, None
    task = cluster.read_task()
    port_base = cluster.DEFAULT_PORT_BASE if port_base is None else port_base
    indices = task.gpu_indices()
    gpus = None
    if indices is not None:
        physical = tf.config.list_physical_devices("GPU")
        gpus = [physical[i] for i in indices if i < len(physical)]
    return SlurmResolver(task, port_base), gpus


def default_num_gpus() -> int | None:
    """Replicas of a task ``srun`` started: one per GPU Slurm gave it, else None."""
    if cluster.cluster_source() != "slurm":
        return None
    indices = cluster.read_task().gpu_indices()
    return len(indices) if indices else None


def multi_worker_strategy(cluster_resolver, options, timeout: float | None
                          ) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy on ``cluster_resolver`` (None: ``TF_CONFIG``'s),
    whose workers must all have started within ``timeout`` seconds."""
    resolver = cluster_resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
    message = _error_line(timeout_line(resolver.cluster_spec().as_dict(), resolver.task_type,
                                       resolver.task_id, timeout or 0))
    with _signals_of_the_wait() as interrupts, _exit_on_sighup(bool(timeout)) as exits:
        watchdog = _start_watchdog(timeout, message, exits, interrupts) if timeout else None
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=cluster_resolver, communication_options=options)
        except tf.errors.UnknownError as e:
            if "Could not start gRPC server" not in str(e):
                raise
            if isinstance(resolver, SlurmResolver):
                task, base = resolver.slurm_task, resolver.port_base
                raise Cifar10Error(
                    f"port {base + task.local_id} on {task.node} (--slurm_port_base={base} + "
                    f"local task {task.local_id}) is in use by another program or job: "
                    f"choose another --slurm_port_base, e.g. {base + 1000}") from e
            address = resolver.cluster_spec().task_address(resolver.task_type,
                                                           resolver.task_id)
            raise Cifar10Error(
                f"this is {resolver.task_type} {resolver.task_id}: cannot listen at its "
                f"address {address}: port {address.rpartition(':')[2]} is in use on this "
                f"machine (by another program, or another worker given the same TF_CONFIG "
                f"task index); give each worker its own index and a free port") from e
        finally:
            if watchdog:
                watchdog.stdin.close()  # the watchdog ends quietly
                watchdog.wait()


def timeout_line(spec: dict[str, list[str]], task_type: str, task_id: int,
                 timeout: float) -> str:
    """The error of a worker that did not see all the others start within ``timeout``
    seconds, naming every task it waited for and where."""
    tasks = [(f"{job} {i}", address) for job in ("chief", "worker")
             for i, address in enumerate(spec.get(job, []))]
    this = f"{task_type} {task_id or 0}"
    chief = " (the chief)" if this == "worker 0" and "chief" not in spec else ""
    return (f"the {len(tasks)} workers did not all start within {timeout:g} s "
            f"(--worker_timeout_secs): this is {this}{chief}; check that every task started "
            f"(see the others' errors) and that each node reaches "
            f"{', '.join(f'{name} at {address}' for name, address in tasks)}, then start the "
            f"job again")


@contextlib.contextmanager
def _signals_of_the_wait() -> Iterator[bool]:
    """SIGINT at its default action in the block (Python's handler would wait for
    TensorFlow); SIGTERM's Python handler set again after it, over the C handler
    TensorFlow leaves.  Yields whether SIGINT ends the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL), signal.getsignal(signal.SIGTERM)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, previous[0])
        if previous[1] is not None:  # (None: not set from Python; left alone)
            signal.signal(signal.SIGTERM, previous[1])


@contextlib.contextmanager
def _exit_on_sighup(wanted: bool = True) -> Iterator[bool]:
    """SIGHUP exits with status 1 in the block (libc's ``_exit`` as its handler, given
    the signal's number, 1); yields whether it does (not where it is ignored: nohup)."""
    if not wanted:
        yield False
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        handler = ctypes.cast(libc._exit, ctypes.c_void_p).value
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    except (OSError, AttributeError):
        yield False
        return
    previous = libc.signal(signal.SIGHUP, handler)
    if previous == 1:  # SIG_IGN
        libc.signal(signal.SIGHUP, previous)
        yield False
        return
    try:
        yield True
    finally:
        libc.signal(signal.SIGHUP, previous)


# Waits until its stdin closes (the strategy is built, or its parent died); past the
# timeout, prints the error line and ends its parent (SIGHUP, else SIGKILL).  A SIGINT
# or SIGTERM meanwhile is said in one line and ends its parent with a SIGINT.
_WATCHDOG = """
import os, select, signal, sys
parent, timeout, message, stopped = int(sys.argv[1]), float(sys.argv[2]), *sys.argv[3:5]
end = signal.SIGHUP if sys.argv[5] == "1" else signal.SIGKILL
interrupt = signal.SIGINT if sys.argv[6] == "1" else end
def stop(signum, frame):
    sys.stderr.write(stopped % signal.Signals(signum).name + "\\n")
    sys.stderr.flush()
    try:
        os.kill(parent, interrupt)
    except OSError:
        pass
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
os.write(1, b"r")
os.close(1)
if not select.select([sys.stdin], [], [], timeout)[0]:
    sys.stderr.write(message + "\\n")
    sys.stderr.flush()
    os.kill(parent, end)
"""


def _start_watchdog(timeout: float, message: str, sighup_exits: bool, sigint_ends: bool
                    ) -> subprocess.Popen:
    sys.stdout.flush()
    sys.stderr.flush()
    stopped = _error_line("stopped by %s while waiting for the other workers to start")
    try:  # the program's own stderr, not the descriptor TensorFlow's lines are filtered on
        stderr = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        stderr = None  # (a test's captured stderr)
    watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()),
                                 str(timeout), message, stopped, "1" if sighup_exits else "0",
                                 "1" if sigint_ends else "0"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    # Ready (its handlers set) before the wait begins, so that no signal is lost.
    watchdog.stdout.read(1)
    watchdog.stdout.close()
    return watchdog


def _error_line(message: str) -> str:
    """``message`` as the program's error line (``<program>: error: ...``)."""
    record = pylogging.LogRecord("absl", pylogging.ERROR, __file__, 0, message, None, None)
    return logging.get_absl_handler().format(record)
