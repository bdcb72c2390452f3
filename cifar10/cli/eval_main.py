"""cifar10-eval: precision @ 1 of a training run's checkpoints, as they appear.

Runs beside cifar10-train (another process, possibly another machine seeing the
same directory), scores each new checkpoint once with the moving-average
weights, and stops when training is complete.  Examples:

    cifar10-eval --checkpoint_dir=/tmp/cifar10_train --eval_dir=/tmp/cifar10_eval
    cifar10-eval --run_once --synthetic_data        # score the latest checkpoint
    cifar10-eval --checkpoint=/tmp/cifar10_train/model.ckpt-10000 --weights=raw
"""

# This file is intentionally short: it parses flags and calls
# cifar10.evaluation.polling.evaluate, where the work is.

from __future__ import annotations

import os
import signal
import sys

from absl import app
from absl import flags
from absl import logging

from cifar10.cli import flags as cifar10_flags
from cifar10.core import machine
from cifar10.core.config import EvalConfig
from cifar10.core.errors import Cifar10Error
from cifar10.data import folder as datafolder
from cifar10.data import getdata
from cifar10.cli import checkpoint_dir
from cifar10.cli import process
from cifar10.cli import follow
from cifar10.cli import outdirs
from cifar10.cli import writable
from cifar10.runs import layout
from cifar10.runs import records

FLAGS = flags.FLAGS
PROGRAM = "cifar10-eval"
define_flags = cifar10_flags.define_eval_flags  # this program's flags


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    checkpoint, run_dir = _refuse_before_data()
    # The data the run was trained on, unless the command line says otherwise; found
    # (and checked) before TensorFlow loads, so that a data mistake is answered at once.
    recorded = follow.follow_run(FLAGS, run_dir, PROGRAM)
    followed = recorded.describe() if recorded else ""
    # One checkpoint to score: a mistyped --checkpoint_dir, or a checkpoint that does not
    # read, costs no download. Its name is looked for, and the data on disk checked,
    # before TensorFlow loads; then it is read, and only then is the data downloaded.
    single = FLAGS.run_once or checkpoint
    if single and not checkpoint and not layout.latest(run_dir):
        raise checkpoint_dir.no_checkpoint(
            run_dir, "No checkpoint file found",
            or_instead="leave out --run_once to score each checkpoint as it is saved")
    data = _data_on_disk(followed) if single else _data(followed)
    # Now that the flags are parsed; the evaluator draws its pictures with matplotlib.
    tf = process.load_tensorflow(allow_tf32=FLAGS.allow_tf32, plots=True)
    if single:
        checkpoint = checkpoint_dir.checkpoint_that_reads(checkpoint, run_dir)
        data = data or _data(followed)
    from cifar10.evaluation import polling
    from cifar10.evaluation import scoring

    _set_up_devices(tf)
    try:
        polling.evaluate(_config(*data, checkpoint), print_fn=lambda line: print(line, flush=True),
                         flags_text=cifar10_flags.flagfile_text(FLAGS), command=sys.argv)
    except scoring.OtherClasses as e:
        raise Cifar10Error(f"{e.what}: {_data_of_its_classes(e.run_dir, len(e.trained_on))}"
                           ) from None
    # Every result is recorded and printed: only the process's end is left, TensorFlow's
    # clean-up in it (some tenths of a second).  A Ctrl-C or SIGTERM from here on is
    # ignored, as after the trainer's last save, so that the status stays 0: at Python's
    # end it would kill the process, with no line, its work done.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _refuse_before_data() -> tuple[str | None, str]:
    """What this start cannot do, refused before the data is looked for: a batch that
    cannot fit, a --checkpoint that names none, an --eval_dir that is not the
    evaluator's to write or cannot be written; and, to poll a run, a folder that is no
    run (not to wait there for ever), then the wait for the run to start.

    Returns:
      (the --checkpoint given, as found, or None; the folder of the run scored).
    """
    machine.refuse_batch_beyond_memory(FLAGS.batch_size,
                                       2 if FLAGS.use_bf16 or FLAGS.use_fp16 else 4, replica=False)
    checkpoint = layout.given(FLAGS.checkpoint) if FLAGS.checkpoint else None
    run_dir = layout.run_folder(checkpoint, FLAGS.checkpoint_dir)
    outdirs.refuse_foreign_eval_dir(FLAGS.eval_dir, run_dir)
    writable.refuse_unwritable("eval_dir", FLAGS.eval_dir)
    outdirs.warn_of_another_runs_results(FLAGS.eval_dir, run_dir)
    outdirs.warn_of_an_earlier_runs_results(FLAGS.eval_dir, run_dir)
    if not (FLAGS.run_once or checkpoint):
        checkpoint_dir.refuse_a_folder_that_is_no_run(run_dir)  # not to wait there for ever
        follow.wait_for_run(run_dir, FLAGS.eval_timeout,
                            print_fn=lambda line: print(line, flush=True))
    return checkpoint, run_dir


