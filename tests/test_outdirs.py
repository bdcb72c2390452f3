"""Whose a folder is (cifar10.cli.outdirs): each program writes only into a folder
that is new, empty or its own (its marker, or a run's files from before markers),
refusing another program's and a user's with one line, the folder left as it was."""

from __future__ import annotations

import datetime
import json
import os

import pytest
from cli import assert_refused, call

from cifar10.cli import outdirs
from cifar10.core.errors import Cifar10Error

TRAIN_START = "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n--max_steps=5\n"
EVAL_START = "# cifar10-eval, started 2026-11-26T10:00:00+00:00 on h\n--run_once\n"

# Folders of each program as earlier versions left them (no marker): {name: {file: text}}.
LEGACY = {
    "state file": ("cifar10-train", {"checkpoint": 'model_checkpoint_path: "model.ckpt-5"\n'}),
    "trainer's flags.txt": ("cifar10-train", {"flags.txt": TRAIN_START}),
    "checkpoint": ("cifar10-train", {"model.ckpt-5.index": "", "model.ckpt-5.data-00000-of-00001": ""}),
    "lock": ("cifar10-train", {"cifar10-train.lock": ""}),
    "results": ("cifar10-eval", {"results.jsonl": "{}\n"}),
    "evaluator's flags.txt": ("cifar10-eval", {"flags.txt": EVAL_START}),
    "exports": ("cifar10-export", {"3/saved_model.pb": "", "3/variables/v": ""}),
    "an export": ("cifar10-export", {"saved_model.pb": ""}),
    "a killed export": ("cifar10-export", {".6-incomplete-x1/.cifar10-incomplete": ""}),
}


