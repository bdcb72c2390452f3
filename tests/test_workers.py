"""cifar10.distribute.workers: the lines the workers say (the checks themselves run
across real workers in test_multi_worker.py)."""

from unittest import mock

import pytest
import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import workers
from cifar10.training import controller
from cifar10.training.controller import TrainData

# What TensorFlow raises in a worker whose peer died in a step's collective.
GRAPH_ERROR = (
    "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most recent "
    "call last):\n  File \"train.py\", line 1, in <module>\n    main()\n\n"
    "{{function_node __inference_<lambda>_1194}} Collective ops is aborted by: Socket closed\n"
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while "
    "calling /tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer "
    "{grpc_status:14, grpc_message:\"Socket closed\"}\nThe error could be from a previous "
    "operation. Restart your program to reset.\n\t [[{{node CollectiveReduceV2}}]] "
    "[Op:__inference_<lambda>_1194]")
# Two replicas out of memory on GPUs: the first root error is the other's cancellation.
TWO_REPLICAS_OOM = (
    "Graph execution error:\n\nDetected at node replica_1/conv2/Conv2D defined at (most recent "
    "call last):\n  File \"train.py\", line 3, in <module>\n\n2 root error(s) found.\n  (0) "
    "CANCELLED:  Function was cancelled before it was started\n  (1) RESOURCE_EXHAUSTED:  OOM "
    "when allocating tensor with shape[4096,64,24,24] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc\n\t [[{{node "
    "replica_1/conv2/Conv2D}}]]\nHint: If you want to see a list of allocated tensors when "
    "OOM happens, add report_tensor_allocations_upon_oom to RunOptions.\n\n0 successful "
    "operations.\n1 derived errors ignored. [Op:__inference_loop_812]")
RESUME = "start every worker again with the same command to resume"


def coordinator(spec=None, task="chief"):
    """A Coordinator of one process, or posing as ``task`` of the cluster ``spec``."""
    cluster = workers.Coordinator(tf.distribute.get_strategy())
    if spec:
        resolver = mock.Mock(cluster_spec=lambda: tf.train.ClusterSpec(spec))
        cluster.multi_worker, cluster.task = True, task
        cluster.strategy = mock.Mock(cluster_resolver=resolver)
    return cluster


@pytest.mark.parametrize("spec, task, error, checkpoint, line", [
    (None, "chief", tf.errors.InternalError(None, None, "disk on fire\nmore"), "/r/model.ckpt-5",
     "training stopped at step 7: disk on fire; the last checkpoint is /r/model.ckpt-5"),
    (None, "chief", tf.errors.ResourceExhaustedError(None, None, TWO_REPLICAS_OOM), None,
     "training stopped at step 7: out of memory (OOM when allocating tensor with "
     "shape[4096,64,24,24]); no checkpoint was written yet; a smaller --batch_size (examples "
     "per replica) fits, or more memory: another machine, or fewer programs beside it"),
    ({"worker": ["a:1", "b:1"]}, "worker 1", tf.errors.UnavailableError(None, None, GRAPH_ERROR),
     "/r/model.ckpt-5", "this is worker 1: lost the chief (worker 0) or the connection to it at "
     "step 7 (Collective ops is aborted by: Socket closed); the last checkpoint, "
     f"/r/model.ckpt-5, is kept; {RESUME}"),
    ({"chief": ["a:1"], "worker": ["b:1"]}, "chief 0",
     tf.errors.UnavailableError(None, None, GRAPH_ERROR), None,
     "this is chief 0: lost worker 0 or the connection to it at step 7 (Collective ops is "
     f"aborted by: Socket closed); no checkpoint was written yet; {RESUME}"),
    ({"chief": ["a:1"], "worker": ["b:1"]}, "worker 0",
     tf.errors.CancelledError(None, None, "Cancelled"), None,
     f"this is worker 0: lost chief 0 or the connection to it at step 7 (Cancelled); no "
     f"checkpoint was written yet; {RESUME}"),
    ({"worker": ["a:1", "b:1", "c:1"]}, "worker 2",
     tf.errors.UnavailableError(None, None, "Socket closed"), None,
     f"this is worker 2: lost another worker or the connection to it at step 7 (Socket "
     f"closed); no checkpoint was written yet; {RESUME}"),
])
def test_a_failure_names_the_step_the_cause_the_worker_lost_and_the_checkpoint(
        spec, task, error, checkpoint, line):
    assert str(coordinator(spec, task).failure(error, 7, checkpoint)) == line


def test_one_worker_before_training_raises_tensorflows_error():
    # Several workers' one line: test_multi_worker's chief that refuses a locked train_dir.
    with pytest.raises(tf.errors.UnavailableError), coordinator().starting():
        raise tf.errors.UnavailableError(None, None, "alone: TensorFlow's own error")


