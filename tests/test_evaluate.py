"""Tests of cifar10.evaluation.evaluate: restoring weights, exact counting, results, polling.

One short training run (6 steps, checkpoints at 3 and 6) is shared by the whole
module; tests that change its directory work on a copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from cli import scalar_values
from conftest import EVAL_LINE, mirrored

from cifar10.runs import checkpoints
from cifar10.data import pipeline as data
from cifar10.evaluation import evaluate
from cifar10.data import synthetic
from cifar10.core.config import TrainConfig
from cifar10.training import controller
from cifar10.training.run import TrainData
from cifar10.training.state import TrainState
from cifar10.core.errors import Cifar10Error
from cifar10.model import Model

RECORDS = 50  # records per generated file: the test split holds 50 examples
RESULT_KEYS = {"checkpoint", "step", "precision", "correct", "examples", "weights",
               "eval_data", "wall_time", "seconds", "checkpoint_mtime_ns", "confusion_matrix",
               "per_class", "synthetic"}
DATA_SUFFIX = ".data-00000-of-00001"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained run: train_dir with model.ckpt-3 and model.ckpt-6, and the test files."""
    root = tmp_path_factory.mktemp("evaluate")
    batches_dir = synthetic.write_dataset(str(root / "data" / "synthetic"),
                                          records_per_file=RECORDS)
    files = data.split_files(batches_dir, "train")
    count = data.validate_files(files)
    train_dir = str(root / "train")
    config = TrainConfig(train_dir=train_dir, batch_size=16, max_steps=6,
                         checkpoint_steps=3, summary_steps=1000, log_frequency=1000,
                         shuffle_buffer=300)
    strategy = mirrored()
    result = controller.train(config, strategy, TrainData(files, count),
                              print_fn=lambda line: None)
    assert result.complete and checkpoints.completed_step(train_dir) == 6
    return types.SimpleNamespace(
        train_dir=train_dir, test_files=data.split_files(batches_dir, "test"),
        ckpt3=os.path.join(train_dir, "model.ckpt-3"),
        ckpt6=os.path.join(train_dir, "model.ckpt-6"))


def config_of(run, eval_dir, **overrides):
    settings = {"checkpoint_dir": run.train_dir, "eval_dir": str(eval_dir),
                "eval_files": run.test_files, "num_examples": RECORDS, "batch_size": 16}
    settings.update(overrides)
    return evaluate.EvalConfig(**settings)


def copy_run(run, tmp_path, complete=True):
    """A copy of the trained run's directory (optionally without the COMPLETE marker)."""
    train_dir = str(tmp_path / "train_copy")
    shutil.copytree(run.train_dir, train_dir)
    if not complete:
        os.remove(os.path.join(train_dir, checkpoints.COMPLETE_FILE))
    return train_dir


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def set_checkpoints(train_dir, steps):
    """Leaves exactly the checkpoints of ``steps`` in ``train_dir``, as a trainer saving
    them would; the files of the others wait in ``<train_dir>.aside``."""
    aside = train_dir + ".aside"
    os.makedirs(aside, exist_ok=True)
    for source, dest in ((train_dir, aside), (aside, train_dir)):
        for name in os.listdir(source):
            step = re.match(r"model\.ckpt-(\d+)\.", name)
            if step and (int(step[1]) in steps) == (dest == train_dir):
                os.replace(os.path.join(source, name), os.path.join(dest, name))


def mark_complete(train_dir, step):
    with open(os.path.join(train_dir, checkpoints.COMPLETE_FILE), "w") as f:
        json.dump({"step": step, "time": time.time()}, f)


