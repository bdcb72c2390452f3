"""cifar10.training.step and .engine: N replicas against one, a step against plain
gradient descent, the schedules, the precisions, the loop functions."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import cli
from cifar10.core.config import TrainConfig
from cifar10.data import pipeline as data
from cifar10.distribute import devices
from cifar10.model import Model
from cifar10.training import step as steps
from cifar10.training.engine import Trainer
from conftest import mirrored

BATCH = 8  # examples per replica


def fixed_batches(strategy, images, labels, num_steps):
    """An iterator that gives replica r of step s the r-th slice of ``images[s]``."""
    per_replica = images.shape[1] // strategy.num_replicas_in_sync

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


def trainer_of(tmp_path, num_replicas=1, **settings):
    config = TrainConfig(train_dir=str(tmp_path),
                         **{"batch_size": BATCH, "shuffle_buffer": 500, **settings})
    return Trainer(config, mirrored(num_replicas), examples_per_epoch=1000)


def run_steps(num_replicas, per_replica_batch, images, labels, tmp_path):
    trainer = trainer_of(tmp_path, num_replicas, batch_size=per_replica_batch)
    it = fixed_batches(trainer.strategy, images, labels, images.shape[0])
    return trainer, [trainer.step(it) for _ in range(images.shape[0])]


@pytest.mark.parametrize("num_replicas", [2, 4])
def test_n_replicas_update_equals_one_replica_on_the_global_batch(num_replicas, tmp_path):
    """The proof that gradient summing, loss scaling and weight decay are right."""
    images, labels = random_batches(2, num_replicas * BATCH)
    one, one_losses = run_steps(1, num_replicas * BATCH, images, labels, tmp_path / "one")
    many, many_losses = run_steps(num_replicas, BATCH, images, labels, tmp_path / "many")
    assert many.global_batch == one.global_batch == num_replicas * BATCH
    for a, b in zip(one_losses, many_losses):
        for name in ("total_loss", "cross_entropy"):
            np.testing.assert_allclose(float(a[name]), float(b[name]), rtol=1e-5)
    initial = values(Model(seed=0).parameters())
    for v1, vn, v0 in zip(values(one.variables), values(many.variables), initial):
        assert not np.allclose(v1, v0), "the step must change every variable"
        np.testing.assert_allclose(vn, v1, rtol=1e-4, atol=1e-6)
    for a1, an in zip(values(one.state.averages.parameters()),
                      values(many.state.averages.parameters())):
        np.testing.assert_allclose(an, a1, rtol=1e-4, atol=1e-6)
    assert one.state.step.numpy() == many.state.step.numpy() == 2
    # The learning rate counts examples, whatever the replicas.
    assert one.state.examples_seen.numpy() == many.state.examples_seen.numpy() == 2 * (
        num_replicas * BATCH)


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
def test_learning_rate_decays_every_350_epochs_of_examples_whatever_the_replicas(global_batch):
    # 350 epochs of 50,000 examples: 17,500,000, after step 136,718 of 128 examples.
    lr = lambda step: float(steps.learning_rate(  # noqa: E731
        step * global_batch, 50_000, TrainConfig(train_dir="")))
    last_before = (350 * 50_000 - 1) // global_batch
    assert lr(0) == lr(last_before) == pytest.approx(0.1)
    assert lr(last_before + 1) == pytest.approx(0.01)
    assert lr(2 * 350 * 50_000 // global_batch + 1) == pytest.approx(0.001)
    # The flags': x0.5 every 0.3 epochs of 1,000 examples, from 0.05.
    config = TrainConfig(train_dir="", learning_rate=0.05, learning_rate_decay_factor=0.5,
                         num_epochs_per_decay=0.3)
    assert [float(steps.learning_rate(examples, 1000, config)) for examples in (
        299, 300, 599, 600, 900)] == pytest.approx([0.05, 0.025, 0.025, 0.0125, 0.00625])


@pytest.mark.parametrize("decay", [0.9999, 0.2])  # 0.2: below the formula from step 2
def test_moving_averages_follow_the_formula(tmp_path, decay):
    k = 4
    images, labels = random_batches(k, BATCH)
    trainer = trainer_of(tmp_path, moving_average_decay=decay)
    expected = values(trainer.variables)  # averages start at the initial weights
    it = fixed_batches(trainer.strategy, images, labels, k)
    for step in range(1, k + 1):
        trainer.step(it)
        rate = min(decay, (1 + step) / (10 + step))
        expected = [rate * a + (1 - rate) * v
                    for a, v in zip(expected, values(trainer.variables))]
    for got, want in zip(values(trainer.state.averages.parameters()), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert float(steps.moving_average_decay(10**6, decay)) == pytest.approx(decay)


def test_xla_float16_and_bfloat16_steps_match_the_float32_step(tmp_path):
    images, labels = random_batches(1, BATCH)
    results, compute = {}, {}
    for name, overrides in {"f32": {}, "xla": {"xla": True}, "f16": {"use_fp16": True},
                            "bf16": {"use_bf16": True}}.items():
        trainer = trainer_of(tmp_path / name, **overrides)
        loss = trainer.step(fixed_batches(trainer.strategy, images, labels, 1))
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
    # A low precision's update differs from float32's by a fraction; a wrong gradient's by 100%.
    for name, step_rel in (("f16", 0.1), ("bf16", 0.25)):
        assert results[name][0] == pytest.approx(f32_loss, rel=1e-3), name
        for got, want, start in zip(results[name][1], f32_vars, initial):
            step_low, step32 = got - start, want - start
            assert np.linalg.norm(step_low - step32) <= step_rel * np.linalg.norm(step32), name


def test_fp16_skips_a_step_with_non_finite_gradients_and_diverges_once_the_scale_cannot_fall(
        tmp_path):
    images, labels = random_batches(7, BATCH)
    # A NaN pixel in step 2: the loss stays finite (ReLU) but conv1's gradient is NaN.
    images[1, 0, 0, 0, 0] = np.nan
    trainer = trainer_of(tmp_path, use_fp16=True, loss_scale_growth_steps=2)
    scale, state = trainer.loss_scale, trainer.state
    it = fixed_batches(trainer.strategy, images, labels, 7)
    assert np.isfinite(float(trainer.step(it)["total_loss"]))
    after_one = values(trainer.variables) + values(state.averages.parameters())
    assert trainer.run_steps(it, 1)[1] == 0  # skipped, not diverged
    for got, want in zip(values(trainer.variables) + values(state.averages.parameters()),
                         after_one):  # no weight or average moved
        np.testing.assert_array_equal(got, want)
    assert (state.step.numpy(), state.examples_seen.numpy()) == (2, BATCH)
    assert (float(scale.scale.numpy()), int(scale.skipped.numpy())) == (2.0 ** 14, 1)
    assert all(np.isfinite(v.numpy()) for v in state.loss_averages.values())
    trainer.run_steps(it, 2)  # two finite steps in a row: doubled
    assert float(scale.scale.numpy()) == 2.0 ** 15
    # NaN logits: steps 5 and 6 halve the scale from 4 to 1, where it diverged; the loop
    # runs on to its end (step 7), which reads it.
    # Its summary step's histograms, of NaN weights, leave the report to the loop's end.
    trainer.variables[-1].assign(tf.fill(trainer.variables[-1].shape, float("nan")))
    scale.scale.assign(4.0)
    with tf.summary.create_file_writer(str(tmp_path / "events")).as_default():
        figures, diverged = trainer.run_steps(it, 3, with_summaries=True)
    assert np.isnan(figures["total_loss"]).all() and diverged == 6
    assert list(figures["loss_scale"]) == [2.0, 1.0, 1.0]
    assert list(figures["skipped_steps"]) == [2, 3, 4]
    assert (state.step.numpy(), state.examples_seen.numpy()) == (7, 3 * BATCH)


def graph_inputs_read(tensor):
    """The names of the graph inputs that ``tensor`` is computed from, through ops without
    state only (asserted): no variable, no iterator, nothing a step computed."""
    found, seen, todo = set(), set(), [tensor.op]
    while todo:
        op = todo.pop()
        if op.name not in seen:
            seen.add(op.name)
            assert not op.op_def.is_stateful, f"{tensor.name} depends on {op.name}"
            if op.type == "Placeholder":
                found.add(op.outputs[0].name)
            todo += [t.op for t in op.inputs]
    return found


@pytest.mark.parametrize("use_fp16, replicas", [(False, 1), (True, 2)])
def test_whether_the_next_step_runs_depends_on_the_step_count_only(tmp_path, use_fp16,
                                                                   replicas):
    """No host round trip inside a loop: its While's condition (and the summary step's If)
    reads the loop's counter and the call's step count, never a value a step computed
    (such as --use_fp16's loss scale after the all-reduce)."""
    trainer = trainer_of(tmp_path, replicas, use_fp16=use_fp16)
    iterator = fixed_batches(trainer.strategy, *random_batches(1, replicas * BATCH), 1)
    for with_summaries in (False, True):
        graph = trainer._fns[with_summaries, False].get_concrete_function(
            iterator, tf.TensorSpec([], tf.int32)).graph
        ops = [op for op in graph.get_operations() if op.type in ("While", "If")]
        assert sorted(op.type for op in ops) == (["If", "While"] if with_summaries else
                                                 ["While"])
        for op in ops:
            if op.type == "If":
                assert graph_inputs_read(op.inputs[0]) == {"num_steps:0"}
                continue
            # The loop variables the condition reads, and those the body makes them from:
            cond, body = op._cond_graph, op._body_graph
            names = [t.name for t in body.inputs]
            read = {i for i, t in enumerate(cond.inputs)
                    if t.name in graph_inputs_read(cond.outputs[0])}
            todo = list(read)
            while todo:
                for name in graph_inputs_read(body.outputs[todo.pop()]):
                    if names.index(name) not in read:
                        read.add(names.index(name))
                        todo.append(names.index(name))
            # ... all start from the count and constants.
            assert read and all(graph_inputs_read(op.inputs[i]) <= {"num_steps:0"}
                                for i in read)


@pytest.mark.parametrize("name, value, bound", [
    ("batch_size", 0, "at least 1"), ("max_steps", 0, "at least 1"),
    ("checkpoint_steps", 0, "at least 1"), ("seed", -1, "at least 0"),
    ("num_epochs_per_decay", 0, "above 0"), ("max_epochs", -1, "above 0")])
def test_config_rejects_bad_values(tmp_path, name, value, bound):
    with pytest.raises(ValueError, match=f"^{name} must be {bound}, got {value}$"):
        trainer_of(tmp_path, **{name: value})


def test_a_step_alone_and_a_call_of_no_steps_leave_the_loops_run_bit_for_bit(tmp_path):
    """The profile window's steps (``alone``) against a loop's after ``prepare``'s call."""
    images, labels = random_batches(3, 2 * BATCH)
    results = []
    for alone in (False, True):
        trainer = trainer_of(tmp_path / str(alone), 2)
        iterator = fixed_batches(trainer.strategy, images, labels, 3)
        events = str(tmp_path / f"events{alone}")
        with tf.summary.create_file_writer(events).as_default():
            if not alone:
                figures, diverged = trainer.run_steps(iterator, 0, with_summaries=True)
                assert (figures["total_loss"].shape, diverged) == ((0,), 0)
                assert int(trainer.state.step.numpy()) == 0
            out = [trainer.run_steps(iterator, 1, with_summaries=step == 3, alone=alone)
                   for step in (1, 2, 3)]
        results.append(([figures["total_loss"][0] for figures, _ in out],
                        values(trainer.variables)))
        assert [diverged for _, diverged in out] == [0, 0, 0]
        tags = cli.event_tags(events)
        assert tags["learning_rate"] == tags["conv1/weights/gradients"] == [3]
    assert results[1][0] == results[0][0]
    for alone_value, loop_value in zip(results[1][1], results[0][1]):
        np.testing.assert_array_equal(alone_value, loop_value)
    with pytest.raises(ValueError, match="a step alone is one step, not 2"):
        trainer.run_steps(iterator, 2, alone=True)


def test_each_weight_decay_term_is_summarised_raw_and_smoothed_also_after_a_restore(tmp_path):
    """'local3/weight_loss (raw)' of the weights the step trains with (--weight_decay),
    and its 0.9 moving average 'local3/weight_loss', not checkpointed: a restored trainer
    starts it anew."""
    images, labels = random_batches(3, BATCH)
    trainer = trainer_of(tmp_path, weight_decay=0.01)
    iterator = fixed_batches(trainer.strategy, images, labels, 3)
    events, raw = str(tmp_path / "events"), []
    with tf.summary.create_file_writer(events).as_default():
        for step in (1, 2, 3):
            raw.append(float(tf.nn.l2_loss(trainer.state.model.local3.weights) * 0.01))
            trainer.run_steps(iterator, 1, with_summaries=True)
    assert cli.scalar_values(events, "local3/weight_loss (raw)") == pytest.approx(
        dict(zip((1, 2, 3), raw)), rel=1e-6)
    smoothed = 0.9 * (0.9 * raw[0] + 0.1 * raw[1]) + 0.1 * raw[2]
    assert cli.scalar_values(events, "local3/weight_loss")[3] == pytest.approx(smoothed,
                                                                               rel=1e-6)
    path = trainer.state.checkpoint().write(str(tmp_path / "model.ckpt-3"))
    assert not any("weight_loss" in key for key, _ in tf.train.list_variables(path))
    resumed = trainer_of(tmp_path / "resumed", weight_decay=0.01)
    resumed.state.checkpoint().read(path).assert_existing_objects_matched()
    events = str(tmp_path / "resumed_events")
    with tf.summary.create_file_writer(events).as_default():
        resumed.run_steps(fixed_batches(resumed.strategy, images, labels, 1), 1,
                          with_summaries=True)
    assert cli.scalar_values(events, "local3/weight_loss") == \
        cli.scalar_values(events, "local3/weight_loss (raw)")


def test_each_replica_reads_its_own_shard_and_gpu_replicas_get_it_on_their_device(
        learnable_files, tmp_path, monkeypatch):
    """Per-replica pipelines on CPU replicas, sharing the host's cores, in order where
    --deterministic asks; GPU replicas' options (forced: one pipeline) train too."""
    files, count = learnable_files
    calls = []
    real = data.train_dataset
    monkeypatch.setattr(data, "train_dataset", lambda *args, **kwargs: (
        calls.append(kwargs), real(*args, **kwargs))[1])
    for deterministic in (True, False):
        trainer = trainer_of(tmp_path / str(deterministic), 2, deterministic=deterministic)
        images, labels = next(iter(trainer.dataset(files)))
    assert [(c["input_context"].input_pipeline_id, c["input_context"].num_input_pipelines,
             c["local_pipelines"], c["deterministic"]) for c in calls] == [
        (0, 2, 2, True), (1, 2, 2, True), (0, 2, 2, False), (1, 2, 2, False)]
    local = trainer.strategy.experimental_local_results(images)
    assert [x.shape for x in local] == [(BATCH, 24, 24, 3)] * 2
    assert not np.array_equal(local[0].numpy(), local[1].numpy())

    # A strategy of its own: TensorFlow keeps a PER_REPLICA call's pipelines for later calls.
    trainer = trainer_of(tmp_path / "gpu", 2)
    trainer.input_options = devices.input_options(trainer.strategy, device_type="GPU")
    assert trainer.input_options.experimental_fetch_to_device
    assert trainer.input_options.experimental_replication_mode == \
        tf.distribute.InputReplicationMode.PER_WORKER
    iterator = iter(trainer.dataset(files))
    assert [(c["input_context"].num_input_pipelines, c["local_pipelines"])
            for c in calls[4:]] == [(1, 1)]
    images, _ = next(iterator)
    assert [v.device.endswith(f"CPU:{i}") for i, v in
            enumerate(trainer.strategy.experimental_local_results(images))] == [True, True]
    figures, diverged = trainer.run_steps(iterator, 5)
    assert diverged == 0 and np.isfinite(figures["total_loss"]).all()
    assert int(trainer.state.step.numpy()) == 5
