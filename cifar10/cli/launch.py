"""cifar10-launch: try multi-worker training on one machine.

Starts --num_workers cifar10-train workers of one job, each with a free port on
127.0.0.1 and its TF_CONFIG; cifar10-train's flags follow a bare --.  A missing
--data_dir is downloaded once, before the workers start.  Example:

    cifar10-launch --num_workers=2 -- --synthetic_data --max_steps=300 --train_dir=/tmp/mw

Worker 0, the chief, shows the job's progress ([worker 0] lines); the other
workers show their warnings and errors (--all_output: all their lines).
Ctrl-C or SIGTERM reaches every worker: they save a checkpoint at one step and
stop; before training has started, they stop at once, nothing trained (exit
status 130).  A worker that fails stops the others (SIGTERM, 5 s later).  The exit
status is that of the first worker that failed, else 0.  On several machines, start
cifar10-train on each instead (docs/multi-machine.md).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence, TextIO

from absl import flags
from absl import logging  # defines absl's --verbosity and the like

from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import outdirs
from cifar10.cli import process
from cifar10.cli import run_data
from cifar10.core import machine
from cifar10.core.errors import Cifar10Error, StoppedBeforeTraining
from cifar10.data import getdata
from cifar10.distribute import cluster
from cifar10.runs import layout

FLAGS = flags.FLAGS
PROGRAM = "cifar10-launch"
define_flags = cifar10_flags.define_launch_flags  # this program's flags
TRAINER = "cifar10-train"
TRAINER_CODE = "from cifar10.cli import entry; entry.train()"
HOST = "127.0.0.1"
INTERRUPTED = 130  # a cifar10-train that a stop request ended before it trained
_POLL_SECS = 0.1
# The others' time to end with their own error line before they get SIGTERM.
_STOP_OTHERS_AFTER_SECS = 5.0


def main(argv: list[str]) -> None:
    train_args = argv[1:]
    fetch_data(check_train_args(train_args, FLAGS.num_workers))
    try:
        launch(FLAGS.num_workers, train_args, all_output=FLAGS.all_output,
               print_fn=lambda line: print(line, flush=True))
    except WorkerFailed as e:
        sys.stdout.flush()
        sys.stderr.write(f"{PROGRAM}: error: {e}\n")
        sys.stderr.flush()
        sys.exit(e.status)


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


_ABSL_MODULES = (logging.__name__,)  # flags every program takes from absl


def check_train_args(args: Sequence[str], num_workers: int) -> flags.FlagValues:
    """The workers' flags, refusing once what every worker would refuse."""
    if any(arg.split("=")[0] in process.HELP_FLAGS for arg in args):
        raise Cifar10Error(f"{TRAINER} --help lists the flags that go after --")
    values = flags.FlagValues()
    cifar10_flags.define_train_flags(values)
    for module in _ABSL_MODULES:
        for flag in flags.FLAGS.get_flags_for_module(module):
            # A copy: parsing here leaves this process's own settings alone.
            values[flag.name] = copy.deepcopy(flag)
    try:
        rest = flagfiles.parse(values, [TRAINER, *args], TRAINER)
    except flags.Error as e:
        message = cifar10_flags.flag_error_text(e)
        raise Cifar10Error(f"{TRAINER}'s flags (after --): {message} (see {TRAINER} "
                           f"--help)") from None
    if len(rest) > 1:
        raise Cifar10Error(f"unexpected arguments for {TRAINER}: {' '.join(rest[1:])} (after "
                           f"-- come its flags only, e.g. -- --max_steps=300)")
    machine.refuse_batch_beyond_memory(
        values["batch_size"].value, 2 if values["use_bf16"].value or values["use_fp16"].value
        else 4)
    outdirs.refuse_unless_own("train_dir", values["train_dir"].value, TRAINER)
    outdirs.refuse_as_data_dir(values["data_dir"].value, values["train_dir"].value)
    layout.refuse_a_folder_for_the_file(values["train_dir"].value)
    if num_workers > 1:
        if values["strategy"].value not in ("auto", "multi_worker"):
            raise Cifar10Error(f"--strategy={values['strategy'].value} would have each worker "
                               f"train on its own, all in one --train_dir: drop it, the "
                               f"workers of one job use multi_worker")
        if values["fresh_start"].value:
            cluster.refuse_fresh_start("multi_worker", values["train_dir"].value)
    return values