def results_lines(eval_dir):
    path = os.path.join(str(eval_dir), evaluate.RESULTS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def direct_counts(checkpoint, files, weights, num_examples=None):
    """(correct, examples) of ``weights`` of ``checkpoint``, computed without evaluate."""
    model = Model()
    key = "averages" if weights == "averages" else "model"
    tf.train.Checkpoint(**{key: model}).read(checkpoint).expect_partial()
    images, labels = [], []
    for image, label in data.read_records(files):
        if num_examples is not None and len(labels) == num_examples:
            break
        images.append(data.eval_batch(image[None])[0].numpy())
        labels.append(int(label))
    logits = model(np.stack(images)).numpy()
    correct = int(np.sum(np.argmax(logits, axis=1) == np.array(labels)))
    return correct, len(labels)


class FakeSleep:
    """Records the waits asked for and advances ``clock`` by them, without waiting;
    runs ``actions[i]`` at the i-th call."""

    def __init__(self, *actions, limit=20):
        self.calls = []
        self.actions = actions
        self.limit = limit
        self.now = 1000.0

    def clock(self):
        return self.now

    def __call__(self, seconds):
        self.calls.append(seconds)
        self.now += seconds
        if len(self.calls) <= len(self.actions):
            self.actions[len(self.calls) - 1]()
        if len(self.calls) > self.limit:
            raise AssertionError(f"the poller did not stop: sleeps {self.calls}")


# --- evaluate_checkpoint -----------------------------------------------------


@pytest.mark.parametrize("weights", ["averages", "raw"])
def test_precision_equals_a_direct_computation(run, tmp_path, weights):
    result = evaluate.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path, weights=weights))
    correct, examples = direct_counts(run.ckpt6, run.test_files, weights)
    assert (result.correct, result.examples) == (correct, examples) == (correct, RECORDS)
    assert result.precision == correct / RECORDS
    assert (result.step, result.checkpoint, result.weights) == (6, run.ckpt6, weights)


@pytest.mark.parametrize("num_examples, batch_size, expected", [
    (37, 10, 37),  # last partial batch of 7 counted, nothing twice
    (RECORDS, 16, RECORDS),  # 3 full batches and one of 2
    (1000, 16, RECORDS),  # more than the files hold: every example once, no repeat
])
def test_exactly_num_examples_are_counted(run, tmp_path, num_examples, batch_size, expected):
    config = config_of(run, tmp_path, num_examples=num_examples, batch_size=batch_size)
    result = evaluate.evaluate_checkpoint(run.ckpt6, config)
    correct, examples = direct_counts(run.ckpt6, run.test_files, "averages", num_examples)
    assert result.examples == examples == expected
    assert result.correct == correct
    assert result.precision == correct / expected


# --- results.jsonl -----------------------------------------------------------


def result_of(step, **overrides):
    fields = {"checkpoint": f"/runs/train/model.ckpt-{step}", "step": step,
              "checkpoint_mtime_ns": 1_000 + step,
              "precision": 0.5, "correct": 5, "examples": 10, "weights": "averages",
              "eval_data": "test", "wall_time": time.time(), "seconds": 0.25}
    fields.update(overrides)
    return evaluate.EvalResult(**fields)


def test_record_appends_a_json_line_and_a_scalar_at_the_step(run, tmp_path):
    result = evaluate.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path))
    writer = tf.summary.create_file_writer(str(tmp_path))
    evaluate.record(result, str(tmp_path), writer)
    evaluate.record(result_of(3, precision=0.25), str(tmp_path), writer)
    writer.close()
    lines = results_lines(tmp_path)
    assert [set(line) for line in lines] == [RESULT_KEYS, RESULT_KEYS]
    assert lines[0] == result.as_record()
    assert (lines[0]["step"], lines[0]["examples"], lines[0]["eval_data"]) == (6, RECORDS, "test")
    assert scalar_values(str(tmp_path), evaluate.PRECISION_TAG) == {
        6: pytest.approx(result.precision), 3: 0.25}