def _data_of_its_classes(run_dir: str, count: int) -> str:
    """How to score the run in ``run_dir`` on data of its ``count`` classes: leave out the
    data flags given that differ from those the run recorded, to use its data; else
    (the run's own data holds other classes now, or it recorded none) a --data_dir of
    those classes."""
    other = f"pass a --data_dir with those {count} classes"
    recorded = records.recorded_flags(run_dir) or {}
    given = [name for name in follow.DATA_FLAGS
             if FLAGS[name].present and name in recorded and not _same(name, recorded[name])]
    if not given:
        return other
    theirs = " ".join(_as_flag(name, recorded[name]) for name in given)
    return (f"leave out {', '.join('--' + name for name in given)} to use the run's "
            f"({theirs}, in {os.path.join(run_dir, records.FLAGS_FILE)}), or {other}")


def _same(name: str, recorded: str) -> bool:
    """Whether flag ``name``'s value is the one ``recorded`` (a flags.txt value); for a
    folder, the same folder."""
    try:
        value = FLAGS[name].parser.parse(recorded)
    except (ValueError, flags.Error):
        return False
    if name == "data_dir" and value and FLAGS[name].value:
        return os.path.realpath(value) == os.path.realpath(FLAGS[name].value)
    return value == FLAGS[name].value


def _as_flag(name: str, recorded: str) -> str:
    """``recorded`` (a flags.txt value) as a flag: --name=value, --name or --noname."""
    if recorded in ("true", "false"):
        return f"--{name}" if recorded == "true" else f"--no{name}"
    return f"--{name}={recorded}"


def _set_up_devices(tf) -> None:
    """The devices the evaluator computes on: never a GPU with --eval_on_cpu (not to
    compete with training for one), else GPUs' memory taken as needed; and the warning
    of a bfloat16 the devices only emulate."""
    from cifar10.distribute import devices

    if FLAGS.eval_on_cpu:
        tf.config.set_visible_devices([], "GPU")
    else:
        devices.enable_memory_growth()
    if FLAGS.use_bf16:
        devices.warn_if_bfloat16_is_emulated()


def _config(batches_dir: str, counts: dict[str, int], checkpoint: str | None) -> EvalConfig:
    """The evaluation's settings: the flags', with the files, the number of examples and
    the class names of the data in ``batches_dir`` (``counts`` records a split)."""
    num_examples = examples_to_evaluate(FLAGS.num_examples, FLAGS["num_examples"].present,
                                        counts, FLAGS.eval_data)
    return cifar10_flags.config_from_flags(
        EvalConfig, FLAGS, eval_files=datafolder.split_files(batches_dir, FLAGS.eval_data),
        num_examples=num_examples, class_names=datafolder.class_names(batches_dir),
        checkpoint=checkpoint)


def _data(followed: str, no_download: str = "") -> tuple[str, dict[str, int]]:
    """The data (``getdata.prepare``) of the data flags, ``followed`` from the run's
    flags.txt (``follow.Followed.describe()``, or ''); where it would be downloaded,
    ``getdata.NotDownloaded(no_download)`` is raised instead when ``no_download`` is
    given."""
    outdirs.refuse_output_as_data_dir("eval_dir", FLAGS.eval_dir, FLAGS.data_dir, followed)
    outdirs.refuse_run_as_data_dir(FLAGS.data_dir, followed)
    return getdata.prepare(
        FLAGS.data_dir, url=FLAGS.data_url, md5=FLAGS.data_md5, use_synthetic=FLAGS.synthetic_data,
        synthetic_records=FLAGS.synthetic_records, dataset=FLAGS.dataset, label=FLAGS.label,
        followed=followed, no_download=no_download)


def _data_on_disk(followed: str) -> tuple[str, dict[str, int]] | None:
    """``_data`` where it is found on disk (checked, or generated), None where it is to
    be downloaded: a data mistake is answered before TensorFlow loads, and a download
    waits until the checkpoint is known to read."""
    try:
        return _data(followed, no_download="the data is not on disk")
    except getdata.NotDownloaded:
        return None


def examples_to_evaluate(asked: int, given: bool, counts: dict[str, int], eval_data: str) -> int:
    """How many examples to score: ``asked`` when the command line ``given`` it (at most
    what the data holds, with a warning); by default the whole test split, or the
    original's 10,000 of the training split (``train_eval``)."""
    available = counts["test" if eval_data == "test" else "train"]
    if not given:
        return available if eval_data == "test" else min(asked, available)
    if asked > available:
        logging.warning("--num_examples=%d but the %s data holds %d examples: evaluating %d.",
                        asked, eval_data, available, available)
    return min(asked, available)


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
