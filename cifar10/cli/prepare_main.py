"""cifar10-prepare: your own images as a CIFAR-10-format data set.

Turns a folder of class folders (my_photos/<class>/*.jpg, split at random by
--test_fraction; or my_photos/train/<class>/ beside my_photos/test/<class>/, val/,
valid/ or validation/, to keep a given split) into the binary files that
cifar10-train and cifar10-eval read.  Example:

    cifar10-prepare --image_dir=my_photos --data_dir=/data/my10
    cifar10-train --data_dir=/data/my10 --train_dir=runs/my10/train
"""

from __future__ import annotations

import os

from absl import app
from absl import flags
from absl import logging

from cifar10.core import atomic
from cifar10.core.logs import ProgressLine
from cifar10.cli import flags as cifar10_flags
from cifar10.data import imagefiles
from cifar10.data import prepare
from cifar10.cli import outdirs
from cifar10.cli import process
from cifar10.core.errors import listed, shown_path

FLAGS = flags.FLAGS
PROGRAM = "cifar10-prepare"
define_flags = cifar10_flags.define_prepare_flags  # this program's flags


def progress_line(total: int, stream=None) -> ProgressLine:
    """The conversion's progress on stderr: ``1,200/10,000 images (850 images/s)``."""
    def describe(done: int, seconds: float) -> str:
        rate = f" ({done / seconds:,.0f} images/s)" if done and seconds > 0 else ""
        return f"{done:,}/{total:,} images{rate}"

    return ProgressLine(describe, total, stream)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    required = {"image_dir": "the folder of class folders to convert",
                "data_dir": "where to write the data set"}
    missing = [f"--{name} must be given ({what})" for name, what in required.items()
               if not FLAGS[name].value]
    if missing:  # (absl's required flags would say "a value other than None")
        raise app.UsageError("; ".join(missing))
    source = imagefiles.find_source(FLAGS.image_dir, FLAGS.test_fraction, FLAGS.seed)
    outdirs.refuse_as_data_dir(FLAGS.data_dir, fix="name a new folder to write the data set in")
    prepare.check_output(FLAGS.data_dir, FLAGS.image_dir)
    _say_what_was_found(source)
    removed = atomic.remove_leftovers(FLAGS.data_dir)  # of a conversion killed with kill -9
    if removed:
        print(f"Removed what an interrupted conversion left in {FLAGS.data_dir}: "
              f"{', '.join(removed)}.")
    process.load_tensorflow()
    line = progress_line(len(source.train) + len(source.test))
    refused = None
    try:
        summary = prepare.convert(source, FLAGS.data_dir, seed=FLAGS.seed, strict=FLAGS.strict,
                                  progress=lambda done, _: line.show(done))
    except prepare.TooFewReadable as e:
        refused = e
    finally:
        line.end()  # (the terminal's line ended before an error, too)
    # The unreadable images are named before a refusal too: it counts them.
    for path, why in sorted(refused.skipped if refused else summary.skipped):
        logging.warning("skipped %s: %s", shown_path(path), why)
    if refused:
        raise refused
    skipped = len(summary.skipped)
    print(f"Wrote {summary.train_records:,} training and {summary.test_records:,} test records "
          f"of {len(summary.class_names)} classes ({listed(summary.class_names)}) to "
          f"{summary.batches_dir}; skipped {skipped} unreadable "
          f"image{'' if skipped == 1 else 's'}.", flush=True)


def _say_what_was_found(source) -> None:
    """The layout and the images found, and a warning for each thing given not used."""
    print(source.layout)
    print(f"Found {len(source.train) + len(source.test):,} images of "
          f"{len(source.class_names)} classes in {FLAGS.image_dir}: {len(source.train):,} for "
          f"training, {len(source.test):,} for testing.", flush=True)
    if source.split and FLAGS["test_fraction"].present:
        train, test = source.split
        logging.warning("%s", f"--test_fraction={FLAGS.test_fraction:g} is not used: {test}/ is "
                        f"the test set of the split folders; to split the classes of {train}/ "
                        f"by --test_fraction instead, point --image_dir at "
                        f"{os.path.join(FLAGS.image_dir, train)}")
    for warning in (imagefiles.unfiled_warning(source.unfiled),
                    imagefiles.left_out_warning(source.left_out)):
        if warning:
            logging.warning("%s", warning)


def run() -> None:
    process.run(PROGRAM, main, __doc__, define_flags)


if __name__ == "__main__":
    run()
