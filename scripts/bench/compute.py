"""(g) the machine's matmul rate and the compute ceiling it sets for training;
(k) where a train step's time goes, layer by layer."""

from __future__ import annotations

import tensorflow as tf

from bench import measure
from cifar10.core.config import CROP_SIZE
from cifar10.kernels.layers import KernelChoice
from cifar10.model import STAGES, Model


def train_flops_per_example(model: Model) -> int:
    """FLOPs of one example's training step in the convolutions and matmuls: each
    layer's multiply-adds count twice (multiply, add) for the forward pass, the weight
    gradient and, but for conv1, the input gradient (LRN, pooling, ReLU and the
    updates are memory-bound and left out)."""
    acts = model.activations(tf.zeros([1, CROP_SIZE, CROP_SIZE, 3]))
    total = 0
    for i, layer in enumerate(model.layers):
        positions = acts[layer.name].shape[1:-1].num_elements()  # 1 for a matmul layer
        passes = 2 if i == 0 else 3
        total += 2 * passes * positions * layer.weights.shape.num_elements()
    return total


def matmul_gflops(windows: int, size: int = 2048, per_window: int = 10,
                  dtype: tf.DType = tf.float32) -> float:
    """(g): median GFLOP/s of [size, size] matmuls of ``dtype`` on this machine."""
    a = tf.cast(tf.random.stateless_normal([size, size], seed=(5, 6)), dtype)
    product = tf.function(lambda: tf.matmul(a, a))
    product().numpy()  # warm-up

    def window() -> None:
        for _ in range(per_window):
            out = product()
        out.numpy()

    return measure.median_rate(window, windows, per_window * 2 * size**3) / 1e9


def _forward_backward(apply, input_gradient: bool):
    @tf.function
    def forward_backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = apply(x)
            total = tf.reduce_sum(tf.cast(y, tf.float32))
        variables = list(tape.watched_variables())  # those the stage reads
        return y, tape.gradient(total, [variables, x] if input_gradient else variables)

    return forward_backward


def _stage_ms(forward_backward, x: tf.Tensor, reps: int) -> tuple[tf.Tensor, float]:
    """(the stage's output, the median milliseconds of its forward and backward pass)."""
    y, _ = forward_backward(x)  # warm-up: tracing

    def once() -> None:
        _, grads = forward_backward(x)
        tf.nest.map_structure(lambda g: g.numpy(), grads)

    return y, 1000 * measure.median_seconds(once, reps)


def layer_times(args, kernels: KernelChoice, reps: int = 5) -> list[tuple[str, float]]:
    """(k) in the run's compute type."""
    return layer_times_by_type(args, [measure.compute_dtype(args)], kernels, reps)[0]


def layer_times_by_type(args, dtypes: list[tf.DType], kernels: KernelChoice,
                        reps: int = 5) -> list[list[tuple[str, float]]]:
    """(k): median milliseconds of each stage's forward and backward pass, one stage at a
    time, for each type of ``dtypes`` in turns stage by stage.  Each stage gets the
    output of the one before and differentiates a sum of its output with respect to
    the variables it reads and, but for the first, its input, as the train step does."""
    models = [Model(compute_dtype=dtype, lrn=kernels.lrn, relu_pool=kernels.relu_pool,
                    relu_lrn=kernels.relu_lrn) for dtype in dtypes]
    images = tf.random.stateless_normal([args.batch_size, CROP_SIZE, CROP_SIZE, 3],
                                        seed=(1, 2))
    inputs = [tf.cast(images, model.stage_dtypes["conv1"]) for model in models]
    stages = [dict(model.stages()) for model in models]
    times = [[] for _ in models]
    for i, name in enumerate(STAGES):
        for k, model in enumerate(models):
            inputs[k], ms = _stage_ms(_forward_backward(stages[k][name], input_gradient=i > 0),
                                      inputs[k], reps)
            times[k].append((name, ms))
    return times
