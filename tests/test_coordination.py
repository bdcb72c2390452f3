"""The one-line errors of a run that TensorFlow stopped (coordination.Coordinator.failure).

The workers' stop, scratch directories and same-start check are tested with real workers
in test_multi_worker.py; here, the lines they say (the same-settings check's are in
test_settings_check.py).
"""

from unittest import mock

import pytest
import tensorflow as tf

from cifar10.core.errors import Cifar10Error
from cifar10.distribute import coordination
from cifar10.distribute import failures


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


class _Resolver:
    """A cluster resolver's cluster spec, as the strategy of a task of ``cluster`` has."""

    def __init__(self, cluster):
        self._cluster = cluster

    def cluster_spec(self):
        return tf.train.ClusterSpec(self._cluster)


# What TensorFlow raises in a worker whose peer died in a step's collective: the cause
# is not on its first line.
GRAPH_ERROR = (
    "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most recent "
    "call last):\n  File \"train.py\", line 1, in <module>\n    main()\n\n"
    "{{function_node __inference_<lambda>_1194}} Collective ops is aborted by: Socket closed\n"
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while "
    "calling /tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer "
    "{grpc_status:14, grpc_message:\"Socket closed\"}\nThe error could be from a previous "
    "operation. Restart your program to reset.\n\t [[{{node CollectiveReduceV2}}]] "
    "[Op:__inference_<lambda>_1194]")


@pytest.mark.parametrize("cluster, task, checkpoint, line", [
    ({"worker": ["a:1", "b:1"]}, "worker 1", "/runs/a/model.ckpt-5",
     "this is worker 1: lost the chief (worker 0) or the connection to it at step 7 (Collective "
     "ops is aborted by: Socket closed); the last checkpoint, /runs/a/model.ckpt-5, is kept; "
     "start every worker again with the same command to resume"),
    ({"chief": ["a:1"], "worker": ["b:1"]}, "chief 0", None,
     "this is chief 0: lost worker 0 or the connection to it at step 7 (Collective ops is "
     "aborted by: Socket closed); no checkpoint was written yet; start every worker again "
     "with the same command to resume"),
    ({"worker": ["a:1", "b:1", "c:1"]}, "worker 2", None,
     "this is worker 2: lost another worker or the connection to it at step 7 (Collective ops "
     "is aborted by: Socket closed); no checkpoint was written yet; start every worker again "
     "with the same command to resume"),
])
def test_a_lost_worker_in_training_is_named_with_the_cause_tensorflow_buries(
        cluster, task, checkpoint, line):
    coordinator = coordination.Coordinator(tf.distribute.get_strategy())
    coordinator.multi_worker, coordinator.task = True, task
    coordinator.strategy = mock.Mock(cluster_resolver=_Resolver(cluster))
    error = tf.errors.UnavailableError(None, None, GRAPH_ERROR)
    assert str(coordinator.failure(error, 7, checkpoint)) == line


def test_the_cause_of_a_tensorflow_error_is_its_first_line_that_says_what():
    assert failures.tensorflow_cause(Exception(GRAPH_ERROR)) == (
        "Collective ops is aborted by: Socket closed")
    assert failures.tensorflow_cause(Exception("Graph execution error:\n\nDetected at "
                                               "node x defined at:\n  File \"a\"\n\n"
                                               "disk on fire\n\t [[{{node x}}]]")) == (
        "disk on fire")
    assert failures.tensorflow_cause(Exception("plain\nmore")) == "plain"
    assert failures.tensorflow_cause(Exception("")) == "Exception"


def test_a_worker_that_ended_when_another_did_not_says_so_in_one_line(monkeypatch, tmp_path):
    # Workers whose steps no longer match: the last barrier fails, not with a lost worker.
    def mismatched(*_):
        raise tf.errors.InternalError(
            None, None, "Collective ops is aborted by: Collective instance 138 expected type "
                        "0 and data_type 1 but got type 0 and data_type 2\nmore")

    monkeypatch.setattr(coordination, "mean_and_square", mismatched)
    stop = coordination._AllWorkersStop.__new__(coordination._AllWorkersStop)
    stop.strategy, stop._handler = None, mock.Mock()
    cluster = coordination.Coordinator(tf.distribute.get_strategy())
    cluster.task, cluster._stop, cluster._scratch = "worker 1", stop, str(tmp_path / "scratch")
    (tmp_path / "scratch").mkdir()
    with pytest.raises(Cifar10Error) as raised:
        cluster.__exit__(None, None, None)
    assert str(raised.value) == (
        "this is worker 1: it ended training, but the other workers did not end with it "
        "(Collective ops is aborted by: Collective instance 138 expected type 0 and "
        "data_type 1 but got type 0 and data_type 2); see their errors, and start every "
        "worker again with the same flags")
    assert not (tmp_path / "scratch").exists()


