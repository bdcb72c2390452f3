"""The precision each stage of the model computes in, for each compute type.

With ``--use_bf16`` not every layer is faster in bfloat16, and one is less
exact: the choice is made layer by layer, from the per-layer times (the
benchmark's (k)) that docs/performance.md records for each CPU kind measured.

- conv2, local3, local4, softmax_linear: bfloat16.  Convolutions and matmuls
  are what AVX512_BF16 and AMX speed up (oneDNN's bfloat16 kernels): conv2, half
  of a float32 step, ran 3x faster in bfloat16 with AMX.
- conv1: bfloat16 on CPUs with AMX where the compiled pooling kernel follows it
  (the model's ``relu_pool``, the default on CPUs), which reads bfloat16 itself:
  a bfloat16 model step (forward and backward, batch 128) took 23.8 ms with
  conv1 in bfloat16, 27.8 ms with conv1 in float32 (Xeon with AMX).  float32
  elsewhere: with 3 input channels conv1 gained nothing in bfloat16 on AMD Zen 4
  (12.0 -> 12.3 ms), and with oneDNN held to AVX512_BF16 without AMX the step
  took 77.3 ms with conv1 in float32 against 79.9 ms; and where TensorFlow's
  pooling follows conv1, its 128x24x24x64 output would be cast to float32 for
  pool1 and the gradient back, which cost more than bfloat16 gained (with AMX
  a step took 6% less CPU time with conv1 in float32).
- pool1, pool2: float32.  Max pooling's gradient in bfloat16 loses small
  contributions where the 3x3, stride-2 windows overlap (1 + 3/256 from four
  windows adds up to 1.0 in bfloat16, 1.0117 in float32; oneDNN 3.7), and
  pooling does no arithmetic that bfloat16 could speed up.  The compiled kernel
  of pool1 reads conv1's bfloat16 output, and adds up its gradient in float32,
  rounded once to bfloat16 for conv1.
- norm1, norm2 (LRN): float32.  TensorFlow has no bfloat16 LRN kernel on the
  CPU; the port's banded-matmul LRN was 1.5-1.7x slower in bfloat16 than in
  float32 on AMD Zen 4, and a bfloat16 sum of squares keeps 8 bits.  The
  compiled LRN kernel (``cifar10.kernels.lrn``, the default on CPUs) computes in
  float32 too.
- The loss (softmax cross-entropy) and the logits: float32.

float16 (``--use_fp16``, for GPUs) keeps its earlier rule: everything in float16
but LRN (computed in float32 inside ``fast_lrn``), the logits and the loss.
Variables stay float32 in every case, so checkpoints are interchangeable.
"""

from __future__ import annotations

import tensorflow as tf

from cifar10.core import cpu

STAGES = ("conv1", "pool1", "norm1", "conv2", "norm2", "pool2", "local3", "local4",
          "softmax_linear")

# Stages that run in float32 under bfloat16, and why (see the module docstring).
BFLOAT16_IN_FLOAT32 = {
    "conv1": "3 input channels: no faster in bfloat16 than the casts around it cost "
             "(bfloat16 with AMX where the compiled pooling kernel reads it)",
    "pool1": "max pooling's gradient is inexact in bfloat16 where windows overlap",
    "norm1": "no bfloat16 LRN kernel; slower than float32 where measured",
    "norm2": "no bfloat16 LRN kernel; slower than float32 where measured",
    "pool2": "max pooling's gradient is inexact in bfloat16 where windows overlap",
}


def stage_dtypes(compute_dtype: tf.DType, relu_pool: bool = False) -> dict[str, tf.DType]:
    """{stage name: the dtype its input is cast to and it computes in}.

    Args:
      compute_dtype: the run's compute type: float32, float16 or bfloat16.
      relu_pool: pool1 is the compiled kernel that reads conv1's output as it comes
        (``cifar10.kernels.pool``): then conv1 runs in bfloat16 where the CPU has AMX.
    """
    compute_dtype = tf.as_dtype(compute_dtype)
    dtypes = {name: compute_dtype for name in STAGES}
    if compute_dtype == tf.bfloat16:
        conv1_in_bfloat16 = relu_pool and cpu.has_amx()
        dtypes.update({name: tf.float32 for name in BFLOAT16_IN_FLOAT32
                       if not (conv1_in_bfloat16 and name == "conv1")})
    return dtypes
