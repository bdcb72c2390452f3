"""cifar10.training.controller.train: learning, progress, resume, a run's end, stop."""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading

import numpy as np
import pytest
import tensorflow as tf

import cli
from cifar10.core.config import TrainConfig
from cifar10.core.errors import Cifar10Error
from cifar10.data import folder as datafolder
from cifar10.data import pipeline as data
from cifar10.runs import checkpoints, layout, records
from cifar10.training import controller, progress
from cifar10.training.engine import Trainer
from cifar10.training.controller import TrainData
from cifar10.training.loops import op_determinism
from cifar10.training.step import TrainState
from conftest import TRAIN_LINE, mirrored


def small_config(train_dir, **overrides):
    # No summaries unless a test asks: their function takes seconds to build.
    settings = dict(train_dir=str(train_dir), batch_size=32, max_steps=20, log_frequency=5,
                    checkpoint_steps=10, summary_steps=1000, shuffle_buffer=500)
    return TrainConfig(**{**settings, **overrides})


def train(files_count, config, strategy=None, **kwargs):
    files, count = files_count
    kwargs.setdefault("print_fn", lambda line: None)
    test_files = datafolder.split_files(os.path.dirname(files[0]), "test")
    return controller.train(config, strategy or mirrored(1),
                            TrainData(files, count, test_files=test_files), **kwargs)


@pytest.fixture(scope="module")
def learned_run(learnable_files, tmp_path_factory):
    """100 steps, 2 replicas of batch 16: (train_dir, lines, reports, result)."""
    train_dir = tmp_path_factory.mktemp("learned_run")
    lines, reports = [], []
    result = train(learnable_files, small_config(train_dir, batch_size=16, max_steps=100,
                                                 log_frequency=10, checkpoint_steps=100),
                   mirrored(2), print_fn=lines.append, on_report=reports.append)
    return train_dir, lines, reports, result


def test_a_run_learns_and_says_where_it_is_at_each_logged_step(learned_run,
                                                                learnable_files):
    train_dir, lines, reports, result = learned_run
    progress_lines = [m for m in map(TRAIN_LINE.match, lines) if m]
    assert [r.step for r in reports] == [int(m[1]) for m in progress_lines] == [
        1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    for report, match in zip(reports, progress_lines):
        epoch = report.step * 32 / 500  # a global batch of 32 on 500 examples
        assert (report.max_steps, report.epoch, report.learning_rate) == (
            100, pytest.approx(epoch), pytest.approx(0.1))
        assert match.groups()[:4] == (str(report.step), "100", f"{report.step:.1f}",
                                      f"{epoch:.2f}")
        assert f"loss = {report.loss:.2f} " in match[0]
        assert report.examples_per_sec > 0 and report.sec_per_batch > 0
    # No time left on the first line (its step is no measure of the pace), nor the last.
    assert [r.step for r in reports if r.seconds_left is None] == [1, 100]
    assert progress_lines[3][0].endswith(f"[step 30/100, 30.0%, epoch 1.92, "
                                         f"{progress_lines[3][5]} left]")
    losses = [r.loss for r in reports]
    # Batches of 16 make the loss jump: the median of the last five reports is compared.
    assert losses[0] > 4.0 and np.median(losses[-5:]) < losses[0] - 1.0
    # The cross-entropy itself falls: on the 100 test images, below ln 10 = 2.3.
    model, step = checkpoints.load_model(layout.latest(str(train_dir)).path, "raw")
    test_files = datafolder.split_files(os.path.dirname(learnable_files[0][0]), "test")
    [(images, labels)] = data.eval_dataset(test_files, 100).as_numpy_iterator()
    xent = float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels, model(images))))
    assert step == 100 and xent < 1.5
    # Each start records every trained setting, which a resumed run's notices name.
    assert set(records.TRAINED_SETTINGS) <= set(records.last_settings(str(train_dir)))
    assert (result.start_step, result.step, result.complete) == (0, 100, True)
    assert result.last_checkpoint == str(train_dir / "model.ckpt-100")
    assert (result.start_epoch, result.epoch, result.loss) == (0.0, 6.4, losses[-1])
    assert 0 < 100 * 32 / result.examples_per_sec < result.seconds  # the steps' clock
    assert result.summary()[1].startswith("This run: 100 steps (epoch 0.00 to 6.40) in ")


def test_bfloat16_logits_agree_with_float32_on_a_learned_run(learned_run, learnable_files):
    # The top class changes only where the best two logits are that close.
    checkpoint = layout.latest(str(learned_run[0])).path
    folder = os.path.dirname(learnable_files[0][0])
    files = datafolder.split_files(folder, "test") + datafolder.split_files(folder, "train")
    images = np.concatenate([x for x, _ in data.eval_dataset(files, 128).as_numpy_iterator()])
    f32, bf16 = (checkpoints.load_model(checkpoint, "averages", dtype)[0](images).numpy()
                 for dtype in (tf.float32, tf.bfloat16))
    assert bf16.dtype == np.float32 and len(f32) == 600
    spread = f32.max(axis=1) - f32.min(axis=1)
    assert np.all(np.abs(bf16 - f32).max(axis=1) <= 0.03 * spread)  # 0.011 measured
    assert np.mean(f32.argmax(axis=1) == bf16.argmax(axis=1)) >= 0.99


