"""Tests of cifar10.runs.checkpoints, the read side of a run directory: finding its
checkpoints, a model from one, and the class names the run was trained on.

They read conftest's ``trained_run`` (checkpoints at steps 3 and 6), or a copy of
it where a test damages it.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import cli
from cifar10.core.errors import Cifar10Error, DataError
from cifar10.data import fileformat as ff
from cifar10.data import folder
from cifar10.runs import checkpoint_files, checkpoints, cleanup, records
from conftest import LAYERS
from rundirs import copy_run, truncate


def test_find_lists_the_complete_checkpoints_and_nothing_that_only_looks_like_one(trained_run,
                                                                                   tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")  # with a user's look-alikes
    assert [(c.step, c.name) for c in checkpoint_files.find(str(run_dir))] == [
        (3, "model.ckpt-3"), (6, "model.ckpt-6")]
    (run_dir / "model.ckpt-3.index").unlink()  # data without index
    (run_dir / "model.ckpt-9.index").write_bytes(b"x")  # index without data
    (run_dir / "model.ckpt-12.index").write_bytes(b"x")  # a shard missing
    (run_dir / "model.ckpt-12.data-00000-of-00002").write_bytes(b"x")
    assert [c.step for c in checkpoint_files.find(str(run_dir))] == [6]
    assert checkpoint_files.scan(str(run_dir))[1] == {3: "no .index file", 9: "no .data file",
                                                 12: "some .data files are missing"}
    assert checkpoint_files.latest(str(run_dir)).path == str(run_dir / "model.ckpt-6")
    assert checkpoint_files.latest(str(run_dir / "no_such_dir")) is None


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
    (tmp_path / checkpoint_files.CLASSES_FILE).write_text("ant\nbee\n")
    assert checkpoints.trained_class_names(str(tmp_path)) == ("ant", "bee")
    assert folder.class_names(str(tmp_path)) == ("cat", "dog")
    (tmp_path / checkpoint_files.CLASSES_FILE).write_text("ant\nant\n")
    with pytest.raises(DataError, match=f"^{tmp_path / checkpoint_files.CLASSES_FILE} lists ant "
                                        f"more than once: "):
        checkpoints.trained_class_names(str(tmp_path))


FIX = ("write the run's 10 class names {where}, one per line in label order (the "
       "batches.meta.txt of the data it was trained on)")
# Where the run's records name its data folder: the file to copy.
COPY_FIX = "write the run's 10 class names in it, one per line in label order, e.g. cp {} {}"


def trained_on_meta(trained_run):
    """The batches.meta.txt of the data folder ``trained_run`` was trained on."""
    return os.path.join(os.path.dirname(trained_run[1][0]), ff.META_FILE)


@pytest.mark.parametrize("content, problem", [
    (b"airplane\nautom\xffbile\n", "is not UTF-8 text (byte 0xff at offset 14)"),
    (b"", "lists no class names"),
    ("".join(f"c{i}\n" for i in range(11)).encode(),
     "lists 11 class names and the run's model has 10 classes"),
    (None, "is a folder, not a class names file"),
])
def test_a_damaged_class_names_file_is_one_line_naming_it_and_the_fix(trained_run, tmp_path,
                                                                     content, problem):
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    path = run_dir / checkpoint_files.CLASSES_FILE
    if content is None:
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(content)
    # Its environment.jsonl names the data folder it read: the fix copies its names,
    # but onto a folder (a cp would copy into it).
    fix = (FIX.format(where="in a file of that name") if content is None else
           COPY_FIX.format(trained_on_meta(trained_run), path))
    with pytest.raises(DataError) as info:
        checkpoints.trained_class_names(str(run_dir))  # the newest model's 10 classes
    assert str(info.value) == f"{path} {problem}: {fix}"
    # Without that record, the fix says where the names are in words.
    (run_dir / records.ENVIRONMENT_FILE).unlink()
    where = "in a file of that name" if content is None else "in it"
    with pytest.raises(DataError) as info:
        checkpoints.trained_class_names(str(run_dir))
    assert str(info.value) == f"{path} {problem}: {FIX.format(where=where)}"
    # Given the data's names (the evaluator), one warning, and the run goes on with them.
    names = tuple(f"k{i}" for i in range(10))
    assert checkpoints.trained_class_names(str(run_dir), fallback=names) == names


def test_a_run_of_other_than_ten_classes_without_its_class_names_file_is_one_line(tmp_path):
    assert checkpoints.recorded_class_names(str(tmp_path), 10) == (None, "")
    assert checkpoints.recorded_class_names(str(tmp_path), 3) == (
        None, "is missing and the run's model has 3 classes")
    (tmp_path / checkpoint_files.CLASSES_FILE).write_text("ant\nbee\ncow\n")
    assert checkpoints.recorded_class_names(str(tmp_path), 5) == (
        None, "lists 3 class names and the run's model has 5 classes")
    # A run of before the model's outputs followed the data: 10 of them, its 3 names.
    assert checkpoints.recorded_class_names(str(tmp_path), 10) == (("ant", "bee", "cow"), "")
    (tmp_path / checkpoint_files.CLASSES_FILE).unlink()
    with pytest.raises(DataError, match="class_names.txt is missing and the run's model has "
                                        "3 classes: write the run's 3 class names in it"):
        checkpoints.trained_class_names(str(tmp_path), num_classes=3)


def write_data_folder(path, names):
    path.mkdir(parents=True)
    (path / ff.META_FILE).write_text("".join(f"{name}\n" for name in names))
    return path


def test_a_missing_class_names_file_names_the_data_folders_names_where_the_run_records_it(
        tmp_path):
    run_dir = tmp_path / "train"
    run_dir.mkdir()
    path = run_dir / checkpoint_files.CLASSES_FILE
    read = write_data_folder(tmp_path / "my data" / "cifar-10-batches-bin", ["ant", "bee", "cow"])

    def error():
        with pytest.raises(DataError) as info:
            checkpoints.trained_class_names(str(run_dir), num_classes=3)
        return str(info.value)

    missing = f"{path} is missing and the run's model has 3 classes: write the run's 3 class "
    words = missing + ("names in it, one per line in label order (the batches.meta.txt of the "
                       "data it was trained on)")
    assert error() == words  # no records
    # environment.jsonl: the data folder its latest start read.
    (run_dir / records.ENVIRONMENT_FILE).write_text(
        json.dumps({"program": "cifar10-train", "settings": {"data_dir": str(tmp_path)}}) + "\n"
        + json.dumps({"program": "cifar10-train", "settings": {"data_dir": str(read)}}) + "\n")
    copy = missing + "names in it, one per line in label order, e.g. cp {} " + str(path)
    assert error() == copy.format(f"'{read / ff.META_FILE}'")  # quoted: a space
    # A data folder whose names are not the model's: not offered.
    (read / ff.META_FILE).write_text("ant\nbee\n")
    assert error() == words
    (read / ff.META_FILE).unlink()
    assert error() == words

    # flags.txt: its absolute --data_dir, for data of CIFAR-10's format.
    (run_dir / records.ENVIRONMENT_FILE).unlink()
    data_dir = tmp_path / "data"
    given = write_data_folder(data_dir / "cifar-10-batches-bin", ["ant", "bee", "cow"])

    def flags_txt(*lines):
        (run_dir / records.FLAGS_FILE).write_text(
            "# cifar10-train, started 2026-11-26T10:00:00+00:00 on host\n"
            + "".join(f"{line}\n" for line in lines))

    flags_txt(f"--data_dir={data_dir}", "--nosynthetic_data", "--dataset=cifar10")
    assert error() == copy.format(given / ff.META_FILE)
    (given / "test_batch.bin").write_bytes(b"")
    flags_txt(f"--data_dir={given}")  # the data folder itself
    assert error() == copy.format(given / ff.META_FILE)
    # Not where the folder read is under it, nor for a relative --data_dir (relative to
    # where the trainer started, which is not recorded).
    flags_txt(f"--data_dir={data_dir}", "--synthetic_data")
    assert error() == words
    flags_txt(f"--data_dir={data_dir}", "--dataset=cifar100")
    assert error() == words
    flags_txt("--data_dir=data")
    assert error() == words
    assert not path.exists()  # only said, not written


def test_predict_export_eval_and_a_resumed_run_on_a_damaged_class_names_file(trained_run,
                                                                               tmp_path):
    """cifar10-predict and cifar10-export stop with one line (they printed and exported
    names a model of 10 classes does not have); cifar10-eval goes on with the data's
    names and says so once; cifar10-train resumes and writes the file again, saying so."""
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    path = run_dir / checkpoint_files.CLASSES_FILE
    path.write_text("".join(f"c{i}\n" for i in range(11)))
    problem = f"{path} lists 11 class names and the run's model has 10 classes"
    image = tmp_path / "cat.png"
    image.write_bytes(tf.io.encode_png(np.zeros((32, 32, 3), np.uint8)).numpy())

    predicted = cli.call("cifar10-predict", f"--checkpoint_dir={run_dir}", str(image))
    assert (predicted.returncode, predicted.stdout) == (1, "")
    fix = COPY_FIX.format(trained_on_meta(trained_run), path)  # from its environment.jsonl
    assert predicted.stderr.splitlines() == [f"cifar10-predict: error: {problem}: {fix}"]
    exported = cli.call("cifar10-export", f"--checkpoint_dir={run_dir}",
                        f"--export_dir={tmp_path / 'export'}")
    assert (exported.returncode, exported.stderr) == (
        1, f"cifar10-export: error: {problem}: {fix}\n")
    assert not (tmp_path / "export").exists()

    data_dir = os.path.dirname(os.path.dirname(trained_run[1][0]))
    evaluated = cli.call("cifar10-eval", f"--checkpoint_dir={run_dir}", "--run_once",
                         f"--eval_dir={tmp_path / 'eval'}", f"--data_dir={data_dir}")
    assert evaluated.returncode == 0, evaluated.stderr
    assert [line for line in evaluated.stderr.splitlines() if "warning" in line] == [
        f"cifar10-eval: warning: {problem}: the run's 10 classes are taken to be the data's "
        f"({', '.join(ff.CLASS_NAMES)})."]

    resumed = cli.call("cifar10-train", f"--train_dir={run_dir}", f"--data_dir={data_dir}",
                       "--max_steps=7", "--batch_size=16")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resuming from {run_dir / 'model.ckpt-6'} at step 6." in resumed.stdout
    assert [line for line in resumed.stderr.splitlines() if "warning" in line] == [
        f"cifar10-train: warning: {problem}: it is written again with --data_dir's class "
        f"names ({', '.join(ff.CLASS_NAMES)})."]
    assert path.read_text() == "".join(f"{name}\n" for name in ff.CLASS_NAMES)


def test_a_checkpoint_is_named_by_its_prefix_or_by_one_of_its_files(trained_run):
    prefix = str(trained_run[0] / "model.ckpt-6")
    for value in (prefix, prefix + ".index", prefix + ".data-00000-of-00001"):
        assert checkpoint_files.given(value) == prefix


def test_a_checkpoint_flag_that_names_no_checkpoint_is_one_line_saying_what_it_is(trained_run,
                                                                                  tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    (run_dir / "model.ckpt-3.data-00000-of-00001").unlink()
    (tmp_path / "empty").mkdir()
    (tmp_path / "red.png").write_bytes(b"\x89PNG not a checkpoint")
    cases = {
        f"{run_dir}/model.ckpt-5": f"--checkpoint {run_dir}/model.ckpt-5 does not exist; "
                                   f"{run_dir} holds model.ckpt-6",
        f"{tmp_path}/gone/model.ckpt-6": f"--checkpoint {tmp_path}/gone/model.ckpt-6 does not "
                                         f"exist: there is no folder {tmp_path}/gone",
        str(run_dir): f"--checkpoint {run_dir} is a folder: pass --checkpoint_dir={run_dir} for "
                      f"its newest checkpoint, or --checkpoint={run_dir}/model.ckpt-6",
        str(tmp_path / "empty"): f"--checkpoint {tmp_path}/empty is a folder and holds no "
                                 f"checkpoints: pass a checkpoint, such as "
                                 f"runs/a/train/model.ckpt-1000, or --checkpoint_dir=<a training "
                                 f"run> for its newest",
        str(tmp_path / "red.png"): f"--checkpoint {tmp_path}/red.png is not a TensorFlow "
                                   f"checkpoint (a checkpoint is named by the prefix of its "
                                   f".index and .data files, such as "
                                   f"runs/a/train/model.ckpt-1000); {tmp_path} holds no "
                                   f"checkpoints",
        f"{run_dir}/notes.txt": f"--checkpoint {run_dir}/notes.txt is not a TensorFlow "
                                f"checkpoint (a checkpoint is named by the prefix of its .index "
                                f"and .data files, such as runs/a/train/model.ckpt-1000); "
                                f"{run_dir} holds model.ckpt-6",
        f"{run_dir}/model.ckpt-3.index": f"--checkpoint {run_dir}/model.ckpt-3.index is "
                                         f"incomplete (no .data file): pass another checkpoint; "
                                         f"{run_dir} holds model.ckpt-6",
    }
    for value, message in cases.items():
        with pytest.raises(Cifar10Error) as err:
            checkpoint_files.given(value)
        assert str(err.value) == message


def test_the_newest_checkpoint_that_reads_is_used_with_one_warning_naming_the_others(
        trained_run, tmp_path):
    run_dir = copy_run(trained_run[0], tmp_path / "train")
    warnings = []
    assert checkpoints.newest_that_reads(str(run_dir), warnings.append).step == 6
    assert warnings == []
    (run_dir / "model.ckpt-6.data-00000-of-00001").write_bytes(b"\0" * 1000)
    assert checkpoints.newest_that_reads(str(run_dir), warnings.append).step == 3
    assert len(warnings) == 1 and warnings[0].startswith(
        f"Using {run_dir}/model.ckpt-3, the newest checkpoint in {run_dir} that reads: "
        f"model.ckpt-6 cannot be read (")
    # Only the newest `tried` are read; an older one is offered, not read.
    with pytest.raises(Cifar10Error) as err:
        checkpoints.newest_that_reads(str(run_dir), warnings.append, tried=1)
    assert re.fullmatch(rf"none of the 1 newest checkpoints in {run_dir} can be read: "
                        rf"model\.ckpt-6 cannot be read \([^\n]+\); pass "
                        rf"--checkpoint={run_dir}/model\.ckpt-3, an older one not tried, if it "
                        rf"reads", str(err.value))
    truncate(run_dir / "model.ckpt-3.index")
    with pytest.raises(Cifar10Error) as err:
        checkpoints.newest_that_reads(str(run_dir), warnings.append)
    assert str(err.value).startswith(f"no checkpoint in {run_dir} can be read: model.ckpt-6 "
                                     f"cannot be read (")
    # The .index cut short is no file --fresh_start knows the trainer wrote: it refuses
    # to delete it, so the advice is to move it (and its .data) out first.
    assert str(err.value).endswith(
        f"; train again (move model.ckpt-3.data-00000-of-00001, model.ckpt-3.index out of "
        f"{run_dir} (damaged, or not the trainer's: --fresh_start deletes only the "
        f"checkpoints it wrote whole), then cifar10-train --train_dir={run_dir} --fresh_start "
        f"deletes the rest) or point --checkpoint_dir at another run")
    assert "\n" not in str(err.value) and len(warnings) == 1
    os.remove(run_dir / "model.ckpt-3.index")
    os.remove(run_dir / "model.ckpt-3.data-00000-of-00001")
    cleanup.remove_run(str(run_dir))  # what --fresh_start does: no refusal
    assert checkpoint_files.find(str(run_dir)) == []
    # Where every checkpoint is the trainer's, --fresh_start deletes them.
    (run_dir / "model.ckpt-6.index").write_bytes(
        (trained_run[0] / "model.ckpt-6.index").read_bytes())
    (run_dir / "model.ckpt-6.data-00000-of-00001").write_bytes(b"\0" * 1000)
    with pytest.raises(Cifar10Error) as err:
        checkpoints.newest_that_reads(str(run_dir), warnings.append)
    assert str(err.value).endswith(
        f"; train again (cifar10-train --train_dir={run_dir} --fresh_start deletes them) or "
        f"point --checkpoint_dir at another run")
    assert checkpoints.newest_that_reads(str(tmp_path / "no_run")) is None
