"""Test set-up shared by all test files: four logical CPU devices, learnable data.

MirroredStrategy tests need several devices; on a CPU-only machine the CPU is
split into logical devices, which must happen before TensorFlow initialises.
"""

import pytest
import tensorflow as tf

from cifar10 import data, synthetic

NUM_LOGICAL_CPUS = 4

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)


@pytest.fixture(scope="session")
def learnable_files(tmp_path_factory):
    """(training files, record count) of a small generated data set the model learns."""
    batches_dir = synthetic.write_dataset(str(tmp_path_factory.mktemp("data")),
                                          records_per_file=100)
    files = data.split_files(batches_dir, "train")
    return files, data.validate_files(files)
