"""The training loop of --steps_per_loop: several steps per call into TensorFlow,
loops that end where the host has work, the same run whatever their length."""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf

import cli
from cifar10.core.config import TrainConfig
from cifar10.distribute import devices
from cifar10.training import controller
from cifar10.training.loops import loop_end
from cifar10.training.engine import Trainer
from cifar10.training.run import TrainData
from cifar10.training.step import ReplicatedStep
from cifar10.core.errors import Cifar10Error, DivergedError
from conftest import TRAIN_LINE, mirrored
from test_train import fixed_batches, random_batches


def small_config(train_dir, **overrides):
    settings = dict(train_dir=str(train_dir), batch_size=16, max_steps=20, log_frequency=3,
                    checkpoint_steps=5, summary_steps=1000, shuffle_buffer=300)
    return TrainConfig(**{**settings, **overrides})


def loops(config, start=0):
    """The (first, last) steps of each loop of a run from ``start``."""
    done, spans = start, []
    while done < config.max_steps:
        end = loop_end(done, start, config)
        spans.append((done + 1, end))
        done = end
    return spans


def test_loops_end_at_every_step_where_the_host_has_work():
    config = small_config("x", max_steps=30, steps_per_loop=7, log_frequency=10,
                          checkpoint_steps=12, summary_steps=8, profile_steps=(20, 21))
    assert loops(config) == [(1, 1), (2, 8), (9, 10), (11, 12), (13, 16), (17, 19), (20, 20),
                             (21, 21), (22, 24), (25, 30)]
    # A resumed run: its first step is logged; then the same rule.
    assert loops(config, start=13)[:3] == [(14, 14), (15, 16), (17, 19)]
    assert loops(small_config("x", max_steps=5, steps_per_loop=1)) == [(s, s) for s in
                                                                       range(1, 6)]
    # Each step of a profile window is a loop of its own, which the trace marks.
    window = small_config("x", max_steps=30, steps_per_loop=7, log_frequency=10,
                          checkpoint_steps=30, summary_steps=30, profile_steps=(12, 15))
    assert loops(window) == [(1, 1), (2, 8), (9, 10), (11, 11), (12, 12), (13, 13), (14, 14),
                             (15, 15), (16, 20), (21, 27), (28, 30)]
    long = small_config("x", max_steps=1000, steps_per_loop=100, log_frequency=1000,
                        checkpoint_steps=1000, summary_steps=1000)
    assert loops(long) == [(1, 1), (2, 101)] + [(s, s + 99) for s in range(102, 902, 100)] + [
        (902, 1000)]


def losses_of(lines):
    return [(int(m[1]), line.split("loss = ")[1].split(" ")[0])
            for line in lines if (m := TRAIN_LINE.match(line))]


def weights(checkpoint):
    reader = tf.train.load_checkpoint(checkpoint)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith(("model/", "averages/", "loss_averages/", "step/", "examples"))}


@pytest.fixture(scope="module")
def stopped_runs(learnable_files, tmp_path_factory):
    """{steps_per_loop: (train_dir, its progress lines)}: runs of 1 and 7 steps per loop
    on two replicas, where a loop also carries the replicas' gradient sums (one
    replica's run takes the same loops; its steps are the other tests' default),
    stopped at 11 and resumed to 20, with summaries every 4 steps."""
    files, count = learnable_files
    runs = {}
    for steps_per_loop in (1, 7):
        train_dir, out = tmp_path_factory.mktemp(f"loop{steps_per_loop}"), []
        for max_steps in (11, 20):  # stopped at 11, resumed to 20
            controller.train(small_config(train_dir, max_steps=max_steps, summary_steps=4,
                                          steps_per_loop=steps_per_loop),
                             mirrored(2), TrainData(files, count), print_fn=out.append)
        runs[steps_per_loop] = train_dir, out
    return runs


