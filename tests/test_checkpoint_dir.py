"""What the programs say of a --checkpoint_dir or --checkpoint that is no training run's
(cifar10.cli.checkpoint_dir, cifar10.runs.layout): a folder that does not
exist, an export, a SavedModel's variables, a run's parent folder."""

from __future__ import annotations

import os
import re
import socket

import pytest
from absl import flags
from cli import call

from cifar10.cli import checkpoint_dir
from cifar10.cli import eval_main
from cifar10.cli import flags as cifar10_flags, process
from cifar10.core.errors import Cifar10Error
from cifar10.runs import layout


def _export(folder):
    """A folder as cifar10-export writes one version: saved_model.pb, variables/."""
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    for name in ("variables.index", "variables.data-00000-of-00001"):
        (folder / "variables" / name).write_bytes(b"")



def predict_refusal(tmp_path, folder) -> str:
    """The last line of cifar10-predict given ``folder``, which it must refuse."""
    image = tmp_path / "x.png"
    image.write_bytes(b"")
    result = call("cifar10-predict", f"--checkpoint_dir={folder}", str(image))
    assert result.returncode == 1
    return result.stderr.splitlines()[-1]

def test_a_folder_that_does_not_exist_is_said_to_be_missing(tmp_path):
    missing = tmp_path / "runs" / "nonexist"
    assert str(checkpoint_dir.no_checkpoint(str(missing))) == (
        f"No checkpoint found in {missing}: there is no such folder; point --checkpoint_dir "
        f"at a training run's --train_dir, or train first (cifar10-train --train_dir={missing})")


def test_a_tilde_left_by_the_shell_is_explained(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert str(checkpoint_dir.no_checkpoint("~/runs/a")) == (
        f"No checkpoint found in ~/runs/a: there is no such folder (the shell does not expand "
        f"a ~ after '=': write --checkpoint_dir ~/runs/a or --checkpoint_dir={tmp_path}/runs/a);"
        f" point --checkpoint_dir at a training run's --train_dir, or train first "
        f"(cifar10-train --train_dir='~/runs/a')")


def test_a_folder_name_with_a_space_is_quoted_in_the_command_to_run(tmp_path):
    folder = tmp_path / "my runs"
    folder.mkdir()
    assert str(checkpoint_dir.no_checkpoint(str(folder))).endswith(
        f": train first (cifar10-train --train_dir='{folder}') or point --checkpoint_dir at "
        f"a training run")


@pytest.mark.parametrize("which", ["version", "exports"])
def test_an_export_is_not_taken_for_a_run_that_has_not_trained(tmp_path, which):
    _export(tmp_path / "exp ü" / "20")
    folder = tmp_path / "exp ü" / ("20" if which == "version" else "")
    what = ("an export (a SavedModel: saved_model.pb)" if which == "version" else
            "a folder of exports (SavedModel version folder 20)")
    expected = (f"No checkpoint found in {os.path.normpath(folder)}, {what}, not a training "
                f"run: pass the --train_dir of the run it was exported from as "
                f"--checkpoint_dir (TensorFlow Serving, saved_model_cli and TFLite's converter "
                f"load the export itself)")
    assert str(checkpoint_dir.no_checkpoint(os.path.normpath(folder))) == expected
    # The program says it before TensorFlow loads, as its last line.
    assert (predict_refusal(tmp_path, os.path.normpath(folder))
            == f"cifar10-predict: error: {expected}")


def test_a_savedmodels_variables_are_not_taken_for_a_checkpoint(tmp_path):
    _export(tmp_path / "export" / "20")
    variables = tmp_path / "export" / "20" / "variables" / "variables"
    for value in (str(variables), f"{variables}.index"):
        with pytest.raises(Cifar10Error) as error:
            layout.given(value)
        assert str(error.value) == (
            f"--checkpoint {value} is the variables of an export (a SavedModel), not a "
            f"training checkpoint: pass a checkpoint of the run it was exported from, such as "
            f"runs/a/train/model.ckpt-1000, or --checkpoint_dir=<that run> for its newest")
    # A checkpoint of that name elsewhere is still one.
    (tmp_path / "other" / "variables").mkdir(parents=True)
    for name in ("variables.index", "variables.data-00000-of-00001"):
        (tmp_path / "other" / "variables" / name).write_bytes(b"")
    plain = str(tmp_path / "other" / "variables" / "variables")
    assert layout.given(plain) == plain


@pytest.mark.parametrize("layout", ["class folders", "split folders", "images"])
def test_a_folder_of_images_is_named_so_not_told_to_train_there(tmp_path, layout):
    photos = tmp_path / "my photos"
    folders = {"class folders": [photos / "cat", photos / "dog"],
               "split folders": [photos / "train" / "cat", photos / "train" / "dog"],
               "images": [photos]}[layout]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "IMG_0001.JPG").write_bytes(b"")
    expected = (f"No checkpoint found in {photos}, a folder of images, not a training run: pass "
                f"a run's --train_dir as --checkpoint_dir")
    if layout != "images":
        expected += (f" (to train on its class folders, make a data set of them first: "
                     f"cifar10-prepare --image_dir='{photos}' --data_dir=<a new folder>)")
    assert str(checkpoint_dir.no_checkpoint(str(photos))) == expected
    # The evaluator refuses it too, rather than wait there for a run's checkpoints.
    with pytest.raises(Cifar10Error) as error:
        checkpoint_dir.refuse_a_folder_that_is_no_run(str(photos))
    assert str(error.value) == expected.replace("No checkpoint found", "No checkpoint file found")
    assert predict_refusal(tmp_path, photos) == f"cifar10-predict: error: {expected}"


