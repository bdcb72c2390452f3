"""The step engine: synchronous data-parallel SGD of the tutorial model.

``Trainer`` builds the state (``state``) and the replicated step (``step``) under a
``tf.distribute`` strategy, feeds it (``dataset``) and runs it in loop functions:
up to ``steps_per_loop`` steps in one call into TensorFlow.  What runs it (the run
directory, resume, progress, saving) is ``controller``'s.

The training it does:
* one replica per device, each on its own batch of ``batch_size`` examples;
  gradients are combined across replicas into one synchronous update, the
  average of the replicas' gradients;
* plain gradient descent, learning rate 0.1 x 0.1^floor(epochs / 350), with
  epochs counted from the examples seen, whatever the number of replicas
  (``schedule``);
* moving averages of every trainable variable, decay 0.9999 with the step as
  ``num_updates``, saved in every checkpoint for the evaluator.

The global step counts updates done: the checkpoint after 1,000 updates is
``model.ckpt-1000`` and holds step 1000, which is where a resumed run goes on.
"""

from __future__ import annotations

from typing import Iterator

import tensorflow as tf

from cifar10.core.config import TrainConfig, compute_dtype
from cifar10.data import fileformat as ff
from cifar10.data import pipeline as data
from cifar10.distribute import devices
from cifar10.kernels.layers import KernelChoice, choose
from cifar10.training.state import DynamicLossScale, TrainState
from cifar10.training.step import ReplicatedStep