def fetch_data(values: flags.FlagValues) -> None:
    """The workers' data found, or downloaded once, before any worker starts."""
    no_download = ""
    if not values["fresh_start"].value:
        run_data.refuse_other_kind_of_data(values, values["train_dir"].value)
        no_download = run_data.download_refusal(values, values["train_dir"].value)
    getdata.prepare(values["data_dir"].value, url=values["data_url"].value,
                    md5=values["data_md5"].value, use_synthetic=values["synthetic_data"].value,
                    synthetic_records=values["synthetic_records"].value,
                    dataset=values["dataset"].value, label=values["label"].value,
                    print_fn=lambda line: None, no_download=no_download)


class Interrupted(StoppedBeforeTraining):
    """One stop request before the job trained ended every worker (status 130)."""


class WorkerFailed(Cifar10Error):
    """A worker ended with a non-zero status; ``status``: the launcher's exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def free_ports(count: int) -> list[int]:
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
    workers = {"worker": [f"{HOST}:{port}" for port in ports]}
    return [json.dumps({"cluster": workers, "task": {"type": "worker", "index": i}})
            for i in range(len(ports))]


def trainer_command(python: str | None = None) -> list[str]:
    """How to start cifar10-train of ``python``'s package: its script, else ``python -c``."""
    python = python or sys.executable
    installed = os.path.join(os.path.dirname(python), TRAINER)
    if os.path.isfile(installed) and os.access(installed, os.X_OK):
        return [installed]
    return [python, "-c", TRAINER_CODE]


@dataclasses.dataclass
class _Job:
    processes: list[subprocess.Popen] = dataclasses.field(default_factory=list)
    relays: list[threading.Thread] = dataclasses.field(default_factory=list)
    closed: threading.Event = dataclasses.field(default_factory=threading.Event)  # output
    signalled: set[int] = dataclasses.field(default_factory=set)  # pids
    stops: list[int] = dataclasses.field(default_factory=list)  # signals passed on


