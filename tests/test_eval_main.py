"""End-to-end tests of the cifar10-eval command: in this process (``cli.call``), and as
subprocesses beside a training process."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import re
import shutil
import socket
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from absl import flags
from cli import call, event_tags, start
from cli import env as cli_env
from conftest import EVAL_LINE, TRAIN_LINE

from cifar10.cli import eval_main
from cifar10.core.errors import DataError
from cifar10.distribute import devices
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.runs import records as runrecord

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here

RECORDS = 50
ERROR = "cifar10-eval: error:"


@pytest.fixture(scope="module")
def trained(trained_run):
    """(data_dir, train_dir): conftest's run (6 steps, 50 records per file), its data
    where --synthetic_data with this --data_dir reads it."""
    train_dir, test_files = trained_run
    data_dir = pathlib.Path(test_files[0]).parents[2]
    assert (data_dir / getdata.SYNTHETIC_SUBDIR).is_dir()
    return data_dir, train_dir


def eval_args(data_dir, checkpoint_dir, eval_dir, *extra):
    return ("--synthetic_data", f"--synthetic_records={RECORDS}", f"--data_dir={data_dir}",
            f"--checkpoint_dir={checkpoint_dir}", f"--eval_dir={eval_dir}", *extra)


def results(eval_dir):
    with open(os.path.join(eval_dir, "results.jsonl")) as f:
        return [json.loads(line) for line in f]


def error_lines(stderr):
    return [line for line in stderr.splitlines() if ERROR in line]


def test_only_a_download_ruled_out_counts_as_data_not_on_disk(tmp_path, monkeypatch):
    """``_data_on_disk`` takes the data for one to download only when prepare says so by
    its error's type: any other data error, whatever its words, is the user's to see
    before TensorFlow loads."""
    values = flags.FlagValues()
    eval_main.define_flags(values)
    values(["cifar10-eval", f"--data_dir={tmp_path / 'data'}"])
    monkeypatch.setattr(eval_main, "FLAGS", values)
    assert eval_main._data_on_disk("") is None  # nothing there: to be downloaded

    def damaged(*args, **kwargs):
        raise DataError("the data is not on disk")

    monkeypatch.setattr(getdata, "prepare", damaged)
    with pytest.raises(DataError, match="^the data is not on disk$"):
        eval_main._data_on_disk("")
    assert not (tmp_path / "data").exists()


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def offline_data_flags(tmp_path):
    """Data flags whose data is fetched from a local tarball into a folder not there yet:
    the folder appears if and only if the data is fetched."""
    tarball = tmp_path / "cifar-10-binary.tar.gz"
    tarball.write_bytes(synthetic.tarball_bytes(records_per_file=10))
    return (f"--data_dir={tmp_path / 'data' / 'new'}", f"--data_url=file://{tarball}",
            f"--data_md5={hashlib.md5(tarball.read_bytes()).hexdigest()}")


def test_run_once_prints_the_precision_line_and_clamps_num_examples_to_the_data(trained,
                                                                               tmp_path):
    # Counting exactly --num_examples below the data size is tested in test_scoring.
    data_dir, train_dir = trained
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once",
                                             "--num_examples=1000", "--batch_size=16"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "SYNTHETIC" in result.stdout
    assert (f"--num_examples=1000 but the test data holds {RECORDS} examples: evaluating "
            f"{RECORDS}.") in result.stderr
    matches = [m for m in map(EVAL_LINE.match, result.stdout.splitlines()) if m]
    assert len(matches) == 1, result.stdout
    assert matches[0].groups()[1:] == ("6", "model.ckpt-6", str(RECORDS), "averages")
    [record] = results(tmp_path / "eval")
    assert (record["step"], record["examples"], record["weights"]) == (6, RECORDS, "averages")
    assert record["precision"] == record["correct"] / RECORDS
    assert matches[0][1] == f"{record['precision']:.3f}"


def test_use_bf16_scores_the_float32_checkpoint_and_says_when_it_is_emulated(trained, tmp_path):
    data_dir, train_dir = trained
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once",
                                             "--use_bf16"))
    assert result.returncode == 0, result.stderr
    matches = [m for m in map(EVAL_LINE.match, result.stdout.splitlines()) if m]
    assert [m.groups()[1:] for m in matches] == [("6", "model.ckpt-6", str(RECORDS), "averages")]
    emulated = [line for line in result.stderr.splitlines() if "--use_bf16:" in line]
    assert len(emulated) == (1 if devices.cpu_has_bfloat16() is False else 0)


def test_a_signal_once_the_evaluation_is_done_is_ignored_not_an_interrupt(trained, tmp_path,
                                                                         monkeypatch):
    # Results recorded and printed, a Ctrl-C in TensorFlow's clean-up at the process's end
    # ended it by the signal (status 130 in a shell, no line): it is ignored from there on.
    data_dir, train_dir = trained
    seen = {}
    evaluate = eval_main.main

    def evaluate_then_look(argv):
        evaluate(argv)
        seen.update({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)})

    monkeypatch.setattr(eval_main, "main", evaluate_then_look)
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once"))
    assert result.returncode == 0, result.stderr
    assert seen == {signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}
    # A refusal keeps the handlers: a Ctrl-C before the work is done still interrupts it.
    seen.clear()
    result = call("cifar10-eval", *eval_args(data_dir, tmp_path / "none", tmp_path / "eval2",
                                             "--run_once"))
    assert result.returncode == 1 and seen == {}


# Sends SIGINT to the process itself from the first Python code that matplotlib's native
# ft2font runs as it initialises (pybind11 makes its enums with Python's enum module):
# a trace function, set only once that module is looked for; writes the file SENT then.
_SIGINT_IN_FT2FONT = textwrap.dedent("""\
    import os, signal, sys
    def initialising_ft2font(frame):
        while frame is not None:
            if (frame.f_code.co_name == "exec_module"
                    and "matplotlib.ft2font" in repr(frame.f_locals.get("module"))):
                return True
            frame = frame.f_back
        return False
    def trace(frame, event, arg):
        if (event == "call" and not frame.f_code.co_filename.startswith("<frozen")
                and initialising_ft2font(frame)):
            sys.settrace(None)
            open(os.environ["SENT"], "w").close()
            os.kill(os.getpid(), signal.SIGINT)
    class Trace:
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib.ft2font":
                sys.settrace(trace)
            return None
    sys.meta_path.insert(0, Trace())
    """)


@pytest.mark.slow  # matplotlib's, not TensorFlow's: the evaluator's process, test_output
def test_ctrl_c_as_matplotlib_initialises_is_an_interrupt_not_a_traceback(trained, tmp_path):
    # It made the first picture's import an ImportError: a traceback and exit status 1.
    data_dir, train_dir = trained
    sent = tmp_path / "sent"
    result = subprocess.run(
        [sys.executable, "-c", _SIGINT_IN_FT2FONT + "from cifar10.cli import entry; "
         "entry.evaluate()", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once")],
        capture_output=True, text=True, timeout=300, env=cli_env(SENT=str(sent)))
    if not sent.exists():
        pytest.skip("this matplotlib's ft2font runs no Python code as it initialises")
    assert (result.returncode, result.stderr) == (130, "cifar10-eval: interrupted\n")
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize("scored_before_the_start", [True, False])
def test_results_of_an_earlier_run_in_the_same_folder_get_a_warning(tmp_path,
                                                                  scored_before_the_start):
    # The README's quick start on generated data, then CIFAR-10 after --fresh_start in
    # the same --train_dir: the evaluator's results of both would share one curve.
    run, eval_dir = tmp_path / "train", tmp_path / "eval"
    run.mkdir()
    (run / "flags.txt").write_text(
        "# cifar10-train, started 2026-11-26T12:00:00+00:00 on vm at step 0\n"
        f"--train_dir={run}\n")
    started = datetime.datetime(2026, 11, 26, 12, tzinfo=datetime.timezone.utc).timestamp()
    # The start's record, stamped by the file system as the trainer wrote it.
    (run / "environment.jsonl").write_text(json.dumps(
        {"program": "cifar10-train", "start_time": "2026-11-26T12:00:00+00:00"}) + "\n")
    os.utime(run / "environment.jsonl", (started + 0.5, started + 0.5))
    saved = started - 60 if scored_before_the_start else started + 60
    eval_dir.mkdir()
    (eval_dir / "results.jsonl").write_text(json.dumps(
        {"checkpoint": f"{run}/model.ckpt-30", "step": 30, "wall_time": saved + 5,
         "checkpoint_mtime_ns": int(saved * 1e9)}) + "\n" + "{damaged\n")
    result = call("cifar10-eval", f"--checkpoint_dir={run}", f"--eval_dir={eval_dir}",
                  "--run_once", *offline_data_flags(tmp_path))
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == ([
        f"cifar10-eval: warning: --eval_dir={eval_dir} holds 1 result(s) of an earlier run in "
        f"{run}, of checkpoints saved before this run started there at step 0 "
        f"(2026-11-26T12:00:00+00:00): this run's go beside them, on the same TensorBoard "
        f"curves; pass --eval_dir={tmp_path}/eval-2 to keep them apart"]  # (eval/ is this one)
        if scored_before_the_start else [])
    assert result.returncode == 1  # (no checkpoint: the warning comes before that error)
    assert os.listdir(eval_dir) == ["results.jsonl"]


def test_eval_data_must_be_test_or_train_eval(trained, tmp_path):
    data_dir, train_dir = trained
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once",
                                             "--eval_data=bogus"))
    assert result.returncode != 0
    assert "eval_data" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "eval").exists()


def test_a_given_checkpoint_that_does_not_read_is_one_line_and_fetches_no_data(trained,
                                                                              tmp_path):
    # The evaluator's other errors (no checkpoint, bad data) are test_polling's and
    # test_data's; this one follows an error through the command to its last line.
    # --checkpoint scores that checkpoint once: not the latest (6), which is sound.
    _, train_dir = trained
    copy = tmp_path / "runs" / "train"
    shutil.copytree(train_dir, copy)
    truncate(copy / "model.ckpt-3.data-00000-of-00001")
    data_flags = offline_data_flags(tmp_path)
    before = sorted(os.listdir(tmp_path))
    result = call("cifar10-eval", f"--checkpoint={copy / 'model.ckpt-3'}", *data_flags,
                  f"--eval_dir={tmp_path / 'eval'}")
    assert (result.returncode, result.stdout) == (1, "")
    [error] = result.stderr.splitlines()
    assert error.startswith(f"{ERROR} --checkpoint {copy / 'model.ckpt-3'} cannot be read (")
    assert error.endswith(f"): pass another checkpoint, or --checkpoint_dir={copy} for its "
                          f"newest that reads")
    assert sorted(os.listdir(tmp_path)) == before  # no data/, no eval/


def test_polling_a_complete_run_of_which_no_checkpoint_reads_ends_with_one_error(trained,
                                                                                 tmp_path):
    # Scored nothing: exit status 1, as at --eval_timeout, not a stop as if done.
    data_dir, train_dir = trained
    copy = tmp_path / "train"
    shutil.copytree(train_dir, copy)
    for step in (3, 6):
        truncate(copy / f"model.ckpt-{step}.index")
    # (A checkpoint that fails to read counts as an evaluation for the interval.)
    result = call("cifar10-eval", *eval_args(data_dir, copy, tmp_path / "eval",
                                             "--eval_interval_secs=1"))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "stopping" not in result.stdout
    assert result.stderr.splitlines()[-1] == (
        f"{ERROR} training in {copy} is complete and none of its checkpoints could be read "
        f"(model.ckpt-6, model.ckpt-3; see the warnings above): nothing was scored; train "
        f"again (move model.ckpt-3.data-00000-of-00001, model.ckpt-3.index, "
        f"model.ckpt-6.data-00000-of-00001, model.ckpt-6.index out of {copy} (damaged, or not "
        f"the trainer's: --fresh_start deletes only the checkpoints it wrote whole), then "
        f"cifar10-train --train_dir={copy} --fresh_start deletes the rest) or point "
        f"--checkpoint_dir at another run")
    assert len(error_lines(result.stderr)) == 1
    assert [line.split(":")[1] for line in result.stderr.splitlines()[:-1]] == [
        " warning"] * 2  # one for each checkpoint skipped
    assert not (tmp_path / "eval").exists()


def test_checkpoint_names_a_checkpoint_by_its_index_file_and_a_folder_is_one_line(trained,
                                                                                  tmp_path):
    data_dir, train_dir = trained
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval",
                                             f"--checkpoint={train_dir / 'model.ckpt-3.index'}"))
    assert result.returncode == 0, result.stderr
    assert [r["step"] for r in results(tmp_path / "eval")] == [3]
    assert results(tmp_path / "eval")[0]["checkpoint"] == str(train_dir / "model.ckpt-3")
    # Said before the data is prepared or anything written.
    result = call("cifar10-eval", *eval_args(tmp_path / "no_data", train_dir, tmp_path / "eval2",
                                             f"--checkpoint={train_dir}"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"{ERROR} --checkpoint {train_dir} is a folder: pass --checkpoint_dir={train_dir} for "
        f"its newest checkpoint, or --checkpoint={train_dir / 'model.ckpt-6'}"]
    assert not (tmp_path / "eval2").exists() and not (tmp_path / "no_data").exists()


# Two processes meeting through the run directory: what each does there is this
# package's (the trainer's saves, polling.py), which test_polling.py checks in-process
# on both TensorFlow versions; the processes' TensorFlow calls are the other tests'.
@pytest.mark.slow
def test_polling_beside_a_running_trainer_scores_each_checkpoint_once(trained, tmp_path):
    data_dir, _ = trained
    train_dir, eval_dir = tmp_path / "train", tmp_path / "eval"
    eval_flags = eval_args(data_dir, train_dir, eval_dir, "--eval_interval_secs=1",
                           "--batch_size=50")
    trainer = start("cifar10-train", "--synthetic_data", f"--synthetic_records={RECORDS}",
                    f"--data_dir={data_dir}", f"--train_dir={train_dir}", "--batch_size=16",
                    "--max_steps=40", "--checkpoint_steps=4", "--keep_checkpoints=2",
                    "--log_frequency=1", "--summary_steps=1000")
    evaluator = start("cifar10-eval", *eval_flags)
    try:
        # 40 steps take about a second here: hold the trainer once a checkpoint
        # exists until the evaluator has scored one, so that it scores several.
        train_out = []
        for line in trainer.stdout:
            train_out.append(line)
            m = TRAIN_LINE.match(line.strip())
            if m and int(m[1]) >= 8:  # model.ckpt-4 is saved
                trainer.send_signal(signal.SIGSTOP)
                break
        deadline = time.time() + 120
        while not os.path.exists(eval_dir / "results.jsonl") and time.time() < deadline:
            if evaluator.poll() is not None:
                break
            time.sleep(0.2)
        trainer.send_signal(signal.SIGCONT)
        out, train_err = trainer.communicate(timeout=240)
        train_out.append(out)
        eval_out, eval_err = evaluator.communicate(timeout=240)
    finally:
        for proc in (trainer, evaluator):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    assert trainer.returncode == 0, train_err
    assert evaluator.returncode == 0, eval_err
    assert "Traceback" not in eval_err and "Traceback" not in train_err
    steps = [r["step"] for r in results(eval_dir)]
    assert len(steps) >= 2, eval_out
    assert len(set(steps)) == len(steps)  # each checkpoint scored once
    assert steps == sorted(steps) and steps[-1] == 40
    assert [r["checkpoint"] for r in results(eval_dir)][-1] == str(train_dir / "model.ckpt-40")
    assert [int(m[2]) for m in map(EVAL_LINE.match, eval_out.splitlines()) if m] == steps
    assert "confusion matrix" not in eval_out  # polling prints the precision lines only
    assert event_tags(str(eval_dir))["Precision @ 1"] == steps
    assert (f"Training in {train_dir} is complete and its final checkpoint is evaluated; "
            f"stopping.") in eval_out

    # A restart after the run scores nothing: test_polling's poll tests.

def test_two_programs_preparing_synthetic_data_at_once_both_succeed(tmp_path, monkeypatch):
    # The file operations of two processes, from two threads, in the worst order:
    # both have written their files before either moves them into place.
    barrier = threading.Barrier(2, timeout=60)
    write_files = synthetic._write_files

    def write_then_wait(directory, files):
        write_files(directory, files)
        barrier.wait()

    monkeypatch.setattr(synthetic, "_write_files", write_then_wait)
    data_dir = str(tmp_path / "data")
    errors, found = [], []

    def prepare():
        try:
            found.append(getdata.prepare(data_dir, use_synthetic=True,
                                               synthetic_records=RECORDS,
                                               print_fn=lambda line: None))
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, repr(errors[0])
    batches_dir = os.path.join(data_dir, getdata.SYNTHETIC_SUBDIR, "cifar-10-batches-bin")
    assert found == [(batches_dir, {"train": 5 * RECORDS, "test": RECORDS})] * 2
    assert os.listdir(os.path.dirname(batches_dir)) == ["cifar-10-batches-bin"]


def test_run_once_without_a_checkpoint_fetches_no_data(tmp_path):
    # A mistyped --checkpoint_dir costs nothing: no download, extraction or conversion.
    typo = tmp_path / "runs" / "typo"
    result = call("cifar10-eval", f"--checkpoint_dir={typo}", "--run_once",
                  *offline_data_flags(tmp_path), f"--eval_dir={tmp_path / 'eval'}")
    assert result.returncode == 1
    assert (result.stdout, result.stderr.splitlines()) == ("", [
        f"{ERROR} No checkpoint file found in {typo}: there is no such folder; point "
        f"--checkpoint_dir at a training run's --train_dir, or train first (cifar10-train "
        f"--train_dir={typo})"])
    assert sorted(os.listdir(tmp_path)) == ["cifar-10-binary.tar.gz"]


def test_run_once_beside_a_trainer_that_has_not_saved_yet_says_it_is_running(tmp_path):
    # Not "train first": the trainer is at it (it holds the run's lock); nothing fetched.
    from cifar10.runs import layout as runlock

    run = tmp_path / "runs" / "a" / "train"
    run.mkdir(parents=True)
    held = runlock.TrainerLock(str(run))
    held.acquire()
    try:
        result = call("cifar10-eval", f"--checkpoint_dir={run}", "--run_once",
                      *offline_data_flags(tmp_path), f"--eval_dir={tmp_path / 'eval'}")
    finally:
        held.release()
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert re.fullmatch(
        re.escape(f"{ERROR} No checkpoint in {run} yet: its trainer is running (PID "
                  f"{os.getpid()} on host {socket.gethostname()}, started ")
        + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
        + re.escape(") and has not saved one; run again after its first save (every "
                    "--checkpoint_steps steps), or leave out --run_once to score each "
                    "checkpoint as it is saved"), line), line
    assert sorted(os.listdir(tmp_path)) == ["cifar-10-binary.tar.gz", "runs"]
    # Once no trainer holds it, the folder is a run not trained yet, as before.
    result = call("cifar10-eval", f"--checkpoint_dir={run}", "--run_once",
                  *offline_data_flags(tmp_path), f"--eval_dir={tmp_path / 'eval'}")
    assert "train first (cifar10-train --train_dir=" in result.stderr


@pytest.mark.parametrize("part", [".index", ".data-00000-of-00001"])
def test_run_once_on_checkpoints_that_do_not_read_fetches_no_data(trained, tmp_path, part):
    # Their files are all there: it reads them before the data is fetched.
    _, train_dir = trained
    copy = tmp_path / "runs" / "train"
    shutil.copytree(train_dir, copy)
    for step in (3, 6):
        truncate(copy / f"model.ckpt-{step}{part}")
    data_flags = offline_data_flags(tmp_path)
    before = sorted(os.listdir(tmp_path))
    result = call("cifar10-eval", f"--checkpoint_dir={copy}", "--run_once", *data_flags,
                  f"--eval_dir={tmp_path / 'eval'}")
    assert (result.returncode, result.stdout) == (1, "")
    [error] = result.stderr.splitlines()
    assert error.startswith(f"{ERROR} no checkpoint in {copy} can be read: model.ckpt-6 "
                            f"cannot be read (")
    assert "; model.ckpt-3 cannot be read (" in error
    # A .index cut short is no checkpoint --fresh_start deletes: it is moved out first.
    start_over = (f"cifar10-train --train_dir={copy} --fresh_start deletes them" if part != ".index"
                  else f"move model.ckpt-3.data-00000-of-00001, model.ckpt-3.index, "
                       f"model.ckpt-6.data-00000-of-00001, model.ckpt-6.index out of {copy} "
                       f"(damaged, or not the trainer's: --fresh_start deletes only the "
                       f"checkpoints it wrote whole), then cifar10-train --train_dir={copy} "
                       f"--fresh_start deletes the rest")
    assert error.endswith(f"; train again ({start_over}) or point --checkpoint_dir at another "
                          f"run")
    assert sorted(os.listdir(tmp_path)) == before  # no data/, no eval/


def test_run_once_downloads_the_data_once_a_checkpoint_reads_and_warns_once(trained,
                                                                          tmp_path):
    # The newest does not read: the one before is scored, with one warning (not one
    # for the check before the download and another for the scoring).
    _, train_dir = trained
    copy = tmp_path / "runs" / "train"
    shutil.copytree(train_dir, copy)
    truncate(copy / "model.ckpt-6.index")
    result = call("cifar10-eval", f"--checkpoint_dir={copy}", "--run_once",
                  *offline_data_flags(tmp_path), f"--eval_dir={tmp_path / 'eval'}")
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warning.startswith(f"cifar10-eval: warning: Using {copy / 'model.ckpt-3'}, the "
                              f"newest checkpoint in {copy} that reads: model.ckpt-6 cannot "
                              f"be read (")
    assert [r["step"] for r in results(tmp_path / "eval")] == [3]
    assert os.path.isdir(tmp_path / "data" / "new" / "cifar-10-batches-bin")


@pytest.mark.parametrize("polling", [[], ["--run_once"]])
def test_a_runs_parent_folder_names_the_folder_of_its_checkpoints(trained, tmp_path, polling):
    # Also the polling evaluator, which would wait there for ever (no --eval_timeout).
    data_dir, train_dir = trained
    parent = train_dir.parent
    result = call("cifar10-eval", *eval_args(data_dir, parent, tmp_path / "eval", *polling))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{ERROR} No checkpoint file found in {parent}; {train_dir} holds checkpoints: pass "
        f"--checkpoint_dir={train_dir}"]
    assert not (tmp_path / "eval").exists()


def test_the_polling_evaluator_given_a_data_folder_says_so_and_does_not_wait(trained, tmp_path):
    data_dir, _ = trained
    result = call("cifar10-eval", *eval_args(data_dir, data_dir, tmp_path / "eval"))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"{ERROR} No checkpoint file found in {data_dir}, a data folder, not a training run: "
        f"pass the run's --train_dir as --checkpoint_dir (its data goes in --data_dir)")


def test_a_replayed_evaluation_scores_the_whole_test_split_without_a_warning(trained, tmp_path):
    # --num_examples left unset is the whole test split: flags.txt keeps it unset.
    data_dir, train_dir = trained
    first = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once"))
    assert (first.returncode, first.stderr) == (0, "")
    flags_txt = tmp_path / "eval" / "flags.txt"
    assert "\n# --num_examples=10000\n" in flags_txt.read_text()
    replayed = call("cifar10-eval", f"--flagfile={flags_txt}")
    assert (replayed.returncode, replayed.stderr) == (0, "")
    assert [r["examples"] for r in results(tmp_path / "eval")] == [RECORDS, RECORDS]
    assert flags_txt.read_text().count("\n# --num_examples=10000\n") == 2
    # Given, it is written as given, and replays as given.
    call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once",
                                    "--num_examples=20"))
    assert runrecord.recorded_flags(str(tmp_path / "eval"), "cifar10-eval")["num_examples"] == "20"
    assert "\n--num_examples=20\n" in flags_txt.read_text()
