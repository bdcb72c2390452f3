"""End-to-end tests of the cifar10-eval command: in this process (``cli.call``), and as
subprocesses beside a training process."""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import socket
import signal
import threading
import time

import pytest
from absl import flags
from cli import call, event_tags, start
from conftest import EVAL_LINE, TRAIN_LINE
from evalruns import results_lines
from rundirs import keep_best, truncate

from cifar10.cli import eval_main
from cifar10.core.errors import DataError
from cifar10.distribute import devices
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.runs import layout as runlock
from cifar10.runs.best import BestCheckpoint
from cifar10.runs import records as runrecord

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here

RECORDS = 50
ERROR = "cifar10-eval: error:"


@pytest.fixture(scope="module")
def trained(trained_run):
    """(data_dir, train_dir) of conftest's run, its data where --synthetic_data reads it."""
    train_dir, test_files = trained_run
    data_dir = pathlib.Path(test_files[0]).parents[2]
    assert (data_dir / getdata.SYNTHETIC_SUBDIR).is_dir()
    return data_dir, train_dir


def eval_args(data_dir, checkpoint_dir, eval_dir, *extra):
    return ("--synthetic_data", f"--synthetic_records={RECORDS}", f"--data_dir={data_dir}",
            f"--checkpoint_dir={checkpoint_dir}", f"--eval_dir={eval_dir}", *extra)


def test_only_a_download_ruled_out_counts_as_data_not_on_disk(tmp_path, monkeypatch):
    """``_data_on_disk`` takes the data for one to download only by prepare's error's
    type: any other data error is the user's to see."""
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


def offline_data_flags(tmp_path):
    """Data flags fetching a local tarball into a folder that appears only if it is."""
    tarball = tmp_path / "cifar-10-binary.tar.gz"
    tarball.write_bytes(synthetic.tarball_bytes(records_per_file=10))
    return (f"--data_dir={tmp_path / 'data' / 'new'}", f"--data_url=file://{tarball}",
            f"--data_md5={hashlib.md5(tarball.read_bytes()).hexdigest()}")


def test_run_once_prints_its_line_and_ignores_a_signal_once_done(trained, tmp_path,
                                                                 monkeypatch):
    """--num_examples beyond the data is clamped with a warning; --use_bf16 scores the
    float32 checkpoint; once done a Ctrl-C is ignored (a refusal keeps the handlers)."""
    data_dir, train_dir = trained
    seen = {}
    evaluate = eval_main.main

    def evaluate_then_look(argv):
        evaluate(argv)
        seen.update({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)})

    monkeypatch.setattr(eval_main, "main", evaluate_then_look)
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once",
                                             "--num_examples=1000", "--use_bf16"))
    assert result.returncode == 0, result.stderr
    assert seen == {signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}
    [match] = [m for m in map(EVAL_LINE.match, result.stdout.splitlines()) if m]
    assert match.groups()[1:] == ("6", "model.ckpt-6", str(RECORDS), "averages")
    assert match[0].endswith(" on SYNTHETIC data")
    [record] = results_lines(tmp_path / "eval")
    assert (record["examples"], record["compute_dtype"]) == (RECORDS, "bfloat16")
    assert match[1] == f"{record['precision']:.3f}"
    assert (f"cifar10-eval: warning: --num_examples=1000 but the test data holds {RECORDS} "
            f"examples: evaluating {RECORDS}.") in result.stderr.splitlines()
    emulated = [line for line in result.stderr.splitlines() if "--use_bf16:" in line]
    assert len(emulated) == (1 if devices.cpu_has_bfloat16() is False else 0)
    seen.clear()
    result = call("cifar10-eval", *eval_args(data_dir, tmp_path / "none", tmp_path / "eval2",
                                             "--run_once"))
    assert result.returncode == 1 and seen == {}


def test_checkpoint_names_a_checkpoint_by_its_index_file(trained, tmp_path):
    data_dir, train_dir = trained
    result = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval",
                                             f"--checkpoint={train_dir / 'model.ckpt-3.index'}"))
    assert result.returncode == 0, result.stderr
    [record] = results_lines(tmp_path / "eval")
    assert (record["step"], record["checkpoint"]) == (3, str(train_dir / "model.ckpt-3"))


