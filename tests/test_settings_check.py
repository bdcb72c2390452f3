"""The check that the workers were started with the same settings: the line each says.

The check itself, across real workers, is tested in test_multi_worker.py.
"""

from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.core.errors import Cifar10Error
from cifar10.distribute import coordination
from cifar10.distribute import settings_check
from cifar10.training import controller
from cifar10.training.controller import TrainData

SETTINGS = ["--batch_size=16", "--max_steps=30", "--seed=0"]
SAME = "start every worker with the same flags and data"


@pytest.mark.parametrize("task, workers, line", [
    ("worker 1", [("worker 0", [1, 2, 3]), ("worker 1", [4, 2, 3])],
     f"this is worker 1: its --batch_size=16 differs from worker 0's; {SAME}"),
    ("worker 0", [("worker 0", [1, 2, 3]), ("worker 1", [4, 5, 3])],
     f"this is worker 0: its --batch_size=16 and --max_steps=30 differ from worker 1's; {SAME}"),
    ("worker 0", [("worker 0", [1, 2, 3]), ("worker 1", [1, 2, 3])], None),
])
def test_of_two_workers_each_names_its_settings_that_differ_from_the_others(
        task, workers, line):
    own = dict(workers)[task]
    assert settings_check.settings_differ(task, workers, SETTINGS, own) == line


# Three workers: worker 2 has another --batch_size than both others, worker 0 another
# --max_steps than both others (its --seed is everyone's).
THREE = [("worker 0", [1, 2, 3]), ("worker 1", [1, 5, 3]), ("worker 2", [4, 5, 3])]


@pytest.mark.parametrize("task, line", [
    ("worker 2", "this is worker 2: its --batch_size=16 differs from worker 0's and worker "
                 f"1's; its --max_steps=30 differs from worker 0's; {SAME}"),
    ("worker 0", "this is worker 0: its --batch_size=16 differs from worker 2's; its "
                 f"--max_steps=30 differs from worker 1's and worker 2's; {SAME}"),
    ("worker 1", "this is worker 1: its --batch_size=16 differs from worker 2's; its "
                 f"--max_steps=30 differs from worker 0's; {SAME}"),
])
def test_of_three_workers_each_pairs_each_setting_with_the_workers_it_differs_from(
        task, line):
    own = dict(THREE)[task]
    assert settings_check.settings_differ(task, THREE, SETTINGS, own) == line


# Four tasks, a chief of two replicas among them (a task is there once a replica).
FOUR = [("chief 0", [1, 2, 3])] * 2 + [
    ("worker 0", [1, 5, 6]), ("worker 1", [1, 2, 6]), ("worker 2", [7, 2, 6])]


@pytest.mark.parametrize("task, line", [
    ("chief 0", "this is chief 0: its --batch_size=16 differs from worker 2's; its "
                "--max_steps=30 differs from worker 0's; its --seed=0 differs from worker "
                f"0's, worker 1's and worker 2's; {SAME}"),
    ("worker 2", "this is worker 2: its --batch_size=16 differs from chief 0's, worker 0's "
                 f"and worker 1's; its --max_steps=30 differs from worker 0's; its --seed=0 "
                 f"differs from chief 0's; {SAME}"),
    ("worker 1", "this is worker 1: its --batch_size=16 differs from worker 2's; its "
                 f"--max_steps=30 differs from worker 0's; its --seed=0 differs from chief "
                 f"0's; {SAME}"),
])
def test_of_four_workers_each_pairs_each_setting_with_the_workers_it_differs_from(
        task, line):
    own = dict(FOUR)[task]
    assert settings_check.settings_differ(task, FOUR, SETTINGS, own) == line


def test_settings_that_differ_from_the_same_workers_share_their_clause():
    workers = [("worker 0", [1, 2, 3]), ("worker 1", [1, 2, 3]), ("worker 2", [4, 5, 3]),
               ("worker 3", [1, 2, 3])]
    assert settings_check.settings_differ("worker 2", workers, SETTINGS, [4, 5, 3]) == (
        "this is worker 2: its --batch_size=16 and --max_steps=30 differ from worker 0's, "
        f"worker 1's and worker 3's; {SAME}")


def test_more_workers_than_a_line_names_are_counted():
    # Eight workers; worker 7's --batch_size differs from all the others', its --seed
    # from workers 0 to 3's.
    workers = [(f"worker {i}", [1, 2, 3 if i < 4 else 9]) for i in range(7)]
    workers.append(("worker 7", [4, 2, 9]))
    assert settings_check.settings_differ("worker 7", workers, SETTINGS, [4, 2, 9]) == (
        "this is worker 7: its --batch_size=16 differs from all 7 other workers'; its "
        f"--seed=0 differs from worker 0's, worker 1's and 2 other workers'; {SAME}")


def test_the_settings_workers_must_share_name_their_flags_and_the_data_with_their_values():
    config = TrainConfig(train_dir="/runs/a", batch_size=8, max_steps=20, use_bf16=True,
                         profile_steps=(3, 4))
    data = TrainData(["/data/a.bin"], 50, ("cat", "dog"))
    settings = controller.shared_settings(config, data)
    assert list(settings) == [
        "--batch_size=8", "--max_steps=20", "--log_frequency=10", "--steps_per_loop=100",
        "--checkpoint_steps=1000", "--summary_steps=100", "--seed=0", "--use_fp16=false",
        "--use_bf16=true", "--deterministic=false", "--initial_learning_rate=0.1",
        "--loss_scale_growth_steps=2000", "--xla=false", "--profile_steps=3,4",
        "training data of 50 records", "2 classes (cat, dog)"]
    assert "no --profile_steps" in controller.shared_settings(TrainConfig(train_dir="/runs/a"),
                                                              data)
    assert "10 classes (airplane, automobile, bird, ...)" in controller.shared_settings(
        config, TrainData(["/data/a.bin"], 50))
    # Each differs in its fingerprint from the same setting on another worker.
    other = controller.shared_settings(TrainConfig(train_dir="/runs/b", batch_size=16),
                                TrainData(["/other/a.bin"], 50, ("cat", "cow")))
    differ = [a for a, x, y in zip(settings, settings.values(), other.values())
              if settings_check._fingerprint(x) != settings_check._fingerprint(y)]
    assert differ == ["--batch_size=8", "--max_steps=20", "--use_bf16=true",
                      "--profile_steps=3,4", "2 classes (cat, dog)"]


def test_one_worker_checks_no_settings():
    cluster = coordination.Coordinator(tf.distribute.get_strategy())
    settings_check.check_same_settings(cluster, {"--batch_size=8": 8})  # no collective


def test_the_gathered_rows_name_their_workers_by_the_task_index_they_carry(monkeypatch):
    # Worker 1 of three; the rows come in replica order, each led by its task's index.
    settings = {"--batch_size=8": 8, "--seed=0": 0}
    same = [settings_check._fingerprint(8), settings_check._fingerprint(0)]
    rows = np.array([[2.0, same[0], 1.0], [0.0] + same, [1.0] + same])
    monkeypatch.setattr(settings_check, "_gather", lambda *_: tf.constant(rows))
    cluster = coordination.Coordinator(tf.distribute.get_strategy())
    cluster.multi_worker, cluster.task = True, "worker 1"
    cluster.tasks = mock.Mock(return_value=["worker 0", "worker 1", "worker 2"])
    with pytest.raises(Cifar10Error) as raised:
        settings_check.check_same_settings(cluster, settings)
    assert str(raised.value) == f"this is worker 1: its --seed=0 differs from worker 2's; {SAME}"
