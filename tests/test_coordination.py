"""The one-line errors of a run that TensorFlow stopped (coordination.Coordinator.failure).

The workers' stop, scratch directories and same-start check are tested with real
workers in test_multi_worker.py.
"""

import pytest
import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.distribute import coordination


@pytest.mark.parametrize("checkpoint, said", [
    ("/runs/a/model.ckpt-5", "the last checkpoint is /runs/a/model.ckpt-5"),
    (None, "no checkpoint was written yet"),
])
def test_a_failure_names_the_step_the_cause_and_the_last_checkpoint(checkpoint, said):
    cluster = coordination.Coordinator(tf.distribute.get_strategy())
    error = tf.errors.InternalError(None, None, "disk on fire\nmore detail")
    failure = cluster.failure(error, 7, checkpoint)
    assert isinstance(failure, Cifar10Error)
    assert str(failure) == f"training stopped at step 7: disk on fire; {said}"
    # A lost worker, under several workers: every worker must start again.
    cluster.multi_worker = True
    lost = cluster.failure(tf.errors.UnavailableError(None, None, "Socket closed"), 7,
                           checkpoint)
    assert str(lost) == (f"training stopped at step 7: lost another worker or the connection "
                         f"to it (Socket closed); {said}; start every worker again to resume")


def test_out_of_memory_says_so_without_tensorflows_function_names_and_what_fits():
    cluster = coordination.Coordinator(tf.distribute.get_strategy())
    error = tf.errors.ResourceExhaustedError(
        None, None, "{{function_node __inference_<lambda>_966}} OOM when allocating tensor "
                    "with shape[100000,12,12,64] and type float on /job:localhost/replica:0/"
                    "task:0/device:CPU:0 by allocator cpu [Op:Relu]\nmore")
    assert str(cluster.failure(error, 0, None)) == (
        "training stopped at step 0: out of memory (OOM when allocating tensor with "
        "shape[100000,12,12,64]); no checkpoint was written yet; a smaller --batch_size "
        "(examples per replica) fits, or more memory: another machine, or fewer programs "
        "beside it")
