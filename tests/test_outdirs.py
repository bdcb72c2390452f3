"""Each program's output folder kept to it (cifar10.cli.outdirs); the programs'
refusals are tested end to end here (cifar10-eval's and cifar10-export's, refused
before TensorFlow loads) and in test_train_main.py, test_follow.py, test_launch.py."""

from __future__ import annotations

import datetime
import json
import os

import pytest
from cli import assert_refused, call

from cifar10.cli import outdirs
from cifar10.cli import suggestions
from cifar10.data import synthetic
from cifar10.core.errors import Cifar10Error
from cifar10.runs import layout

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
    assert layout.run_folder("runs/a/model.ckpt-5", "runs/b") == "runs/a"
    assert layout.run_folder("model.ckpt-5.index", None) == "."
    assert layout.run_folder(None, "runs/b") == "runs/b"


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


# ---- results of an earlier run in the same --train_dir ----------------------------

HOUR_S = 3600
NEW_RUN = "2026-11-26T13:00:00+00:00"  # its start at step 0, by the trainer's clock


def stamp(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def run_started(run, new_run=NEW_RUN, resumed=None, file_clock_behind_s=HOUR_S):
    """``run``'s records of a start at step 0 at ``new_run`` (and of a resumed start at
    ``resumed``), by a trainer whose clock runs ``file_clock_behind_s`` ahead of the
    file system's: environment.jsonl is stamped by the file system, half a second after
    the latest start."""
    run.mkdir()
    starts = [(new_run, 0)] + ([(resumed, 30)] if resumed else [])
    (run / "flags.txt").write_text("".join(
        f"# cifar10-train, started {t} on vm at step {step}\n--train_dir={run}\n"
        for t, step in starts))
    (run / "environment.jsonl").write_text("".join(
        json.dumps({"program": "cifar10-train", "start_time": t, "start_step": step}) + "\n"
        for t, step in starts))
    written = stamp(starts[-1][0]) - file_clock_behind_s + 0.5
    os.utime(run / "environment.jsonl", (written, written))


def results_of(eval_dir, run, saved_s):
    """``eval_dir``'s results.jsonl: one result per checkpoint of ``run`` whose index
    file the file system stamped at each of ``saved_s`` (-1: unknown), scored 5 s
    later by an evaluator whose clock (wall_time) is the file system's."""
    eval_dir.mkdir()
    (eval_dir / "results.jsonl").write_text("".join(
        json.dumps({"checkpoint": f"{run}/model.ckpt-{i}", "step": i, "wall_time":
                    max(s, 0) + 5, "checkpoint_mtime_ns": int(s * 1e9)}) + "\n"
        for i, s in enumerate(saved_s)) + "{damaged\n")


@pytest.mark.parametrize("resumed", [None, "2026-11-26T15:00:00+00:00"])
def test_an_earlier_runs_results_are_told_by_the_file_systems_clock_alone(tmp_path, caplog,
                                                                           resumed):
    # The trainer's clock is an hour ahead of the file system's (and the evaluator's):
    # only the file system's times of the checkpoints and of the run's records are
    # compared, not the trainer's start with the evaluator's wall_time.
    run, eval_dir = tmp_path / "train", tmp_path / "eval"
    run_started(run, resumed=resumed)
    began_on_disk = stamp(NEW_RUN) - HOUR_S
    # Two checkpoints saved a minute and 3 s before the new run began, one 2 s after
    # it (before its record was written), one unknown (-1).
    results_of(eval_dir, run, [began_on_disk - 60, began_on_disk - 3, began_on_disk + 2, -1e-9])
    outdirs.warn_of_an_earlier_runs_results(str(eval_dir), str(run))
    assert [r.getMessage() for r in caplog.records] == [
        f"--eval_dir={eval_dir} holds 2 result(s) of an earlier run in {run}, of checkpoints "
        f"saved before this run started there at step 0 ({NEW_RUN}): this run's go beside "
        f"them, on the same TensorBoard curves; pass --eval_dir={tmp_path}/eval-2 to keep "
        f"them apart"]


@pytest.mark.parametrize("file_clock_behind_s", [HOUR_S, -HOUR_S, 0])
def test_a_runs_own_results_get_no_warning_whatever_the_clocks(tmp_path, caplog,
                                                               file_clock_behind_s):
    # Its checkpoints saved from a second after its start on, by a trainer whose clock
    # is an hour ahead of the file system's and the evaluator's (or behind, or not).
    run, eval_dir = tmp_path / "train", tmp_path / "eval"
    run_started(run, file_clock_behind_s=file_clock_behind_s)
    began_on_disk = stamp(NEW_RUN) - file_clock_behind_s
    results_of(eval_dir, run, [began_on_disk + 1, began_on_disk + 600])
    outdirs.warn_of_an_earlier_runs_results(str(eval_dir), str(run))
    assert caplog.records == []


def test_a_run_without_its_records_gets_no_warning(tmp_path, caplog):
    run, eval_dir = tmp_path / "train", tmp_path / "eval"
    run_started(run)
    results_of(eval_dir, run, [0.0])
    (run / "environment.jsonl").write_text("{damaged\n")
    outdirs.warn_of_an_earlier_runs_results(str(eval_dir), str(run))
    os.remove(run / "environment.jsonl")
    outdirs.warn_of_an_earlier_runs_results(str(eval_dir), str(run))
    assert caplog.records == []


def evaluators_folder(folder, scored):
    """``folder`` as an evaluator's whose latest start scored the run ``scored``."""
    folder.mkdir()
    (folder / "flags.txt").write_text(EVAL_START + f"--checkpoint_dir={scored}\n")
    return folder


def test_the_eval_dir_suggested_for_a_run_keeps_the_runs_name(tmp_path):
    # A run named as /tmp/cifar10_train is: its name and -eval, not /tmp/eval.
    assert suggestions.eval_dir_for(str(tmp_path / "cifar10_train")) == str(
        tmp_path / "cifar10_train-eval")
    # A run laid out as runs/a/train: runs/a/eval.
    assert suggestions.eval_dir_for(str(tmp_path / "a" / "train")) == str(tmp_path / "a" / "eval")


def test_the_eval_dir_suggested_is_never_a_folder_of_another(tmp_path):
    run = tmp_path / "cifar10_train"
    suggested = tmp_path / "cifar10_train-eval"
    # Empty, or the evaluator's folder of this run: suggested as it is.
    suggested.mkdir()
    assert suggestions.eval_dir_for(str(run)) == str(suggested)
    suggested.rmdir()
    evaluators_folder(suggested, run)
    assert suggestions.eval_dir_for(str(run)) == str(suggested)
    # Another run's results, a user's folder, a training run, a file: numbered.
    (suggested / "flags.txt").write_text(EVAL_START + f"--checkpoint_dir={tmp_path / 'b'}\n")
    assert suggestions.eval_dir_for(str(run)) == f"{suggested}-2"
    (tmp_path / "cifar10_train-eval-2").mkdir()
    (tmp_path / "cifar10_train-eval-2" / "notes.txt").write_text("mine")
    assert suggestions.eval_dir_for(str(run)) == f"{suggested}-3"
    evaluators_folder(tmp_path / "cifar10_train-eval-3", run)
    (tmp_path / "cifar10_train-eval-3" / "cifar10-train.lock").write_bytes(b"")
    (tmp_path / "cifar10_train-eval-4").write_text("a file")
    assert suggestions.eval_dir_for(str(run)) == f"{suggested}-5"


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


def listing(root):
    """Every path under ``root`` with its size and modification time."""
    return sorted((str(path.relative_to(root)), path.stat().st_size, path.stat().st_mtime_ns)
                  for path in root.rglob("*"))


def data_folder(tmp_path):
    return synthetic.write_dataset(str(tmp_path / "data"), records_per_file=2)


def training_run(folder, sign):
    """``folder`` as a training run, known by one ``sign``: its lock, a flags.txt of a
    cifar10-train start, or checkpoint files alone."""
    folder.mkdir(parents=True)
    if sign == "flags.txt":
        (folder / "flags.txt").write_text(
            "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n--max_steps=5\n")
    elif sign == "checkpoint":
        (folder / "model.ckpt-5.index").write_bytes(b"")
        (folder / "model.ckpt-5.data-00000-of-00001").write_bytes(b"")
    else:
        (folder / sign).write_bytes(b"")
    return folder


def test_cifar10_eval_refuses_a_data_folder_as_eval_dir_and_leaves_it_as_it_was(tmp_path):
    data = data_folder(tmp_path)
    before = listing(tmp_path / "data")
    result = call("cifar10-eval", f"--checkpoint_dir={tmp_path / 'a' / 'train'}",
                  f"--eval_dir={data}", "--run_once")
    assert_refused(result,
        f"cifar10-eval: error: --eval_dir={data} holds data files (batches.meta.txt, "
        f"data_batch_1.bin, ...): choose a directory for the evaluator's results, outside the "
        f"data, such as {tmp_path / 'a' / 'eval'}")
    assert listing(tmp_path / "data") == before


def test_cifar10_eval_refuses_a_folder_of_checkpoints_as_eval_dir(tmp_path):
    # No trainer's lock or flags.txt (a run copied by hand, or an older version's).
    other = training_run(tmp_path / "copied", "checkpoint")
    before = listing(other)
    result = call("cifar10-eval", f"--checkpoint_dir={tmp_path / 'a' / 'train'}",
                  f"--eval_dir={other}", "--run_once")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-eval: error: --eval_dir={other} is the directory of a training run "
        f"(model.ckpt-*), where cifar10-train keeps its checkpoints and records: choose a "
        f"directory of the evaluator's own, such as {tmp_path / 'a' / 'eval'}"]
    assert listing(other) == before


