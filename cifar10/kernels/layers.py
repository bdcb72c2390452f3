"""The compiled kernels as the model's layer functions (each computes in float32 and
reads and writes float32 and bfloat16 itself), and a run's choice between them and
TensorFlow's ops (``choose``).  CPUs only; XLA cannot compile them."""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import tensorflow as tf

from cifar10.core.config import KERNEL_CHOICES, LRN_ALPHA, LRN_BETA, LRN_BIAS, LRN_DEPTH_RADIUS
from cifar10.core.errors import Cifar10Error
from cifar10.kernels import build
from cifar10.lrn import fast_lrn

assert LRN_BETA == 0.75  # the kernels compute d ** -0.75
_LRN = dict(depth_radius=LRN_DEPTH_RADIUS, bias=LRN_BIAS, alpha=LRN_ALPHA)
NATIVE_TYPES = (tf.float32, tf.bfloat16)  # the types the kernels read and write


def _in_native_types(kernel: Callable[..., tf.Tensor], x: tf.Tensor, dtype: tf.DType | None,
                     *args) -> tf.Tensor:
    """``kernel(x, *args, out)`` in ``dtype`` (default: x's): x and the output cast
    through float32 where the kernels do not read or write their type."""
    dtype = tf.as_dtype(dtype or x.dtype)
    inner = x if x.dtype in NATIVE_TYPES else tf.cast(x, tf.float32)
    return tf.cast(kernel(inner, *args, dtype if dtype in NATIVE_TYPES else tf.float32), dtype)


def compiled_lrn(x: tf.Tensor, dtype: tf.DType | None = None) -> tf.Tensor:
    """The tutorial's LRN (as ``fast_lrn``) in float32, the output in ``dtype``."""
    def kernel(x, out):
        ops = build.load()

        @tf.custom_gradient
        def lrn(x):
            return (ops.cifar10_lrn(x, Tout=out, **_LRN),
                    lambda upstream: ops.cifar10_lrn_grad(x, upstream, **_LRN))
        return lrn(x)
    return _in_native_types(kernel, x, dtype)


def compiled_bias_relu_lrn(z: tf.Tensor, bias: tf.Tensor, dtype: tf.DType | None = None
                           ) -> tf.Tensor:
    """``compiled_lrn(relu(z + bias))`` of a convolution's output z [batch, ..., channels]:
    the bias added and the ReLU taken in float32 as the kernel reads z, their gradients
    (the bias's summed over the batch in a fixed order) in LRN's gradient pass."""
    def kernel(z, bias, out):
        ops = build.load()

        @tf.custom_gradient
        def bias_relu_lrn(z, bias):
            def grad(upstream):
                return tuple(ops.cifar10_bias_relu_lrn_grad(z, bias, upstream, **_LRN))
            return ops.cifar10_bias_relu_lrn(z, bias, Tout=out, **_LRN), grad
        return bias_relu_lrn(z, bias)
    return _in_native_types(kernel, z, dtype, tf.cast(bias, tf.float32))


def compiled_relu_pool(z: tf.Tensor, bias: tf.Tensor, dtype: tf.DType | None = None
                       ) -> tf.Tensor:
    """``max_pool2d(relu(z + bias), 3, 2, 'SAME')`` of a convolution's output z, pooled
    before the bias and ReLU (the same to the bit); the gradient rounded once to z's type."""
    def kernel(z, bias, out):
        ops = build.load()

        @tf.custom_gradient
        def relu_pool(z, bias):
            y, argmax = ops.cifar10_bias_relu_pool(z, bias, Tout=out)

            def grad(upstream):
                return tuple(ops.cifar10_bias_relu_pool_grad(upstream, argmax, tf.shape(z),
                                                             T=z.dtype))
            return y, grad
        return relu_pool(z, bias)
    return _in_native_types(kernel, z, dtype, tf.cast(bias, tf.float32))


class KernelChoice(NamedTuple):
    """A run's layer functions (``Model``'s ``lrn``, ``relu_pool``, ``relu_lrn``; None:
    TensorFlow's ops), which ('compiled' or 'tensorflow') and why."""
    lrn: Callable[..., tf.Tensor]
    relu_pool: Callable[..., tf.Tensor] | None
    relu_lrn: Callable[..., tf.Tensor] | None
    kernel: str
    reason: str


def tensorflow_ops(reason: str) -> KernelChoice:
    return KernelChoice(fast_lrn, None, None, "tensorflow", reason)


def choose(kernels: str, device_names: Sequence[str], xla: bool) -> KernelChoice:
    """The layer functions of a run whose replicas are on ``device_names``; ``kernels``:
    'auto' (the compiled ones where they can run, else TensorFlow's ops), 'compiled'
    (or an error) or 'tensorflow'."""
    if kernels not in KERNEL_CHOICES:
        raise Cifar10Error(f"--kernels must be one of {', '.join(KERNEL_CHOICES)}, "
                           f"got {kernels!r}")
    if kernels == "tensorflow":
        return tensorflow_ops("--kernels=tensorflow")
    on_gpu = any(tf.DeviceSpec.from_string(name).device_type == "GPU" for name in device_names)
    unfit = ("the replicas are GPUs and the kernels are for CPUs" if on_gpu else
             "XLA cannot compile the kernels (--xla)" if xla else "")
    try:
        if unfit:
            raise Cifar10Error(f"cannot run here: {unfit}")
        build.load()
    except Cifar10Error as error:
        if kernels == "compiled":
            raise Cifar10Error(f"--kernels=compiled: {error}; or use --kernels=auto, "
                               "which falls back to TensorFlow's ops") from None
        return tensorflow_ops(unfit or str(error))
    return KernelChoice(compiled_lrn, compiled_relu_pool, compiled_bias_relu_lrn, "compiled",
                        "CPU replicas")
