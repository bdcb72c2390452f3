"""Each program's output folder kept to it (cifar10.cli.outdirs); the programs'
refusals are tested end to end in test_train_main.py, test_follow.py, test_launch.py."""

from __future__ import annotations

import pytest

from cifar10.cli import outdirs
from cifar10.core.errors import Cifar10Error
from cifar10.runs import checkpoint_files

EVAL_START = "# cifar10-eval, started 2026-11-26T10:00:00+00:00 on h\n--run_once\n"


def test_an_evaluators_folder_is_refused_and_the_suggestion_is_another_folder(tmp_path):
    train_dir = tmp_path / "train"  # an evaluator's folder, named as a run's would be
    train_dir.mkdir()
    (train_dir / "flags.txt").write_text(EVAL_START)
    with pytest.raises(Cifar10Error) as error:
        outdirs.refuse_foreign_train_dir(str(train_dir))
    assert str(error.value).endswith(f"choose a directory of the run's own, such as "
                                     f"{tmp_path / 'train-2'}")


@pytest.mark.parametrize("sign", ["model.ckpt-500.index", "cifar10-train.lock"])
def test_a_run_an_older_evaluator_wrote_into_still_resumes(tmp_path, sign):
    # Runs of older versions: no cifar10-train start recorded, an evaluator's start
    # in the same folder; a checkpoint or the trainer's lock says it is a run.
    (tmp_path / "flags.txt").write_text(EVAL_START)
    (tmp_path / sign).write_bytes(b"")
    outdirs.refuse_foreign_train_dir(str(tmp_path))


def test_an_eval_dir_named_eval_that_is_a_run_is_given_another_name(tmp_path):
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "cifar10-train.lock").write_bytes(b"")
    with pytest.raises(Cifar10Error, match=f"such as {tmp_path / 'eval-2'}$"):
        outdirs.refuse_training_dir(str(eval_dir), str(tmp_path / "train"))


def test_the_run_scored_is_the_checkpoints_folder_else_the_checkpoint_dir():
    assert checkpoint_files.run_folder("runs/a/model.ckpt-5", "runs/b") == "runs/a"
    assert checkpoint_files.run_folder("model.ckpt-5.index", None) == "."
    assert checkpoint_files.run_folder(None, "runs/b") == "runs/b"


def test_the_run_an_evaluators_folder_scored_is_found_as_the_evaluator_finds_it(tmp_path,
                                                                                 caplog):
    # Its last start scored a --checkpoint of run a: scoring run a again says nothing.
    run_a = tmp_path / "a"
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "flags.txt").write_text(
        f"# cifar10-eval, started 2026-11-26T10:00:00+00:00 on h\n"
        f"--checkpoint={run_a / 'model.ckpt-5'}\n--checkpoint_dir=/tmp/cifar10_train\n")
    outdirs.warn_of_another_runs_results(str(tmp_path / "eval"), str(run_a))
    assert caplog.records == []
    outdirs.warn_of_another_runs_results(str(tmp_path / "eval"), "/tmp/cifar10_train")
    assert [r.getMessage().split(": ")[0] for r in caplog.records] == [
        f"--eval_dir={tmp_path / 'eval'} holds the results of another run ({run_a})"]