def export(tmp_path, export_dir):
    return call("cifar10-export", f"--checkpoint_dir={tmp_path / 'a' / 'train'}",
                f"--export_dir={export_dir}")


@pytest.mark.parametrize("sign, listed", [("cifar10-train.lock", "cifar10-train.lock"),
                                          ("flags.txt", "flags.txt"),
                                          ("checkpoint", "model.ckpt-*")])
def test_cifar10_export_refuses_a_training_runs_folder_as_export_dir(tmp_path, sign, listed):
    run = training_run(tmp_path / "a" / "train", sign)
    other = training_run(tmp_path / "b" / "train", sign)
    for export_dir, what in [(run, "the run it exports"), (other, f"a training run ({listed})")]:
        before = listing(export_dir)
        result = export(tmp_path, export_dir)
        assert_refused(result,
            f"cifar10-export: error: --export_dir={export_dir} is the directory of {what}, "
            f"where cifar10-train keeps its checkpoints and records: choose a folder for the "
            f"exports, such as {tmp_path / 'a' / 'export'}")
        assert listing(export_dir) == before


def test_cifar10_export_refuses_an_evaluators_folder_or_a_data_folder(tmp_path):
    (tmp_path / "a").mkdir()
    evaluators = evaluators_folder(tmp_path / "a" / "eval", tmp_path / "a" / "train")
    data = data_folder(tmp_path)
    for export_dir, error in [
            (evaluators, "is an evaluator's folder (its flags.txt records cifar10-eval): choose "
                         "a folder for the exports"),
            (data, "holds data files (batches.meta.txt, data_batch_1.bin, ...): choose a "
                   "directory for the exports, outside the data")]:
        before = listing(tmp_path)
        result = export(tmp_path, export_dir)
        assert_refused(result,
            f"cifar10-export: error: --export_dir={export_dir} {error}, such as "
            f"{tmp_path / 'a' / 'export'}")
        assert listing(tmp_path) == before


