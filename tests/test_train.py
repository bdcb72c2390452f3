"""Tests of the trainer (cifar10.training): the replicated step, the schedules, the
controller's runs: checkpoints, resume, stop, divergence.

Replicas run on the logical CPU devices made in conftest.py.
"""

from __future__ import annotations

import os
import re
import threading
import time
import types

import numpy as np
import pytest
import tensorflow as tf

from cifar10.runs import checkpoints, layout, rundir
from cifar10.data import pipeline as data
from cifar10.data import folder as datafolder
from cifar10.evaluation import scoring
from cifar10.core.config import EvalConfig, TrainConfig
from cifar10.distribute import devices
from cifar10.training import controller
from cifar10.training.determinism import op_determinism
from cifar10.training import schedule
from cifar10.training.engine import Trainer
from cifar10.training.run import TrainData
from cifar10.training.state import TrainState
from cifar10.core.errors import Cifar10Error, DivergedError
from cifar10.model import Model
from cli import event_tags
from conftest import TRAIN_LINE, mirrored

BATCH = 8  # examples per replica in the equivalence tests


def fixed_batches(strategy, images, labels, num_steps):
    """An iterator that gives replica r of step s the r-th slice of step s's batch.

    ``images``: [num_steps, global_batch, 24, 24, 3].  Each replica has its own
    input pipeline, as in training (``devices.input_options``).
    """
    n = strategy.num_replicas_in_sync
    per_replica = images.shape[1] // n

    def ds_fn(ctx):
        part = slice(ctx.input_pipeline_id * per_replica, (ctx.input_pipeline_id + 1) * per_replica)
        return tf.data.Dataset.from_tensor_slices((images[:num_steps, part],
                                                   labels[:num_steps, part]))

    return iter(strategy.distribute_datasets_from_function(ds_fn, devices.input_options(strategy)))


def random_batches(num_steps, global_batch, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(num_steps, global_batch, 24, 24, 3)).astype(np.float32)
    labels = rng.integers(0, 10, size=(num_steps, global_batch)).astype(np.int32)
    return images, labels


def values(variables):
    return [v.numpy() for v in variables]


def run_steps(num_replicas, per_replica_batch, images, labels, tmp_path):
    strategy = mirrored(num_replicas)
    config = TrainConfig(train_dir=str(tmp_path), batch_size=per_replica_batch)
    trainer = Trainer(config, strategy, examples_per_epoch=1000)
    it = fixed_batches(strategy, images, labels, images.shape[0])
    losses = [trainer.step(it) for _ in range(images.shape[0])]
    return trainer, losses


@pytest.mark.parametrize("num_replicas", [2, 4])
def test_n_replicas_update_equals_one_replica_on_the_global_batch(num_replicas, tmp_path):
    """The proof that gradient summing, loss scaling and weight decay are right."""
    images, labels = random_batches(2, num_replicas * BATCH)
    one, one_losses = run_steps(1, num_replicas * BATCH, images, labels, tmp_path / "one")
    many, many_losses = run_steps(num_replicas, BATCH, images, labels, tmp_path / "many")
    assert many.global_batch == one.global_batch == num_replicas * BATCH
    for a, b in zip(one_losses, many_losses):
        np.testing.assert_allclose(float(a["total_loss"]), float(b["total_loss"]), rtol=1e-5)
        np.testing.assert_allclose(float(a["cross_entropy"]), float(b["cross_entropy"]),
                                   rtol=1e-5)
    initial = values(Model(seed=0).parameters())
    for v1, vn, v0 in zip(values(one.variables), values(many.variables), initial):
        assert not np.allclose(v1, v0), "the step must change every variable"
        np.testing.assert_allclose(vn, v1, rtol=1e-4, atol=1e-6)
    for a1, an in zip(values(one.state.averages.parameters()),
                      values(many.state.averages.parameters())):
        np.testing.assert_allclose(an, a1, rtol=1e-4, atol=1e-6)
    assert one.state.step.numpy() == many.state.step.numpy() == 2


def test_one_step_is_plain_gradient_descent_on_the_mean_loss(tmp_path):
    images, labels = random_batches(1, 2 * BATCH)
    trainer, losses = run_steps(2, BATCH, images, labels, tmp_path)
    model = Model(seed=0)
    with tf.GradientTape() as tape:
        parts = model.loss(model(images[0]), labels[0])
    grads = tape.gradient(parts.total, model.parameters())
    np.testing.assert_allclose(float(losses[0]["total_loss"]), float(parts.total), rtol=1e-5)
    for var, v0, g in zip(trainer.variables, model.parameters(), grads):
        np.testing.assert_allclose(var.numpy(), v0.numpy() - 0.1 * g.numpy(), rtol=1e-4,
                                   atol=1e-6)


