"""cifar10-export: a trained model as a SavedModel for TensorFlow Serving (and TFLite).

Writes the latest checkpoint of a training run (its moving-average weights, as
cifar10-eval) to <export_dir>/<step>/, with the preprocessing in the graph.
Examples:

    cifar10-export --checkpoint_dir=runs/a/train --export_dir=runs/a/export
    cifar10-export --checkpoint_dir=runs/a/train --export_dir=runs/a/export --tflite
"""

from __future__ import annotations

import os

from absl import app
from absl import flags

from cifar10.cli import flags as cifar10_flags
from cifar10.cli import outdirs
from cifar10.cli import checkpoint_dir
from cifar10.cli import process
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
    with outdirs.claimed("export_dir", FLAGS.export_dir, PROGRAM, read=run_dir):
        target = export.export(
            checkpoint, FLAGS.export_dir, weights=FLAGS.weights, overwrite=FLAGS.overwrite,
            class_names=checkpoints.trained_class_names(os.path.dirname(checkpoint)),
            tflite=FLAGS.tflite)
    tflite = f" and {export.TFLITE_FILE}" if FLAGS.tflite else ""
    print(f"Exported {checkpoint} ({FLAGS.weights} weights) to {target}: a SavedModel{tflite}.",
          flush=True)


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