def folder_of(path, files):
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def listing(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*"))


@pytest.mark.parametrize("kind", LEGACY)
def test_a_folder_of_an_earlier_version_is_its_programs(tmp_path, kind):
    program, files = LEGACY[kind]
    folder = str(folder_of(tmp_path, files))
    assert outdirs.whose(folder) == program
    with outdirs.claimed("out", folder, program):  # its own: marked now
        pass
    assert (tmp_path / outdirs.MARKER).read_text() == program + "\n"
    assert outdirs.whose(folder) == program


def test_a_new_or_empty_folder_is_nobodys_and_a_folder_of_other_files_a_users(tmp_path):
    assert outdirs.whose(str(tmp_path / "new")) == ""
    assert outdirs.whose(str(tmp_path)) == ""
    (tmp_path / "notes.txt").write_text("mine")
    assert outdirs.whose(str(tmp_path)) is None
    assert outdirs.whose(str(tmp_path / "notes.txt")) is None
    # A run (with an older evaluator's files in it) stays the trainer's.
    folder_of(tmp_path / "run", {"flags.txt": EVAL_START, "cifar10-train.lock": ""})
    assert outdirs.whose(str(tmp_path / "run")) == "cifar10-train"


PROGRAMS = {  # program: (its folder flag, the other flags of a start that gets that far)
    "cifar10-train": ("train_dir", ["--synthetic_data", "--max_steps=1", "--data_dir=d"]),
    "cifar10-eval": ("eval_dir", ["--run_once", "--checkpoint_dir=run", "--data_dir=d"]),
    "cifar10-export": ("export_dir", ["--checkpoint_dir=run"]),
}
OTHERS = {  # what the folder holds: (whose it is as the line says, its files)
    "trainer's": ("is cifar10-train's folder", {outdirs.MARKER: "cifar10-train\n"}),
    "evaluator's": ("is cifar10-eval's folder", LEGACY["results"][1]),
    "exporter's": ("is cifar10-export's folder", LEGACY["exports"][1]),
    "data": ("is a folder of other files", {"cifar-10-batches-bin/test_batch.bin": "x"}),
    "images": ("is a folder of other files", {"cat/1.png": "", "dog/2.jpg": ""}),
}


@pytest.mark.parametrize("program, other", [(p, o) for p in PROGRAMS for o in OTHERS
                                             if f"{p}'s" not in OTHERS[o][0]])
def test_each_program_refuses_a_folder_not_its_own_and_leaves_it_as_it_was(
        tmp_path, program, other):
    flag, args = PROGRAMS[program]
    what, files = OTHERS[other]
    folder = folder_of(tmp_path / "out", files)
    before = listing(tmp_path)
    result = call(program, f"--{flag}={folder}", *args)
    assert_refused(result, f"{program}: error: --{flag}={folder} {what}: choose a new or "
                           f"empty folder for {program} (or one it wrote before)")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_runs_best_folder_is_no_programs_output_folder(tmp_path, program):
    best = folder_of(tmp_path / "run", {"best/best.json": '{"step": null}'}) / "best"
    flag, args = PROGRAMS[program]
    before = listing(tmp_path)
    assert_refused(call(program, f"--{flag}={best}", *args),
                   f"{program}: error: --{flag}={best} is the best checkpoint's folder of the run "
                   f"in {tmp_path / 'run'}: choose a new or empty folder for {program} (or one it "
                   f"wrote before)")
    assert listing(tmp_path) == before


def test_the_evaluator_refuses_the_folder_of_the_run_it_scores_before_it_starts(tmp_path):
    run = tmp_path / "run"
    assert_refused(call("cifar10-eval", f"--checkpoint_dir={run}", f"--eval_dir={run}"),
                   f"cifar10-eval: error: --eval_dir={run} is the folder of the run it reads: "
                   f"choose a new or empty folder for cifar10-eval (or one it wrote before)")
    assert not run.exists()


def test_each_program_marks_its_folder_and_goes_on_in_it(tmp_path, trained_run):
    run_dir, _ = trained_run
    data = run_dir.parent / "data"
    train = tmp_path / "train"
    args = ("--synthetic_data", f"--data_dir={data}", "--synthetic_records=50", "--batch_size=4")
    for _ in range(2):  # the second start resumes in the folder the first marked
        assert call("cifar10-train", f"--train_dir={train}", "--max_steps=1", *args
                    ).returncode == 0
    assert call("cifar10-eval", f"--checkpoint_dir={train}", f"--eval_dir={tmp_path / 'eval'}",
                "--run_once", *args).returncode == 0
    assert call("cifar10-export", f"--checkpoint_dir={train}",
                f"--export_dir={tmp_path / 'export'}").returncode == 0
    assert {name: outdirs.whose(str(tmp_path / name)) for name in ("train", "eval", "export")} \
        == {"train": "cifar10-train", "eval": "cifar10-eval", "export": "cifar10-export"}
    assert (train / outdirs.MARKER).read_text() == "cifar10-train\n"


def test_a_program_that_fails_before_it_wrote_leaves_no_folder_it_made(tmp_path):
    for wrote in ([], ["flags.txt"]):
        folder = tmp_path / "a" / "out"
        with pytest.raises(KeyboardInterrupt):
            with outdirs.claimed("out", str(folder), "cifar10-eval"):
                for name in wrote:
                    (folder / name).write_text("")
                raise KeyboardInterrupt
        assert os.listdir(folder) == wrote if wrote else not (tmp_path / "a").exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")
def test_a_folder_that_cannot_be_written_is_one_line_at_the_first_write(tmp_path):
    # (A folder under a file is refused as one that cannot be read, before that.)
    folder = "/proc/cifar10-run"
    result = call("cifar10-train", f"--train_dir={folder}", "--synthetic_data",
                  f"--data_dir={tmp_path / 'data'}", "--synthetic_records=20", "--max_steps=1")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-train: error: cannot write in --train_dir {folder} (No such file or "
        f"directory); choose a folder you can write")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("program, flag, args", [
    ("cifar10-train", "train_dir", ["--synthetic_data"]),
    ("cifar10-eval", "eval_dir", ["--synthetic_data", "--run_once"]),
])
def test_a_programs_folder_is_no_data_dir(tmp_path, trained_run, program, flag, args):
    run = folder_of(tmp_path / "run", {"cifar10-train.lock": ""})
    out = tmp_path / "out"
    ckpt = [] if program == "cifar10-train" else [f"--checkpoint_dir={trained_run[0]}"]
    before = listing(tmp_path)
    assert_refused(call(program, f"--{flag}={out}", f"--data_dir={out}", *ckpt, *args),
                   f"{program}: error: --data_dir={out} is the program's output folder too: "
                   f"give the data a folder of its own")
    assert_refused(call(program, f"--{flag}={out}", f"--data_dir={run}", *ckpt, *args),
                   f"{program}: error: --data_dir={run} is cifar10-train's folder, not a data "
                   f"folder: {outdirs.FETCH_INSTEAD}")
    assert listing(tmp_path) == before


def test_cifar10_prepare_refuses_a_programs_folder_as_its_data_dir(tmp_path):
    run = folder_of(tmp_path / "run", {"cifar10-train.lock": ""})
    with pytest.raises(Cifar10Error, match="is cifar10-train's folder, not a data folder: "
                                           "name a new folder to write the data set in"):
        outdirs.refuse_as_data_dir(str(run), fix="name a new folder to write the data set in")


def test_the_eval_dir_the_trainer_suggests_goes_beside_the_run(tmp_path):
    assert outdirs.eval_dir_for("/tmp/cifar10_train") is None  # the evaluator's default
    assert outdirs.eval_dir_for(str(tmp_path / "a" / "train")) == str(tmp_path / "a" / "eval")
    assert outdirs.eval_dir_for(str(tmp_path / "mine")) == f"{tmp_path / 'mine'}-eval"


# ---- results of another run, or of an earlier run in the same --train_dir -----------

HOUR_S = 3600
NEW_RUN = "2026-11-26T13:00:00+00:00"  # its start at step 0, by the trainer's clock


def stamp(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def run_started(run, file_clock_behind_s, resumed=None):
    """``run``'s records of a start at step 0 (and of a resume at ``resumed``) by a
    trainer whose clock runs ``file_clock_behind_s`` ahead of the file system's."""
    run.mkdir()
    starts = [(NEW_RUN, 0)] + ([(resumed, 30)] if resumed else [])
    (run / "flags.txt").write_text("".join(
        f"# cifar10-train, started {t} on vm at step {step}\n--train_dir={run}\n"
        for t, step in starts))
    (run / "environment.jsonl").write_text("".join(
        json.dumps({"program": "cifar10-train", "start_time": t, "start_step": step}) + "\n"
        for t, step in starts))
    written = stamp(starts[-1][0]) - file_clock_behind_s + 0.5
    os.utime(run / "environment.jsonl", (written, written))
    return stamp(NEW_RUN) - file_clock_behind_s  # its start by the file system's clock


def results_of(eval_dir, run, saved_s):
    """``eval_dir``'s results of checkpoints of ``run`` saved at ``saved_s`` (the file
    system's clock; -1e-9: unknown), and a damaged line."""
    eval_dir.mkdir()
    (eval_dir / "results.jsonl").write_text("".join(
        json.dumps({"checkpoint": f"{run}/model.ckpt-{i}", "step": i,
                    "checkpoint_mtime_ns": int(s * 1e9)}) + "\n"
        for i, s in enumerate(saved_s)) + "{damaged\n")


@pytest.mark.parametrize("file_clock_behind_s, resumed", [
    (HOUR_S, None), (HOUR_S, "2026-11-26T15:00:00+00:00"), (-HOUR_S, None), (0, None)])
def test_an_earlier_runs_results_are_told_by_the_file_systems_clock_alone(
        tmp_path, caplog, file_clock_behind_s, resumed):
    run, eval_dir = tmp_path / "train", tmp_path / "eval"
    began = run_started(run, file_clock_behind_s, resumed)
    # Saved a minute and 3 s before the new run began; 1 s and 10 min after; unknown.
    results_of(eval_dir, run, [began - 60, began - 3, began + 1, began + 600, -1e-9])
    outdirs.warn_of_other_results(str(eval_dir), str(run))
    assert [r.getMessage() for r in caplog.records] == [
        f"--eval_dir={eval_dir} holds 2 result(s) of an earlier run in {run}, of checkpoints "
        f"saved before this run started there at step 0 ({NEW_RUN}): this run's go beside "
        f"them, on the same TensorBoard curves; pass another --eval_dir to keep them apart"]
    # Without the run's records, nothing is told.
    os.remove(run / "environment.jsonl")
    caplog.clear()
    outdirs.warn_of_other_results(str(eval_dir), str(run))
    assert caplog.records == []


def test_the_results_of_another_run_are_a_warning(tmp_path, caplog):
    run_a = tmp_path / "a"
    folder_of(tmp_path / "eval", {"flags.txt": EVAL_START + f"--checkpoint={run_a}/model.ckpt-5\n"
                                  "--checkpoint_dir=/tmp/cifar10_train\n"})
    outdirs.warn_of_other_results(str(tmp_path / "eval"), str(run_a))
    assert caplog.records == []
    outdirs.warn_of_other_results(str(tmp_path / "eval"), "/tmp/cifar10_train")
    assert [r.getMessage().split(": ")[0] for r in caplog.records] == [
        f"--eval_dir={tmp_path / 'eval'} holds the results of another run ({run_a})"]