@pytest.mark.parametrize("global_batch", [128, 512])
def test_learning_rate_decays_every_350_epochs_of_examples(global_batch):
    epoch = 50_000
    boundary = 350 * epoch  # examples seen at the first decay: 17,500,000
    last_before = (boundary - 1) // global_batch  # 136,718 for 128; 34,179 for 512
    lr = lambda step: float(schedule.learning_rate(step * global_batch, epoch))  # noqa: E731
    assert lr(0) == pytest.approx(0.1)
    assert lr(last_before) == pytest.approx(0.1)
    assert lr(last_before + 1) == pytest.approx(0.01)
    assert lr(2 * boundary // global_batch + 1) == pytest.approx(0.001)


def test_learning_rate_boundaries_do_not_depend_on_the_replica_count():
    # 4 replicas x 128 reach 350 epochs (17,500,000 examples) at a quarter of the
    # steps of 1 x 128: after step 136,719 = ceil(17,500,000 / 128).
    assert float(schedule.learning_rate(136_719 * 128, 50_000)) == pytest.approx(0.01)
    assert float(schedule.learning_rate(136_719 // 4 * 512, 50_000)) == pytest.approx(0.1)
    assert float(schedule.learning_rate((136_719 // 4 + 1) * 512, 50_000)) == pytest.approx(0.01)


def test_moving_averages_follow_the_formula(tmp_path):
    k = 4
    images, labels = random_batches(k, BATCH)
    strategy = mirrored(1)
    trainer = Trainer(TrainConfig(train_dir=str(tmp_path), batch_size=BATCH), strategy,
                      examples_per_epoch=1000)
    expected = values(trainer.variables)  # averages start at the initial weights
    it = fixed_batches(strategy, images, labels, k)
    for step in range(1, k + 1):
        trainer.step(it)
        decay = min(0.9999, (1 + step) / (10 + step))
        expected = [decay * a + (1 - decay) * v
                    for a, v in zip(expected, values(trainer.variables))]
    for got, want in zip(values(trainer.state.averages.parameters()), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert float(schedule.moving_average_decay(1)) == pytest.approx(2 / 11)
    assert float(schedule.moving_average_decay(10**6)) == pytest.approx(0.9999)


def small_config(train_dir, **overrides):
    # No summaries unless a test asks: the first one traces for seconds (0.06 s after).
    settings = dict(train_dir=str(train_dir), batch_size=32, max_steps=20, log_frequency=5,
                    checkpoint_steps=10, summary_steps=1000, shuffle_buffer=500)
    settings.update(overrides)
    return TrainConfig(**settings)


@pytest.fixture(scope="module")
def learned_run(learnable_files, tmp_path_factory):
    """A run that has learned: 100 steps on ``learnable_files``, 2 replicas of batch 16.

    Returns a namespace: train_dir (checkpoint at step 100), lines (what it printed),
    reports (its ``StepReport``s, every 10 steps), result (its ``TrainResult``) and
    test_files.
    """
    files, count = learnable_files
    train_dir = tmp_path_factory.mktemp("learned_run")
    config = small_config(train_dir, batch_size=16, max_steps=100, log_frequency=10,
                          checkpoint_steps=100)
    lines, reports = [], []
    result = controller.train(config, mirrored(2), TrainData(files, count),
                              print_fn=lines.append, on_report=reports.append)
    test_files = datafolder.split_files(os.path.dirname(files[0]), "test")
    return types.SimpleNamespace(train_dir=train_dir, lines=lines, reports=reports,
                                 test_files=test_files, result=result)


def test_loss_falls_on_learnable_data(learned_run):
    lines, reports = learned_run.lines, learned_run.reports
    # Each logged step is a report and a progress line.
    assert [r.step for r in reports] == [1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    progress = [m for m in map(TRAIN_LINE.match, lines) if m]
    assert [m[1] for m in progress] == [str(r.step) for r in reports]
    assert all(f"loss = {r.loss:.2f} " in m[0] for r, m in zip(reports, progress))
    assert all(r.learning_rate == pytest.approx(0.1) for r in reports)
    assert all(r.examples_per_sec > 0 and r.sec_per_batch > 0 for r in reports)
    losses = [r.loss for r in reports]
    # Weight decay alone is ~2.2 at the start; the cross-entropy starts at ~2.3.
    assert losses[0] > 4.0
    # Batches of 16 at learning rate 0.1 make the loss jump from report to report,
    # and a change of rounding (a sum taken in another order) moves the jumps: over
    # seeds 0-3 the mean of the last three reports missed 1.5 below the first loss
    # for one seed, whichever the order. The median of the last five was 1.2-2.5
    # below it for each; weight decay alone falls by about 0.2 in 100 steps.
    assert np.median(losses[-5:]) < losses[0] - 1.0
    # Learning lowers the cross-entropy itself, not only the weight decay: the trained
    # weights' on the 100 test images is 0.004 with TensorFlow 2.21 and 0.002 with 2.16
    # (ln 10 = 2.3 by chance).
    model, step = checkpoints.load_model(layout.latest(str(learned_run.train_dir)).path,
                                         "raw")
    [(images, labels)] = data.eval_dataset(learned_run.test_files, 100).as_numpy_iterator()
    xent = float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels, model(images))))
    assert step == 100 and len(labels) == 100 and xent < 1.5


def test_each_line_says_where_the_run_is(learned_run):
    reports, lines = learned_run.reports, learned_run.lines
    progress = [m for m in map(TRAIN_LINE.match, lines) if m]
    assert len(progress) == len(reports) == 11
    for report, match in zip(reports, progress):
        # 100 steps of a global batch of 32 (2 replicas x 16) on 500 examples.
        epoch = report.step * 32 / 500
        assert (report.max_steps, report.epoch) == (100, pytest.approx(epoch))
        assert match.groups()[:4] == (str(report.step), "100", f"{report.step:.1f}",
                                      f"{epoch:.2f}")
        assert (match[5] is None) == (report.seconds_left is None)
    # No time left on the first line (its step is no measure of the pace), nor the last.
    assert [r.step for r in reports if r.seconds_left is None] == [1, 100]
    assert all(0 < r.seconds_left < 600 for r in reports[1:-1])
    assert progress[3][0].endswith(f"[step 30/100, 30.0%, epoch 1.92, "
                                   f"{progress[3][5]} left]")


def test_a_run_gives_the_figures_of_its_summary(learned_run):
    result, reports = learned_run.result, learned_run.reports
    assert (result.start_step, result.step, result.complete) == (0, 100, True)
    assert result.last_checkpoint == str(learned_run.train_dir / "model.ckpt-100")
    assert (result.train_dir, result.is_chief, result.task) == (
        str(learned_run.train_dir), True, "chief")
    assert (result.start_epoch, result.epoch) == (0.0, pytest.approx(100 * 32 / 500))
    assert result.loss == reports[-1].loss
    # The mean counts the steps over their clock, which the wall time includes.
    steps_time = 100 * 32 / result.examples_per_sec
    assert 0 < steps_time < result.seconds
    assert result.summary()[1].startswith("This run: 100 steps (epoch 0.00 to 6.40) in ")


def test_the_first_line_counts_its_step_not_the_tracing(learnable_files, tmp_path,
                                                        monkeypatch):
    files, count = learnable_files
    prepare, run_steps = Trainer.prepare, Trainer.run_steps
    traced_before = []  # per call that runs steps: had its function been traced?

    def slow_prepare(self, iterator, with_summaries=False, alone=False):
        prepare(self, iterator, with_summaries, alone)
        time.sleep(2.0)  # tracing that takes longer still: not on the clock either

    calls = []  # (steps, with summaries) of each call

    def counting_run_steps(self, iterator, num_steps, with_summaries=False, alone=False):
        calls.append((num_steps, with_summaries))
        if num_steps:  # not prepare's call of no steps
            fn = self._loop_fns[with_summaries]
            traced_before.append(fn.experimental_get_tracing_count())
        return run_steps(self, iterator, num_steps, with_summaries, alone)

    monkeypatch.setattr(Trainer, "prepare", slow_prepare)
    monkeypatch.setattr(Trainer, "run_steps", counting_run_steps)
    reports = []
    controller.train(small_config(tmp_path, batch_size=16, max_steps=4, log_frequency=1,
                                  summary_steps=4), mirrored(1), TrainData(files, count),
                     print_fn=lambda line: None, on_report=reports.append)
    # Each step function was traced before its first call (step 1's, then step 4's
    # with summaries), and the clock stood still meanwhile: a line that counted the
    # 2 seconds would say more than 2 sec/batch.
    assert traced_before == [1, 1, 1, 1]
    # And set up in TensorFlow's runtime by a call of no steps (the first call of the
    # function with summaries took about 1 s more than the next one).
    assert calls == [(0, False), (1, False), (1, False), (1, False), (0, True), (1, True)]
    assert [r.step for r in reports] == [1, 2, 3, 4]
    assert all(r.sec_per_batch < 2.0 for r in reports), reports


def test_bfloat16_evaluation_agrees_with_float32_on_a_learned_run(learned_run, tmp_path,
                                                                   monkeypatch):
    # bfloat16 keeps 8 significant bits: each product and activation is rounded by up
    # to 2^-9 (0.2%) of itself, so the logits move by a small fraction of their
    # spread, and the top class changes only where the best two are about that
    # close, which a trained model's seldom are (99.8% agreement on the 10,000 real
    # test images at 20,000 steps; see docs/results.md). Variables and logits are float32.
    checkpoint = layout.latest(str(learned_run.train_dir)).path
    files = learned_run.test_files + datafolder.split_files(
        os.path.dirname(learned_run.test_files[0]), "train")
    images = np.concatenate([x for x, _ in data.eval_dataset(files, 128).as_numpy_iterator()])
    logits = {}
    for dtype in (tf.float32, tf.bfloat16):
        model, step = checkpoints.load_model(checkpoint, "averages", dtype)
        assert step == 100 and all(v.dtype == tf.float32 for v in model.parameters())
        logits[dtype.name] = model(images).numpy()
        assert logits[dtype.name].dtype == np.float32
    f32, bf16 = logits["float32"], logits["bfloat16"]
    assert len(f32) == 600
    spread = f32.max(axis=1) - f32.min(axis=1)
    assert np.all(np.abs(bf16 - f32).max(axis=1) <= 0.03 * spread)  # 0.011 measured
    assert np.mean(f32.argmax(axis=1) == bf16.argmax(axis=1)) >= 0.99
    # The evaluator in bfloat16 scores the same checkpoint the same, to that agreement.
    loaded = []
    load_model = checkpoints.load_model
    monkeypatch.setattr(checkpoints, "load_model",
                        lambda *args: loaded.append(args[2]) or load_model(*args))
    results = [scoring.evaluate_checkpoint(checkpoint, EvalConfig(
        checkpoint_dir=str(learned_run.train_dir), eval_dir=str(tmp_path), eval_files=files,
        num_examples=600, use_bf16=use_bf16)) for use_bf16 in (False, True)]
    assert results[0].correct > 300  # it has learned: chance is 60
    assert abs(results[1].correct - results[0].correct) <= 6
    assert loaded == [tf.float32, tf.bfloat16]


def test_each_replica_reads_its_own_shard_through_its_own_pipeline(learnable_files, tmp_path,
                                                                   monkeypatch):
    files, count = learnable_files
    contexts = []
    real = data.train_dataset

    def recording(*args, input_context=None, **kwargs):
        contexts.append(input_context)
        return real(*args, input_context=input_context, **kwargs)

    monkeypatch.setattr(data, "train_dataset", recording)
    trainer = Trainer(small_config(tmp_path, batch_size=4), mirrored(2), count)
    images, labels = next(iter(trainer.dataset(files)))
    assert [(c.input_pipeline_id, c.num_input_pipelines) for c in contexts] == [(0, 2), (1, 2)]
    local = trainer.strategy.experimental_local_results(images)
    assert [x.shape for x in local] == [(4, 24, 24, 3)] * 2
    assert [y.shape for y in trainer.strategy.experimental_local_results(labels)] == [(4,)] * 2
    assert not np.array_equal(local[0].numpy(), local[1].numpy())


def test_one_device_strategy_trains_with_its_default_input(learnable_files, tmp_path):
    files, count = learnable_files
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert devices.input_options(strategy) is None  # it refuses per-replica pipelines
    result = controller.train(small_config(tmp_path, max_steps=2, checkpoint_steps=2),
                              strategy, TrainData(files, count), print_fn=lambda line: None)
    assert (result.step, result.complete) == (2, True)
    assert result.last_checkpoint == str(tmp_path / "model.ckpt-2")


def test_resume_continues_from_the_saved_step_with_the_saved_state(learnable_files, tmp_path):
    files, count = learnable_files
    first = controller.train(small_config(tmp_path, max_steps=10), mirrored(1),
                             TrainData(files, count), print_fn=lambda line: None)
    assert (first.step, first.complete) == (10, True)
    saved = tf.train.load_checkpoint(first.last_checkpoint)

    lines = []
    config = small_config(tmp_path, max_steps=15)
    trainer = Trainer(config, mirrored(1), count)
    run_dir = rundir.RunDirectory(str(tmp_path), trainer.state.checkpoint(), keep=5)
    assert run_dir.restore() == layout.Checkpoint(10, first.last_checkpoint)
    assert trainer.state.step.numpy() == 10
    for layer in trainer.state.model.layers:
        for kind in ("weights", "biases"):
            name = f"{layer.name}/{kind}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(getattr(layer, kind).numpy(),
                                          saved.get_tensor("model/" + name))
            avg = getattr(trainer.state.averages.layers[trainer.state.model.layers.index(layer)],
                          kind)
            np.testing.assert_array_equal(avg.numpy(), saved.get_tensor("averages/" + name))

    second = controller.train(config, mirrored(1), TrainData(files, count),
                              print_fn=lines.append)
    assert lines[0] == f"Resuming from {first.last_checkpoint} at step 10."
    assert lines[1] == (f"Training on {count} examples from {os.path.dirname(files[0])} with 1 "
                        f"replica(s), global batch 32; checkpoints and summaries in {tmp_path}.")
    assert "step 11," in lines[2]
    assert (second.step, second.steps_run) == (15, 5)
    # Its epochs count on from the resumed state: 32 examples a step, 500 an epoch.
    assert (second.start_epoch, second.epoch) == (10 * 32 / 500, 15 * 32 / 500)
    assert second.summary()[1].startswith("This run: 5 steps (epoch 0.64 to 0.96) in ")
    assert second.last_checkpoint.endswith("model.ckpt-15")


def test_bfloat16_and_float32_runs_resume_each_others_float32_checkpoints(learnable_files,
                                                                        tmp_path, monkeypatch):
    files, count = learnable_files
    done, compute = [], []
    state_init = TrainState.__init__
    monkeypatch.setattr(TrainState, "__init__", lambda self, seed, dtype, classes, **kw: (
        compute.append(dtype), state_init(self, seed, dtype, classes, **kw))[1])
    for use_bf16, max_steps in ((True, 4), (False, 8), (True, 12)):
        lines = []
        config = small_config(tmp_path, batch_size=16, max_steps=max_steps, log_frequency=1,
                              checkpoint_steps=4, use_bf16=use_bf16)
        result = controller.train(config, mirrored(1), TrainData(files, count),
                                  print_fn=lines.append)
        if done:
            assert lines[0] == f"Resuming from {done[-1].last_checkpoint} at step {done[-1].step}."
        losses = [float(m[0].split("loss = ")[1].split()[0])
                  for m in map(TRAIN_LINE.match, lines) if m]
        assert len(losses) == 4 and all(np.isfinite(losses))
        assert (result.step, result.steps_run) == (max_steps, 4)
        dtypes = tf.train.load_checkpoint(result.last_checkpoint).get_variable_to_dtype_map()
        weights = {k: v for k, v in dtypes.items() if k.startswith(("model/", "averages/"))}
        assert len(weights) == 20 and set(weights.values()) == {tf.float32}
        done.append(result)
    assert compute == [tf.bfloat16, tf.float32, tf.bfloat16]
    saved = tf.train.load_checkpoint(done[-1].last_checkpoint)
    assert saved.get_tensor("examples_seen/.ATTRIBUTES/VARIABLE_VALUE") == 12 * 16


def test_completed_run_is_reported_not_trained_further(learnable_files, tmp_path):
    files, count = learnable_files
    controller.train(small_config(tmp_path, max_steps=5), mirrored(1), TrainData(files, count),
                     print_fn=lambda line: None)
    assert checkpoints.completed_step(str(tmp_path)) == 5
    lines = []
    again = controller.train(small_config(tmp_path, max_steps=5), mirrored(1),
                             TrainData(files, count), print_fn=lines.append)
    assert (again.step, again.steps_run, again.complete) == (5, 0, True)
    assert len(lines) == 1 and "already complete at step 5" in lines[0]  # no "Training on"


def test_max_steps_below_the_runs_step_is_refused_not_marked_complete(learnable_files,
                                                                     tmp_path):
    """A run stopped at step 5 of many, resumed with --max_steps=3, was declared complete
    (training_complete.json written), so the evaluator stopped and the Slurm job no
    longer requeued.  Once it ran to its --max_steps, the marker stays as it was."""
    files, count = learnable_files
    controller.train(small_config(tmp_path, max_steps=5), mirrored(1), TrainData(files, count),
                     print_fn=lambda line: None)
    for marked in (True, False):
        if not marked:  # as a run stopped at step 5 leaves it
            os.remove(tmp_path / "training_complete.json")
        lines = []
        with pytest.raises(Cifar10Error) as err:
            controller.train(small_config(tmp_path, max_steps=3), mirrored(1),
                             TrainData(files, count), print_fn=lines.append)
        assert str(err.value) == (
            f"--max_steps=3 is below the run's step 5 ({tmp_path / 'model.ckpt-5'}): pass "
            f"a --max_steps above 5 to train it further, or --fresh_start (or another "
            f"--train_dir) for a new run")
        assert lines == []
        assert checkpoints.completed_step(str(tmp_path)) == (5 if marked else None)


def test_stop_event_saves_at_the_step_reached(learnable_files, tmp_path):
    files, count = learnable_files
    stop = threading.Event()

    def print_and_stop(line):
        if "step 5," in line:
            stop.set()

    result = controller.train(small_config(tmp_path, max_steps=1000), mirrored(1),
                              TrainData(files, count), stop_event=stop,
                              print_fn=print_and_stop)
    assert (result.step, result.stopped, result.complete) == (5, True, False)
    assert result.last_checkpoint.endswith("model.ckpt-5")
    assert checkpoints.completed_step(str(tmp_path)) is None


# What a diverged run says: which of the three happened first to a run of a huge
# learning rate depends on the step's arithmetic.
DIVERGED = (r"^Model diverged(?: with loss = NaN| with an infinite loss \(-?inf\)|: weights "
            r"are not finite \(NaN or infinite\)) at step (\d+); ")


def test_divergence_raises_and_keeps_the_last_good_checkpoint(learnable_files, tmp_path):
    files, count = learnable_files
    controller.train(small_config(tmp_path, max_steps=10), mirrored(1), TrainData(files, count),
                     print_fn=lambda line: None)
    with pytest.raises(DivergedError, match=DIVERGED) as err:
        controller.train(small_config(tmp_path, max_steps=30, checkpoint_steps=1,
                                      initial_learning_rate=1e12),
                         mirrored(1), TrainData(files, count), print_fn=lambda line: None)
    diverged_at = int(re.match(DIVERGED, str(err.value))[1])
    assert 10 < diverged_at < 30
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert str(err.value).endswith(f"the last good checkpoint is {latest}")
    reader = tf.train.load_checkpoint(latest)
    assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") < diverged_at
    for key in reader.get_variable_to_shape_map():
        if key.startswith(("model/", "averages/")):
            assert np.all(np.isfinite(reader.get_tensor(key))), key


# On TensorFlow 2.16, the float16 step, a non-finite step skipped and the scale
# halved run in the next two tests (one replica), two replicas' steps in test_loop's.
@pytest.mark.slow
def test_fp16_skips_a_step_with_non_finite_gradients_halves_the_scale_and_grows_back(
        tmp_path):
    images, labels = random_batches(4, 2 * BATCH)
    # Step 2, replica 0's first image: ReLU turns the NaN into 0, so the loss stays
    # finite, but conv1's weight gradient takes the pixel itself: NaN.
    images[1, 0, 0, 0, 0] = np.nan
    strategy = mirrored(2)
    config = TrainConfig(train_dir=str(tmp_path), batch_size=BATCH, use_fp16=True,
                         loss_scale_growth_steps=2)
    trainer = Trainer(config, strategy, examples_per_epoch=1000)
    scale = trainer.loss_scale
    it = fixed_batches(strategy, images, labels, 4)
    assert float(scale.scale.numpy()) == 2.0 ** 15

    assert np.isfinite(float(trainer.step(it)["total_loss"]))
    after_one = values(trainer.variables), values(trainer.state.averages.parameters())
    assert trainer.run_steps(it, 1)[1] == 0  # skipped, not diverged
    # Skipped on every replica: no weight, average or example count moved.
    for got, want in zip(values(trainer.variables), after_one[0]):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(values(trainer.state.averages.parameters()), after_one[1]):
        np.testing.assert_array_equal(got, want)
    assert trainer.state.examples_seen.numpy() == 2 * BATCH
    assert trainer.state.step.numpy() == 2
    assert (float(scale.scale.numpy()), int(scale.skipped.numpy())) == (2.0 ** 14, 1)
    assert all(np.isfinite(v.numpy()) for v in trainer.state.loss_averages.values())

    trainer.step(it)  # one finite step: not yet
    assert float(scale.scale.numpy()) == 2.0 ** 14
    trainer.step(it)  # two in a row: doubled
    assert float(scale.scale.numpy()) == 2.0 ** 15
    assert trainer.state.examples_seen.numpy() == 3 * 2 * BATCH


def test_fp16_a_non_finite_loss_is_a_skipped_step_until_the_scale_cannot_fall(tmp_path):
    images, labels = random_batches(6, BATCH)
    strategy = mirrored(1)
    trainer = Trainer(TrainConfig(train_dir=str(tmp_path), batch_size=BATCH, use_fp16=True),
                      strategy, examples_per_epoch=1000)
    it = fixed_batches(strategy, images, labels, 6)
    # NaN logits: from here on every loss and every gradient is NaN.
    softmax_biases = trainer.variables[-1]
    softmax_biases.assign(tf.fill(softmax_biases.shape, float("nan")))
    losses, diverged = trainer.run_steps(it, 1)
    assert np.isnan(float(losses["total_loss"])) and diverged == 0  # the scale can halve
    assert float(trainer.loss_scale.scale.numpy()) == 2.0 ** 14
    # From 4: step 2 halves it to 2, step 3 to 1, where it cannot fall: the loop of
    # five steps ends there, on a divergence.
    trainer.loss_scale.scale.assign(4.0)
    losses, diverged = trainer.run_steps(it, 5)
    assert np.isnan(float(losses["total_loss"])) and diverged == 3
    assert trainer.state.step.numpy() == 3 and trainer.state.examples_seen.numpy() == 0
    assert int(trainer.loss_scale.skipped.numpy()) == 3


def test_fp16_divergence_is_declared_once_the_scale_bottoms_out(learnable_files, tmp_path):
    files, count = learnable_files
    lines = []
    # Batch 1: float16 convolutions are slow on a CPU, and 16 or more steps are needed.
    with pytest.raises(DivergedError, match=DIVERGED) as err:
        controller.train(small_config(tmp_path, batch_size=1, max_steps=60, log_frequency=5,
                                      use_fp16=True, initial_learning_rate=1e12),
                         mirrored(1), TrainData(files, count), print_fn=lines.append)
    # Halving from 2^15 to 1 takes 15 skipped steps before the one that gives up.
    diverged_at = int(re.match(DIVERGED, str(err.value))[1])
    assert 16 <= diverged_at < 60
    skipped = [re.search(r"^(\d+) step\(s\) had non-finite gradients and were skipped since "
                         r"the last line; loss scale now (\d+)\.$", line) for line in lines
               if "non-finite gradients" in line]
    assert skipped and all(skipped)
    scales = [int(m[2]) for m in skipped]
    assert scales == sorted(scales, reverse=True) and scales[-1] < 2 ** 15
    assert sum(int(m[1]) for m in skipped) < diverged_at
    tags = event_tags(str(tmp_path))
    assert tags["loss_scale"] == tags["skipped_steps"] and tags["loss_scale"][0] == 1


def test_config_rejects_bad_values(tmp_path):
    strategy = mirrored(1)
    for name in ("batch_size", "max_steps", "checkpoint_steps"):
        with pytest.raises(ValueError, match=name):
            Trainer(small_config(tmp_path, **{name: 0}), strategy)


def test_xla_float16_and_bfloat16_steps_match_the_float32_step(tmp_path):
    images, labels = random_batches(1, BATCH)
    results, compute = {}, {}
    for name, overrides in {"f32": {}, "xla": {"xla": True}, "f16": {"use_fp16": True},
                            "bf16": {"use_bf16": True}}.items():
        strategy = mirrored(1)
        config = TrainConfig(train_dir=str(tmp_path / name), batch_size=BATCH, **overrides)
        trainer = Trainer(config, strategy, examples_per_epoch=1000)
        loss = trainer.step(fixed_batches(strategy, images, labels, 1))
        assert all(v.dtype == tf.float32 for v in trainer.state.checkpoint().model.parameters())
        compute[name] = {trainer.state.model.compute_dtype, trainer.state.averages.compute_dtype}
        results[name] = (float(loss["total_loss"]), values(trainer.variables))
    assert compute == {"f32": {tf.float32}, "xla": {tf.float32}, "f16": {tf.float16},
                       "bf16": {tf.bfloat16}}
    f32_loss, f32_vars = results["f32"]
    assert results["xla"][0] == pytest.approx(f32_loss, rel=1e-5)
    for got, want in zip(results["xla"][1], f32_vars):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    initial = values(Model(seed=0).parameters())
    # The mixed-precision updates move the weights as the float32 one does, to the
    # precision of their type: measured, the update of a variable differs from the
    # float32 one by 0.04-4% of its size in float16 (whose convolutions on CPU also
    # accumulate in float16) and by 0.3-14% in bfloat16, which keeps 3 bits fewer
    # (gradients of random labels at initialisation are sums that mostly cancel,
    # which magnifies rounding).  A wrong or missing gradient would be off by 100%.
    for name, step_rel in (("f16", 0.1), ("bf16", 0.25)):
        assert results[name][0] == pytest.approx(f32_loss, rel=1e-3), name
        for got, want, start in zip(results[name][1], f32_vars, initial):
            step_low, step32 = got - start, want - start
            assert np.linalg.norm(step_low - step32) <= step_rel * np.linalg.norm(step32), name


def test_learning_rate_counts_examples_across_a_change_of_replica_count(tmp_path):
    images, labels = random_batches(3, 4 * BATCH)
    one, _ = run_steps(1, 4 * BATCH, images[:1], labels[:1], tmp_path / "a")
    assert one.state.examples_seen.numpy() == 4 * BATCH
    # Resume the same state with 4 replicas of BATCH: the count goes on in examples.
    four = Trainer(TrainConfig(train_dir=str(tmp_path / "b"), batch_size=BATCH), mirrored(4),
                   examples_per_epoch=1000)
    four.state.checkpoint().read(one.state.checkpoint().write(str(tmp_path / "ck"))).assert_consumed()
    four.step(fixed_batches(four.strategy, images[1:2], labels[1:2], 1))
    assert four.state.step.numpy() == 2
    assert four.state.examples_seen.numpy() == 8 * BATCH
    # 350 epochs of 1,000 examples: the first decay comes after 350,000 examples.
    four.state.examples_seen.assign(350_000 - 1)
    assert float(schedule.learning_rate(four.state.examples_seen, four.examples_per_epoch)) == \
        pytest.approx(0.1)
    four.state.examples_seen.assign(350_000)
    assert float(schedule.learning_rate(four.state.examples_seen, four.examples_per_epoch)) == \
        pytest.approx(0.01)


def test_op_determinism_is_on_for_a_deterministic_run_only_and_as_found_after_it(
        learnable_files, tmp_path):
    """TensorFlow's op determinism is the whole process's: a --deterministic run turns
    it on for its steps and leaves it as it found it, also when it fails."""
    from tensorflow.python.framework import config as tf_config  # its reading is not public
    files, count = learnable_files
    (tmp_path / "a_file").write_text("not a directory")
    during, after = [], []

    def record(report):
        during.append(tf_config.is_op_determinism_enabled())

    try:
        for name, deterministic in (("on", True), ("off", False), ("a_file/run", True)):
            config = small_config(tmp_path / name, max_steps=2, log_frequency=1,
                                  deterministic=deterministic)
            try:
                controller.train(config, mirrored(1), TrainData(files, count),
                                 print_fn=lambda line: None, on_report=record)
            except Cifar10Error:
                assert name == "a_file/run"  # cannot create --train_dir
            after.append(tf_config.is_op_determinism_enabled())
        assert (during, after) == ([True, True, False, False], [False, False, False])
        # Found on (the caller's choice, or TF_DETERMINISTIC_OPS=1): left on.
        tf.config.experimental.enable_op_determinism()
        with op_determinism(True):
            pass
        assert tf_config.is_op_determinism_enabled()
    finally:
        tf_config.disable_op_determinism()  # the rest of the session runs as usual


def test_unwritable_train_dir_is_a_one_line_error(learnable_files, tmp_path):
    files, count = learnable_files
    (tmp_path / "a_file").write_text("not a directory")
    with pytest.raises(Cifar10Error, match=r"cannot create --train_dir .*a_file/run"):
        controller.train(small_config(tmp_path / "a_file" / "run"), mirrored(1),
                         TrainData(files, count), print_fn=lambda line: None)
