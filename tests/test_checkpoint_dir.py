"""What the programs say of a --checkpoint_dir or --checkpoint that is no training run's
(cifar10.cli.checkpoint_dir, cifar10.runs.checkpoint_files)."""

from __future__ import annotations

import os
import re
import socket

import pytest
from absl import flags
from cli import assert_refused, call

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
    """The one line of cifar10-predict given ``folder``, which it must refuse."""
    image = tmp_path / "x.png"
    image.write_bytes(b"")
    result = call("cifar10-predict", f"--checkpoint_dir={folder}", str(image))
    assert (result.returncode, result.stdout) == (1, "")
    [line] = result.stderr.splitlines()
    return line


def test_a_folder_without_checkpoints_is_one_line_saying_where_to_look(tmp_path):
    missing, empty, parent = tmp_path / "nonexist", tmp_path / "my runs", tmp_path / "runs"
    empty.mkdir()
    _checkpoint(parent / "b c", 1)
    photos = tmp_path / "photos"
    (photos / "cat").mkdir(parents=True)
    (photos / "cat" / "1.png").write_bytes(b"")
    _export(tmp_path / "export" / "20")
    for folder, said in [
            (missing, f": there is no such folder; point --checkpoint_dir at a training run's "
                      f"--train_dir, or train first (cifar10-train --train_dir={missing})"),
            (empty, f": train first (cifar10-train --train_dir='{empty}') or point "
                    f"--checkpoint_dir at a training run"),
            (parent, f"; {parent / 'b c'} holds checkpoints: pass "
                     f"--checkpoint_dir='{parent / 'b c'}'"),
            (photos, ", a folder of other files, not a training run: point --checkpoint_dir "
                     "at a training run's --train_dir"),
            (tmp_path / "export", ", cifar10-export's folder, not a training run: point "
                                  "--checkpoint_dir at a training run's --train_dir")]:
        assert predict_refusal(tmp_path, folder) == (
            f"cifar10-predict: error: No checkpoint found in {folder}{said}")


def test_the_polling_evaluator_refuses_a_folder_that_is_no_run_rather_than_wait(tmp_path):
    # A new or empty folder is waited for (a trainer may start there: test_run_data).
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "1.png").write_bytes(b"")
    result = call("cifar10-eval", f"--checkpoint_dir={tmp_path / 'photos'}",
                  f"--eval_dir={tmp_path / 'eval'}")
    assert_refused(result, f"cifar10-eval: error: No checkpoint file found in "
                           f"{tmp_path / 'photos'}, a folder of other files, not a training "
                           f"run: point --checkpoint_dir at a training run's --train_dir")
    assert not (tmp_path / "eval").exists()


def test_a_savedmodels_variables_are_not_taken_for_a_checkpoint(tmp_path):
    _export(tmp_path / "export" / "20")
    variables = tmp_path / "export" / "20" / "variables" / "variables"
    for value in (str(variables), f"{variables}.index"):
        with pytest.raises(Cifar10Error, match="is the variables of an export"):
            layout.given(value)
    # A checkpoint of that name elsewhere is still one.
    plain = _checkpoint(tmp_path / "other" / "variables", 1).parent / "variables"
    for suffix in (".index", ".data-00000-of-00001"):
        (plain.parent / f"variables{suffix}").write_bytes(b"")
    assert layout.given(str(plain)) == str(plain)


# The line of a run whose trainer (this process, holding the run's lock) has not saved yet.
def _trainer_running(run) -> str:
    return (re.escape(f"No checkpoint in {run} yet: its trainer is running (PID {os.getpid()} "
                      f"on host {socket.gethostname()}, started ")
            + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
            + re.escape(") and has not saved one; run again after its first save (every "
                        "--checkpoint_steps steps)"))


def test_a_run_whose_trainer_has_not_saved_yet_is_said_to_be_running(tmp_path):
    # Not "train first": its trainer is at it (it holds the run's lock, as a trainer
    # does); cifar10-eval --run_once says the same (test_eval_main.py).
    run = tmp_path / "runs" / "b" / "train"
    run.mkdir(parents=True)
    program = "cifar10-export"
    held = layout.TrainerLock(str(run))
    held.acquire()
    try:
        result = call(program, f"--checkpoint_dir={run}",
                      f"--export_dir={tmp_path / 'runs' / 'b' / 'export'}")
    finally:
        held.release()
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert re.fullmatch(re.escape(f"{program}: error: ") + _trainer_running(run), line), line
    assert not (tmp_path / "runs" / "b" / "export").exists()


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