def test_scored_checkpoints_ignores_a_truncated_last_line(tmp_path):
    assert evaluate.scored_checkpoints(str(tmp_path)) == set()  # no results.jsonl yet
    whole = json.dumps(dataclasses.asdict(result_of(3)))
    cut = json.dumps(dataclasses.asdict(result_of(6)))[:40]
    (tmp_path / evaluate.RESULTS_FILE).write_text(whole + "\n" + cut)
    assert evaluate.scored_checkpoints(str(tmp_path)) == {"model.ckpt-3|1003|averages|test"}


def test_scored_checkpoints_skips_lines_that_are_json_but_not_a_result(tmp_path):
    whole = json.dumps(dataclasses.asdict(result_of(3)))
    others = ["5", "[1, 2]", '"text"', "null", '{"checkpoint": 1}']
    (tmp_path / evaluate.RESULTS_FILE).write_text("\n".join([*others, whole]) + "\n")
    assert evaluate.scored_checkpoints(str(tmp_path)) == {"model.ckpt-3|1003|averages|test"}


def test_run_once_finds_the_checkpoints_whatever_the_state_file_says(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    for text in ("", "garbage {", 'model_checkpoint_path: "model.ckpt-99"\n', None):
        state = os.path.join(train_dir, "checkpoint")
        if text is None:
            os.remove(state)
        else:
            with open(state, "w") as f:
                f.write(text)
        [result] = evaluate.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                               run_once=True), print_fn=lambda line: None)
        assert result.checkpoint == os.path.join(train_dir, "model.ckpt-6")


def test_a_result_recorded_after_a_truncated_line_is_remembered(tmp_path):
    cut = json.dumps(dataclasses.asdict(result_of(3)))[:40]
    (tmp_path / evaluate.RESULTS_FILE).write_text(cut)  # a crash while writing step 3
    writer = tf.summary.create_file_writer(str(tmp_path))
    evaluate.record(result_of(6), str(tmp_path), writer)
    writer.close()
    assert evaluate.scored_checkpoints(str(tmp_path)) == {"model.ckpt-6|1006|averages|test"}


# --- run_once ----------------------------------------------------------------


def test_run_once_scores_the_latest_checkpoint_and_writes_the_scalar(run, tmp_path):
    lines = []
    results = evaluate.evaluate(config_of(run, tmp_path, run_once=True, num_examples=37,
                                          batch_size=10), print_fn=lines.append)
    assert len(results) == 1
    result = results[0]
    assert (result.step, result.checkpoint, result.examples) == (6, run.ckpt6, 37)
    # The precision line, then the class table (a header and 10 rows) and the
    # confusion matrix (a title, the column numbers and 10 rows).
    assert len(lines) == 1 + 11 + 12
    assert lines[1:] == evaluate.class_table(result)
    match = EVAL_LINE.match(lines[0])
    assert match, lines[0]
    # Generated data (the folder has cifar10.data.synthetic's marker): the line says so.
    assert match.groups()[1:] == ("6", "model.ckpt-6", "37", "averages")
    assert lines[0].endswith(") on SYNTHETIC data")
    assert result.synthetic
    assert f"precision @ 1 = {result.precision:.3f} " in lines[0]
    assert scalar_values(str(tmp_path), evaluate.PRECISION_TAG) == {
        6: pytest.approx(result.precision)}
    assert results_lines(tmp_path) == [result.as_record()]


def test_a_given_checkpoint_is_scored_once_instead_of_the_latest(run, tmp_path):
    lines = []
    [result] = evaluate.evaluate(config_of(run, tmp_path, checkpoint=run.ckpt3, weights="raw"),
                                 print_fn=lines.append)
    assert (result.step, result.checkpoint, result.weights) == (3, run.ckpt3, "raw")
    assert EVAL_LINE.match(lines[0]).groups()[1:] == ("3", "model.ckpt-3", str(result.examples),
                                                 "raw")
    assert results_lines(tmp_path) == [result.as_record()]
    missing = os.path.join(os.path.dirname(run.ckpt3), "model.ckpt-4")
    with pytest.raises(Cifar10Error, match=f"^cannot evaluate checkpoint {re.escape(missing)}: "):
        evaluate.evaluate(config_of(run, tmp_path / "eval", checkpoint=missing))