class Trainer:
    """Builds the state and the replicated step under ``strategy``, and runs it.

    TensorFlow's op determinism, which ``deterministic`` runs take, is the
    process's: the caller's to turn on (``determinism.op_determinism``).

    Args:
      config: the run's settings.
      strategy: one replica per device; ``devices.make_strategy`` makes one.
      examples_per_epoch: examples in the training set (for the LR schedule).
      num_classes: classes of the data: the model's outputs.
      kernels: the model's layer functions; default: as ``config.kernels`` chooses
        them (``choose``).  The benchmark passes others to time each kernel.
    """

    def __init__(self, config: TrainConfig, strategy: tf.distribute.Strategy,
                 examples_per_epoch: int = ff.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
                 num_classes: int = ff.NUM_CLASSES,
                 kernels: KernelChoice | None = None):
        config.check()
        self.config, self.strategy = config, strategy
        self.examples_per_epoch = examples_per_epoch
        self.input_options = devices.input_options(strategy)  # how batches reach the replicas
        self.kernels = kernels or choose(config.kernels,
                                                strategy.extended.worker_devices, config.xla)
        with strategy.scope():
            self.state = TrainState(config.seed, tf.as_dtype(compute_dtype(config)),
                                    num_classes, lrn=self.kernels.lrn,
                                    relu_pool=self.kernels.relu_pool,
                                    relu_lrn=self.kernels.relu_lrn)
            self.loss_scale = (DynamicLossScale(config.loss_scale_growth_steps)
                               if config.use_fp16 else None)
        self.train_step = ReplicatedStep(self.state, strategy, config, examples_per_epoch,
                                         self.loss_scale)
        self.num_replicas = self.train_step.num_replicas
        self.global_batch = self.train_step.global_batch
        self.variables = self.train_step.variables
        self._loop_fns = {
            False: tf.function(lambda it, n: self._loop(it, n, with_summaries=False)),
            True: tf.function(lambda it, n: self._loop(it, n, with_summaries=True)),
        }
        # One step without a TensorFlow loop, for the profiler's window (run_steps).
        self._alone_fns = {
            False: tf.function(lambda it: self._alone(it, with_summaries=False)),
            True: tf.function(lambda it: self._alone(it, with_summaries=True)),
        }
        self._built: set[tuple[bool, bool]] = set()  # (with_summaries, alone) of those traced

    def dataset(self, train_files: list[str], start_step: int = 0
                ) -> tf.distribute.DistributedDataset:
        """The training batches, distributed over the replicas.

        The input position is not checkpointed (it would mean saving the shuffle
        buffer); instead a resumed run seeds its input with the step it starts
        at, so that it does not replay the order the run began with.  A
        ``deterministic`` run instead rebuilds the order it began with and skips
        the batches of the steps already done, so that it goes on exactly as an
        uninterrupted run would (with the same batch size and replicas).
        """
        cfg = self.config
        if cfg.deterministic:
            seed, skip_steps = cfg.seed % (2**31 - 1), start_step
        else:
            seed, skip_steps = (cfg.seed * 1_000_003 + start_step) % (2**31 - 1), 0

        def pipeline(ctx):
            # A pipeline feeds one replica, or each of its worker's replicas in turn.
            per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            return data.train_dataset(train_files, cfg.batch_size, seed=seed,
                                      shuffle_buffer=cfg.shuffle_buffer, input_context=ctx,
                                      skip_batches=skip_steps * per_step)

        return self.strategy.distribute_datasets_from_function(pipeline, self.input_options)

    def settings(self) -> dict:
        """What the run's config does not say: replicas, global batch, data, TensorFlow."""
        return {"num_replicas": self.num_replicas, "global_batch": self.global_batch,
                "examples_per_epoch": self.examples_per_epoch, "tensorflow": tf.__version__}

    def step(self, iterator: Iterator, with_summaries: bool = False) -> dict[str, tf.Tensor]:
        """Runs one synchronous update on the next batch of ``iterator`` (a loop of one
        step: ``run_steps``).

        Returns:
          {'cross_entropy', 'total_loss'}: the step's losses over the global batch.
        """
        return self.run_steps(iterator, 1, with_summaries)[0]

    def run_steps(self, iterator: Iterator, num_steps: int, with_summaries: bool = False,
                  alone: bool = False) -> tuple[dict[str, tf.Tensor], int]:
        """Runs ``num_steps`` updates in one call into TensorFlow (a loop).

        The loop stops early after a step whose loss is not finite (unless
        ``--use_fp16``'s loss scale skipped it and can still go down: ``_diverged``).
        With ``with_summaries`` its last step writes the training summaries.

        ``alone`` runs one step (``num_steps`` must be 1) in a function without a
        TensorFlow loop, the same step: the profiler takes the iterations of a
        traced loop for the steps of its overview, and then drops the step marks
        of the calls (``profiling``), finding none.

        Returns:
          (the losses of the last step run, as ``step``'s; the step whose loss was
          not finite, or 0).
        """
        if alone:
            if num_steps != 1:
                raise ValueError(f"a step alone is one step, not {num_steps}")
            losses, diverged = self._alone_fns[with_summaries](iterator)
        else:
            losses, diverged = self._loop_fns[with_summaries](
                iterator, tf.constant(num_steps, tf.int32))
        self._built.add((with_summaries, alone))
        return losses, int(diverged)

    def prepare(self, iterator: Iterator, with_summaries: bool = False,
                alone: bool = False) -> None:
        """Builds the function of ``run_steps(iterator, ..., with_summaries, alone)``
        before its first call, if not built yet, so that the time of that call is
        its steps' time, not the tracing's (seconds; more with the summaries of
        several replicas).

        The loops are also set up in TensorFlow's runtime, by a call of no steps (the
        first call of a function with summaries took about 1 s more than the next on
        a CPU); a step alone is traced only: a call would run a step.  Every worker
        of a multi-worker run must prepare the same functions in the same order.
        """
        if (with_summaries, alone) in self._built:
            return
        if alone:
            self._alone_fns[with_summaries].get_concrete_function(iterator)
        else:
            self.run_steps(iterator, 0, with_summaries)
        self._built.add((with_summaries, alone))

    def _diverged(self, total_loss: tf.Tensor) -> tf.Tensor:
        """After a step: whether its loss says the run diverged.  A loss that is not
        finite does, unless ``--use_fp16``'s loss scale skipped the step (its
        gradients were not finite either) and can still go down: then it is one
        more skipped step, and the halved scale is tried next."""
        bad = tf.logical_not(tf.math.is_finite(total_loss))
        if self.loss_scale is not None:
            bad = tf.logical_and(bad, self.loss_scale.scale.read_value() <= 1.0)
        return bad

    def _loop(self, iterator, num_steps, with_summaries):
        zero = tf.constant(0.0)
        losses = {"cross_entropy": zero, "total_loss": zero}
        diverged = tf.constant(0, tf.int64)
        for _ in tf.range(num_steps - 1 if with_summaries else num_steps):
            losses = self.train_step(iterator, with_summaries=False)
            if self._diverged(losses["total_loss"]):
                diverged = self.state.step.read_value()
                break
        if with_summaries and num_steps > 0:  # a call of no steps: ``prepare``'s
            # The last step writes the summaries, unless the loop stopped on a
            # diverged step.  The scope "/": the tf.cond's own would prefix their tags.
            going = tf.equal(diverged, 0)
            with tf.name_scope("/"), tf.summary.record_if(going):
                last = self.train_step(iterator, with_summaries=True)
            diverged = tf.where(tf.logical_and(going, self._diverged(last["total_loss"])),
                                self.state.step.read_value(), diverged)
            losses = {k: tf.where(going, last[k], v) for k, v in losses.items()}
        return losses, diverged

    def _alone(self, iterator, with_summaries):
        losses = self.train_step(iterator, with_summaries)
        diverged = tf.where(self._diverged(losses["total_loss"]), self.state.step.read_value(),
                            tf.constant(0, tf.int64))
        return losses, diverged