@pytest.mark.parametrize("message, cause", [
    (GRAPH_ERROR, "Collective ops is aborted by: Socket closed"),
    (TWO_REPLICAS_OOM, "OOM when allocating tensor with shape[4096,64,24,24] and type float "
                       "on /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc"),
    ("Graph execution error:\n\nDetected at node x defined at:\n  File \"a\"\n\ndisk on fire\n"
     "\t [[{{node x}}]]", "disk on fire"),
    ("2 root error(s) found.\n  (0) OUT_OF_RANGE:  End of sequence\n\t [[{{node x}}]]\n  (1) "
     "OUT_OF_RANGE:  End of sequence\n0 successful operations.", "End of sequence"),
    ("2 root error(s) found.\n  (0) CANCELLED:  Function was cancelled\n  (1) CANCELLED:  "
     "Function was cancelled\n0 successful operations.", "Function was cancelled"),
    ("/d/data_batch_3.bin; No such file or directory [Op:ReduceDataset] name: ",
     "/d/data_batch_3.bin; No such file or directory"),
    ("[Op:Foo] failed: bad input", "[Op:Foo] failed: bad input"),
    ("plain\nmore", "plain"),
    ("", "Exception"),
])
def test_the_cause_of_a_tensorflow_error_is_its_line_that_says_what(message, cause):
    assert workers.tensorflow_cause(Exception(message)) == cause


def test_a_worker_that_ended_when_another_did_not_says_so_in_one_line(monkeypatch, tmp_path):
    def mismatched(*_):
        raise tf.errors.InternalError(None, None, "Collective ops is aborted by: Collective "
                                                  "instance 138 expected type 0\nmore")

    monkeypatch.setattr(workers, "mean_and_square", mismatched)
    stop = workers._AllWorkersStop.__new__(workers._AllWorkersStop)
    stop.strategy, stop._handler = None, mock.Mock()
    cluster = coordinator()
    cluster.task, cluster._stop, cluster._scratch = "worker 1", stop, str(tmp_path)
    with pytest.raises(Cifar10Error) as raised:
        cluster.__exit__(None, None, None)
    assert str(raised.value) == (
        "this is worker 1: it ended training, but the other workers did not end with it "
        "(Collective ops is aborted by: Collective instance 138 expected type 0); see their "
        "errors, and start every worker again with the same flags")
    assert not tmp_path.exists()


SETTINGS = ["--batch_size=16", "--max_steps=30", "--seed=0"]
SAME = "start every worker with the same flags and data"


@pytest.mark.parametrize("task, workers_, line", [
    ("worker 1", [("worker 0", [1, 2, 3]), ("worker 1", [4, 2, 3])],
     f"this is worker 1: its --batch_size=16 differs from worker 0's; {SAME}"),
    ("worker 0", [("worker 0", [1, 2, 3]), ("worker 1", [4, 5, 3])],
     f"this is worker 0: its --batch_size=16 and --max_steps=30 differ from worker 1's; {SAME}"),
    ("worker 0", [("worker 0", [1, 2, 3]), ("worker 1", [1, 2, 3])], None),
    # A chief of two replicas (a task is there once a replica) and three workers.
    ("worker 2", [("chief 0", [1, 2, 3])] * 2 + [("worker 0", [1, 5, 6]),
                                                 ("worker 1", [1, 2, 6]),
                                                 ("worker 2", [7, 2, 6])],
     "this is worker 2: its --batch_size=16, --max_steps=30 and --seed=0 differ from chief "
     f"0's, worker 0's and worker 1's; {SAME}"),
    ("worker 4", [(f"worker {i}", [1, 2, 3]) for i in range(4)] + [("worker 4", [4, 2, 3])],
     f"this is worker 4: its --batch_size=16 differs from 4 other workers'; {SAME}"),
])
def test_each_worker_names_its_settings_that_differ_and_whose(task, workers_, line):
    assert workers.settings_differ(task, workers_, SETTINGS, dict(workers_)[task]) == line


def test_the_settings_workers_must_share_name_their_flags_and_the_data_with_their_values():
    config = TrainConfig(train_dir="/runs/a", batch_size=8, max_steps=20, use_bf16=True,
                         profile_steps=(3, 4))
    data = TrainData(["/data/a.bin"], 50, ("cat", "dog"))
    settings = controller.shared_settings(config, data)
    assert list(settings) == [
        "--batch_size=8", "--max_steps=20", "--log_frequency=10", "--steps_per_loop=100",
        "--checkpoint_steps=1000", "--summary_steps=100", "--seed=0", "--use_fp16=false",
        "--use_bf16=true", "--deterministic=false", "--learning_rate=0.1",
        "--learning_rate_decay_factor=0.1", "--num_epochs_per_decay=350",
        "--moving_average_decay=0.9999", "--weight_decay=0.004", "no --max_epochs",
        "--eval_every_steps=0", "--loss_scale_growth_steps=2000", "--xla=false",
        "--profile_steps=3,4",
        "--replicas_per_gpu=1", "--all_reduce=auto", "training data of 50 records",
        "2 classes (cat, dog)"]
    workers.check_same_settings(coordinator(), settings)  # one worker: no collective