def test_cifar10_export_refuses_a_folder_of_images_loose_or_in_class_folders(tmp_path):
    """Other programs would take the folder for one of exports once a version folder
    is in it."""
    (tmp_path / "a").mkdir()
    for name in ("photos/cat.png", "photos/dog.jpg", "photos/x.bmp", "classes/cat/1.png",
                 "classes/dog/2.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    for export_dir, shown in [(tmp_path / "photos", "cat.png, dog.jpg, ..."),
                              (tmp_path / "classes", "in cat/, dog/")]:
        before = listing(tmp_path)
        assert_refused(export(tmp_path, export_dir),
            f"cifar10-export: error: --export_dir={export_dir} is a folder of images ({shown}):"
            f" choose a folder for the exports, such as {tmp_path / 'a' / 'export'}")
        assert listing(tmp_path) == before
    # An evaluator's pictures are its own, not a user's images: runs/a is not refused.
    evaluators = evaluators_folder(tmp_path / "a" / "eval", tmp_path / "a" / "train")
    (evaluators / "confusion_matrix.png").write_bytes(b"")
    outdirs.refuse_foreign_export_dir(str(tmp_path / "a"), str(tmp_path / "a" / "train"))


def test_a_folder_of_earlier_exports_is_the_exporters_own(tmp_path):
    exports = tmp_path / "a" / "export"
    (exports / "3").mkdir(parents=True)
    (exports / "3" / "saved_model.pb").write_bytes(b"")
    (exports / ".6-incomplete-x1").mkdir()  # an export at work, or one killed
    outdirs.refuse_foreign_export_dir(str(exports), str(tmp_path / "a" / "train"))
    # And it is the folder suggested; one that holds anything else is not.
    assert suggestions.export_dir_for(str(tmp_path / "a" / "train")) == str(exports)
    (exports / "notes.txt").write_text("mine")
    assert suggestions.export_dir_for(str(tmp_path / "a" / "train")) == f"{exports}-2"
    assert suggestions.export_dir_for(str(tmp_path / "cifar10_train")) == str(
        tmp_path / "cifar10_train-export")


