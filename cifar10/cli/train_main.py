"""cifar10-train: train the CIFAR-10 tutorial model, one replica per GPU.

Resumes the run in --train_dir if there is one; SIGINT/SIGTERM save a
checkpoint and stop.  Examples:

    cifar10-train --num_gpus=4
    cifar10-train --synthetic_data --max_steps=200 --train_dir=/tmp/try   # offline
"""

# This file is intentionally short: it parses flags, installs the signal
# handlers and calls cifar10.training.controller.train, where the work is.

from __future__ import annotations

import signal
import sys
import threading

from absl import app
from absl import flags

from cifar10.core.config import TrainConfig
from cifar10.distribute import cluster
from cifar10.cli import flags as cifar10_flags
from cifar10.data import getdata
from cifar10.cli import follow
from cifar10.cli import outdirs
from cifar10.cli import programs

FLAGS = flags.FLAGS
PROGRAM = "cifar10-train"
define_flags = cifar10_flags.define_train_flags  # this program's flags


def install_stop_handlers(stop_event: threading.Event) -> None:
    """SIGINT/SIGTERM: finish the loop of steps under way, save, exit; a second signal stops at once."""

    def handler(signum, frame):
        if stop_event.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        stop_event.set()
        print(f"Received {signal.Signals(signum).name}: finishing the current steps and "
              f"saving a checkpoint (send it again to stop at once).", flush=True)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    # TF_CONFIG and the settings it rules out are checked before TensorFlow loads
    # (which takes seconds) and reads TF_CONFIG itself.
    kind = cluster.strategy_kind(FLAGS.strategy)
    outdirs.refuse_foreign_train_dir(FLAGS.train_dir)
    if FLAGS.fresh_start:
        cluster.refuse_fresh_start(kind, FLAGS.train_dir)
    else:
        follow.refuse_other_kind_of_data(FLAGS, FLAGS.train_dir)
    # The data is found (downloaded if need be) and checked before TensorFlow loads,
    # so that a data mistake is answered at once.
    batches_dir, counts = getdata.prepare(
        FLAGS.data_dir, url=FLAGS.data_url, md5=FLAGS.data_md5, use_synthetic=FLAGS.synthetic_data,
        synthetic_records=FLAGS.synthetic_records, dataset=FLAGS.dataset, label=FLAGS.label)
    programs.load_tensorflow(allow_tf32=FLAGS.allow_tf32)
    from cifar10.data import pipeline as data
    from cifar10.distribute import devices
    from cifar10.training import controller
    from cifar10.training.run import TrainData

    # --num_gpus left at its default: one replica per GPU Slurm gave the task under srun,
    # else one replica, on the CPU without a warning if need be.
    num_gpus = FLAGS.num_gpus if FLAGS["num_gpus"].present else None
    strategy = devices.make_strategy(num_gpus, FLAGS.log_device_placement,
                                     FLAGS.strategy, FLAGS.worker_timeout_secs,
                                     FLAGS.slurm_port_base)
    if FLAGS.use_bf16:
        devices.warn_if_bfloat16_is_emulated(strategy.extended.worker_devices)
    config = cifar10_flags.config_from_flags(TrainConfig, FLAGS,
                                              profile_steps=FLAGS.profile_steps)
    train_data = TrainData(data.split_files(batches_dir, "train"), counts["train"],
                           data.class_names(batches_dir))
    stop_event = threading.Event()
    install_stop_handlers(stop_event)
    result = controller.train(config, strategy, train_data, stop_event=stop_event,
                              print_fn=lambda line: print(line, flush=True),
                              invocation=_invocation(batches_dir))
    if result.steps_run:  # else train said the run was already complete
        print("\n".join(result.summary()))


def _invocation(batches_dir: str):
    """What the run records of this program: its command line and flags (per start,
    in train_dir), and settings TensorBoard shows with the run's config."""
    from cifar10.training.run import Invocation

    return Invocation(command=sys.argv, flags_text=programs.flagfile_text(FLAGS),
                      settings={"command": " ".join(sys.argv), "data_dir": batches_dir,
                                "num_gpus": FLAGS.num_gpus, "allow_tf32": FLAGS.allow_tf32})


def run() -> None:
    programs.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
