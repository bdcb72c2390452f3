"""Tests of cifar10.runs.checkpoints, the read side of a run directory: finding its
checkpoints, a model from one, and the class names the run was trained on.

They read conftest's ``trained_run`` (checkpoints at steps 3 and 6), or a copy of
it where a test damages it.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import fileformat as ff
from cifar10.data import folder
from cifar10.runs import checkpoints
from conftest import LAYERS
from rundirs import copy_run, truncate


def test_find_lists_the_complete_checkpoints_and_nothing_that_only_looks_like_one(trained_run,
                                                                                   tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")  # with a user's look-alikes
    assert [(c.step, c.name) for c in checkpoints.find(str(run_dir))] == [
        (3, "model.ckpt-3"), (6, "model.ckpt-6")]
    (run_dir / "model.ckpt-3.index").unlink()  # data without index
    (run_dir / "model.ckpt-9.index").write_bytes(b"x")  # index without data
    (run_dir / "model.ckpt-12.index").write_bytes(b"x")  # a shard missing
    (run_dir / "model.ckpt-12.data-00000-of-00002").write_bytes(b"x")
    assert [c.step for c in checkpoints.find(str(run_dir))] == [6]
    assert checkpoints.scan(str(run_dir))[1] == {3: "no .index file", 9: "no .data file",
                                                 12: "some .data files are missing"}
    assert checkpoints.latest(str(run_dir)).path == str(run_dir / "model.ckpt-6")
    assert checkpoints.latest(str(run_dir / "no_such_dir")) is None


def test_load_model_gives_the_averages_or_the_raw_weights_and_the_step(trained_run):
    train_dir, _ = trained_run
    ckpt6, ckpt3 = str(train_dir / "model.ckpt-6"), str(train_dir / "model.ckpt-3")
    reader = tf.train.load_checkpoint(ckpt6)
    averages, avg_step = checkpoints.load_model(ckpt6, "averages")
    raw, raw_step = checkpoints.load_model(ckpt6, "raw")
    assert avg_step == raw_step == 6
    for name in LAYERS:
        for kind in ("weights", "biases"):
            key = f"{name}/{kind}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(getattr(getattr(averages, name), kind).numpy(),
                                          reader.get_tensor("averages/" + key))
            np.testing.assert_array_equal(getattr(getattr(raw, name), kind).numpy(),
                                          reader.get_tensor("model/" + key))
    assert not np.allclose(averages.conv1.weights.numpy(), raw.conv1.weights.numpy())
    assert checkpoints.load_model(ckpt3)[1] == 3
    assert checkpoints.num_outputs(ckpt6) == ff.NUM_CLASSES


def test_load_model_rejects_an_unknown_weights_name(trained_run):
    with pytest.raises(ValueError, match="weights must be one of"):
        checkpoints.load_model(str(trained_run[0] / "model.ckpt-6"), "ema")


def test_read_model_says_in_one_line_which_checkpoint_cannot_be_read(trained_run, tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    truncate(run_dir / "model.ckpt-6.data-00000-of-00001")
    with pytest.raises(Cifar10Error) as err:
        checkpoints.read_model(str(run_dir / "model.ckpt-6"))
    assert str(err.value).startswith(f"cannot read checkpoint {run_dir}/model.ckpt-6: ")
    assert "\n" not in str(err.value)


def test_the_runs_class_names_are_its_own_file_not_the_datas(tmp_path):
    assert checkpoints.trained_class_names(str(tmp_path)) == ff.CLASS_NAMES  # none recorded
    (tmp_path / ff.META_FILE).write_text("cat\ndog\n")  # as if it were a data folder too
    (tmp_path / checkpoints.CLASSES_FILE).write_text("ant\nbee\n")
    assert checkpoints.trained_class_names(str(tmp_path)) == ("ant", "bee")
    assert folder.class_names(str(tmp_path)) == ("cat", "dog")
    (tmp_path / checkpoints.CLASSES_FILE).write_text("ant\nant\n")
    with pytest.raises(DataError, match=f"^{tmp_path / checkpoints.CLASSES_FILE} lists ant "
                                        f"more than once: "):
        checkpoints.trained_class_names(str(tmp_path))
