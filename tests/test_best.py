"""runs/best.py and runs/metrics.py: the best checkpoint kept across offers and starts,
replaced so that a kill at any point leaves one that reads; the metrics file."""

from __future__ import annotations

import logging
import os
import types

import pytest
import tensorflow as tf

from cifar10.core import atomic
from cifar10.runs import best, cleanup, layout
from cifar10.runs.best import Best, BestCheckpoint
from cifar10.runs.metrics import HEADER, METRICS_FILE, MetricsFile
from rundirs import leave_an_interrupted_save


def warnings(caplog) -> list[str]:
    """The warnings logged (TensorFlow 2.16's saver logs at INFO through absl too)."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


WEIGHT = "w/.ATTRIBUTES/VARIABLE_VALUE"


class Killed(BaseException):
    """The process killed at this point."""


def offers(train_dir, checkpoint, weight, figures, start=0):
    """BestCheckpoint(train_dir) of a start at ``start``: .offer of each (step, precision),
    ``weight`` = step."""
    kept = BestCheckpoint(str(train_dir), checkpoint, start)
    taken = []
    for step, precision in figures:
        weight.assign(step)
        taken.append(kept.offer(step, precision, loss=1.0 / step))
    return kept, taken


def test_the_best_is_kept_across_offers_and_starts(tmp_path):
    weight = tf.Variable(0.0)
    checkpoint = tf.train.Checkpoint(w=weight)
    kept, taken = offers(tmp_path, checkpoint, weight, [(10, 0.5), (20, 0.7), (30, 0.7),
                                                        (40, 0.6)])
    assert taken == [True, True, False, False]  # a tie keeps the older
    path = str(tmp_path / "best" / "model.ckpt-20")
    assert kept.best == Best(20, 0.7, 0.05, path)
    assert tf.train.latest_checkpoint(str(tmp_path / "best")) == path
    assert sorted(os.listdir(tmp_path / "best")) == [
        "best.json", "checkpoint", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]
    assert tf.train.load_checkpoint(path).get_tensor(WEIGHT) == 20
    resumed, taken = offers(tmp_path, checkpoint, weight, [(50, 0.65), (60, 0.75)], 40)
    assert taken == [False, True]  # compared with the earlier start's best
    assert resumed.best.step == 60 and layout.find(str(tmp_path / "best"))[0].step == 60
    # Resumed from step 40 again: the best of step 60 is of a trajectory gone; no number
    # is no best.
    again, taken = offers(tmp_path, checkpoint, weight, [(45, float("nan")), (50, 0.1)], 40)
    assert taken == [False, True] and again.best.step == 50
    assert offers(tmp_path, checkpoint, weight, [])[0].best is None  # (a start at 0)
    assert os.listdir(tmp_path / "best") == ["best.json"]


def test_a_users_best_folder_is_left_as_it_is(tmp_path, caplog):
    """best/ without best.json, the trainer's mark (a checkpoint copied there)."""
    weight = tf.Variable(0.0)
    checkpoint = tf.train.Checkpoint(w=weight)
    checkpoint.write(str(tmp_path / "best" / "model.ckpt-5"))
    before = sorted(os.listdir(tmp_path / "best"))
    kept, taken = offers(tmp_path, checkpoint, weight, [(10, 0.5)])
    assert (kept.best, taken, sorted(os.listdir(tmp_path / "best"))) == (None, [False], before)
    assert warnings(caplog) == [
        f"{tmp_path / 'best'} is not the trainer's (it has no best.json): it is left as it is "
        f"and the run keeps no best checkpoint; move it away to have one kept."]
    assert cleanup.remove_run(str(tmp_path)) == 0
    assert layout.run_of(str(tmp_path / "best")) == str(tmp_path / "best")


@pytest.mark.parametrize("cut", ["write", "switch", "state", "drop"])
def test_a_replacement_cut_short_leaves_a_best_that_reads(tmp_path, monkeypatch, caplog, cut):
    """A failed write is a warning (the kept best stays); a kill after it (at the switch
    to best.json, at the state file, while the old files go) leaves a best that reads,
    and the next start removes the rest."""
    weight = tf.Variable(0.0)
    checkpoint = tf.train.Checkpoint(w=weight)
    offers(tmp_path, checkpoint, weight, [(10, 0.5)])
    folder = str(tmp_path / "best")

    def full_disk(prefix):
        checkpoint.write(prefix)  # (some of its files written)
        raise OSError(28, "No space left on device")

    def kill(*args, **kwargs):
        raise Killed()
    where = {"switch": (atomic, "write_text"), "state": (layout, "write_state"),
             "drop": (cleanup, "delete")}
    if cut == "write":
        assert offers(tmp_path, types.SimpleNamespace(write=full_disk), weight,
                      [(20, 0.7)], 10)[1] == [False]
        assert "No space left on device); training goes on, the best kept is" in caplog.text
        assert not cleanup.checkpoint_files(folder, 20)
    else:
        monkeypatch.setattr(*where[cut], kill)
        with pytest.raises(Killed):
            offers(tmp_path, checkpoint, weight, [(20, 0.7)], 10)
        monkeypatch.undo()
    kept = best.read(folder)
    assert kept.step == (10 if cut in ("write", "switch") else 20)
    assert tf.train.load_checkpoint(kept.path).get_tensor(WEIGHT) == kept.step
    leave_an_interrupted_save(tmp_path / "best", 30)
    again = BestCheckpoint(str(tmp_path), tf.train.Checkpoint(w=weight), 20)
    assert again.best == kept
    assert sorted(os.listdir(folder)) == ["best.json", "checkpoint",
                                          f"model.ckpt-{kept.step}.data-00000-of-00001",
                                          f"model.ckpt-{kept.step}.index"]
    assert tf.train.latest_checkpoint(folder) == kept.path


def test_metrics_rows_of_later_steps_are_dropped_on_resume(tmp_path, caplog):
    path = tmp_path / METRICS_FILE
    MetricsFile(str(tmp_path), 0).append([
        {"step": 10, "epoch": 0.0256, "loss": 2.31, "learning_rate": 0.1,
         "examples_per_sec": 1234.5678},
        {"step": 20, "precision": 0.5, "test_loss": 1.25}])
    with open(path, "a") as f:
        f.write("30,0.07,2.2,0.1,1250.0,,\n40,0.1")  # a row of a later start, one cut short
    MetricsFile(str(tmp_path), 20).append([{"step": 30, "loss": 2.0}])
    assert path.read_text().splitlines() == [
        HEADER, "10,0.0256,2.31,0.1,1234.57,,", "20,,,,,0.5,1.25", "30,,2,,,,"]
    assert warnings(caplog) == [
        f"{path}: its damaged rows are left out (a line cut short, or not of its columns)."]
    assert cleanup.own_files(str(tmp_path)) == [METRICS_FILE]


def test_a_metrics_file_of_another_header_is_left_alone(tmp_path, caplog):
    path = tmp_path / METRICS_FILE
    path.write_text("epoch,accuracy\n1,0.5\n")
    MetricsFile(str(tmp_path), 0).append([{"step": 10, "loss": 2.0}])
    assert path.read_text() == "epoch,accuracy\n1,0.5\n"
    assert len(warnings(caplog)) == 1 and "it is not the trainer's" in caplog.text
    assert cleanup.own_files(str(tmp_path)) == []