def test_an_evaluators_pictures_do_not_make_a_folder_of_images(tmp_path):
    # runs/a: the evaluator's folder with its pictures, the run's folder not started yet.
    (tmp_path / "a" / "eval").mkdir(parents=True)
    (tmp_path / "a" / "train").mkdir()
    (tmp_path / "a" / "eval" / "flags.txt").write_text("# cifar10-eval\n")
    (tmp_path / "a" / "eval" / "confusion_matrix-step20.png").write_bytes(b"")
    for folder in (tmp_path / "a", tmp_path / "a" / "eval"):
        assert "images" not in str(checkpoint_dir.no_checkpoint(str(folder)))


@pytest.mark.parametrize("layout,one_class", [(("cat",), "cat"),
                                               (("train/cat", "test/cat"), "train/cat")])
def test_a_folder_of_one_class_folder_is_told_that_two_classes_are_needed(tmp_path, layout,
                                                                          one_class):
    # cifar10-prepare would refuse one class: the message says what to add first.
    photos = tmp_path / "my photos"
    for folder in layout:
        (photos / folder).mkdir(parents=True)
        (photos / folder / "IMG_0001.JPG").write_bytes(b"")
    expected = (f"No checkpoint found in {photos}, a folder of images, not a training run: pass "
                f"a run's --train_dir as --checkpoint_dir (to train on it, a classifier needs "
                f"two or more classes, each in a folder of its own beside {one_class}/, then "
                f"cifar10-prepare --image_dir='{photos}' --data_dir=<a new folder>)")
    assert str(checkpoint_dir.no_checkpoint(str(photos))) == expected


# The line of a run whose trainer (this process, holding the run's lock) has not saved yet.
def _trainer_running(run) -> str:
    return (re.escape(f"No checkpoint in {run} yet: its trainer is running (PID {os.getpid()} "
                      f"on host {socket.gethostname()}, started ")
            + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
            + re.escape(") and has not saved one; run again after its first save (every "
                        "--checkpoint_steps steps)"))


@pytest.mark.parametrize("program", ["cifar10-predict", "cifar10-export"])
def test_a_run_whose_trainer_has_not_saved_yet_is_said_to_be_running(tmp_path, program):
    # Not "train first": its trainer is at it (it holds the run's lock, as a trainer
    # does); cifar10-eval --run_once says the same (test_eval_main.py).
    run = tmp_path / "runs" / "b" / "train"
    run.mkdir(parents=True)
    image = tmp_path / "x.png"
    image.write_bytes(b"")
    args = {"cifar10-predict": [str(image)],
            "cifar10-export": [f"--export_dir={tmp_path / 'runs' / 'b' / 'export'}"]}[program]
    held = layout.TrainerLock(str(run))
    held.acquire()
    try:
        result = call(program, f"--checkpoint_dir={run}", *args)
    finally:
        held.release()
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert re.fullmatch(re.escape(f"{program}: error: ") + _trainer_running(run), line), line
    assert not (tmp_path / "runs" / "b" / "export").exists()
    # Once no trainer holds it, it is a folder to train in, as before.
    assert str(checkpoint_dir.no_checkpoint(str(run))).endswith(
        f": train first (cifar10-train --train_dir={run}) or point --checkpoint_dir at a "
        f"training run")


# ---- a --checkpoint with a --checkpoint_dir that does not hold it --------------------

def _checkpoint(folder, step):
    """A checkpoint's files as their names make one (what is checked before TensorFlow)."""
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in (".index", ".data-00000-of-00001"):
        (folder / f"model.ckpt-{step}{suffix}").write_bytes(b"")
    return folder / f"model.ckpt-{step}"


