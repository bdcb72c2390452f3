"""Starts N local cifar10-train workers, each with its TF_CONFIG, to try multi-worker.

    python scripts/launch_workers.py --num_workers=2 -- --synthetic_data --max_steps=200

Everything after ``--`` goes to every worker's cifar10-train.  Each worker gets a
free port on 127.0.0.1 and a TF_CONFIG naming the whole cluster and its own
index (worker 0 is the chief, which writes checkpoints and summaries).  The
workers' output is printed with a ``[worker i]`` prefix.  SIGINT/SIGTERM are
passed on to every worker (they save a checkpoint at one step and stop).  The
exit status is 0 when every worker exits 0, else the first non-zero status.

On real machines, start ``cifar10-train`` on each host with its own TF_CONFIG
instead (docs/multi-machine.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_configs(ports: list[int]) -> list[str]:
    """The TF_CONFIG of each worker of a local cluster on ``ports``."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
            for i in range(len(ports))]


def _relay(index: int, stream, out) -> None:
    for line in stream:
        out.write(f"[worker {index}] {line}")
        out.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_workers", type=int, default=2, help="workers to start")
    parser.add_argument("--program", default=os.path.join(os.path.dirname(sys.executable),
                                                          "cifar10-train"),
                        help="the trainer to start (default: cifar10-train next to Python)")
    parser.add_argument("train_args", nargs="*", help="arguments of every worker (after --)")
    args = parser.parse_args(argv)
    if args.num_workers < 1:
        parser.error(f"--num_workers must be at least 1, got {args.num_workers}")
    procs = []
    for i, tf_config in enumerate(tf_configs(free_ports(args.num_workers))):
        env = dict(os.environ, TF_CONFIG=tf_config, PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen([args.program, *args.train_args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, bufsize=1,
                                      # Own session: a Ctrl-C in the terminal reaches the
                                      # workers once, through forward(), not twice (a
                                      # second signal stops a worker without saving).
                                      start_new_session=True))
    relays = [threading.Thread(target=_relay, args=(i, p.stdout, sys.stdout), daemon=True)
              for i, p in enumerate(procs)]
    for relay in relays:
        relay.start()

    def forward(signum, frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    codes = [p.wait() for p in procs]
    for relay in relays:
        relay.join(timeout=5)
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main())