def test_run_once_without_a_checkpoint_raises_no_checkpoint_error(run, tmp_path):
    missing = tmp_path / "no_such_run"
    with pytest.raises(evaluate.NoCheckpointError) as err:
        evaluate.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(missing),
                                    run_once=True))
    assert isinstance(err.value, Cifar10Error)
    assert str(err.value).startswith(f"No checkpoint file found in {missing}")
    assert results_lines(tmp_path / "eval") == []


@pytest.mark.parametrize("part", [
    ".index",
    DATA_SUFFIX,
])
def test_run_once_on_a_corrupt_checkpoint_is_an_error_naming_it(run, tmp_path, part):
    train_dir = copy_run(run, tmp_path)
    latest = os.path.join(train_dir, "model.ckpt-6")
    truncate(latest + part)
    with pytest.raises(Cifar10Error, match=f"cannot evaluate checkpoint {re.escape(latest)}"):
        evaluate.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir,
                                    run_once=True))
    assert results_lines(tmp_path / "eval") == []


# --- polling -----------------------------------------------------------------


def completion_line(train_dir):
    return (f"Training in {train_dir} is complete and its final checkpoint is evaluated; "
            f"stopping.")


def test_a_new_run_with_the_same_checkpoint_names_is_scored_again(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    eval_dir = tmp_path / "eval"
    config = config_of(run, eval_dir, checkpoint_dir=train_dir)
    assert [r.step for r in evaluate.evaluate(config, print_fn=lambda line: None,
                                              sleep=FakeSleep())] == [6]
    # A new run (e.g. after --fresh_start) writes model.ckpt-6 again.
    for name in os.listdir(train_dir):
        if name.startswith("model.ckpt-6"):
            path = os.path.join(train_dir, name)
            os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    again = evaluate.evaluate(config, print_fn=lambda line: None, sleep=FakeSleep())
    assert [r.step for r in again] == [6]
    assert len(results_lines(eval_dir)) == 2


def test_poll_scores_the_final_checkpoint_once_and_a_restart_scores_nothing(run, tmp_path):
    eval_dir = tmp_path / "eval"
    lines, sleep = [], FakeSleep()
    results = evaluate.evaluate(config_of(run, eval_dir), print_fn=lines.append, sleep=sleep)
    assert [r.step for r in results] == [6]
    assert EVAL_LINE.match(lines[0])[3] == "model.ckpt-6"
    assert lines[1:] == [completion_line(run.train_dir)]
    assert sleep.calls == []

    # Restarted on the same eval_dir: results.jsonl says ckpt-6 is scored already.
    lines, sleep = [], FakeSleep()
    assert evaluate.evaluate(config_of(run, eval_dir), print_fn=lines.append, sleep=sleep) == []
    assert lines == [completion_line(run.train_dir)]
    assert sleep.calls == []
    assert [r["step"] for r in results_lines(eval_dir)] == [6]
    assert scalar_values(str(eval_dir), evaluate.PRECISION_TAG) == {
        6: pytest.approx(results[0].precision)}

    # The raw weights are another record: scored once too.
    raw = evaluate.evaluate(config_of(run, eval_dir, weights="raw"), print_fn=lines.append,
                            sleep=sleep)
    assert [(r.step, r.weights) for r in raw] == [(6, "raw")]
    assert [r["weights"] for r in results_lines(eval_dir)] == ["averages", "raw"]


def test_poll_stops_after_eval_timeout_without_a_new_checkpoint(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    lines = []
    sleep = FakeSleep()
    results = evaluate.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_timeout=1.0,
                  eval_interval_secs=0.25), print_fn=lines.append, sleep=sleep,
        clock=sleep.clock)
    assert [r.step for r in results] == [6]
    assert lines[-1] == "No new checkpoint in 1 s; stopping."
    assert len(lines) == 2
    assert sleep.calls == [0.25] * 5  # polls until more than 1 s has passed