@pytest.mark.parametrize("program", ["cifar10-predict", "cifar10-export", "cifar10-eval"])
def test_a_checkpoint_of_another_run_than_the_checkpoint_dir_given_is_refused(tmp_path,
                                                                              program):
    # Each program would use run c's checkpoint and class names, dropping run a unsaid.
    run_a, run_c = tmp_path / "runs" / "a" / "train", tmp_path / "runs" / "c" / "train"
    _checkpoint(run_a, 30)
    other = _checkpoint(run_c, 10)
    (tmp_path / "x.png").write_bytes(b"")
    args = {"cifar10-predict": [str(tmp_path / "x.png")],
            "cifar10-export": [f"--export_dir={tmp_path / 'export'}"],
            "cifar10-eval": [f"--eval_dir={tmp_path / 'eval'}", "--synthetic_data",
                             f"--data_dir={tmp_path / 'data'}"]}[program]
    result = call(program, f"--checkpoint_dir={run_a}", f"--checkpoint={other}.index", *args)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"{program}: error: --checkpoint {other}.index is not in --checkpoint_dir {run_a}: give "
        f"only --checkpoint to use it, or a --checkpoint_dir that holds it "
        f"(--checkpoint_dir={run_c}) (see {program} --help)"]
    assert sorted(os.listdir(tmp_path)) == ["runs", "x.png"]  # nothing made or fetched


def test_a_checkpoint_in_the_checkpoint_dir_however_named_goes_with_it(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "a" / "train"
    checkpoint = _checkpoint(run, 30)
    os.symlink(run, tmp_path / "latest")
    monkeypatch.chdir(run)
    for value, folder in ((f"{checkpoint}.index", f"{run}/"), ("model.ckpt-30", "."),
                          (str(tmp_path / "latest" / "model.ckpt-30"), str(run)),
                          # no checkpoint: layout.given says what it is
                          (str(tmp_path / "b" / "model.ckpt-30"), str(run))):
        assert layout.not_in_checkpoint_dir(value, folder) is None, value
    assert layout.not_in_checkpoint_dir("model.ckpt-30", str(tmp_path)) == (
        f"--checkpoint model.ckpt-30 is not in --checkpoint_dir {tmp_path}: give only "
        f"--checkpoint to use it, or a --checkpoint_dir that holds it (--checkpoint_dir=.)")


def test_an_evaluators_flags_txt_of_a_checkpoint_replays(tmp_path):
    # It records --checkpoint_dir at its default beside --checkpoint: not a contradiction.
    checkpoint = str(_checkpoint(tmp_path / "runs" / "c" / "train", 10))
    first, replay = flags.FlagValues(), flags.FlagValues()
    for values in (first, replay):
        eval_main.define_flags(values)
    process.parse_flags(["cifar10-eval", f"--checkpoint={checkpoint}"], "cifar10-eval", "",
                         first)
    (tmp_path / "flags.txt").write_text(cifar10_flags.flagfile_text(first))
    assert f"--checkpoint_dir={first['checkpoint_dir'].default}\n" in cifar10_flags.flagfile_text(first)
    process.parse_flags(["cifar10-eval", f"--flagfile={tmp_path / 'flags.txt'}"],
                         "cifar10-eval", "", replay)
    assert (replay.checkpoint, replay.checkpoint_dir) == (checkpoint, "/tmp/cifar10_train")


def test_a_folder_above_runs_names_the_runs_in_it_and_skips_a_subfolder_it_cannot_read(
        tmp_path, monkeypatch):
    for run in ("again", "train"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        for name in ("model.ckpt-5.index", "model.ckpt-5.data-00000-of-00001"):
            (tmp_path / "runs" / run / name).write_bytes(b"")
    (tmp_path / "runs" / "empty").mkdir()
    assert str(checkpoint_dir.no_checkpoint(str(tmp_path / "runs"), "No checkpoint file found")) \
        == (f"No checkpoint file found in {tmp_path / 'runs'}; its subfolders again, train hold "
            f"checkpoints: pass one of them as --checkpoint_dir, such as "
            f"--checkpoint_dir={tmp_path / 'runs' / 'again'}")
    (tmp_path / "other" / "private").mkdir(parents=True)
    listdir = os.listdir

    def refused(path="."):
        if str(path).endswith("private"):
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", refused)
    assert str(checkpoint_dir.no_checkpoint(str(tmp_path / "other"))) == (
        f"No checkpoint found in {tmp_path / 'other'}: train first (cifar10-train "
        f"--train_dir={tmp_path / 'other'}) or point --checkpoint_dir at a training run")
