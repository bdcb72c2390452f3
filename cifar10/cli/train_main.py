"""cifar10-train: train the CIFAR-10 tutorial model, one replica per GPU.

Resumes the run in --train_dir if there is one; SIGINT/SIGTERM save a
checkpoint and stop (a second one stops at once), as does a closed standard
output (exit status 141).  Examples:

    cifar10-train --num_gpus=4
    cifar10-train --synthetic_data --max_steps=200 --train_dir=/tmp/try   # offline
"""

from __future__ import annotations

import contextlib
import sys

from absl import app
from absl import flags

from cifar10.core import machine
from cifar10.core.config import TrainConfig
from cifar10.distribute import cluster
from cifar10.cli import flags as cifar10_flags
from cifar10.data import getdata
from cifar10.cli import outdirs
from cifar10.cli import run_data
from cifar10.cli import process
from cifar10.runs import layout

FLAGS = flags.FLAGS
PROGRAM = "cifar10-train"
define_flags = cifar10_flags.define_train_flags  # this program's flags


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    no_download = _refuse_before_tensorflow()
    batches_dir, counts = _data(no_download)
    process.load_tensorflow(allow_tf32=FLAGS.allow_tf32, gpus=None)  # make_strategy's
    from cifar10.cli import stopping
    from cifar10.data import folder as data
    from cifar10.core.errors import StoppedBeforeTraining
    from cifar10.distribute import devices
    from cifar10.training import controller
    from cifar10.training.controller import TrainData

    strategy = _strategy()
    config = cifar10_flags.config_from_flags(TrainConfig, FLAGS,
                                              profile_steps=FLAGS.profile_steps)
    train_data = TrainData(data.split_files(batches_dir, "train"), counts["train"],
                           data.class_names(batches_dir), data.split_files(batches_dir, "test"))
    is_chief, task = devices.worker_role(strategy)
    new_run = FLAGS.fresh_start or not layout.holds_checkpoints(FLAGS.train_dir)
    if is_chief and new_run and not (FLAGS.use_bf16 or FLAGS.use_fp16):
        devices.suggest_precision(strategy.extended.worker_devices)  # not at each resume
    # (The other workers of a job write nothing in --train_dir.)
    claimed = (outdirs.claimed("train_dir", FLAGS.train_dir, PROGRAM) if is_chief
               else contextlib.nullcontext())
    try:
        with claimed, stopping.StopRequests(PROGRAM, FLAGS.train_dir,
                                            task=None if is_chief else task) as stop:
            result = controller.train(config, strategy, train_data, stop_event=stop.event,
                                      print_fn=stop.print, invocation=_invocation(batches_dir),
                                      on_training_start=stop.training_starts)
    except StoppedBeforeTraining:
        if stop.stdout_closed:  # the stop was a closed pipe, not a signal: its status
            stop.say(f"{PROGRAM}: {stop.stdout_lost()} before training started; "
                     f"nothing was trained")
            sys.exit(stop.stdout_status)
        raise
    _close(result, stop)


def _data(no_download: str) -> tuple[str, dict[str, int]]:
    return getdata.prepare(
        FLAGS.data_dir, url=FLAGS.data_url, md5=FLAGS.data_md5, use_synthetic=FLAGS.synthetic_data,
        synthetic_records=FLAGS.synthetic_records, dataset=FLAGS.dataset, label=FLAGS.label,
        no_download=no_download, fetched_by=cluster.data_fetcher(),
        wait_s=FLAGS.worker_timeout_secs)


def _strategy():
    """The run's distribution strategy, with the warnings of an emulated precision."""
    from cifar10.distribute import devices

    num_gpus = FLAGS.num_gpus if FLAGS["num_gpus"].present else None
    strategy = devices.make_strategy(num_gpus, FLAGS.log_device_placement,
                                     FLAGS.strategy, FLAGS.worker_timeout_secs,
                                     FLAGS.slurm_port_base, FLAGS.replicas_per_gpu,
                                     FLAGS.all_reduce)
    if FLAGS.use_bf16:
        devices.warn_if_bfloat16_is_emulated(strategy.extended.worker_devices)
    if FLAGS.use_fp16:
        devices.warn_if_float16_runs_on_cpu(strategy.extended.worker_devices)
    return strategy


def _close(result, stop) -> None:
    """The run's closing lines; where stdout was closed, the first on stderr instead."""
    summary = (result.summary(outdirs.eval_dir_for(FLAGS.train_dir))
               if result.steps_run else [])
    for line in summary:
        stop.print(line)
    if stop.stdout_closed:
        stop.say(stop.closed_line(summary[0] if summary else
                                  f"Training was already complete at step {result.step}."))
        sys.exit(stop.stdout_status)


def _refuse_before_tensorflow() -> str:
    """Refuses what this start cannot do; returns ``run_data.download_refusal``'s."""
    kind = cluster.strategy_kind(FLAGS.strategy)  # TF_CONFIG and what it rules out
    machine.refuse_batch_beyond_memory(FLAGS.batch_size,
                                      2 if FLAGS.use_bf16 or FLAGS.use_fp16 else 4)
    outdirs.refuse_unless_own("train_dir", FLAGS.train_dir, PROGRAM)
    outdirs.refuse_as_data_dir(FLAGS.data_dir, FLAGS.train_dir)
    if kind != "multi_worker":  # (a job's chief takes the lock once all its workers are up)
        layout.refuse_if_held(FLAGS.train_dir)  # before anything else is said or fetched
    if FLAGS.fresh_start:
        cluster.refuse_fresh_start(kind, FLAGS.train_dir)
        return ""
    run_data.refuse_other_kind_of_data(FLAGS, FLAGS.train_dir)
    return run_data.download_refusal(FLAGS, FLAGS.train_dir)


def _invocation(batches_dir: str):
    from cifar10.training.controller import Invocation

    return Invocation(command=sys.argv, flags_text=cifar10_flags.flagfile_text(FLAGS),
                      settings={"command": " ".join(sys.argv), "data_dir": batches_dir,
                                "num_gpus": FLAGS.num_gpus, "allow_tf32": FLAGS.allow_tf32})


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
