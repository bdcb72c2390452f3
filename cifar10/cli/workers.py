"""One multi-worker job on this machine: cifar10-launch's library.

``launch`` starts N ``cifar10-train`` workers, each with a free port on 127.0.0.1
and a ``TF_CONFIG`` naming the whole cluster and its own index (worker 0 is the
chief, which writes the checkpoints and summaries), passes SIGINT and SIGTERM on
to every worker, stops the others (SIGTERM) a few seconds after one failed if they
have not ended by then (both ``worker_stops``), and ends with the first worker that
failed (their flags are checked and their data fetched before, by ``launch_args``),
or, where one stop request came before the job started training and every worker
ended interrupted (exit status 130), as a program interrupted before its work began
(``Interrupted``).  Each worker leads its own process group, and every signal goes
to the whole group: a worker still waiting for the others to start hears a signal
only through its watchdog (``cifar10.distribute.resolver``), a process of its group.

What it shows: the workers run the same synchronous steps, so each of them
prints the same lines (the data notice, every logged step and its loss, the end
of the run).  Shown from every worker, each of those lines came N times.  The
chief's lines are the job's: they are shown, prefixed ``[worker 0]``; of the
other workers only their stderr is, their own warnings and errors, prefixed
``[worker i]`` (``all_output`` shows all their lines too).

The trainer is the ``cifar10-train`` installed next to the Python that runs this
(a package's console scripts go into its interpreter's ``bin`` folder), else
that Python running ``cifar10.cli.entry.train`` (what the script runs): whichever
Python the launcher runs in, the workers run the same package in the same one.  Nothing here loads TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Callable, Sequence, TextIO

from cifar10.cli import worker_stops
from cifar10.core.errors import Cifar10Error, StoppedBeforeTraining

TRAINER = "cifar10-train"
# What the console script runs (setup.py), for a Python whose scripts are elsewhere:
# through ``entry``, so that a Ctrl-C while the worker imports its modules is one line,
# where ``-m cifar10.cli.train_main`` would import them before any handler.
TRAINER_CODE = "from cifar10.cli import entry; entry.train()"
HOST = "127.0.0.1"


# The exit status of a cifar10-train that a stop request ended before it trained
# (interrupted: 128 + SIGINT, whichever of SIGINT and SIGTERM it was).
INTERRUPTED = 130


class Interrupted(StoppedBeforeTraining):
    """The job was asked to stop (SIGINT, SIGTERM) before it started training, and
    every worker stopped so (``INTERRUPTED``), with nothing trained or saved."""


class WorkerFailed(Cifar10Error):
    """A worker ended with a non-zero status; ``status`` is the launcher's exit status
    (a worker's own, or 128 + the signal that ended it)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((HOST, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_configs(ports: Sequence[int]) -> list[str]:
    """The ``TF_CONFIG`` of each worker of a local cluster on ``ports``."""
    workers = {"worker": [f"{HOST}:{port}" for port in ports]}
    return [json.dumps({"cluster": workers, "task": {"type": "worker", "index": i}})
            for i in range(len(ports))]


def trainer_command(python: str | None = None) -> list[str]:
    """How to start cifar10-train with ``python`` (default: this one)'s package.

    The console script next to the interpreter when it is there (a virtual
    environment's ``bin``), else ``python -c`` running the script's entry point (a
    package installed with ``pip install --user``, whose scripts are elsewhere).
    """
    python = python or sys.executable
    installed = os.path.join(os.path.dirname(python), TRAINER)
    if os.path.isfile(installed) and os.access(installed, os.X_OK):
        return [installed]
    return [python, "-c", TRAINER_CODE]


def launch(num_workers: int, train_args: Sequence[str], all_output: bool = False,
           command: Sequence[str] | None = None, out: TextIO | None = None,
           print_fn: Callable[[str], None] = print) -> None:
    """Runs ``num_workers`` workers of one job to their end.

    Args:
      num_workers: workers to start (each one replica per its ``--num_gpus``).
      train_args: the flags of every worker.
      all_output: also show the other workers' stdout, not only the chief's.
      command: the trainer (default ``trainer_command()``).
      out: where the workers' lines go (default: ``sys.stdout``).
      print_fn: where the launcher's own line goes.

    Raises:
      Interrupted: one SIGINT or SIGTERM, passed on to the workers before they
        started training, ended every one of them (exit status 130).
      WorkerFailed: a worker ended with a non-zero status (the first to end so).
      Cifar10Error: a worker could not be started (the others are stopped).
    """
    out = out or sys.stdout
    command = list(command or trainer_command())
    ports = free_ports(num_workers)
    print_fn(_start_line(ports, all_output))
    job = _Job()
    ended = _run_workers(job, command, train_args, ports, all_output, out)
    _raise_for_ending(job, ended)


@dataclasses.dataclass
class _Job:
    """What the launcher, its relays and its signal handler share while the workers run."""

    processes: list[subprocess.Popen] = dataclasses.field(default_factory=list)
    relays: list[threading.Thread] = dataclasses.field(default_factory=list)
    closed: threading.Event = dataclasses.field(  # nobody reads ``out`` any more (| head)
        default_factory=threading.Event)
    # The pids of the workers the launcher has signalled.
    signalled: set[int] = dataclasses.field(default_factory=set)
    # The stop requests (signals) passed on to the workers.
    stops: list[int] = dataclasses.field(default_factory=list)


def _run_workers(job: _Job, command: list[str], train_args: Sequence[str],
                 ports: Sequence[int], all_output: bool, out: TextIO) -> list[tuple[int, int]]:
    """Starts the workers of ``job`` and waits for all to end, passing SIGINT and SIGTERM
    on to them meanwhile; returns (index, return code) of each, in the order they
    ended, once their lines are all shown."""
    previous = worker_stops.forward_signals(job.processes, job.signalled, job.stops)
    try:
        _start_all(command, train_args, ports, all_output, out, job.processes, job.relays,
                   on_closed=lambda: worker_stops.stop_once(job.processes, job.closed,
                                                            job.signalled))
        ended = worker_stops.wait(
            job.processes,
            on_failure=lambda: worker_stops.stop_unsignalled(job.processes, job.signalled))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for relay in job.relays:
        relay.join(timeout=5)
    return ended


def _raise_for_ending(job: _Job, ended: Sequence[tuple[int, int]]) -> None:
    """Raises what the workers' ``ended`` (index, return code) make of the job:
    ``Interrupted``, ``WorkerFailed``, or BrokenPipeError where its output was
    closed; returns where every worker ended well."""
    failed = [(index, status) for index, status in ended if status != 0]
    # One stop request, and every worker interrupted: they stopped before training
    # (in training, the first stop request saves and ends each with status 0; a
    # second one interrupts them at once, with what they trained saved before).
    if (len(job.stops) == 1 and not job.closed.is_set() and len(failed) == len(job.processes)
            and all(worker_stops.exit_status(status) == INTERRUPTED for _, status in failed)):
        raise Interrupted()
    if failed:
        raise WorkerFailed(", then ".join(worker_stops.ending(index, status)
                                          for index, status in failed),
                           worker_stops.exit_status(failed[0][1]))
    if job.closed.is_set():  # the workers saved and stopped: end as a closed pipe ends a program
        raise BrokenPipeError("standard output was closed")


def _start_all(command: list[str], train_args: Sequence[str], ports: Sequence[int],
               all_output: bool, out: TextIO, processes: list[subprocess.Popen],
               relays: list[threading.Thread], on_closed: Callable[[], None]) -> None:
    """Starts the workers into ``processes`` (which the signal forwarding sees as they
    come), each with a thread in ``relays`` that prefixes its lines into ``out`` and
    calls ``on_closed`` if ``out`` is closed."""
    lock = threading.Lock()
    for index, tf_config in enumerate(tf_configs(ports)):
        try:
            process, stream = _start_worker([*command, *train_args], tf_config,
                                            show_stdout=index == 0 or all_output)
        except OSError as e:
            for started in processes:  # no half job left running
                started.kill()
            raise Cifar10Error(f"cannot start worker {index}, {' '.join(command)} "
                               f"({e.strerror or e})") from e
        processes.append(process)
        relays.append(threading.Thread(target=_relay, daemon=True,
                                       args=(f"[worker {index}] ", stream, out, lock,
                                             on_closed)))
        relays[-1].start()


def _start_line(ports: Sequence[int], all_output: bool) -> str:
    where = f"{HOST}, port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))}"
    if len(ports) == 1:
        return f"Starting 1 {TRAINER} worker on {where}."
    shown = ("every worker shows all its lines" if all_output else
             "worker 0 (the chief) shows the job's progress, the others their warnings "
             "and errors")
    return f"Starting {len(ports)} {TRAINER} workers of one job on {where}: {shown}."


def _start_worker(argv: Sequence[str], tf_config: str, show_stdout: bool
                  ) -> tuple[subprocess.Popen, TextIO]:
    """A worker process and the stream of its lines to show (stdout and stderr
    together, or stderr alone)."""
    env = dict(os.environ, TF_CONFIG=tf_config, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        argv, env=env, text=True, errors="replace", bufsize=1,
        stdout=subprocess.PIPE if show_stdout else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if show_stdout else subprocess.PIPE,
        # Its own session: a Ctrl-C in the terminal reaches the worker once, through
        # _forward_signals, not twice (a second signal stops a worker without saving).
        start_new_session=True)
    return process, process.stdout if show_stdout else process.stderr


def _relay(prefix: str, stream: TextIO, out: TextIO, lock: threading.Lock,
           on_closed: Callable[[], None] = lambda: None) -> None:
    """Writes each line of ``stream`` to ``out`` with ``prefix``, whole lines at a time;
    calls ``on_closed`` when ``out`` is closed (a stop request, as for the trainer)."""
    writable = True
    for line in stream:
        if not writable:
            continue  # keep reading, so that the worker never blocks on a full pipe
        with lock:
            try:
                out.write(prefix + line if line.endswith("\n") else f"{prefix}{line}\n")
                out.flush()
            except (OSError, ValueError):  # nobody reads the output any more (| head)
                writable = False
                on_closed()  # under the relays' lock: one stop, whichever relay sees it