# stopped_runs' tests: on TensorFlow 2.16, loops of several steps on two replicas run
# in test_the_input_of_gpu_replicas... and test_sigterm_mid_loop..., summaries in a
# loop in test_a_step_alone... and test_a_call_of_no_steps..., the resume in
# test_records' deterministic runs.
@pytest.mark.slow
def test_one_step_per_loop_and_seven_train_the_same_run_across_a_stop(stopped_runs):
    lines, finals = {}, {}
    for steps_per_loop, (train_dir, out) in stopped_runs.items():
        lines[steps_per_loop] = losses_of(out)
        finals[steps_per_loop] = weights(str(train_dir / "model.ckpt-20"))
        assert {n for n in os.listdir(train_dir) if n.endswith(".index")} == {
            f"model.ckpt-{s}.index" for s in (5, 10, 11, 15, 20)}
    assert [s for s, _ in lines[1]] == [1, 3, 6, 9, 11, 12, 15, 18, 20]
    assert lines[7] == lines[1]
    assert sorted(finals[7]) == sorted(finals[1])
    for key, value in finals[1].items():
        np.testing.assert_array_equal(finals[7][key], value, err_msg=key)


def test_a_step_alone_is_the_same_step_as_in_a_loop(tmp_path):
    """The profile window's steps (run_steps' ``alone``) against a loop's, on two
    replicas, with summaries on the last step: the same losses, weights bit for bit."""
    images, labels = random_batches(3, 2 * 8)
    results = []
    for alone in (False, True):
        strategy = mirrored(2)
        trainer = Trainer(small_config(tmp_path / str(alone), batch_size=8), strategy, 1000)
        iterator = fixed_batches(strategy, images, labels, 3)
        with tf.summary.create_file_writer(str(tmp_path / f"events{alone}")).as_default():
            out = [trainer.run_steps(iterator, 1, with_summaries=step == 3, alone=alone)
                   for step in (1, 2, 3)]
        results.append(([float(losses["total_loss"]) for losses, _ in out],
                        [v.numpy() for v in trainer.variables]))
        assert [diverged for _, diverged in out] == [0, 0, 0]
        assert cli.event_tags(str(tmp_path / f"events{alone}"))["learning_rate"] == [3]
    assert results[1][0] == results[0][0]
    for alone_value, loop_value in zip(results[1][1], results[0][1]):
        np.testing.assert_array_equal(alone_value, loop_value)
    with pytest.raises(ValueError, match="a step alone is one step, not 2"):
        trainer.run_steps(iterator, 2, alone=True)


def test_a_call_of_no_steps_runs_no_step_and_writes_no_summary(tmp_path):
    """``prepare``'s call of no steps, with summaries on two replicas: the step,
    weights and iterator stay; the next call writes the summaries' usual tags."""
    images, labels = random_batches(2, 2 * 8)
    strategy = mirrored(2)
    trainer = Trainer(small_config(tmp_path, batch_size=8), strategy, 1000)
    iterator = fixed_batches(strategy, images, labels, 2)
    before = [v.numpy() for v in trainer.variables]
    with tf.summary.create_file_writer(str(tmp_path / "events")).as_default():
        losses, diverged = trainer.run_steps(iterator, 0, with_summaries=True)
        assert (float(losses["total_loss"]), diverged) == (0.0, 0)
        assert int(trainer.state.step.numpy()) == 0
        for was, now in zip(before, trainer.variables):
            np.testing.assert_array_equal(was, now.numpy())
        first, _ = trainer.run_steps(iterator, 1, with_summaries=True)
    tags = cli.event_tags(str(tmp_path / "events"))
    assert tags["learning_rate"] == [1]  # the first batch's step; none at step 0
    assert {"cross_entropy", "conv1/activations", "conv1/weights/gradients"} <= set(tags)
    # The step after it took the first batch: its loss is a fresh trainer's first.
    fresh = Trainer(small_config(tmp_path / "fresh", batch_size=8), strategy, 1000)
    expected, _ = fresh.run_steps(fixed_batches(strategy, images, labels, 2), 1)
    assert float(first["total_loss"]) == pytest.approx(float(expected["total_loss"]), rel=1e-5)


@pytest.mark.slow  # see above
def test_summaries_are_written_at_the_same_steps_for_any_loop_length(stopped_runs):
    """Across the stop too (where the stopped run logs its last step and the resumed
    one its first)."""
    tags = {steps_per_loop: cli.event_tags(str(train_dir))
            for steps_per_loop, (train_dir, _) in stopped_runs.items()}
    assert tags[7] == tags[1]
    assert tags[7]["learning_rate"] == [4, 8, 12, 16, 20]
    assert tags[7]["examples_per_sec"] == [1, 3, 6, 9, 11, 12, 15, 18, 20]