def test_no_rate_counts_the_building_of_a_step_function(learnable_files, tmp_path,
                                                        monkeypatch):
    """A step function's build (1000 s of the clock here) is in no line's rate."""
    clock = itertools.count()  # each reading of the clock: one second later
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0] + next(clock))
    prepare, run_steps = Trainer.prepare, Trainer.run_steps
    calls = []  # (steps, with summaries, traced before) of each call

    def slow_prepare(self, iterator, with_summaries=False, alone=False):
        prepare(self, iterator, with_summaries, alone)
        now[0] += 1000

    def counting_run_steps(self, iterator, num_steps, with_summaries=False, alone=False):
        traced = self._fns[with_summaries, alone].experimental_get_tracing_count()
        calls.append((num_steps, with_summaries, traced))
        return run_steps(self, iterator, num_steps, with_summaries, alone)

    monkeypatch.setattr(Trainer, "prepare", slow_prepare)
    monkeypatch.setattr(Trainer, "run_steps", counting_run_steps)
    reports = []
    train(learnable_files, small_config(tmp_path, batch_size=16, max_steps=4, log_frequency=1,
                                        summary_steps=4), on_report=reports.append)
    assert calls == [(0, False, 0), (1, False, 1), (1, False, 1), (0, True, 0), (2, True, 1)]
    assert [r.step for r in reports] == [1, 2, 3, 4]
    assert all(r.sec_per_batch < 100 for r in reports), reports


