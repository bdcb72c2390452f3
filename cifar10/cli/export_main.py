"""cifar10-export: a trained model as a SavedModel for TensorFlow Serving (and TFLite).

Writes the latest checkpoint of a training run (its moving-average weights, as
cifar10-eval) to <export_dir>/<step>/, with the preprocessing in the graph.
Examples:

    cifar10-export --checkpoint_dir=runs/a/train --export_dir=runs/a/export
    cifar10-export --checkpoint_dir=runs/a/train --export_dir=runs/a/export --tflite
    cifar10-export --checkpoint_dir=runs/a/train --tflite=float32,float16,dynamic,int8
"""

from __future__ import annotations

import os

from absl import app
from absl import flags

from cifar10.cli import flags as cifar10_flags
from cifar10.cli import outdirs
from cifar10.cli import checkpoint_dir
from cifar10.cli import process
from cifar10.cli import run_data
from cifar10.data import getdata
from cifar10.runs import layout

FLAGS = flags.FLAGS
PROGRAM = "cifar10-export"
define_flags = cifar10_flags.define_export_flags  # this program's flags


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    # A --checkpoint that names no checkpoint is answered before TensorFlow loads.
    given = layout.given(FLAGS.checkpoint) if FLAGS.checkpoint else None
    run_dir = layout.run_folder(given, FLAGS.checkpoint_dir)
    outdirs.refuse_unless_own("export_dir", FLAGS.export_dir, PROGRAM, read=run_dir)
    process.load_tensorflow()
    from cifar10.runs import checkpoints
    from cifar10.serving import export

    checkpoint = given or checkpoint_dir.checkpoint_to_use(FLAGS.checkpoint_dir)
    checkpoint_dir.warn_if_trained_on_synthetic_data(checkpoint)
    calibration = _calibration_images(run_dir) if "int8" in FLAGS.tflite else None
    with outdirs.claimed("export_dir", FLAGS.export_dir, PROGRAM, read=run_dir):
        target = export.export(
            checkpoint, FLAGS.export_dir, weights=FLAGS.weights, overwrite=FLAGS.overwrite,
            class_names=checkpoints.trained_class_names(os.path.dirname(checkpoint)),
            tflite=FLAGS.tflite, calibration=calibration)
    print(f"Exported {checkpoint} ({FLAGS.weights} weights) to {target}: a SavedModel"
          f"{', and TFLite models:' if FLAGS.tflite else '.'}", flush=True)
    for choice in FLAGS.tflite:
        name = export.TFLITE_FILES[choice]
        size = os.path.getsize(os.path.join(target, name)) / 1e6
        calibrated = (f", calibrated on {len(calibration)} training images"
                      if choice == "int8" else "")
        print(f"  {name}: {size:.2f} MB ({choice}{calibrated})", flush=True)


def _calibration_images(run_dir: str):
    """--calibration_images of the run's training data, found as cifar10-eval finds it."""
    from cifar10.serving import export

    recorded = run_data.follow_run(FLAGS, run_dir, PROGRAM)
    batches_dir, _ = getdata.prepare(
        FLAGS.data_dir, url=FLAGS.data_url, md5=FLAGS.data_md5, use_synthetic=FLAGS.synthetic_data,
        synthetic_records=FLAGS.synthetic_records, dataset=FLAGS.dataset, label=FLAGS.label,
        followed=recorded.describe() if recorded else "")
    return export.calibration_images(batches_dir, FLAGS.calibration_images)


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