def test_the_suggested_eval_dir_keeps_the_runs_results_apart(tmp_path):
    default_train, default_eval = str(tmp_path / "cifar10_train"), str(tmp_path / "cifar10_eval")

    def suggested(train_dir):
        return suggestions.eval_dir_to_suggest(str(train_dir), default_train, default_eval)

    def scored_by_the_evaluator(eval_dir, run_dir):
        os.makedirs(eval_dir, exist_ok=True)
        with open(os.path.join(eval_dir, "flags.txt"), "w") as f:
            f.write(f"# cifar10-eval, started 2026-11-26T10:00:00+00:00 on h\n"
                    f"--checkpoint_dir={run_dir}\n--eval_dir={eval_dir}\n")

    # The default run: the evaluator's default folder, while it is free or this run's.
    assert suggested(default_train) is None
    scored_by_the_evaluator(default_eval, default_train)
    assert suggested(default_train) is None
    # Another run's results there: one of the run's own, as the evaluator's warning says.
    scored_by_the_evaluator(default_eval, tmp_path / "runs" / "a" / "train")
    assert suggested(default_train) == f"{default_train}-eval"
    # Any other run: its own, beside it.
    assert suggested(tmp_path / "runs" / "b" / "train") == str(tmp_path / "runs" / "b" / "eval")
    assert suggested(tmp_path / "mine") == str(tmp_path / "mine-eval")


def exports_folder(folder, *steps):
    """``folder`` as cifar10-export leaves it: a SavedModel version folder per step."""
    for step in steps:
        (folder / str(step) / "variables").mkdir(parents=True)
        (folder / str(step) / "saved_model.pb").write_bytes(b"")
    return folder


EXPORT_FOLDERS = {
    "exports": ("", "a folder of exports (SavedModel version folders 3, 6)"),
    "version": ("6", "an export (a SavedModel: saved_model.pb)"),
}


@pytest.mark.parametrize("kind", EXPORT_FOLDERS)
def test_cifar10_eval_refuses_an_export_folder_as_eval_dir(tmp_path, kind):
    subfolder, what = EXPORT_FOLDERS[kind]
    eval_dir = exports_folder(tmp_path / "a" / "export", 3, 6) / subfolder
    before = listing(tmp_path)
    result = call("cifar10-eval", f"--checkpoint_dir={tmp_path / 'a' / 'train'}",
                  f"--eval_dir={eval_dir}", "--run_once")
    assert_refused(result,
        f"cifar10-eval: error: --eval_dir={eval_dir} is {what}: choose a directory of the "
        f"evaluator's own, such as {tmp_path / 'a' / 'eval'}")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("kind", EXPORT_FOLDERS)