def test_one_device_strategy_trains_with_its_default_input(learnable_files, tmp_path):
    result = train(learnable_files, small_config(tmp_path, max_steps=2),
                   tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert (result.step, result.complete) == (2, True)
    assert result.last_checkpoint == str(tmp_path / "model.ckpt-2")


def test_a_resumed_run_counts_on_from_the_saved_step_in_either_precision(learnable_files,
                                                                         tmp_path, monkeypatch):
    """bfloat16 and float32 runs resume each other's float32 checkpoints, counting on."""
    done, compute = [], []
    state_init = TrainState.__init__
    monkeypatch.setattr(TrainState, "__init__", lambda self, seed, dtype, classes, **kw: (
        compute.append(dtype), state_init(self, seed, dtype, classes, **kw))[1])
    for use_bf16, max_steps in ((True, 4), (False, 8), (True, 12)):
        lines = []
        result = train(learnable_files, small_config(
            tmp_path, batch_size=16, max_steps=max_steps, log_frequency=1, checkpoint_steps=4,
            use_bf16=use_bf16), print_fn=lines.append)
        if done:
            assert lines[0] == f"Resuming from {done[-1].last_checkpoint} at step {max_steps - 4}."
        progress = [m for m in map(TRAIN_LINE.match, lines) if m]
        assert [int(m[1]) for m in progress] == list(range(max_steps - 3, max_steps + 1))
        assert all(np.isfinite(float(m[0].split("loss = ")[1].split()[0])) for m in progress)
        # 16 examples a step, 500 an epoch.
        assert (result.start_epoch, result.epoch) == ((max_steps - 4) * 16 / 500,
                                                      max_steps * 16 / 500)
        dtypes = tf.train.load_checkpoint(result.last_checkpoint).get_variable_to_dtype_map()
        weights = {k: v for k, v in dtypes.items() if k.startswith(("model/", "averages/"))}
        assert len(weights) == 20 and set(weights.values()) == {tf.float32}
        done.append(result)
    assert compute == [tf.bfloat16, tf.float32, tf.bfloat16]


def test_the_hyperparameters_steer_the_run_and_max_epochs_ends_it_also_on_resume(
        learnable_files, tmp_path):
    """x0.5 every 0.1 epochs (50 of 500 examples) from 0.05; no weight decay: the total
    loss is the cross entropy.  --max_epochs=0.5 ends at step 16 (256 examples), 0.8
    resumed with batch 8 at step 34 (256 + 18 x 8 = 400), then is complete."""
    config = small_config(tmp_path, batch_size=16, max_steps=100, log_frequency=1,
                          summary_steps=8, learning_rate=0.05, learning_rate_decay_factor=0.5,
                          num_epochs_per_decay=0.1, weight_decay=0.0, max_epochs=0.5)
    lines, reports = [], []
    result = train(learnable_files, config, print_fn=lines.append, on_report=reports.append)
    assert (result.step, result.complete, checkpoints.completed_step(str(tmp_path))) == (
        16, True, 16)
    rates = [0.05 * 0.5 ** ((step - 1) * 16 // 50) for step in range(1, 17)]
    assert [r.learning_rate for r in reports] == pytest.approx(rates)
    assert cli.scalar_values(str(tmp_path), "learning_rate") == pytest.approx(
        {8: rates[7], 16: rates[15]})
    assert cli.scalar_values(str(tmp_path), "total_loss (raw)") == cli.scalar_values(
        str(tmp_path), "cross_entropy (raw)")
    assert ", global batch 16, to step 16 (--max_epochs=0.5); " in lines[0]
    assert lines[-1].endswith(" [step 16/16, 100.0%, epoch 0.51]")
    lines = []
    config = dataclasses.replace(config, batch_size=8, max_epochs=0.8)
    result = train(learnable_files, config, print_fn=lines.append)
    assert (result.step, result.complete, result.epoch) == (34, True, 0.8)
    assert lines[-1].endswith(" [step 34/34, 100.0%, epoch 0.80]")
    lines = []
    train(learnable_files, config, print_fn=lines.append)
    assert lines == [f"Training in {tmp_path} is already complete at step 34 (max_epochs=0.8); "
                     f"nothing to do. Raise --max_epochs to train further or pass "
                     f"--fresh_start to start over."]


def test_a_complete_run_trains_no_further_and_one_past_max_steps_is_refused(learnable_files,
                                                                            tmp_path):
    """A run stopped at step 5 of many, resumed with --max_steps=3, is not marked complete."""
    train(learnable_files, small_config(tmp_path, max_steps=5))
    assert checkpoints.completed_step(str(tmp_path)) == 5
    lines = []
    again = train(learnable_files, small_config(tmp_path, max_steps=5), print_fn=lines.append)
    assert (again.step, again.steps_run, again.complete) == (5, 0, True)
    assert lines == [f"Training in {tmp_path} is already complete at step 5 (max_steps=5); "
                     f"nothing to do. Raise --max_steps to train further or pass "
                     f"--fresh_start to start over."]
    os.remove(tmp_path / "training_complete.json")  # as a run stopped at step 5 leaves it
    with pytest.raises(Cifar10Error) as err:
        train(learnable_files, small_config(tmp_path, max_steps=3), print_fn=pytest.fail)
    assert str(err.value) == (
        f"--max_steps=3 is below the run's step 5 ({tmp_path / 'model.ckpt-5'}): pass "
        f"a --max_steps above 5 to train it further, or --fresh_start (or another "
        f"--train_dir) for a new run")
    assert checkpoints.completed_step(str(tmp_path)) is None


def test_a_stop_saves_at_the_end_of_the_loop_and_says_how_to_resume(learnable_files,
                                                                     tmp_path, monkeypatch):
    """A stop asked for in the loop of steps 3 to 9 comes at its end; no --fresh_start."""
    stop, run_steps = threading.Event(), Trainer.run_steps
    monkeypatch.setattr(Trainer, "run_steps", lambda self, it, n, *args, **kwargs: (
        n == 7 and stop.set(), run_steps(self, it, n, *args, **kwargs))[1])
    result = train(learnable_files, small_config(
        tmp_path, max_steps=100, steps_per_loop=7, log_frequency=100, checkpoint_steps=100,
        fresh_start=True), stop_event=stop)
    assert (result.step, result.complete) == (9, False)
    assert result.summary()[0] == (
        f"Stopped at step 9; saved {tmp_path / 'model.ckpt-9'}. Run the same command "
        f"without --fresh_start to resume.")
    assert checkpoints.completed_step(str(tmp_path)) is None


def test_a_data_file_gone_when_the_input_starts_is_one_line_naming_it(learnable_files,
                                                                     tmp_path):
    """A file removed after the data check fails at the first batch, as a step would."""
    files, count = learnable_files
    gone = str(tmp_path / "data" / "data_batch_9.bin")
    with pytest.raises(Cifar10Error) as err:
        train(([*files, gone], count), small_config(tmp_path / "train"))
    assert str(err.value).startswith(f"training stopped at step 0: {gone}; No such file or "
                                     f"directory")
    assert str(err.value).endswith("; no checkpoint was written yet")


def test_op_determinism_is_on_for_a_deterministic_run_only_and_as_found_after_it(
        learnable_files, tmp_path):
    """A --deterministic run turns the process's op determinism on for its steps and
    leaves it as it found it, also when it fails."""
    from tensorflow.python.framework import config as tf_config  # its reading is not public
    (tmp_path / "a_file").write_text("not a directory")
    during, after = [], []
    try:
        for name, deterministic in (("on", True), ("off", False), ("a_file/run", True)):
            config = small_config(tmp_path / name, max_steps=2, log_frequency=1,
                                  deterministic=deterministic)
            try:
                train(learnable_files, config, on_report=lambda report: during.append(
                    tf_config.is_op_determinism_enabled()))
            except Cifar10Error as e:
                assert name == "a_file/run" and "cannot create --train_dir" in str(e)
            after.append(tf_config.is_op_determinism_enabled())
        assert (during, after) == ([True, True, False, False], [False, False, False])
        tf.config.experimental.enable_op_determinism()  # found on: left on
        with op_determinism(True):
            pass
        assert tf_config.is_op_determinism_enabled()
    finally:
        tf_config.disable_op_determinism()  # the rest of the session runs as usual
