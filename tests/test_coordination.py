"""The one-line errors of a run that TensorFlow stopped (coordination.Coordinator.failure).

The workers' stop, scratch directories, same-settings and same-start checks are tested
with real workers in test_multi_worker.py; here, the lines they say.
"""

from unittest import mock

import pytest
import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import coordination
from cifar10.distribute import failures
from cifar10.training import run
from cifar10.training.run import TrainData


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


SETTINGS = ["--batch_size=16", "--max_steps=30", "--seed=0"]


@pytest.mark.parametrize("task, workers, line", [
    ("worker 1", [("worker 0", [1, 2, 3]), ("worker 1", [4, 2, 3])],
     "this is worker 1: its --batch_size=16 differs from worker 0's; start every worker with "
     "the same flags and data"),
    # A worker of several replicas is there once a replica; the chief names the others.
    ("chief 0", [("chief 0", [1, 2, 3])] * 2 + [("worker 0", [1, 5, 6]), ("worker 1", [1, 2, 6])],
     "this is chief 0: its --max_steps=30 and --seed=0 differ from worker 0's and worker 1's; "
     "start every worker with the same flags and data"),
    ("worker 1", [("worker 0", [1, 2, 3]), ("worker 1", [1, 2, 3]), ("worker 2", [1, 2, 4])],
     "this is worker 1: its --seed=0 differs from worker 2's; start every worker with the "
     "same flags and data"),
    ("worker 0", [("worker 0", [1, 2, 3]), ("worker 1", [1, 2, 3])], None),
])
def test_each_worker_names_its_settings_that_differ_and_the_workers_they_differ_from(
        task, workers, line):
    own = dict(workers)[task]
    assert coordination.settings_differ(task, workers, SETTINGS, own) == line


def test_the_settings_workers_must_share_name_their_flags_and_the_data_with_their_values():
    config = TrainConfig(train_dir="/runs/a", batch_size=8, max_steps=20, use_bf16=True,
                         profile_steps=(3, 4))
    data = TrainData(["/data/a.bin"], 50, ("cat", "dog"))
    settings = run.shared_settings(config, data)
    assert list(settings) == [
        "--batch_size=8", "--max_steps=20", "--steps_per_loop=100", "--log_frequency=10",
        "--summary_steps=100", "--checkpoint_steps=1000", "--use_fp16=false",
        "--use_bf16=true", "--xla=false", "--deterministic=false", "--seed=0",
        "--profile_steps=3,4", "initial_learning_rate 0.1", "loss_scale_growth_steps 2000",
        "training data of 50 records", "2 classes (cat, dog)"]
    assert "no --profile_steps" in run.shared_settings(TrainConfig(train_dir="/runs/a"), data)
    assert "10 classes (airplane, automobile, bird, ...)" in run.shared_settings(
        config, TrainData(["/data/a.bin"], 50))
    # Each differs in its fingerprint from the same setting on another worker.
    other = run.shared_settings(TrainConfig(train_dir="/runs/b", batch_size=16),
                                TrainData(["/other/a.bin"], 50, ("cat", "cow")))
    differ = [a for a, x, y in zip(settings, settings.values(), other.values())
              if coordination._fingerprint(x) != coordination._fingerprint(y)]
    assert differ == ["--batch_size=8", "--max_steps=20", "--use_bf16=true",
                      "--profile_steps=3,4", "2 classes (cat, dog)"]


def test_one_worker_checks_no_settings():
    cluster = coordination.Coordinator(tf.distribute.get_strategy())
    cluster.check_same_settings({"--batch_size=8": 8})  # no collective, no error


def test_a_worker_that_ended_when_another_did_not_says_so_in_one_line(monkeypatch, tmp_path):
    # Workers whose steps no longer match: the last barrier fails, not with a lost worker.
    def mismatched(*_):
        raise tf.errors.InternalError(
            None, None, "Collective ops is aborted by: Collective instance 138 expected type "
                        "0 and data_type 1 but got type 0 and data_type 2\nmore")

    monkeypatch.setattr(coordination, "_mean_and_square", mismatched)
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
