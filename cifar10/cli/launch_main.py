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

# This file is intentionally short: it parses flags and calls cifar10.cli.workers,
# where the work is.

from __future__ import annotations

import sys

from absl import flags

from cifar10.cli import flags as cifar10_flags
from cifar10.cli import launch_args
from cifar10.cli import workers as launch
from cifar10.cli import process

FLAGS = flags.FLAGS
PROGRAM = "cifar10-launch"
define_flags = cifar10_flags.define_launch_flags  # this program's flags


def main(argv: list[str]) -> None:
    train_args = argv[1:]
    launch_args.fetch_data(launch_args.check_train_args(train_args, FLAGS.num_workers))
    try:
        launch.launch(FLAGS.num_workers, train_args, all_output=FLAGS.all_output,
                      print_fn=lambda line: print(line, flush=True))
    except launch.WorkerFailed as e:
        # The workers' own status, not 1: a worker's 130 or 137 says what happened.
        sys.stdout.flush()
        sys.stderr.write(f"{PROGRAM}: error: {e}\n")
        sys.stderr.flush()
        sys.exit(e.status)


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
