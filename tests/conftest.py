"""Test set-up shared by all test files: four logical CPU devices, learnable data,
a small trained run, and the names and line formats several files check.

MirroredStrategy tests need several devices; on a CPU-only machine the CPU is
split into logical devices, which must happen before TensorFlow initialises.
Test files import the helpers below with ``from conftest import ...``.
"""

import contextlib
import os
import re
import signal
import sys
import tempfile

import pytest
import tensorflow as tf

from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.core.config import TrainConfig
from cifar10.kernels import build
from cifar10.training import controller
from cifar10.training.controller import TrainData

NUM_LOGICAL_CPUS = 4

# Compiled kernels (cifar10.kernels) go to a cache of the tests' own, shared by the
# test processes and the programs they start, never to the user's ~/.cache.
os.environ.setdefault("CIFAR10_KERNEL_CACHE",
                      os.path.join(tempfile.gettempdir(), f"cifar10-test-kernels-{os.getuid()}"))
with contextlib.suppress(build.KernelBuildError):  # before any test: none says it compiles
    build.library(build.NAME, build.NATIVE_SOURCES, build.TF_SOURCES)
# The programs' folder first on PATH, as in an activated venv: where a line suggests a
# program, it names it (tests that leave the folder out see its path).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])

# A suite started in the background of a non-interactive shell inherits SIGINT ignored,
# and under nohup SIGHUP, and so would every program it starts: the Ctrl-C tests need
# Python's own handler, and the wait for the workers ends a program by SIGHUP (status 1).
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGHUP, signal.SIG_DFL)

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)

LAYERS = ("conv1", "conv2", "local3", "local4", "softmax_linear")  # the model's, in order
# The trainer's progress line and the evaluator's result line, exactly. The progress
# line is the original's (its step is group 1), then where the run is: groups 2 to 5
# are max_steps, the percentage, the epoch and the time left (None where not known).
TRAIN_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: step (\d+), loss = \d+\.\d\d "
    r"\(\d+\.\d examples/sec; \d+\.\d{3} sec/batch\)"
    r"(?: \[step \1/(\d+), (\d+\.\d)%, epoch (\d+\.\d\d)(?:, ([0-9hms. ]+) left)?\])?$")
# The result line ends ` on SYNTHETIC data` on generated data.
EVAL_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: precision @ 1 = (\d\.\d{3}) "
    r"\(step (\d+), (model\.ckpt-\d+), (\d+) examples, (\w+) weights\)(?: on SYNTHETIC data)?$")
# --eval_every_steps' line: the step, precision @ 1, the test loss, the examples.
VALIDATION_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: step (\d+), precision @ 1 = (\d\.\d{3}), test loss = "
    r"(\d+\.\d{3}) \((\d+) test examples in \d+\.\d sec; (?:the best so far|best \d\.\d{3} at "
    r"step \d+|not kept)\)(?: on SYNTHETIC data)?$")


def mirrored(num_replicas: int = 1) -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over the first ``num_replicas`` logical CPUs."""
    return tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(num_replicas)],
        cross_device_ops=tf.distribute.ReductionToOneDevice())


@pytest.fixture(scope="session")
def learnable_files(tmp_path_factory):
    """(training files, record count) of a small generated data set the model learns
    quickly (separable classes: the tests of learning count on it)."""
    batches_dir = synthetic.write_dataset(str(tmp_path_factory.mktemp("data")),
                                          records_per_file=100, separable=True)
    files = datafolder.split_files(batches_dir, "train")
    return files, datafolder.validate_files(files)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """(train_dir, test files): 50 records per file (the test split holds 50
    examples), 6 steps trained, checkpoints at 3 and 6; made once per test process
    and shared by every file (tests/evalruns.py's too): a test that changes the run's
    directory works on a copy.  The data is where --synthetic_data with
    --data_dir=<root>/data reads it (test_eval_main.py's runs)."""
    root = tmp_path_factory.mktemp("trained_run")
    batches_dir = synthetic.write_dataset(str(root / "data" / "synthetic"), records_per_file=50)
    files = datafolder.split_files(batches_dir, "train")
    config = TrainConfig(train_dir=str(root / "train"), batch_size=16, max_steps=6,
                         checkpoint_steps=3, summary_steps=1000, log_frequency=1000,
                         shuffle_buffer=300)
    result = controller.train(config, mirrored(), TrainData(files, datafolder.validate_files(files)),
                              print_fn=lambda line: None)
    assert result.complete
    return root / "train", datafolder.split_files(batches_dir, "test")


@pytest.fixture
def pictures_stubbed(monkeypatch):
    """The evaluator's pictures each one small PNG instead of matplotlib's drawing
    (about a quarter of a short evaluation), for the files whose tests are of what the
    evaluator scores and when (``pytestmark = pytest.mark.usefixtures(...)``): what it
    draws is test_recording's and test_output's."""
    from cifar10.evaluation import plots

    png = tf.io.encode_png(tf.zeros((2, 2, 3), tf.uint8)).numpy()
    monkeypatch.setattr(plots, "confusion_png", lambda *args: png)
    monkeypatch.setattr(plots, "misclassified_png", lambda *args: png)