@pytest.mark.parametrize("part", [
    ".index",
    DATA_SUFFIX,
])
def test_poll_skips_a_corrupt_checkpoint_with_a_warning(run, tmp_path, caplog, part):
    train_dir = copy_run(run, tmp_path, complete=False)
    latest = os.path.join(train_dir, "model.ckpt-6")
    truncate(latest + part)
    lines = []
    sleep = FakeSleep()
    results = evaluate.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_timeout=0.5,
                  eval_interval_secs=0.1), print_fn=lines.append, sleep=sleep,
        clock=sleep.clock)
    assert results == []
    assert results_lines(tmp_path / "eval") == []
    assert lines == ["No new checkpoint in 0.5 s; stopping."]
    skipped = [r.getMessage() for r in caplog.records if "Skipping checkpoint" in r.getMessage()]
    assert len(skipped) == 1  # tried once, not again at every poll
    assert skipped[0].startswith(f"Skipping checkpoint {latest}: ")


def test_poll_on_a_complete_run_with_an_unreadable_final_checkpoint_says_so(run, tmp_path):
    train_dir = copy_run(run, tmp_path)
    truncate(os.path.join(train_dir, "model.ckpt-6.index"))
    lines = []
    results = evaluate.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=train_dir),
                                print_fn=lines.append, sleep=FakeSleep())
    assert results == []
    assert len(lines) == 1  # it stops: nothing will ever make ckpt-6 readable
    assert "is evaluated" not in lines[0]
    assert lines[0].endswith("final checkpoint " + os.path.join(train_dir, "model.ckpt-6")
                             + " could not be evaluated; stopping.")


def test_poll_waits_eval_interval_secs_between_evaluations(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    set_checkpoints(train_dir, [3])
    lines = []

    def trainer_saves_the_final_checkpoint():
        set_checkpoints(train_dir, [3, 6])
        mark_complete(train_dir, 6)

    def interval_wait():
        # Asked before the second evaluation, not after it.
        assert [EVAL_LINE.match(line)[3] for line in lines] == ["model.ckpt-3"]

    sleep = FakeSleep(trainer_saves_the_final_checkpoint, interval_wait)
    results = evaluate.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_interval_secs=100),
        print_fn=lines.append, sleep=sleep, clock=sleep.clock)
    assert [r.step for r in results] == [3, 6]
    assert sleep.calls == [evaluate.POLL_SECS,  # looking for a new checkpoint
                           100 - evaluate.POLL_SECS]  # the rest of the interval
    assert lines[-1] == completion_line(train_dir)
    assert [r["step"] for r in results_lines(tmp_path / "eval")] == [3, 6]


def test_poll_moves_to_the_newest_checkpoint_after_waiting(run, tmp_path):
    train_dir = copy_run(run, tmp_path, complete=False)
    for suffix in (".index", DATA_SUFFIX):  # a checkpoint 4 that is never read
        shutil.copy(os.path.join(train_dir, "model.ckpt-3" + suffix),
                    os.path.join(train_dir, "model.ckpt-4" + suffix))
    set_checkpoints(train_dir, [3])

    def final():
        set_checkpoints(train_dir, [3, 4, 6])
        mark_complete(train_dir, 6)

    sleep = FakeSleep(lambda: set_checkpoints(train_dir, [3, 4]), final)
    results = evaluate.evaluate(
        config_of(run, tmp_path / "eval", checkpoint_dir=train_dir, eval_interval_secs=100),
        print_fn=lambda line: None, sleep=sleep)
    assert [os.path.basename(r.checkpoint) for r in results] == ["model.ckpt-3", "model.ckpt-6"]
    assert len(sleep.calls) == 2


