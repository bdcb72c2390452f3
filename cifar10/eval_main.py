"""cifar10-eval: evaluate the checkpoints of a training run (thin entry point)."""

from __future__ import annotations

import os

# Before TensorFlow is imported: hide its C++ INFO lines (warnings still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from absl import app
from absl import flags

from cifar10 import flags as cifar10_flags
from cifar10 import programs

FLAGS = flags.FLAGS
PROGRAM = "cifar10-eval"


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    raise NotImplementedError("cifar10-eval is not written yet")


def run() -> None:
    cifar10_flags.define_eval_flags()
    programs.run(PROGRAM, main, __doc__)


if __name__ == "__main__":
    run()
