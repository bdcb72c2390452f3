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


def evaluators_folder(folder, scored):
    """``folder`` as an evaluator's whose latest start scored the run ``scored``."""
    folder.mkdir()
    (folder / "flags.txt").write_text(EVAL_START + f"--checkpoint_dir={scored}\n")
    return folder


def test_the_eval_dir_suggested_for_a_run_keeps_the_runs_name(tmp_path):
    # A run named as /tmp/cifar10_train is: its name and -eval, not /tmp/eval.
    assert outdirs.eval_dir_for(str(tmp_path / "cifar10_train")) == str(
        tmp_path / "cifar10_train-eval")
    # A run laid out as runs/a/train: runs/a/eval.
    assert outdirs.eval_dir_for(str(tmp_path / "a" / "train")) == str(tmp_path / "a" / "eval")


def test_the_eval_dir_suggested_is_never_a_folder_of_another(tmp_path):
    run = tmp_path / "cifar10_train"
    suggested = tmp_path / "cifar10_train-eval"
    # Empty, or the evaluator's folder of this run: suggested as it is.
    suggested.mkdir()
    assert outdirs.eval_dir_for(str(run)) == str(suggested)
    suggested.rmdir()
    evaluators_folder(suggested, run)
    assert outdirs.eval_dir_for(str(run)) == str(suggested)
    # Another run's results, a user's folder, a training run, a file: numbered.
    (suggested / "flags.txt").write_text(EVAL_START + f"--checkpoint_dir={tmp_path / 'b'}\n")
    assert outdirs.eval_dir_for(str(run)) == f"{suggested}-2"
    (tmp_path / "cifar10_train-eval-2").mkdir()
    (tmp_path / "cifar10_train-eval-2" / "notes.txt").write_text("mine")
    assert outdirs.eval_dir_for(str(run)) == f"{suggested}-3"
    evaluators_folder(tmp_path / "cifar10_train-eval-3", run)
    (tmp_path / "cifar10_train-eval-3" / "cifar10-train.lock").write_bytes(b"")
    (tmp_path / "cifar10_train-eval-4").write_text("a file")
    assert outdirs.eval_dir_for(str(run)) == f"{suggested}-5"


def test_the_refusal_of_another_runs_folder_as_eval_dir_suggests_one_for_the_run_scored(
        tmp_path):
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "cifar10-train.lock").write_bytes(b"")
    with pytest.raises(Cifar10Error) as error:
        outdirs.refuse_training_dir(str(other), str(tmp_path / "cifar10_train"))
    assert str(error.value).endswith(f"such as {tmp_path / 'cifar10_train-eval'}")


def test_the_train_dir_suggested_for_an_evaluators_folder_is_a_new_one(tmp_path):
    eval_dir = evaluators_folder(tmp_path / "my_eval", tmp_path / "a")
    with pytest.raises(Cifar10Error, match=f"such as {tmp_path / 'my_eval-train'}$"):
        outdirs.refuse_foreign_train_dir(str(eval_dir))
    (tmp_path / "my_eval-train").mkdir()
    (tmp_path / "my_eval-train" / "notes.txt").write_text("mine")
    with pytest.raises(Cifar10Error, match=f"such as {tmp_path / 'my_eval-train-2'}$"):
        outdirs.refuse_foreign_train_dir(str(eval_dir))
