"""The replicated train step: one synchronous update of the tutorial model.

Each replica runs the forward and backward pass on its own batch of
``batch_size`` examples; the replicas' gradients are summed into one update of
plain gradient descent, the same on every replica; then the moving averages,
the step, the examples seen and the smoothed losses move on.  ``engine.Trainer``
runs it in its loop functions, inside a ``tf.function``.
"""

from __future__ import annotations

from typing import Iterator

import tensorflow as tf

from cifar10.core.config import LOSS_AVERAGE_DECAY, TrainConfig
from cifar10.runs import summaries
from cifar10.training.schedule import learning_rate, moving_average_decay
from cifar10.training.state import DynamicLossScale, TrainState


class ReplicatedStep:
    """One update of ``state`` under ``strategy``; call it with the input iterator.

    Args:
      state: the variables it updates (created under the strategy's scope).
      strategy: one replica per device.
      config: the run's settings (batch size, learning rate, XLA).
      examples_per_epoch: examples in the training set (for the LR schedule).
      loss_scale: ``--use_fp16``'s dynamic loss scale, or None.
    """

    def __init__(self, state: TrainState, strategy: tf.distribute.Strategy,
                 config: TrainConfig, examples_per_epoch: int,
                 loss_scale: DynamicLossScale | None = None):
        self.state, self.strategy, self.loss_scale = state, strategy, loss_scale
        self.num_replicas = strategy.num_replicas_in_sync
        self.global_batch = config.batch_size * self.num_replicas
        self.examples_per_epoch = examples_per_epoch
        self.initial_learning_rate = config.initial_learning_rate
        self.variables = state.model.parameters()
        # XLA compiles the per-replica forward and backward pass; the cross-replica
        # update (merge_call) stays outside the compiled cluster.
        self._gradients_fn = (tf.function(self._gradients, jit_compile=True) if config.xla
                              else self._gradients)
        # The smoothed weight-decay terms, one per layer with weight decay
        # ('local3/weight_loss'), for TensorBoard. Not in the checkpoint (a checkpoint
        # written without them must restore): NaN until the first step of this
        # process sets them.
        with strategy.scope():
            self.weight_loss_averages = {
                f"{layer.name}/weight_loss": tf.Variable(float("nan"), trainable=False,
                                                         name=f"{layer.name}_weight_loss_avg")
                for layer in state.model.layers if layer.wd}

    def __call__(self, iterator: Iterator, with_summaries: bool = False
                 ) -> dict[str, tf.Tensor]:
        """Runs the step on the next batch of ``iterator``; with ``with_summaries``
        writes the training summaries.

        Returns:
          {'cross_entropy', 'total_loss'}: the step's losses over the global batch.
        """
        images, labels = next(iterator)
        # Of the weights this step trains with (read before its update): two scalars.
        weight_losses = {f"{name}/weight_loss": value
                         for name, value in self.state.model.weight_losses().items()}
        out = self.strategy.run(self._replica_step, args=(images, labels, with_summaries))
        xent = self.strategy.reduce(tf.distribute.ReduceOp.SUM, out["cross_entropy"], axis=None)
        wd = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, out["weight_decay"], axis=None)
        losses = {"cross_entropy": xent, "total_loss": xent + wd}
        self._average_losses(losses, self.state.loss_averages, first=self.state.step == 1)
        self._average_losses(weight_losses, self.weight_loss_averages)
        if with_summaries:
            self._write_summaries(out, {**weight_losses, **losses})
        return losses

    def _replica_step(self, images, labels, with_summaries):
        grads, xent, wd, acts = self._gradients_fn(images, labels)
        ctx = tf.distribute.get_replica_context()
        reduced, lr = ctx.merge_call(self._apply, args=(grads,))
        out = {"cross_entropy": xent, "weight_decay": wd}
        if with_summaries:
            out.update(activations=acts, gradients=reduced, images=images, learning_rate=lr)
        return out

    def _gradients(self, images, labels):
        """Forward and backward pass of one replica: (grads, xent, wd, activations)."""
        model = self.state.model
        with tf.GradientTape() as tape:
            acts = model.activations(images)
            # This replica's share of the loss: gradients are SUMMED over replicas
            # (in _apply), which gives the gradient of the global batch's loss.
            parts = model.loss(acts["softmax_linear"], labels, self.global_batch,
                               self.num_replicas)
            scale = 1.0 if self.loss_scale is None else self.loss_scale.scale.read_value()
            scaled = parts.total * scale
        grads = tape.gradient(scaled, self.variables)
        if self.loss_scale is not None:
            grads = [g / scale for g in grads]
        return grads, parts.cross_entropy, parts.weight_decay, acts

    def _apply(self, strategy, grads):
        """Cross-replica part of a step: sum gradients, SGD update, averages, step.

        Returns:
          (the summed gradients, the learning rate this update used).
        """
        pairs = list(zip(grads, self.variables))
        reduced = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, pairs)
        lr = learning_rate(self.state.examples_seen, self.examples_per_epoch,
                           self.initial_learning_rate)
        if self.loss_scale is None:
            def descend(v, g):
                return v.assign_sub(lr * g)
            kept, examples = 1.0, self.global_batch
        else:  # a step with non-finite gradients changes no weight and no average
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in reduced])

            def descend(v, g):
                return v.assign_sub(lr * tf.where(finite, g, tf.zeros_like(g)))
            kept = tf.cast(finite, tf.float32)
            examples = self.global_batch * tf.cast(finite, tf.int64)
            self.loss_scale.update(finite)
        for var, grad in zip(self.variables, reduced):
            strategy.extended.update(var, descend, args=(grad,))
        self.state.step.assign_add(1)
        self.state.examples_seen.assign_add(examples)
        rate = (1.0 - moving_average_decay(self.state.step)) * kept
        for avg, var in zip(self.state.averages.parameters(), self.variables):
            strategy.extended.update(avg, lambda a, v: a.assign_sub(rate * (a - v)), args=(var,))
        return reduced, lr

    def _average_losses(self, losses: dict[str, tf.Tensor], averages: dict[str, tf.Variable],
                        first: tf.Tensor | None = None) -> None:
        """Moves the smoothed ``losses`` (TensorBoard's) on; the first step (``first``,
        else where an average is still NaN) sets them."""
        for name, value in losses.items():
            avg = averages[name]
            start = tf.math.is_nan(avg) if first is None else first
            new = tf.where(start, value, LOSS_AVERAGE_DECAY * avg
                           + (1.0 - LOSS_AVERAGE_DECAY) * value)
            if self.loss_scale is not None:  # a skipped step leaves the averages alone
                new = tf.where(tf.math.is_finite(value), new, avg)
            avg.assign(new)

    def _write_summaries(self, out: dict, losses: dict[str, tf.Tensor]) -> None:
        """The step's training summaries, from the first replica's values."""
        local = lambda x: self.strategy.experimental_local_results(x)[0]  # noqa: E731
        summaries.write_train_summaries(
            step=self.state.step, learning_rate=local(out["learning_rate"]), losses=losses,
            loss_averages={**self.weight_loss_averages, **self.state.loss_averages},
            activations={k: local(v) for k, v in out["activations"].items()},
            variables=self.variables, gradients=[local(g) for g in out["gradients"]],
            images=local(out["images"]))