@pytest.mark.parametrize("value, replicas, said", [
    ("nan", 2, "Model diverged with loss = NaN at step 13"),
    ("inf", 1, "Model diverged with an infinite loss (inf) at step 13"),
])
def test_a_nan_or_infinite_loss_inside_a_loop_names_its_step_and_the_last_good_checkpoint(
        learnable_files, tmp_path, monkeypatch, value, replicas, said):
    files, count = learnable_files
    original = ReplicatedStep.__call__

    def poisoned(self, iterator, with_summaries=False):  # step 13's loss is NaN or inf
        losses = original(self, iterator, with_summaries)
        bad = tf.equal(self.state.step, 13)
        return {k: tf.where(bad, tf.constant(float(value)), v) for k, v in losses.items()}

    monkeypatch.setattr(ReplicatedStep, "__call__", poisoned)
    config = small_config(tmp_path, max_steps=30, steps_per_loop=7, log_frequency=10)
    assert loops(config)[3] == (11, 15)  # step 13 is inside a loop
    lines = []
    with pytest.raises(DivergedError) as err:
        controller.train(config, mirrored(replicas), TrainData(files, count),
                         print_fn=lines.append)
    assert str(err.value) == (f"{said}; the last good checkpoint is "
                              f"{tmp_path / 'model.ckpt-10'}")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-10")
    assert [s for s, _ in losses_of(lines)] == [1, 10]


def test_weights_that_are_not_finite_after_a_finite_loss_are_never_saved(
        learnable_files, tmp_path, monkeypatch):
    files, count = learnable_files
    original = ReplicatedStep.__call__

    def poisoned(self, iterator, with_summaries=False):  # NaN biases after step 15's update
        losses = original(self, iterator, with_summaries)
        biases = self.variables[1]
        biases.assign(tf.where(tf.equal(self.state.step, 15), tf.fill(biases.shape, np.nan),
                               biases))
        return losses

    monkeypatch.setattr(ReplicatedStep, "__call__", poisoned)
    config = small_config(tmp_path, max_steps=30, steps_per_loop=7, log_frequency=10)
    with pytest.raises(DivergedError) as err:  # at the loop end of step 15, its save
        controller.train(config, mirrored(1), TrainData(files, count),
                         print_fn=lambda line: None)
    assert str(err.value) == (f"Model diverged: weights are not finite (NaN or infinite) at "
                              f"step 15; the last good checkpoint is "
                              f"{tmp_path / 'model.ckpt-10'}")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-10")


def test_the_input_of_gpu_replicas_is_fetched_to_the_device_and_trains(learnable_files,
                                                                        tmp_path):
    """What only GPU replicas take, forced on two CPU replicas."""
    files, count = learnable_files
    strategy = mirrored(2)
    options = devices.input_options(strategy, device_type="GPU")
    assert options.experimental_fetch_to_device
    assert options.experimental_replication_mode == tf.distribute.InputReplicationMode.PER_WORKER
    cpu = devices.input_options(strategy)
    assert not cpu.experimental_fetch_to_device
    assert cpu.experimental_replication_mode == tf.distribute.InputReplicationMode.PER_REPLICA

    trainer = Trainer(small_config(tmp_path), strategy, count)
    trainer.input_options = options
    iterator = iter(trainer.dataset(files))
    images, labels = next(iterator)
    assert [v.device.endswith(f"CPU:{i}") for i, v in
            enumerate(strategy.experimental_local_results(images))] == [True, True]
    assert [v.shape for v in strategy.experimental_local_results(images)] == [
        (16, 24, 24, 3)] * 2
    losses, diverged = trainer.run_steps(iterator, 5)
    assert diverged == 0 and np.isfinite(float(losses["total_loss"]))
    assert int(trainer.state.step.numpy()) == 5


def test_sigterm_mid_loop_stops_at_the_loop_end_with_a_checkpoint(tmp_path):
    process = cli.start("cifar10-train", f"--data_dir={tmp_path / 'data'}",
                        f"--train_dir={tmp_path / 'train'}", "--synthetic_data",
                        "--synthetic_records=50", "--batch_size=4", "--steps_per_loop=40",
                        "--log_frequency=100000", "--checkpoint_steps=100000")
    # Step 1 is a loop of its own; the next loop is steps 2 to 41.
    out, err = cli.sigterm_when(process, TRAIN_LINE.match, delay=0.3)
    assert process.returncode == 0, err
    (stopped,) = [line for line in out.splitlines() if line.startswith("Stopped at step ")]
    step = int(stopped.split("Stopped at step ")[1].split(";")[0])
    assert (step - 1) % 40 == 0 and step > 1, stopped
    assert os.path.exists(tmp_path / "train" / f"model.ckpt-{step}.index")


