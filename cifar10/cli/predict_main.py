"""cifar10-predict: the classes of image files, by a trained cifar10 model.

Classifies PNG, JPEG, GIF and BMP files of any size with the latest checkpoint
of a training run (its moving-average weights, as cifar10-eval).  Examples:

    cifar10-predict cat.png dog.jpg photos/
    cifar10-predict --checkpoint_dir=runs/a/train --top_k=1 --output=jsonl photos/ > preds.jsonl

A file name that starts with a dash is taken for a flag: write it ./-1.jpg, or put
the file names after a --.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags
from absl import logging

from cifar10.cli import flags as cifar10_flags
from cifar10.cli import run_data
from cifar10.data import imagefiles
from cifar10.cli import checkpoint_dir
from cifar10.cli import process
from cifar10.core import machine
from cifar10.runs import layout
from cifar10.core.errors import Cifar10Error, shown_path

FLAGS = flags.FLAGS
PROGRAM = "cifar10-predict"
define_flags = cifar10_flags.define_predict_flags  # this program's flags

# The most bytes an image piped in as - may have: more than any image's, so that an
# endless or mistaken pipe is refused, not read into memory.
STDIN_LIMIT = 256 * 2 ** 20
_CHUNK = 2 ** 20  # read at a time


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise app.UsageError("name the image files or folders to classify")
    machine.refuse_batch_beyond_memory(FLAGS.batch_size, replica=False)
    run_data.refuse_cifar_data(
        argv[1:], f"--checkpoint={FLAGS.checkpoint}" if FLAGS.checkpoint
        else f"--checkpoint_dir={FLAGS.checkpoint_dir}")
    left_out: list[str] = []
    paths = imagefiles.find_images(argv[1:], left_out)
    if left_out:
        logging.warning("%s", imagefiles.left_out_warning(left_out))
    piped = _standard_input() if imagefiles.STDIN in paths else {}
    # A --checkpoint that names no checkpoint is answered before TensorFlow loads.
    given = layout.given(FLAGS.checkpoint) if FLAGS.checkpoint else None
    process.load_tensorflow()
    from cifar10.runs import checkpoints
    from cifar10.serving import predict

    checkpoint = given or checkpoint_dir.checkpoint_to_use(FLAGS.checkpoint_dir)
    checkpoint_dir.warn_if_trained_on_synthetic_data(checkpoint)
    model, _ = checkpoints.read_model(checkpoint, FLAGS.weights)
    names = checkpoints.trained_class_names(os.path.dirname(checkpoint), model.num_classes)
    show = predict.FORMATTERS[FLAGS.output]
    if FLAGS.output == "csv":
        print(predict.csv_header(FLAGS.top_k, len(names)), flush=True)
    failed = 0
    for result in predict.predict_files(model, paths, FLAGS.batch_size, FLAGS.top_k,
                                        num_classes=len(names), contents=piped):
        if isinstance(result, predict.Failure):
            failed += 1
            logging.warning("cannot read %s: %s", shown_path(result.path), result.reason)
        else:
            print(show(result, names), flush=True)
    if failed:
        raise Cifar10Error(f"{failed} of {len(paths)} images could not be read (see above)")


def _standard_input() -> dict[str, bytes]:
    """{"-": the image piped in}; Cifar10Error where stdin is a terminal or closed, or
    holds more than ``STDIN_LIMIT`` bytes."""
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None or sys.stdin.isatty():
        raise Cifar10Error(
            f"{imagefiles.STDIN} names an image read from standard input, which is "
            f"{'closed' if stdin is None else 'a terminal'}: pipe the image in, as in "
            f"cifar10-predict {imagefiles.STDIN} < cat.png (a file named - is ./-)")
    chunks, size = [], 0
    while size <= STDIN_LIMIT:
        chunk = stdin.read(min(_CHUNK, STDIN_LIMIT + 1 - size))
        if not chunk:
            return {imagefiles.STDIN: b"".join(chunks)}
        chunks.append(chunk)
        size += len(chunk)
    raise Cifar10Error(
        f"{imagefiles.STDIN} names an image read from standard input, which holds more than "
        f"{STDIN_LIMIT:,} bytes ({STDIN_LIMIT // 2 ** 20} MiB), the most an image piped in "
        f"may have: save the image to a file and name the file")


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