def test_poll_without_a_checkpoint_says_so_once_and_waits(run, tmp_path):
    train_dir = tmp_path / "not_yet"
    lines = []
    sleep = FakeSleep(lambda: None, lambda: None,
                      lambda: shutil.copytree(run.train_dir, str(train_dir)))
    results = evaluate.evaluate(config_of(run, tmp_path / "eval", checkpoint_dir=str(train_dir)),
                                print_fn=lines.append, sleep=sleep)
    assert [r.step for r in results] == [6]
    assert lines[0] == (f"No checkpoint file found in {train_dir}; waiting for the trainer "
                        f"to write one.")
    assert sum("No checkpoint file found" in line for line in lines) == 1
    assert len(sleep.calls) == 3
    assert lines[-1] == completion_line(str(train_dir))


def test_poll_returns_when_should_stop(run, tmp_path):
    results = evaluate.evaluate(config_of(run, tmp_path / "eval"), sleep=FakeSleep(),
                                should_stop=lambda: True)
    assert results == []


# --- per-class figures and the confusion matrix ---------------------------------


def always_cat_run(tmp_path):
    """(data folder, test files, train_dir) of a run whose model.ckpt-9 always says cat
    (3): zero last-layer weights and a bias for cat alone; 23 test records."""
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=23)
    state = TrainState(seed=0, compute_dtype=tf.float32)
    for model in (state.model, state.averages):
        model.softmax_linear.weights.assign(tf.zeros([192, 10]))
        model.softmax_linear.biases.assign(tf.one_hot(3, 10) * 5.0)
    state.step.assign(9)
    state.checkpoint().write(str(tmp_path / "train" / "model.ckpt-9"))
    return batches_dir, data.split_files(batches_dir, "test"), tmp_path / "train"


def test_a_model_that_always_says_cat_gives_the_exact_confusion_matrix(tmp_path):
    """Forced outcome: zero last-layer weights and a bias only for cat (3): every
    image is predicted cat, so the matrix has the class counts in cat's column."""
    batches_dir, test_files, train_dir = always_cat_run(tmp_path)
    labels = np.concatenate([labels.numpy() for _, labels in data.eval_dataset(test_files, 50)])
    counts = np.bincount(labels, minlength=10)  # 23 records: 3 of classes 0-2, 2 of the rest
    assert counts.tolist() == [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]
    lines = []
    [result] = evaluate.evaluate(evaluate.EvalConfig(
        checkpoint_dir=str(train_dir), eval_dir=str(tmp_path / "eval"), eval_files=test_files,
        num_examples=23, batch_size=8, run_once=True,
        class_names=data.class_names(batches_dir)), print_fn=lines.append)

    want = np.zeros((10, 10), int)
    want[:, 3] = counts
    assert result.confusion_matrix == want.tolist()
    assert (result.correct, result.examples) == (2, 23)  # the diagonal; the sum
    assert result.precision == pytest.approx(2 / 23)
    names = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
             "truck")
    assert result.per_class == [
        {"name": name, "count": int(count), "recall": 1.0 if i == 3 else 0.0,
         "precision": 2 / 23 if i == 3 else None}
        for i, (name, count) in enumerate(zip(names, counts))]
    assert results_lines(tmp_path / "eval") == [result.as_record()]
    assert lines[1:6] == ["class        count  recall  precision",
                          "airplane         3   0.000          -",
                          "automobile       3   0.000          -",
                          "bird             3   0.000          -",
                          "cat              2   1.000      0.087"]
    assert lines[12:15] == [
        "confusion matrix (rows: true class; columns: predicted class, as numbered):",
        "                   0     1     2     3     4     5     6     7     8     9",
        " 0  airplane       0     0     0     3     0     0     0     0     0     0"]
    assert len(lines) == 24