def test_polling_a_runs_best_checkpoint_scores_it_and_stops_as_the_run_is_complete(trained,
                                                                                   tmp_path):
    data_dir, train_dir = trained
    run_dir = tmp_path / "train"
    shutil.copytree(train_dir, run_dir)
    best = keep_best(run_dir, 3)
    result = call("cifar10-eval", *eval_args(data_dir, best, tmp_path / "eval"))
    assert result.returncode == 0, result.stderr
    [record] = results_lines(tmp_path / "eval")
    assert (record["step"], record["checkpoint"]) == (3, str(best / "model.ckpt-3"))
    assert result.stdout.endswith(f"Training in {run_dir} is complete and its best checkpoint "
                                  f"is evaluated; stopping.\n")


# Two processes meeting through the run directory (test_polling checks the schedule).
@pytest.mark.slow
def test_polling_beside_a_running_trainer_scores_each_checkpoint_once(trained, tmp_path):
    data_dir, _ = trained
    train_dir, eval_dir = tmp_path / "train", tmp_path / "eval"
    trainer = start("cifar10-train", "--synthetic_data", f"--synthetic_records={RECORDS}",
                    f"--data_dir={data_dir}", f"--train_dir={train_dir}", "--batch_size=16",
                    "--max_steps=16", "--checkpoint_steps=4", "--keep_checkpoints=2",
                    "--log_frequency=1", "--summary_steps=1000")
    evaluator = start("cifar10-eval", *eval_args(data_dir, train_dir, eval_dir, "--wait_for_run",
                                                 "--eval_interval_secs=1", "--batch_size=50",
                                                 "--misclassified_images=0"))
    try:
        # The trainer is held until the evaluator has scored one, so that it scores several.
        for line in trainer.stdout:
            if (m := TRAIN_LINE.match(line.strip())) and int(m[1]) >= 8:
                trainer.send_signal(signal.SIGSTOP)
                break
        deadline = time.monotonic() + 120  # (a guard)
        while not (eval_dir / "results.jsonl").exists() and evaluator.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        trainer.send_signal(signal.SIGCONT)
        _, train_err = trainer.communicate(timeout=240)
        eval_out, eval_err = evaluator.communicate(timeout=240)
    finally:
        for proc in (trainer, evaluator):
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert (trainer.returncode, evaluator.returncode) == (0, 0), train_err + eval_err
    steps = [r["step"] for r in results_lines(eval_dir)]
    assert len(steps) >= 2 and steps == sorted(set(steps)) and steps[-1] == 16, eval_out
    assert [int(m[2]) for m in map(EVAL_LINE.match, eval_out.splitlines()) if m] == steps
    assert "confusion matrix" not in eval_out  # polling prints the precision lines only
    assert event_tags(str(eval_dir))["Precision @ 1"] == steps
    assert eval_out.endswith(f"Training in {train_dir} is complete and its final checkpoint "
                             f"is evaluated; stopping.\n")


