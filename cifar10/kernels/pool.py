"""conv1's bias and ReLU with pool1's max pooling, as one compiled CPU kernel each way
(``compiled_relu_pool``).

TensorFlow runs conv1's bias and ReLU fused with the convolution, then pool1 over
its 128x24x24x64 output; the gradient is three passes over a tensor that size
(max pooling's, the ReLU's, the bias sum).  The kernels of ``pool_rows.cc`` pool
the convolution's output itself and add the bias and take the ReLU of the
pooled maxima: the same values to the bit (a bias added and rounded keeps the
order of the values it is added to), and a quarter of the work, because the
pooled tensor is a quarter of the size.  The gradient is one pass, to the
position of each maximum, and the bias gradient is summed over the pooled
tensor.  Under ``--use_bf16`` on CPUs with AMX the kernel reads conv1's bfloat16
output itself, so that conv1 runs in bfloat16 without a cast, and pools, adds the
bias and sums the gradients in float32: the gradient where windows overlap is
exact up to its one rounding to bfloat16 for conv1 (``cifar10.precision``).
Measured on a 2-core Xeon with AMX, conv1 and pool1 forward and backward took
10.6 instead of 13.9 ms in float32, and 8.3 instead of 13.9 ms under --use_bf16
(docs/performance.md).
"""

from __future__ import annotations

import tensorflow as tf

from cifar10.kernels import ops


def compiled_relu_pool(z: tf.Tensor, bias: tf.Tensor, dtype: tf.DType | None = None
                       ) -> tf.Tensor:
    """``max_pool2d(relu(z + bias), 3, 2, 'SAME')`` from the compiled kernels, CPU only.

    Args:
      z: [batch, rows, columns, channels] float32 or bfloat16 (float16 is cast to
        float32): a convolution's output before its bias.
      bias: [channels], added in float32.
      dtype: the output's type (default: z's); float32 or bfloat16 are written by the
        kernel, others cast from float32.

    Returns:
      [batch, ceil(rows / 2), ceil(columns / 2), channels] in ``dtype``.
    """
    return ops.in_native_types(_relu_pool, z, dtype, tf.cast(bias, tf.float32))


def _relu_pool(z: tf.Tensor, bias: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    module = ops.load()

    @tf.custom_gradient
    def relu_pool(z, bias):
        y, argmax = module.cifar10_bias_relu_pool(z, bias, Tout=dtype)

        def grad(upstream):
            return tuple(module.cifar10_bias_relu_pool_grad(upstream, argmax, tf.shape(z),
                                                            T=z.dtype))

        return y, grad

    return relu_pool(z, bias)
