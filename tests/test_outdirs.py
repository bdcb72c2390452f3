"""Each program's output folder kept to it (cifar10.cli.outdirs); the programs'
refusals are tested end to end in test_train_main.py, test_follow.py, test_launch.py."""

from __future__ import annotations

import pytest

from cifar10.cli import outdirs
from cifar10.core.errors import Cifar10Error

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
