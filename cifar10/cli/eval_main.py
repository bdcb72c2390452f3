"""cifar10-eval: precision @ 1 of a training run's checkpoints, as they appear.

Runs beside cifar10-train (another process, possibly another machine seeing the
same directory), scores each new checkpoint once with the moving-average
weights, and stops when training is complete.  Examples:

    cifar10-eval --checkpoint_dir=/tmp/cifar10_train --eval_dir=/tmp/cifar10_eval
    cifar10-eval --run_once --synthetic_data        # score the latest checkpoint
    cifar10-eval --checkpoint=/tmp/cifar10_train/model.ckpt-10000 --weights=raw
    cifar10-eval --model=/tmp/cifar10_export/10000/model.tflite   # an exported model
"""

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
from cifar10.cli import outdirs
from cifar10.cli import run_data
from cifar10.evaluation import recording
from cifar10.runs import layout
from cifar10.runs import records

FLAGS = flags.FLAGS
PROGRAM = "cifar10-eval"
define_flags = cifar10_flags.define_eval_flags  # this program's flags


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    checkpoint, run_dir = _refuse_before_data()
    # The data the run was trained on, unless the command line says otherwise.
    recorded = run_data.follow_run(FLAGS, run_dir, PROGRAM)
    followed = recorded.describe() if recorded else ""
    # One checkpoint to score: a mistyped --checkpoint_dir, or a checkpoint that does not
    # read, costs no download (the data is downloaded once the checkpoint reads).
    single = FLAGS.run_once or checkpoint or FLAGS.model
    if single and not (checkpoint or FLAGS.model) and not layout.latest(run_dir):
        raise checkpoint_dir.no_checkpoint(
            run_dir, "No checkpoint file found",
            or_instead="leave out --run_once to score each checkpoint as it is saved")
    data = _data_on_disk(followed) if single else _data(followed)
    process.load_tensorflow(allow_tf32=FLAGS.allow_tf32, plots=True,
                            gpus=0 if FLAGS.eval_on_cpu else 1)
    if single and not FLAGS.model:
        checkpoint = checkpoint_dir.checkpoint_that_reads(checkpoint, run_dir)
    if single:
        data = data or _data(followed)
    from cifar10.evaluation import polling
    from cifar10.evaluation import scoring

    if FLAGS.use_bf16:
        from cifar10.distribute import devices

        devices.warn_if_bfloat16_is_emulated()
    try:
        with outdirs.claimed("eval_dir", FLAGS.eval_dir, PROGRAM, read=run_dir,
                             work=recording.RESULTS_FILE):
            polling.evaluate(_config(*data, checkpoint), command=sys.argv,
                             print_fn=lambda line: print(line, flush=True),
                             flags_text=cifar10_flags.flagfile_text(FLAGS))
    except scoring.OtherClasses as e:
        raise Cifar10Error(f"{e.what}: {_data_of_its_classes(e.run_dir, len(e.trained_on))}"
                           ) from None
    # Every result is recorded: a signal during TensorFlow's clean-up at exit would kill
    # the process, with no line, its work done; the status stays 0.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _refuse_before_data() -> tuple[str | None, str]:
    """Refuses what this start cannot do; returns (--checkpoint or None, run folder: with
    --model, the model's folder, whose data flags none records)."""
    machine.refuse_batch_beyond_memory(FLAGS.batch_size,
                                       2 if FLAGS.use_bf16 or FLAGS.use_fp16 else 4, replica=False)
    checkpoint = layout.given(FLAGS.checkpoint) if FLAGS.checkpoint else None
    model = FLAGS.model and os.path.normpath(FLAGS.model)
    if model and not os.path.exists(model):
        raise Cifar10Error(f"--model={FLAGS.model} does not exist: pass a version folder of "
                           f"cifar10-export (<export_dir>/<step>) or a .tflite file in it")
    run_dir = (model if os.path.isdir(model) else os.path.dirname(model) or ".") if model \
        else layout.run_folder(checkpoint, FLAGS.checkpoint_dir)
    outdirs.refuse_unless_own("eval_dir", FLAGS.eval_dir, PROGRAM, read=run_dir)
    outdirs.warn_of_other_results(FLAGS.eval_dir, run_dir)
    if not (FLAGS.run_once or checkpoint or model):
        checkpoint_dir.refuse_a_folder_that_is_no_run(run_dir, FLAGS.wait_for_run)
        run_data.wait_for_run(run_dir, FLAGS.eval_timeout,
                              print_fn=lambda line: print(line, flush=True))
    return checkpoint, run_dir


def _data_of_its_classes(run_dir: str, count: int) -> str:
    """How to score the run in ``run_dir`` on data of its ``count`` classes."""
    other = f"pass a --data_dir with those {count} classes"
    recorded = records.recorded_flags(run_dir) or {}

    def differs(name: str) -> bool:
        try:
            return not run_data.equal(name, FLAGS[name].value,
                                      FLAGS[name].parser.parse(recorded[name]))
        except (ValueError, flags.Error):
            return True

    given = [name for name in run_data.DATA_FLAGS
             if FLAGS[name].present and name in recorded and differs(name)]
    if not given:
        return other
    theirs = " ".join(run_data.as_flag(name, recorded[name]) for name in given)
    return (f"leave out {', '.join('--' + name for name in given)} to use the run's "
            f"({theirs}, in {os.path.join(run_dir, records.FLAGS_FILE)}), or {other}")


def _config(batches_dir: str, counts: dict[str, int], checkpoint: str | None) -> EvalConfig:
    num_examples = examples_to_evaluate(FLAGS.num_examples, FLAGS["num_examples"].present,
                                        counts, FLAGS.eval_data)
    return cifar10_flags.config_from_flags(
        EvalConfig, FLAGS, eval_files=datafolder.split_files(batches_dir, FLAGS.eval_data),
        num_examples=num_examples, class_names=datafolder.class_names(batches_dir),
        checkpoint=checkpoint)


def _data(followed: str, no_download: str = "") -> tuple[str, dict[str, int]]:
    outdirs.refuse_as_data_dir(FLAGS.data_dir, FLAGS.eval_dir, followed)
    return getdata.prepare(
        FLAGS.data_dir, url=FLAGS.data_url, md5=FLAGS.data_md5, use_synthetic=FLAGS.synthetic_data,
        synthetic_records=FLAGS.synthetic_records, dataset=FLAGS.dataset, label=FLAGS.label,
        followed=followed, no_download=no_download)


def _data_on_disk(followed: str) -> tuple[str, dict[str, int]] | None:
    """``_data`` where it is on disk, None where it is to be downloaded."""
    try:
        return _data(followed, no_download="the data is not on disk")
    except getdata.NotDownloaded:
        return None


def examples_to_evaluate(asked: int, given: bool, counts: dict[str, int], eval_data: str) -> int:
    """How many examples to score: ``asked`` if ``given`` (at most what the data holds);
    by default the whole test split, or the original's 10,000 of the training split."""
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