def test_cifar10_train_refuses_an_export_folder_as_train_dir(tmp_path, kind):
    # The folder suggested goes beside the exports, not among them.
    subfolder, what = EXPORT_FOLDERS[kind]
    train_dir = exports_folder(tmp_path / "a" / "export", 3, 6) / subfolder
    before = listing(tmp_path)
    result = call("cifar10-train", f"--train_dir={train_dir}", "--synthetic_data",
                  f"--data_dir={tmp_path / 'data'}", "--max_steps=1")
    assert_refused(result,
        f"cifar10-train: error: --train_dir={train_dir} is {what}: choose a directory of the "
        f"run's own, such as {tmp_path / 'a' / 'train'}")
    assert listing(tmp_path) == before  # no data/ either


def test_a_folder_of_one_export_is_named_so(tmp_path):
    exports = exports_folder(tmp_path / "exports", 5)
    with pytest.raises(Cifar10Error, match=r"is a folder of exports \(SavedModel version "
                                           r"folder 5\): "):
        outdirs.refuse_foreign_eval_dir(str(exports), str(tmp_path / "a" / "train"))


def test_numbered_folders_that_are_no_savedmodels_are_no_exports(tmp_path):
    # Class folders named by label, say.
    for label in ("0", "1"):
        (tmp_path / "mine" / label).mkdir(parents=True)
    outdirs.refuse_foreign_train_dir(str(tmp_path / "mine"))
    outdirs.refuse_foreign_eval_dir(str(tmp_path / "mine"), str(tmp_path / "a" / "train"))


# A folder of data sets (a --data_dir) holds one of these.
DATA_SETS = {
    "cifar-10-batches-bin": "test_batch.bin",  # downloaded, or cifar10-prepare's
    "synthetic/cifar-10-batches-bin": "test_batch.bin",  # --synthetic_data's
    "cifar-100-binary": "test.bin",
    "cifar-100-fine-batches-bin": "test_batch.bin",
}


@pytest.mark.parametrize("held", DATA_SETS)
def test_a_folder_of_data_sets_is_refused_as_every_programs_output_folder(tmp_path, held,
                                                                         monkeypatch):
    data_dir = tmp_path / "cifar10_data"
    (data_dir / held).mkdir(parents=True)
    (data_dir / held / DATA_SETS[held]).write_bytes(b"")
    (data_dir / "cifar-10-binary.tar.gz").write_bytes(b"")
    shown = held.split("/")[0] + "/"
    before = listing(tmp_path)
    run = tmp_path / "a" / "train"
    monkeypatch.setattr(suggestions, "DEFAULT_TRAIN_DIR", str(tmp_path / "cifar10_train"))
    for program, flag, args, what, suggested in [
            ("cifar10-train", "train_dir",
             ["--synthetic_data", f"--data_dir={tmp_path / 'd'}", "--max_steps=1"],
             "the run's checkpoints and records", tmp_path / "cifar10_train"),
            ("cifar10-eval", "eval_dir", [f"--checkpoint_dir={run}", "--run_once"],
             "the evaluator's results", tmp_path / "a" / "eval"),
            ("cifar10-export", "export_dir", [f"--checkpoint_dir={run}"], "the exports",
             tmp_path / "a" / "export")]:
        result = call(program, f"--{flag}={data_dir}", *args)
        assert_refused(result,
            f"{program}: error: --{flag}={data_dir} is a folder of data sets, as a --data_dir "
            f"is (it holds {shown}): choose a directory for {what}, outside the data, such as "
            f"{suggested}")
    assert listing(tmp_path) == before


def test_what_is_not_a_folder_of_data_sets_or_exports_is_taken(tmp_path):
    # The defaults side by side: /tmp/cifar10_data beside /tmp/cifar10_train.
    (tmp_path / "cifar10_data" / "cifar-10-batches-bin").mkdir(parents=True)
    (tmp_path / "cifar10_data" / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"")
    run = str(tmp_path / "cifar10_train")
    outdirs.refuse_foreign_train_dir(run)
    outdirs.refuse_foreign_eval_dir(str(tmp_path / "cifar10_eval"), run)
    outdirs.refuse_foreign_export_dir(str(tmp_path / "cifar10_export"), run)
    # Empty folders, and a project folder that holds the folder of data sets.
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "empty", tmp_path):
        outdirs.refuse_foreign_train_dir(str(folder))
        outdirs.refuse_foreign_eval_dir(str(folder), run)
        outdirs.refuse_foreign_export_dir(str(folder), run)
    # A folder of earlier exports for the exporter: test_a_folder_of_earlier_exports_...