def test_per_class_scalars_and_pr_curves_go_to_tensorboard(tmp_path):
    """Read back with TensorBoard's own event reader: a recall and a precision scalar
    per class under per_class/, and a PR curve per class for its PR-curve plugin."""
    from tensorboard.backend.event_processing import event_accumulator

    batches_dir, test_files, _ = always_cat_run(tmp_path)
    names = data.class_names(batches_dir)
    evaluate.evaluate(evaluate.EvalConfig(
        checkpoint_dir=str(tmp_path / "train"), eval_dir=str(tmp_path / "eval"),
        eval_files=test_files, num_examples=23, batch_size=8, run_once=True, class_names=names),
        print_fn=lambda line: None)

    events = event_accumulator.EventAccumulator(
        str(tmp_path / "eval"), size_guidance={event_accumulator.TENSORS: 0}).Reload()
    tags = set(events.Tags()["tensors"])
    assert {f"per_class/recall/{name}" for name in names} <= tags
    assert {f"per_class/precision/{name}" for name in names} & tags == {"per_class/precision/cat"}
    curves = set(events.PluginTagToContent("pr_curves"))
    assert curves == {f"pr_curve/{name}/pr_curves" for name in names}  # the plugin's suffix
    value = lambda tag: tf.make_ndarray(events.Tensors(tag)[0].tensor_proto)  # noqa: E731
    assert [e.step for e in events.Tensors("per_class/recall/cat")] == [9]
    assert float(value("per_class/recall/cat")) == 1.0
    assert float(value("per_class/recall/dog")) == 0.0
    assert float(value("per_class/precision/cat")) == pytest.approx(2 / 23)
    # Rows: true positives, false positives, true negatives, false negatives,
    # precision, recall, at the thresholds 0, 0.005, ..., 1.
    cat = value("pr_curve/cat/pr_curves")
    assert cat.shape == (6, evaluate.PR_THRESHOLDS)
    assert cat[0, 0] == 2 and cat[1, 0] == 21  # every image is above threshold 0
    assert cat[5, 0] == 1.0 and cat[4, 0] == pytest.approx(2 / 23)
    assert cat[0, -1] == 0 and cat[3, -1] == 2  # none is certain: the cat probability < 1
    dog = value("pr_curve/dog/pr_curves")
    # Dog's probability is 1 / (e^5 + 9) = 0.0064 for every image: at or above 0.005,
    # below 0.01.
    assert dog[0, :3].tolist() == [2, 2, 0] and dog[1, :3].tolist() == [21, 21, 0]


def test_the_heat_map_and_the_misclassified_grid_go_to_tensorboard_and_png_files(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    batches_dir, test_files, _ = always_cat_run(tmp_path)  # 21 of the 23 are wrong
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "confusion_matrix-step9.png").write_bytes(b"the user's own file")
    config = evaluate.EvalConfig(
        checkpoint_dir=str(tmp_path / "train"), eval_dir=str(eval_dir), eval_files=test_files,
        num_examples=23, batch_size=8, run_once=True, misclassified_images=5,
        class_names=data.class_names(batches_dir))
    [result] = evaluate.evaluate(config, print_fn=lambda line: None)

    # Each class's first wrong one in file order, in class order, 5 in all: cats are
    # never wrong, so airplane, automobile, bird, deer, dog.
    assert result.misclassified.labels == [0, 1, 2, 4, 5]
    records = list(data.read_records(test_files).as_numpy_iterator())
    first = {}
    for image, label in records:
        first.setdefault(int(label), image)
    np.testing.assert_array_equal(result.misclassified.images,
                                  np.stack([first[k] for k in (0, 1, 2, 4, 5)]))
    assert result.misclassified.predicted == [3] * 5
    assert result.misclassified.images.shape == (5, 32, 32, 3)
    assert sorted(os.listdir(eval_dir)) == [
        "confusion_matrix-step9-2.png", "confusion_matrix-step9.png", "environment.jsonl",
        *sorted(n for n in os.listdir(eval_dir) if n.startswith("events.")),
        "misclassified-step9.png", "results.jsonl"]
    assert (eval_dir / "confusion_matrix-step9.png").read_bytes() == b"the user's own file"
    titles = evaluate.picture_titles(result)
    for name, tag in (("confusion_matrix-step9-2.png", "confusion_matrix"),
                      ("misclassified-step9.png", "misclassified")):
        image = tf.io.decode_png((eval_dir / name).read_bytes())
        assert image.shape[0] > 200 and image.shape[1] > 200 and image.shape[2] in (3, 4)
        # Generated data: the title's first line says so.
        assert png_title(eval_dir / name) == titles[tag]
        assert titles[tag].startswith("SYNTHETIC data (generated, not CIFAR-10)\n")
    assert titles["confusion_matrix"].endswith(
        "\nConfusion matrix, model.ckpt-9, averages weights: precision @ 1 = 0.087")
    events = event_accumulator.EventAccumulator(
        str(eval_dir), size_guidance={event_accumulator.TENSORS: 0}).Reload()
    assert {"confusion_matrix", "misclassified"} <= set(events.PluginTagToContent("images"))
    assert [e.step for e in events.Tensors("misclassified")] == [9]