def test_two_programs_preparing_synthetic_data_at_once_both_succeed(tmp_path, monkeypatch):
    # The worst order: both have written their files before either moves them.
    barrier = threading.Barrier(2, timeout=60)
    write_files = synthetic._write_files
    monkeypatch.setattr(synthetic, "_write_files",
                        lambda *args: (write_files(*args), barrier.wait()))
    data_dir, found = str(tmp_path / "data"), []
    threads = [threading.Thread(target=lambda: found.append(getdata.prepare(
        data_dir, use_synthetic=True, synthetic_records=RECORDS, print_fn=lambda line: None)))
        for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batches_dir = os.path.join(data_dir, getdata.SYNTHETIC_SUBDIR, "cifar-10-batches-bin")
    assert found == [(batches_dir, {"train": 5 * RECORDS, "test": RECORDS})] * 2
    assert os.listdir(os.path.dirname(batches_dir)) == ["cifar-10-batches-bin"]


def refusal_case(case, tmp_path, train_dir, held):
    """(the arguments of a refused start, its error's pattern); its lock goes in ``held``."""
    copy = tmp_path / "runs" / "train"
    if case == "no folder":
        return [f"--checkpoint_dir={copy}", "--run_once"], re.escape(
            f"No checkpoint file found in {copy}: there is no such folder; point "
            f"--checkpoint_dir at a training run's --train_dir, or train first (cifar10-train "
            f"--train_dir={copy})")
    if case == "trainer running":  # a run's lock held, as by its trainer
        copy.mkdir(parents=True)
        held.append(runlock.TrainerLock(str(copy)))
        held[0].acquire()
        return [f"--checkpoint_dir={copy}", "--run_once"], (
            re.escape(f"No checkpoint in {copy} yet: its trainer is running (PID "
                      f"{os.getpid()} on host {socket.gethostname()}, started ")
            + r"[-\d :]+" + re.escape(") and has not saved one; run again after its first "
                                      "save (every --checkpoint_steps steps), or leave out "
                                      "--run_once to score each checkpoint as it is saved"))
    shutil.copytree(train_dir, copy)
    if case == "no best kept":  # the best/ of a complete run that kept none
        BestCheckpoint(str(copy), None, 0)
        return [f"--checkpoint_dir={copy / 'best'}"], re.escape(
            f"No checkpoint file found in {copy / 'best'}: the run in {copy} keeps its best "
            f"checkpoint there from its first validation (cifar10-train --eval_every_steps); "
            f"pass --checkpoint_dir={copy} for the run's newest")
    for step in (3, 6):
        truncate(copy / f"model.ckpt-{step}.data-00000-of-00001")
    if case == "none reads":
        return [f"--checkpoint_dir={copy}", "--run_once"], re.escape(
            f"no checkpoint in {copy} can be read: model.ckpt-6 cannot be read (") + ".*" \
            + re.escape(f"; train again (cifar10-train --train_dir={copy} --fresh_start "
                        f"deletes them) or point --checkpoint_dir at another run")
    return [f"--checkpoint={copy / 'model.ckpt-3'}"], re.escape(
        f"--checkpoint {copy / 'model.ckpt-3'} cannot be read (") + ".*" + re.escape(
        f"): pass another checkpoint, or --checkpoint_dir={copy} for its newest that reads")


@pytest.mark.parametrize("case", ["no folder", "trainer running", "none reads",
                                  "--checkpoint does not read", "no best kept"])
def test_a_start_with_nothing_to_score_is_one_line_and_fetches_no_data(trained, tmp_path,
                                                                        case):
    held = []
    args, error = refusal_case(case, tmp_path, trained[1], held)
    data_flags = offline_data_flags(tmp_path)
    before = sorted(os.listdir(tmp_path))
    try:
        result = call("cifar10-eval", *args, *data_flags, f"--eval_dir={tmp_path / 'eval'}")
    finally:
        for lock in held:
            lock.release()
    assert (result.returncode, result.stdout) == (1, "")
    [line] = result.stderr.splitlines()
    assert re.fullmatch(re.escape(ERROR + " ") + error, line), line
    assert sorted(os.listdir(tmp_path)) == before  # no data/, no eval/


def test_run_once_downloads_the_data_once_a_checkpoint_reads_and_warns_once(trained,
                                                                          tmp_path):
    # The newest does not read: the one before is scored, with one warning, not two.
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
    assert [r["step"] for r in results_lines(tmp_path / "eval")] == [3]
    assert os.path.isdir(tmp_path / "data" / "new" / "cifar-10-batches-bin")


@pytest.mark.parametrize("polling", [[], ["--run_once"]])
def test_the_folder_above_a_run_is_named_so_and_not_waited_in(trained, tmp_path, polling):
    data_dir, train_dir = trained
    given = train_dir.parent
    result = call("cifar10-eval", *eval_args(data_dir, given, tmp_path / "eval", *polling))
    assert (result.returncode, result.stderr.splitlines()[-1]) == (1, (
        f"{ERROR} No checkpoint file found in {given}; {train_dir} holds checkpoints: pass "
        f"--checkpoint_dir={train_dir}"))
    assert not (tmp_path / "eval").exists()


def test_a_replayed_evaluation_scores_the_whole_test_split_without_a_warning(trained, tmp_path):
    # --num_examples left unset is the whole test split: flags.txt keeps it unset.
    data_dir, train_dir = trained
    first = call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once"))
    assert (first.returncode, first.stderr) == (0, "")
    flags_txt = tmp_path / "eval" / "flags.txt"
    assert "\n# --num_examples=10000\n" in flags_txt.read_text()
    replayed = call("cifar10-eval", f"--flagfile={flags_txt}")
    assert (replayed.returncode, replayed.stderr) == (0, "")
    assert [r["examples"] for r in results_lines(tmp_path / "eval")] == [RECORDS, RECORDS]
    assert flags_txt.read_text().count("\n# --num_examples=10000\n") == 2
    # Given, it is written as given, and replays as given.
    call("cifar10-eval", *eval_args(data_dir, train_dir, tmp_path / "eval", "--run_once",
                                    "--num_examples=20"))
    assert runrecord.recorded_flags(str(tmp_path / "eval"), "cifar10-eval")["num_examples"] == "20"
    assert "\n--num_examples=20\n" in flags_txt.read_text()