def launch(num_workers: int, train_args: Sequence[str], all_output: bool = False,
           command: Sequence[str] | None = None, out: TextIO | None = None,
           print_fn: Callable[[str], None] = print) -> None:
    """Runs ``num_workers`` workers of one job to their end, their lines into ``out``; raises
    Interrupted, WorkerFailed, BrokenPipeError (``out`` closed) or Cifar10Error."""
    out = out or sys.stdout
    command = list(command or trainer_command())
    ports = free_ports(num_workers)
    print_fn(_start_line(ports, all_output))
    job = _Job()
    previous = {signum: signal.signal(signum, lambda signum, _: _forward(job, signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        _start_all(job, command, train_args, ports, all_output, out)
        ended = wait(job.processes, on_failure=lambda: _stop_unsignalled(job))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for relay in job.relays:
        relay.join(timeout=5)
    failed = [(index, status) for index, status in ended if status != 0]
    # (In training, the first stop request saves and ends each worker with status 0.)
    if (len(job.stops) == 1 and not job.closed.is_set() and len(failed) == num_workers
            and all(exit_status(status) == INTERRUPTED for _, status in failed)):
        raise Interrupted()
    if failed:
        raise WorkerFailed(", then ".join(ending(index, status) for index, status in failed),
                           exit_status(failed[0][1]))
    if job.closed.is_set():
        raise BrokenPipeError("standard output was closed")


def _start_line(ports: Sequence[int], all_output: bool) -> str:
    where = f"{HOST}, port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))}"
    if len(ports) == 1:
        return f"Starting 1 {TRAINER} worker on {where}."
    shown = ("every worker shows all its lines" if all_output else
             "worker 0 (the chief) shows the job's progress, the others their warnings "
             "and errors")
    return f"Starting {len(ports)} {TRAINER} workers of one job on {where}: {shown}."


def _start_all(job: _Job, command: list[str], train_args: Sequence[str],
               ports: Sequence[int], all_output: bool, out: TextIO) -> None:
    lock_ = threading.Lock()
    for index, tf_config in enumerate(tf_configs(ports)):
        try:
            process_, stream = _start_worker([*command, *train_args], tf_config,
                                             show_stdout=index == 0 or all_output)
        except OSError as e:
            for started in job.processes:  # no half job left running
                started.kill()
            raise Cifar10Error(f"cannot start worker {index}, {' '.join(command)} "
                               f"({e.strerror or e})") from e
        job.processes.append(process_)
        job.relays.append(threading.Thread(
            target=_relay, daemon=True,
            args=(f"[worker {index}] ", stream, out, lock_, lambda: _stop_once(job))))
        job.relays[-1].start()


def _start_worker(argv: Sequence[str], tf_config: str, show_stdout: bool
                  ) -> tuple[subprocess.Popen, TextIO]:
    env = dict(os.environ, TF_CONFIG=tf_config, PYTHONUNBUFFERED="1")
    worker = subprocess.Popen(
        argv, env=env, text=True, errors="replace", bufsize=1,
        stdout=subprocess.PIPE if show_stdout else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if show_stdout else subprocess.PIPE,
        # A terminal's Ctrl-C reaches it once, through _forward (twice: no save).
        start_new_session=True)
    return worker, worker.stdout if show_stdout else worker.stderr


def _relay(prefix: str, stream: TextIO, out: TextIO, lock_: threading.Lock,
           on_closed: Callable[[], None]) -> None:
    writable = True
    for line in stream:
        if not writable:
            continue  # keep reading, so that the worker never blocks on a full pipe
        with lock_:
            try:
                out.write(prefix + line if line.endswith("\n") else f"{prefix}{line}\n")
                out.flush()
            except (OSError, ValueError):  # nobody reads the output any more (| head)
                writable = False
                on_closed()


def signal_group(worker: subprocess.Popen, signum: int, signalled: set[int]) -> None:
    if worker.poll() is None:  # not reaped: its pid is still its group's id
        signalled.add(worker.pid)
        try:
            os.killpg(worker.pid, signum)
        except ProcessLookupError:  # it and its group ended just now
            pass


def _forward(job: _Job, signum: int) -> None:
    job.stops.append(signum)
    for worker in list(job.processes):
        signal_group(worker, signum, job.signalled)


def _stop_once(job: _Job) -> None:
    """SIGTERM to every worker once the output is closed (a second: no save)."""
    if not job.closed.is_set():
        job.closed.set()
        for worker in list(job.processes):
            signal_group(worker, signal.SIGTERM, job.signalled)


def _stop_unsignalled(job: _Job) -> None:
    """SIGTERM to every worker not yet signalled (one asked to stop is left to save)."""
    for worker in job.processes:
        if worker.pid not in job.signalled:
            signal_group(worker, signal.SIGTERM, job.signalled)


def wait(processes: Sequence[subprocess.Popen], on_failure: Callable[[], None] = lambda: None,
         grace_secs: float = _STOP_OTHERS_AFTER_SECS) -> list[tuple[int, int]]:
    """(index, return code) of each process, in the order they ended; calls
    ``on_failure`` once, if others still run ``grace_secs`` after the first failure."""
    running, ended = dict(enumerate(processes)), []
    failed_at: float | None = None
    stopped = False
    while running:
        for index, worker in list(running.items()):
            if worker.poll() is not None:
                ended.append((index, worker.returncode))
                del running[index]
                if worker.returncode != 0 and failed_at is None:
                    failed_at = time.monotonic()
        if (running and not stopped and failed_at is not None
                and time.monotonic() - failed_at >= grace_secs):
            stopped = True
            on_failure()
        if running:
            time.sleep(_POLL_SECS)
    return ended


def ending(index: int, status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"worker {index} was ended by {name}"
    return f"worker {index} exited with status {status}"


def exit_status(status: int) -> int:
    """A return code as a shell reports it (128 + the signal that ended it)."""
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    run()
