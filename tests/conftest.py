"""Test set-up shared by all test files: four logical CPU devices.

MirroredStrategy tests need several devices; on a CPU-only machine the CPU is
split into logical devices, which must happen before TensorFlow initialises.
"""

import tensorflow as tf

NUM_LOGICAL_CPUS = 4

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)