def test_the_tasks_of_a_cluster_are_named_as_each_task_names_itself():
    coordinator = coordination.Coordinator(tf.distribute.get_strategy())
    coordinator.strategy = mock.Mock(cluster_resolver=_Resolver(
        {"chief": ["a:1"], "worker": ["b:1", "c:1"]}))
    assert coordinator.tasks() == ["chief 0", "worker 0", "worker 1"]


# What TensorFlow 2.21 raises from a loop of steps on two replicas (MirroredStrategy)
# whose input ran out: a header, each replica's root error, then a tally.
TWO_ROOT_ERRORS = (
    "Graph execution error:\n\nDetected at node while/cond/IteratorGetNext defined at (most "
    "recent call last):\n  File \"train.py\", line 11, in <module>\n\n  File \"train.py\", "
    "line 8, in f\n\n2 root error(s) found.\n  (0) OUT_OF_RANGE:  End of sequence\n\t "
    "[[{{node while/cond/IteratorGetNext}}]]\n\t [[while/loop_body_control/_20/_13]]\n  (1) "
    "OUT_OF_RANGE:  End of sequence\n\t [[{{node while/cond/IteratorGetNext}}]]\n0 "
    "successful operations.\n0 derived errors ignored. [Op:__inference_f_238]")
# Two replicas out of memory on GPUs: the second's root error is a cancellation.
TWO_REPLICAS_OOM = (
    "Graph execution error:\n\nDetected at node replica_1/conv2/Conv2D defined at (most recent "
    "call last):\n  File \"train.py\", line 3, in <module>\n\n2 root error(s) found.\n  (0) "
    "CANCELLED:  Function was cancelled before it was started\n  (1) RESOURCE_EXHAUSTED:  OOM "
    "when allocating tensor with shape[4096,64,24,24] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc\n\t [[{{node "
    "replica_1/conv2/Conv2D}}]]\nHint: If you want to see a list of allocated tensors when "
    "OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current "
    "allocation info. This isn't available when running in Eager mode.\n\n0 successful "
    "operations.\n1 derived errors ignored. [Op:__inference_loop_812]")


def test_the_cause_of_an_eager_ops_error_leaves_out_the_op_it_names():
    for tail in (" [Op:ReduceDataset] name: ", " [Op:ReduceDataset]",
                 " [Op:IteratorGetNext] name: iterator"):
        assert failures.tensorflow_cause(Exception(
            f"/d/data_batch_3.bin; No such file or directory{tail}")) == (
            "/d/data_batch_3.bin; No such file or directory")
    # A cause that only names its op in passing keeps it.
    assert failures.tensorflow_cause(Exception("[Op:Foo] failed: bad input")) == (
        "[Op:Foo] failed: bad input")


def test_the_cause_of_an_error_of_several_replicas_is_a_root_error_without_its_code():
    assert failures.tensorflow_cause(Exception(TWO_ROOT_ERRORS)) == "End of sequence"
    assert str(failures.stopped(tf.errors.OutOfRangeError(None, None, TWO_ROOT_ERRORS), 0,
                                None)) == (
        "training stopped at step 0: End of sequence; no checkpoint was written yet")
    error = tf.errors.ResourceExhaustedError(None, None, TWO_REPLICAS_OOM)
    assert str(failures.stopped(error, 4, "/runs/a/model.ckpt-3")) == (
        "training stopped at step 4: out of memory (OOM when allocating tensor with "
        "shape[4096,64,24,24]); the last checkpoint is /runs/a/model.ckpt-3; a smaller "
        "--batch_size (examples per replica) fits, or more memory: another machine, or fewer "
        "programs beside it")
    # Only cancellations: one of them, rather than nothing.
    assert failures.tensorflow_cause(Exception(
        "2 root error(s) found.\n  (0) CANCELLED:  Function was cancelled\n  (1) CANCELLED: "
        " Function was cancelled\n0 successful operations.")) == "Function was cancelled"
