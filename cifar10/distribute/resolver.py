"""The cluster resolver MultiWorkerMirroredStrategy is built with under ``srun``.

``slurm.py`` reads the job step's cluster; this module hands it to TensorFlow.
MultiWorkerMirroredStrategy takes its replicas per worker from the resolver's
``num_accelerators`` for every resolver but TF_CONFIG's (which counts the GPUs the
process made visible): ``SlurmResolver`` counts them the same way, once the strategy
has started its server, so that a CPU node runs one CPU replica and a GPU node one
replica per GPU it kept, whatever ``nvidia-smi`` would say.

``multi_worker_strategy`` bounds the strategy's start, where every worker waits
for all the others (under Slurm, or with ``TF_CONFIG``).
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
from cifar10.distribute import slurm


class SlurmResolver(tf.distribute.cluster_resolver.SimpleClusterResolver):
    """A Slurm job step's workers, this task among them, and its visible GPUs."""

    def __init__(self, task: slurm.SlurmTask, port_base: int):
        super().__init__(tf.train.ClusterSpec({"worker": task.addresses(port_base)}),
                         task_type="worker", task_id=task.rank, rpc_layer="grpc")
        self.slurm_task = task

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        # Asked after the strategy configured its collectives and started its server
        # (listing devices sooner would start TensorFlow's runtime too early).
        return {"GPU": len(tf.config.list_logical_devices("GPU"))}


def from_slurm(port_base: int | None) -> tuple[SlurmResolver | None, list | None]:
    """(the resolver of this Slurm job step, this task's physical GPUs); (None, None)
    where ``TF_CONFIG`` names the cluster or ``srun`` did not start this process.
    ``port_base`` None is ``slurm.DEFAULT_PORT_BASE``.

    The GPUs are those Slurm allocated to this task (``slurm.SlurmTask.gpu_indices``),
    None where it allocated none (the task takes what it sees).

    Raises:
      Cifar10Error: one line: the step's variables, a GPU per task, the port in use.
    """
    if cluster.cluster_source() != "slurm":
        return None, None
    task = slurm.read_task()
    port_base = slurm.DEFAULT_PORT_BASE if port_base is None else port_base
    slurm.check_port(task, port_base)
    indices = task.gpu_indices()
    gpus = None
    if indices is not None:
        physical = tf.config.list_physical_devices("GPU")
        gpus = [physical[i] for i in indices if i < len(physical)]
    return SlurmResolver(task, port_base), gpus


def check_tf_config_port() -> None:
    """Refuses, in one line, to start this task of ``TF_CONFIG`` where its address's port
    is in use on this machine (as ``slurm.check_port`` under ``srun``): TensorFlow would
    fail to start its server with a traceback.

    Raises:
      Cifar10Error: the port is in use, e.g. by a second worker given the same
        "index" on this machine.
    """
    config = cluster.read_tf_config()
    task_type, index = config["task"]["type"], config["task"]["index"]
    address = config["cluster"][task_type][index]
    if slurm.port_in_use(int(address.rpartition(":")[2])):
        raise _port_in_use(f"{task_type} {index}", address)


def _port_in_use(task: str, address: str, under_slurm: bool = False) -> Cifar10Error:
    port = address.rpartition(":")[2]
    if under_slurm:
        return Cifar10Error(f"this is {task}: cannot listen at its address {address}: port "
                            f"{port} is in use by another program or job: choose another "
                            f"--slurm_port_base")
    return Cifar10Error(
        f"this is {task}: cannot listen at its address {address}: port {port} is in use on "
        f"this machine (by another program, or another worker given the same TF_CONFIG task "
        f"index); give each worker its own index and a free port")


def default_num_gpus() -> int | None:
    """The replicas of a task that ``srun`` started: one per GPU Slurm gave it; None
    where it gave none, or outside Slurm (``TF_CONFIG`` wins)."""
    if cluster.cluster_source() != "slurm":
        return None
    indices = slurm.read_task().gpu_indices()
    return len(indices) if indices else None