@pytest.mark.parametrize("sign", ["model.ckpt-500.index", "cifar10-train.lock"])
def test_a_run_that_holds_its_data_sets_or_an_export_still_resumes(tmp_path, sign):
    # Trained with --data_dir and --train_dir the same folder, before they were refused.
    training_run(tmp_path / "run", sign)
    (tmp_path / "run" / "cifar-10-batches-bin").mkdir()
    (tmp_path / "run" / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"")
    exports_folder(tmp_path / "run", 5)
    outdirs.refuse_foreign_train_dir(str(tmp_path / "run"))


def test_a_runs_parent_folder_is_refused_as_a_new_train_dir(tmp_path):
    parent = tmp_path / "runs" / "par"
    (parent / "train").mkdir(parents=True)
    for name in ("model.ckpt-20.index", "model.ckpt-20.data-00000-of-00001"):
        (parent / "train" / name).write_bytes(b"")
    (parent / "eval").mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = call("cifar10-train", f"--train_dir={parent}", "--synthetic_data",
                  f"--data_dir={tmp_path / 'data'}", "--max_steps=1")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-train: error: --train_dir={parent} is no training run but holds a training "
        f"run, {parent / 'train'}: pass --train_dir={parent / 'train'} to resume it, or a "
        f"folder of a new run's own")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing made
    # Two runs in it: both named.
    (parent / "b").mkdir()
    for name in ("model.ckpt-1.index", "model.ckpt-1.data-00000-of-00001"):
        (parent / "b" / name).write_bytes(b"")
    with pytest.raises(Cifar10Error, match=rf"holds training runs \({parent / 'b'}, "
                                           rf"{parent / 'train'}\): pass --train_dir="):
        outdirs.refuse_foreign_train_dir(str(parent))
    # A run that is one itself (its own checkpoint) resumes, whatever it holds.
    (parent / "model.ckpt-3.index").write_bytes(b"")
    outdirs.refuse_foreign_train_dir(str(parent))


def test_the_train_dir_suggested_for_a_data_folder_is_a_free_one(tmp_path, monkeypatch):
    """In place of a folder of data: the trainer's default where it is free (not there,
    or empty), else numbered past a run, a user's folder and a file."""
    default = tmp_path / "cifar10_train"
    monkeypatch.setattr(suggestions, "DEFAULT_TRAIN_DIR", str(default))
    (tmp_path / "data" / "test_batch.bin").parent.mkdir()
    (tmp_path / "data" / "test_batch.bin").write_bytes(b"")
    data = str(tmp_path / "data")
    assert suggestions.train_dir_instead(data) == str(default)  # not there yet
    default.mkdir()
    assert suggestions.train_dir_instead(data) == str(default)  # empty
    (default / "cifar10-train.lock").write_bytes(b"")  # another run: resumed, were it taken
    (tmp_path / "cifar10_train-2").write_text("a file")
    (tmp_path / "cifar10_train-3").mkdir()
    (tmp_path / "cifar10_train-3" / "notes.txt").write_text("mine")
    before = listing(tmp_path)
    with pytest.raises(Cifar10Error) as error:
        outdirs.refuse_foreign_train_dir(data)
    assert str(error.value) == (
        f"--train_dir={data} holds data files (test_batch.bin): choose a directory for the "
        f"run's checkpoints and records, outside the data, such as {tmp_path / 'cifar10_train-4'}")
    assert listing(tmp_path) == before
    # The folder of data is never its own suggestion, even as the default.
    monkeypatch.setattr(suggestions, "DEFAULT_TRAIN_DIR", data)
    assert suggestions.train_dir_instead(data) == f"{data}-2"