def test_a_fresh_start_stopped_tells_how_to_resume_without_deleting_its_work(
        learnable_files, tmp_path):
    """The same command again would delete what the stop saved: the advice leaves
    --fresh_start out."""
    files, count = learnable_files
    stop = threading.Event()
    result = controller.train(small_config(tmp_path, max_steps=100, fresh_start=True),
                              mirrored(1), TrainData(files, count), stop_event=stop,
                              print_fn=lambda line: stop.set() if "step 1," in line else None)
    assert result.summary()[0] == (
        f"Stopped at step 1; saved {tmp_path / 'model.ckpt-1'}. Run the same command "
        f"without --fresh_start to resume.")


def test_a_data_file_gone_when_the_input_starts_is_one_line_naming_it(learnable_files, tmp_path):
    """The input pipeline's first batch reads every file (its cache fills): a file removed
    after the data check fails there, before the first step, as a step's error would."""
    files, count = learnable_files
    gone = str(tmp_path / "data" / "data_batch_9.bin")
    with pytest.raises(Cifar10Error) as err:
        controller.train(small_config(tmp_path / "train"), mirrored(1),
                         TrainData([*files, gone], count), print_fn=lambda line: None)
    message = str(err.value)
    assert message.startswith(f"training stopped at step 0: {gone}; No such file or directory")
    assert message.endswith("; no checkpoint was written yet") and "\n" not in message


def test_each_weight_decay_term_is_summarised_raw_and_smoothed_also_after_a_restore(tmp_path):
    """As the original's ``_add_loss_summaries``: 'local3/weight_loss (raw)', wd *
    l2_loss of the weights the step trains with, and 'local3/weight_loss', its 0.9
    moving average.  Those averages are not in the checkpoint (one written before
    them restores): a trainer that restored one starts them at its first step."""
    images, labels = random_batches(3, 2 * 8)
    strategy = mirrored(2)
    trainer = Trainer(small_config(tmp_path, batch_size=8), strategy, 1000)
    assert not any("weight_loss" in key for key, _ in
                   tf.train.list_variables(trainer.state.checkpoint().write(
                       str(tmp_path / "ckpt" / "model.ckpt-0"))))
    iterator = fixed_batches(strategy, images, labels, 3)
    raw = {}
    with tf.summary.create_file_writer(str(tmp_path / "events")).as_default():
        for step in (1, 2, 3):
            raw[step] = {layer: float(tf.nn.l2_loss(getattr(trainer.state.model, layer).weights)
                                      * 0.004) for layer in ("local3", "local4")}
            trainer.run_steps(iterator, 1, with_summaries=True)
    for layer in ("local3", "local4"):
        written = cli.scalar_values(str(tmp_path / "events"), f"{layer}/weight_loss (raw)")
        assert written == pytest.approx({step: raw[step][layer] for step in (1, 2, 3)},
                                        rel=1e-6)
        smoothed = raw[1][layer]
        for step in (2, 3):
            smoothed = 0.9 * smoothed + 0.1 * raw[step][layer]
        assert cli.scalar_values(str(tmp_path / "events"), f"{layer}/weight_loss")[3] == \
            pytest.approx(smoothed, rel=1e-6)
    # A trainer that restored the first checkpoint: the average starts at its value.
    trainer.state.checkpoint().write(str(tmp_path / "model.ckpt-3"))
    resumed = Trainer(small_config(tmp_path / "resumed", batch_size=8), strategy, 1000)
    resumed.state.checkpoint().read(str(tmp_path / "model.ckpt-3")
                                    ).assert_existing_objects_matched()
    with tf.summary.create_file_writer(str(tmp_path / "resumed_events")).as_default():
        resumed.run_steps(fixed_batches(strategy, images, labels, 1), 1, with_summaries=True)
    assert cli.scalar_values(str(tmp_path / "resumed_events"), "local3/weight_loss") == \
        cli.scalar_values(str(tmp_path / "resumed_events"), "local3/weight_loss (raw)")
