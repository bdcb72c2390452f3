"""The replicated train step (``ReplicatedStep``): the replicas' gradients summed into one
gradient-descent update; the state it updates (``TrainState``) and the schedules."""

from __future__ import annotations

from typing import Callable, Iterator

import tensorflow as tf

from cifar10.core.config import (INITIAL_LOSS_SCALE, LOSS_AVERAGE_DECAY, WEIGHT_DECAY,
                                 TrainConfig)
from cifar10.data import fileformat as ff
from cifar10.model import Model
from cifar10.runs import summaries


def learning_rate(examples, examples_per_epoch: int, config: TrainConfig) -> tf.Tensor:
    """The rate once ``examples`` were trained on: ``config.learning_rate`` times the
    decay factor every ``num_epochs_per_decay`` epochs, counted in examples so that it
    does not depend on the number of replicas."""
    period = config.num_epochs_per_decay * examples_per_epoch  # examples between decays
    decays = tf.floor(tf.cast(examples, tf.float64) / period)  # exact at whole multiples
    return config.learning_rate * tf.pow(config.learning_rate_decay_factor,
                                         tf.cast(decays, tf.float32))


def moving_average_decay(step, decay: float) -> tf.Tensor:
    """Decay of the weight averages after update ``step`` (num_updates = step): ``decay``,
    less while (1 + step) / (10 + step) is."""
    step = tf.cast(step, tf.float32)
    return tf.minimum(decay, (1.0 + step) / (10.0 + step))


class TrainState(tf.Module):
    """Everything a checkpoint holds: weights, their averages, step, loss averages.
    The names in ``checkpoint()`` are every checkpoint's keys: never rename one."""

    def __init__(self, seed: int, compute_dtype: tf.DType, num_classes: int = ff.NUM_CLASSES,
                 lrn: Callable[..., tf.Tensor] | None = None,
                 relu_pool: Callable[..., tf.Tensor] | None = None,
                 relu_lrn: Callable[..., tf.Tensor] | None = None,
                 weight_decay: float = WEIGHT_DECAY):
        super().__init__(name="train_state")
        self.model = Model(seed=seed, compute_dtype=compute_dtype, num_classes=num_classes,
                           lrn=lrn, relu_pool=relu_pool, relu_lrn=relu_lrn,
                           weight_decay=weight_decay)
        # A model of its own, so that the evaluator restores it as averages=Model().
        self.averages = Model(seed=seed, compute_dtype=compute_dtype, trainable=False,
                              num_classes=num_classes)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # Over all replicas: a run resumed with another replica count keeps its schedule.
        self.examples_seen = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name="examples_seen")
        self.loss_averages = {
            name: tf.Variable(0.0, trainable=False, name=f"{name}_avg")
            for name in ("cross_entropy", "total_loss")
        }

    def checkpoint(self) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(model=self.model, averages=self.averages, step=self.step,
                                   examples_seen=self.examples_seen,
                                   loss_averages=self.loss_averages)


class DynamicLossScale(tf.Module):
    """``--use_fp16``'s loss scale, which keeps float16 gradients clear of underflow: a
    step with gradients not all finite is skipped and halves it (to no less than 1);
    ``growth_steps`` finite steps in a row double it.  Not checkpointed."""

    def __init__(self, growth_steps: int):
        super().__init__(name="loss_scale")
        self.growth_steps = growth_steps
        self.scale = tf.Variable(INITIAL_LOSS_SCALE, trainable=False, name="scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="good_steps")
        self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps")

    def update(self, finite: tf.Tensor) -> None:
        """After a step: ``finite`` says whether its gradients were all finite."""
        good = tf.where(finite, self.good_steps + 1, tf.constant(0, tf.int64))
        grow = good >= self.growth_steps
        self.scale.assign(tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                                   tf.maximum(self.scale / 2.0, 1.0)))
        self.good_steps.assign(tf.where(grow, tf.zeros_like(good), good))
        self.skipped.assign_add(1 - tf.cast(finite, tf.int64))


class ReplicatedStep:
    """One update of ``state`` (made under ``strategy``'s scope) on the iterator's next
    batch; ``loss_scale``: ``--use_fp16``'s, or None."""

    def __init__(self, state: TrainState, strategy: tf.distribute.Strategy,
                 config: TrainConfig, examples_per_epoch: int,
                 loss_scale: DynamicLossScale | None = None):
        self.state, self.strategy, self.loss_scale = state, strategy, loss_scale
        self.num_replicas = strategy.num_replicas_in_sync
        self.global_batch = config.batch_size * self.num_replicas
        self.examples_per_epoch, self.config = examples_per_epoch, config
        self.variables = state.model.parameters()
        # XLA compiles the replica's pass; the cross-replica update stays outside it.
        self._gradients_fn = (tf.function(self._gradients, jit_compile=True) if config.xla
                              else self._gradients)
        # The smoothed weight-decay terms for TensorBoard: not checkpointed, NaN until
        # this process's first step sets them.
        with strategy.scope():
            self.weight_loss_averages = {
                f"{layer.name}/weight_loss": tf.Variable(float("nan"), trainable=False,
                                                         name=f"{layer.name}_weight_loss_avg")
                for layer in state.model.layers if layer.wd is not None}

    def __call__(self, iterator: Iterator, with_summaries: bool = False
                 ) -> dict[str, tf.Tensor]:
        """Returns the step's {'cross_entropy', 'total_loss'} over the global batch."""
        images, labels = next(iterator)
        # Of the weights this step trains with (read before its update).
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
            # This replica's share: the gradients summed in _apply are the global batch's.
            parts = model.loss(acts["softmax_linear"], labels, self.global_batch,
                               self.num_replicas)
            scale = 1.0 if self.loss_scale is None else self.loss_scale.scale.read_value()
            scaled = parts.total * scale
        grads = tape.gradient(scaled, self.variables)
        if self.loss_scale is not None:
            grads = [g / scale for g in grads]
        return grads, parts.cross_entropy, parts.weight_decay, acts

    def _apply(self, strategy, grads):
        """Cross-replica: sums the gradients, updates weights, averages and step; returns
        (the summed gradients, the learning rate used)."""
        pairs = list(zip(grads, self.variables))
        reduced = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, pairs)
        lr = learning_rate(self.state.examples_seen, self.examples_per_epoch, self.config)
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
        decay = moving_average_decay(self.state.step, self.config.moving_average_decay)
        rate = (1.0 - decay) * kept
        for avg, var in zip(self.state.averages.parameters(), self.variables):
            strategy.extended.update(avg, lambda a, v: a.assign_sub(rate * (a - v)), args=(var,))
        return reduced, lr

    def _average_losses(self, losses: dict[str, tf.Tensor], averages: dict[str, tf.Variable],
                        first: tf.Tensor | None = None) -> None:
        """Moves the smoothed ``losses`` on; the first step (``first``, else where an
        average is still NaN) sets them."""
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