def png_title(path) -> str:
    from PIL import Image

    with Image.open(path) as image:
        return image.text["Title"]


def test_a_run_with_nothing_wrong_says_why_it_has_no_grid_and_real_data_is_not_synthetic(
        tmp_path):
    """Test records of cats alone, scored by the model that always says cat, in a
    folder without the generated data's marker."""
    _, _, train_dir = always_cat_run(tmp_path)
    cats = tmp_path / "cats" / "test_batch.bin"
    cats.parent.mkdir()
    cats.write_bytes(synthetic.make_records(np.full(7, 3), separable=True))
    lines = []
    [result] = evaluate.evaluate(evaluate.EvalConfig(
        checkpoint_dir=str(train_dir), eval_dir=str(tmp_path / "eval"), eval_files=[str(cats)],
        num_examples=7, run_once=True), print_fn=lines.append)

    assert (result.correct, result.examples, result.synthetic) == (7, 7, False)
    assert EVAL_LINE.match(lines[0]).groups()[1:] == ("9", "model.ckpt-9", "7", "averages")
    assert lines[0].endswith(" averages weights)")
    assert lines[1] == ("No misclassified images to show for model.ckpt-9: all 7 examples "
                        "were classified right.")
    assert lines[2] == "class        count  recall  precision"
    assert results_lines(tmp_path / "eval")[0]["synthetic"] is False
    pictures = sorted(n for n in os.listdir(tmp_path / "eval") if n.endswith(".png"))
    assert pictures == ["confusion_matrix-step9.png"]
    assert png_title(tmp_path / "eval" / pictures[0]) == (
        "Confusion matrix, model.ckpt-9, averages weights: precision @ 1 = 1.000")
    # None asked for: nothing to explain.
    lines = []
    evaluate.evaluate(evaluate.EvalConfig(
        checkpoint_dir=str(train_dir), eval_dir=str(tmp_path / "eval0"), eval_files=[str(cats)],
        num_examples=7, run_once=True, misclassified_images=0), print_fn=lines.append)
    assert EVAL_LINE.match(lines[0]) and lines[1] == "class        count  recall  precision"


@pytest.mark.parametrize("plots", [False, True])
def test_only_the_evaluator_lets_tensorflow_load_matplotlib(plots):
    """Keras imports matplotlib.pyplot when it is installed (0.65 s of each start):
    the programs that do not draw keep it out while TensorFlow loads, TensorFlow works
    without it, and matplotlib can still be imported after (a library user's)."""
    script = ("import sys; from cifar10.cli import programs; "
              f"tf = programs.load_tensorflow(plots={plots}); "
              "loaded = 'matplotlib.pyplot' in sys.modules; "
              "__import__('cifar10.evaluation.plots'); "  # the evaluator's drawing, importable after
              "print(loaded, int(tf.reduce_sum([1, 2])), sys.modules['matplotlib'] is not None)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == [str(plots), "3", "True"], out.stderr