def multi_worker_strategy(cluster_resolver, options, timeout: float | None
                          ) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy on ``cluster_resolver`` (None: ``TF_CONFIG``'s),
    whose workers must all have started within ``timeout`` seconds.

    Building it waits, in TensorFlow's C++ runtime and holding Python's lock (no
    thread of this process runs meanwhile, nor a Python signal handler), until every
    worker of the cluster has registered with the chief; a worker that never starts
    (its task failed, or a node cannot reach another's port) would keep the others
    waiting for ever, deaf to SIGTERM.  A small watchdog process ends it after
    ``timeout`` seconds, with one error line and exit status 1 (``_exit_on_sighup``);
    Ctrl-C ends it as any program (exit status 130), and so does a SIGTERM that
    reaches the watchdog too (scancel signals every process of a job step;
    cifar10-launch every process of a worker's group), as a SIGTERM ends
    cifar10-train anywhere before training: each after one line saying so
    (nothing is trained or written yet).
    """
    resolver = cluster_resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
    message = _error_line(timeout_line(resolver.cluster_spec().as_dict(), resolver.task_type,
                                       resolver.task_id, timeout or 0))
    with _ctrl_c_ends_the_process() as interrupts, \
            _exit_on_sighup(bool(timeout)) as exits, _sigterm_taken_back():
        watchdog = _start_watchdog(timeout, message, exits, interrupts) if timeout else None
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=cluster_resolver, communication_options=options)
        except tf.errors.UnknownError as e:
            if "Could not start gRPC server" not in str(e):
                raise
            # Taken since the check (check_tf_config_port, slurm.check_port) said free.
            address = resolver.cluster_spec().task_address(resolver.task_type,
                                                           resolver.task_id)
            raise _port_in_use(f"{resolver.task_type} {resolver.task_id}", address,
                               isinstance(resolver, SlurmResolver)) from e
        finally:
            if watchdog:
                watchdog.stdin.close()  # the watchdog ends quietly
                watchdog.wait()


def timeout_line(cluster: dict[str, list[str]], task_type: str, task_id: int,
                 timeout: float) -> str:
    """The error of a worker that did not see all the others start within ``timeout``
    seconds: this task and every task it waited for, named by their ``TF_CONFIG``
    type and index ('chief 0', 'worker 0'; a cluster of workers alone calls its
    worker 0 the chief), with the address it waited at."""
    tasks = [(f"{job} {i}", address) for job in ("chief", "worker")
             for i, address in enumerate(cluster.get(job, []))]
    chief = "" if "chief" in cluster else " (the chief)"
    this = f"{task_type} {task_id or 0}"
    return (f"the {len(tasks)} workers did not all start within {timeout:g} s "
            f"(--worker_timeout_secs): this is {this}{chief if this == 'worker 0' else ''}; "
            f"check that every task started (see the others' errors) and that each node "
            f"reaches {', '.join(f'{name} at {address}' for name, address in tasks)}, then "
            f"start the job again")


@contextlib.contextmanager
def _ctrl_c_ends_the_process() -> Iterator[bool]:
    """SIGINT at its default action in the block (the process ends, exit status 130):
    Python's handler would run only once TensorFlow returns; yields whether that is so
    (not outside the main thread).  (SIGTERM is TensorFlow's while it builds the
    strategy: its preemption notifier's.)"""
    if threading.current_thread() is not threading.main_thread():
        yield False  # (signal handlers are the main thread's to set)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _sigterm_taken_back() -> Iterator[None]:
    """SIGTERM's Python handler set again (in the C library too) as the block ends:
    building the strategy, TensorFlow's preemption notifier sets a C handler of its own
    for SIGTERM and leaves it there, so that a SIGTERM after the build (before the
    trainer's handlers, ``stopping``) was lost, the worker going on into training.  In
    the main thread only, where handlers are set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if previous is not None:  # (None: a handler not set from Python; left alone)
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _exit_on_sighup(wanted: bool = True) -> Iterator[bool]:
    """In the block, SIGHUP makes the process exit with status 1 at once (the C
    library's ``_exit`` as its handler, called with the signal's number, 1), where a
    Python handler would not run; yields whether that is so (else the watchdog kills
    the process: no SIGHUP, no C library to call, or SIGHUP ignored, as under nohup).
    Nothing is changed unless ``wanted`` (there is a watchdog)."""
    if not wanted:
        yield False
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        handler = ctypes.cast(libc._exit, ctypes.c_void_p).value
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        sighup = signal.SIGHUP
    except (OSError, AttributeError):
        yield False
        return
    assert sighup == 1  # _exit(signum): the exit status is the signal's number
    previous = libc.signal(sighup, handler)
    if previous == _SIG_IGN:  # nohup: a hang-up must not end the wait; SIGKILL instead
        libc.signal(sighup, previous)
        yield False
        return
    try:
        yield True
    finally:
        libc.signal(sighup, previous)


_SIG_IGN = 1  # the C library's SIG_IGN, as signal() returns it


# Waits until its stdin closes (this process built its strategy, or died); if that
# takes longer than the timeout, prints the error line and ends this process: with
# SIGHUP, which its C handler turns into exit status 1, or else SIGKILL.  A SIGINT or
# SIGTERM meanwhile (Ctrl-C reaches both processes; scancel signals every process
# of the step) is said in one line and ends this process at once, both as a SIGINT
# (its default action there: exit status 130, as cifar10-train interrupted before
# training), or as the timeout does where SIGINT is not at its default action.
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
        pass  # it has ended already (Ctrl-C reached it too)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
os.write(1, b"r")  # ready: its handlers are set
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
    # Its signal handlers set before the wait begins: a SIGTERM to the job step in
    # between would end the watchdog and leave this process waiting, deaf to it.
    watchdog.stdout.read(1)  # (b"" if it died: the wait goes on without it)
    watchdog.stdout.close()
    return watchdog


def _error_line(message: str) -> str:
    """``message`` as the program's error line (``<program>: error: ...``)."""
    record = pylogging.LogRecord("absl", pylogging.ERROR, __file__, 0, message, None, None)
    return logging.get_absl_handler().format(record)
