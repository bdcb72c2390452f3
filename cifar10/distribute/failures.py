"""The one-line errors of a run that TensorFlow stopped: a worker lost, before
training or in it (this task and the one lost named by their ``TF_CONFIG`` type and
index, ``coordination.Coordinator`` tells which), memory run out, or another
error, its cause dug out of TensorFlow's message.
"""

from __future__ import annotations

import re

import tensorflow as tf

from cifar10.core.errors import Cifar10Error, first_line

# What a collective operation raises when a peer worker is gone or unreachable.
LOST_WORKER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                      tf.errors.AbortedError, tf.errors.CancelledError)


def lost_before_training(task: str, lost: str) -> Cifar10Error:
    """The error of ``task`` (e.g. 'worker 1'), which lost ``lost`` ('the chief
    (worker 0)', 'another worker') before training started."""
    see = "see its error" if lost != "another worker" else "see the others' errors"
    return Cifar10Error(f"this is {task}: lost {lost} or the connection to it before "
                        f"training started ({see}); start every worker again once it is fixed")


def lost_in_training(task: str, lost: str, error: tf.errors.OpError, step: int,
                     checkpoint: str | None) -> Cifar10Error:
    """The error of ``task``, which lost ``lost`` at ``step`` (TensorFlow's ``error``);
    ``checkpoint`` is the run's newest (a path; None where none was written)."""
    kept = (f"the last checkpoint, {checkpoint}, is kept" if checkpoint
            else "no checkpoint was written yet")
    return Cifar10Error(f"this is {task}: lost {lost} or the connection to it at step {step} "
                        f"({tensorflow_cause(error)}); {kept}; start every worker again with "
                        f"the same command to resume")


def stopped(error: tf.errors.OpError, step: int, checkpoint: str | None) -> Cifar10Error:
    """The error of a run that TensorFlow's ``error`` stopped at ``step``, out of memory
    or otherwise; ``checkpoint`` is its newest (a path; None where none was written)."""
    last = (f"the last checkpoint is {checkpoint}" if checkpoint
            else "no checkpoint was written yet")
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return Cifar10Error(
            f"training stopped at step {step}: out of memory ({oom_cause(error)}); "
            f"{last}; a smaller --batch_size (examples per replica) fits, or more "
            f"memory: another machine, or fewer programs beside it")
    return Cifar10Error(f"training stopped at step {step}: {tensorflow_cause(error)}; "
                        f"{last}")


# The lines of TensorFlow's error messages that say where, not what: the header of an
# error raised from a graph, the stack of the op that failed, gRPC's detail, the node,
# the count of the root errors of a run on several replicas and its tally after them,
# the hint of an out-of-memory error.
_NOT_THE_CAUSE = re.compile(r"Graph execution error:|Detected at node|Node: |Stack trace|"
                            r"File \"|Additional GRPC error|:UNKNOWN:|The error could be from|"
                            r"\[\[|<stack traces unavailable>|Executing non-communication op|"
                            r"\d+ root error\(s\) found|\d+ successful operations|"
                            r"\d+ derived errors ignored|Hint: ")
# The head of each of several root errors: '(0) OUT_OF_RANGE:  '.
_ROOT_ERROR = re.compile(r"^\(\d+\)\s+(?:([A-Z_]+):\s+)?")


def tensorflow_cause(error: BaseException) -> str:
    """The line of a TensorFlow error's message that says what went wrong, where the
    first says only where ('Graph execution error:', then the op's stack): 'Collective
    ops is aborted by: Socket closed', without its '{{function_node ...}}' prefix.  Of
    a run on several replicas ('2 root error(s) found.', then '(0) OUT_OF_RANGE:  End
    of sequence', ...): the first root error that is not another's cancellation,
    without its number and code ('End of sequence')."""
    lines, cancelled, in_stack = [], [], False
    for raw in str(error).splitlines():
        line = re.sub(r"^(\{\{function_node [^}]*\}\}\s*)+", "", raw.strip())
        root = _ROOT_ERROR.match(line)
        if root:
            line = line[root.end():].strip()
        if raw.startswith("Detected at node"):
            in_stack = True  # the op's stack follows, to a blank line
        elif not line:
            in_stack = False
        if line and not in_stack and not _NOT_THE_CAUSE.match(line):
            (cancelled if root and root[1] == "CANCELLED" else lines).append(line)
    aborted = [line for line in lines if "aborted by:" in line]
    return _EAGER_OP.sub("", (aborted or lines or cancelled or [first_line(error)])[0])


# The tail of an eager op's error, which names the op, not the cause:
# 'data_batch_3.bin; No such file or directory [Op:ReduceDataset] name: '.
_EAGER_OP = re.compile(r"\s*\[Op:[^\]]*\](?:\s*name:\s*\S*)?\s*$")


def oom_cause(error: tf.errors.OpError) -> str:
    """'OOM when allocating tensor with shape[100000,24,24,64]' of TensorFlow's
    message (``tensorflow_cause``), without the type, device and allocator after it."""
    return tensorflow_cause(error).split(" and type ")[0]