def test_the_trainer_never_suggests_a_train_dir_that_holds_anything(tmp_path):
    """Whatever the machine holds in /tmp/cifar10_train (another run, say), the folder the
    refusal of a data folder suggests is free: not there yet, or empty."""
    (tmp_path / "test_batch.bin").write_bytes(b"")
    result = call("cifar10-train", f"--train_dir={tmp_path}", "--synthetic_data",
                  f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 1
    suggested = result.stderr.splitlines()[-1].rpartition(", such as ")[2]
    assert suggested.startswith("/tmp/cifar10_train")
    assert not os.path.lexists(suggested) or (os.path.isdir(suggested)
                                              and not os.listdir(suggested)), suggested
    assert sorted(os.listdir(tmp_path)) == ["test_batch.bin"]


def test_a_suggested_folder_fits_the_longest_name_a_file_system_takes(tmp_path):
    train_dir = tmp_path / ("r" * 250)
    suggested = suggestions.eval_dir_for(str(train_dir))
    assert os.path.dirname(suggested) == str(tmp_path)
    assert os.path.basename(suggested) == "r" * 247 + "-eval"  # with room for "-99"
    os.mkdir(suggested)  # the file system takes it
    # Characters of several bytes are cut whole.
    wide = tmp_path / ("é" * 126)  # 252 bytes
    name = os.path.basename(suggestions.eval_dir_for(str(wide)))
    assert name == "é" * 123 + "-eval" and len(os.fsencode(name + "-99")) <= 255
    # A short name is as before.
    assert suggestions.eval_dir_for(str(tmp_path / "cifar10_train")) == str(
        tmp_path / "cifar10_train-eval")


SAME_FOLDER = ("{program}: error: --data_dir={data} is the --{flag} too ({what} would go "
               "among the data, and later starts would refuse the folder as one or the "
               "other): give them different folders, such as --data_dir={suggested}")


@pytest.mark.parametrize("linked", [False, True])
def test_cifar10_train_refuses_its_train_dir_as_data_dir_at_the_first_start(tmp_path, linked):
    # The first start trained with its data in the run's folder; every later one (a
    # resume, its flags.txt, the evaluator) refused the folder as a run's, not data.
    run = tmp_path / "runs" / "a" / "train"
    data = run
    if linked:
        run.mkdir(parents=True)
        data = tmp_path / "link"
        data.symlink_to(run)
    result = call("cifar10-train", f"--train_dir={run}", f"--data_dir={data}",
                  "--synthetic_data", "--synthetic_records=20", "--max_steps=1")
    assert_refused(result, SAME_FOLDER.format(
        program="cifar10-train", data=data, flag="train_dir",
        what="the run's checkpoints and records", suggested=tmp_path / "runs" / "a" / "data"))
    assert not run.exists() or os.listdir(run) == []


def test_cifar10_eval_refuses_its_eval_dir_as_data_dir_at_the_first_start(tmp_path,
                                                                          trained_run):
    run_dir, _ = trained_run
    ev = tmp_path / "ev"
    result = call("cifar10-eval", f"--checkpoint_dir={run_dir}", f"--eval_dir={ev}",
                  f"--data_dir={ev}", "--synthetic_data", "--synthetic_records=20",
                  "--run_once")
    assert_refused(result, SAME_FOLDER.format(
        program="cifar10-eval", data=ev, flag="eval_dir", what="the evaluator's results",
        suggested=tmp_path / "ev-data"))
    assert not ev.exists()


def test_a_run_whose_data_went_into_its_folder_is_told_the_same(tmp_path):
    # A run an earlier version let train on data in its own folder: the line names both
    # flags, not the folder as a run's alone; its data is left where it is.
    run = tmp_path / "same"
    synthetic.write_dataset(str(run / "synthetic"), records_per_file=20)
    (run / "cifar10-train.lock").write_text("")
    before = listing(run)
    result = call("cifar10-train", f"--train_dir={run}", f"--data_dir={run}",
                  "--synthetic_data", "--synthetic_records=20", "--max_steps=10")
    assert_refused(result, SAME_FOLDER.format(
        program="cifar10-train", data=run, flag="train_dir",
        what="the run's checkpoints and records", suggested=tmp_path / "same-data"))
    assert listing(run) == before
