"""End-to-end tests of the cifar10-train command: what needs a process (signals, kills)
as a subprocess, the rest in this process (``cli.call``)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from cifar10.cli import stopping
from cifar10.runs import cleanup
from cifar10.data import folder as datafolder
from cifar10.distribute import devices
from cifar10.data import synthetic
from cifar10.data import fileformat as ff
from cli import call, env, event_tags, program, start
from conftest import LAYERS, TRAIN_LINE, VALIDATION_LINE

VARIABLES = [f"{layer}/{kind}" for layer in LAYERS for kind in ("weights", "biases")]
EXPECTED_TAGS = {
    "learning_rate", "cross_entropy", "cross_entropy (raw)", "total_loss", "total_loss (raw)",
    "images", "examples_per_sec", "local3/weight_loss", "local3/weight_loss (raw)",
    "local4/weight_loss", "local4/weight_loss (raw)",
    *(f"{layer}/activations" for layer in LAYERS), *(f"{layer}/sparsity" for layer in LAYERS),
    *VARIABLES, *(f"{v}/gradients" for v in VARIABLES),
}


def train_args(tmp_path, *extra):
    return (f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
            "--synthetic_data", "--synthetic_records=50", "--batch_size=16", *extra)


def checkpoint_steps(train_dir):
    return sorted(int(name[len("model.ckpt-"):-len(".index")])
                  for name in os.listdir(train_dir) if name.endswith(".index"))


def test_train_logs_checkpoints_summaries_then_reports_complete(tmp_path):
    """With validation every 5 steps (and at the last): its lines, the best in the summary."""
    args = train_args(tmp_path, "--max_steps=12", "--num_gpus=2", "--log_frequency=4",
                      "--checkpoint_steps=3", "--keep_checkpoints=2", "--summary_steps=6",
                      "--eval_every_steps=5")
    result = call("cifar10-train", *args)
    assert result.returncode == 0, result.stderr
    assert "SYNTHETIC" in result.stdout
    assert "Sharding callback duration" not in result.stdout + result.stderr
    logged = [int(m[1]) for m in map(TRAIN_LINE.match, result.stdout.splitlines()) if m]
    assert logged == [1, 4, 8, 12]
    validated = [m for m in map(VALIDATION_LINE.match, result.stdout.splitlines()) if m]
    assert [(int(m[1]), m[4]) for m in validated] == [(5, "50"), (10, "50"), (12, "50")]
    train_dir = tmp_path / "train"
    assert checkpoint_steps(train_dir) == [9, 12]  # every 3 steps, 2 kept
    assert tf.train.latest_checkpoint(str(train_dir)).endswith("model.ckpt-12")
    # The data's class names (batches.meta.txt), for cifar10-predict and cifar10-export.
    assert (train_dir / "class_names.txt").read_text().splitlines() == list(ff.CLASS_NAMES)
    tags = event_tags(str(train_dir))
    assert EXPECTED_TAGS <= set(tags), EXPECTED_TAGS - set(tags)
    assert not [t for t in tags if "replica" in t]
    assert tags["learning_rate"] == [6, 12]
    assert tags["conv1/sparsity"] == [6, 12]
    assert tags["examples_per_sec"] == [1, 4, 8, 12]
    # The run's summary: 12 steps of 2 x 16 examples on 250 (50 records a file).
    last_loss = re.search(r"loss = (\d+\.\d\d)", result.stdout.splitlines()[-6])[1]
    ended, figures, best, evaluate = result.stdout.strip().splitlines()[-4:]
    assert ended == f"Training complete at step 12; saved {train_dir}/model.ckpt-12."
    assert re.fullmatch(r"This run: 12 steps \(epoch 0\.00 to 1\.54\) in [\dhms. ]+, "
                        r"\d+\.\d examples/sec on average, final loss (\d+\.\d\d)\.",
                        figures)[1] == last_loss
    step, precision = re.fullmatch(r"Best: precision @ 1 = (\S+) at step (\d+) \(\S+\)\.",
                                   best).group(2, 1)
    assert (int(step), precision) in [(int(m[1]), m[2]) for m in validated]
    assert best.endswith(f"({train_dir}/best/model.ckpt-{step}).")
    # The evaluator's folder of this run's own (the default /tmp/cifar10_eval is every run's).
    assert evaluate == (f"Evaluate it: cifar10-eval --checkpoint_dir={train_dir} "
                        f"--eval_dir={tmp_path / 'eval'} --run_once")
    # A rerun of a complete run: test_train.test_completed_run_is_reported_not_trained_further;
    # --fresh_start from the command line: test_kill_during_a_save_then_resume_or_fresh_start.


def test_sigterm_saves_a_checkpoint_and_the_next_start_resumes(tmp_path):
    args = train_args(tmp_path, "--max_steps=100000", "--log_frequency=1", "--steps_per_loop=1",
                      "--checkpoint_steps=100000")
    proc = start("cifar10-train", *args)
    try:
        wait_for_log_step(proc, 3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    stopped = int(re.search(r"Stopped at step (\d+)", out)[1])
    assert stopped >= 3
    train_dir = tmp_path / "train"
    assert out.strip().splitlines()[-3:] == [
        f"Stopped at step {stopped}; saved {train_dir}/model.ckpt-{stopped}. Run the same "
        f"command again to resume.",
        out.strip().splitlines()[-2],
        f"Evaluate it: cifar10-eval --checkpoint_dir={train_dir} --eval_dir={tmp_path / 'eval'} "
        f"--run_once"]
    assert out.strip().splitlines()[-2].startswith(f"This run: {stopped} steps (epoch 0.00 to ")
    latest = tf.train.latest_checkpoint(str(tmp_path / "train"))
    assert latest.endswith(f"model.ckpt-{stopped}")
    assert tf.train.load_checkpoint(latest).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == stopped

    # The float32 run goes on in bfloat16 (its checkpoints are float32 either way).
    resumed = call("cifar10-train", *train_args(tmp_path, f"--max_steps={stopped + 2}",
                                                "--log_frequency=1", "--use_bf16"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {stopped}." in resumed.stdout
    emulated = "--use_bf16: this CPU has no bfloat16 instructions" in resumed.stderr
    assert emulated == (devices.cpu_has_bfloat16() is False)
    steps = [int(m[1]) for m in map(TRAIN_LINE.match, resumed.stdout.splitlines()) if m]
    assert steps == [stopped + 1, stopped + 2]


def pipeline(args, reader, **reader_options) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Starts ``cifar10-train ARGS | READER`` as a shell starts a job: in a process
    group of its own (the trainer's pid), which a Ctrl-C reaches whole.  The
    trainer's stderr is piped; this process keeps no end of the pipe between them."""
    trainer = subprocess.Popen([program("cifar10-train"), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env(),
                               preexec_fn=os.setpgrp)
    try:
        consumer = subprocess.Popen(reader, stdin=trainer.stdout,
                                    preexec_fn=lambda: os.setpgid(0, trainer.pid),
                                    **reader_options)
    except BaseException:
        trainer.kill()
        raise
    trainer.stdout.close()
    return trainer, consumer


def ended_pipeline(trainer, consumer, timeout=60) -> str:
    """Waits for both ends of a ``pipeline``; returns the trainer's stderr."""
    try:
        err = trainer.communicate(timeout=timeout)[1]
        consumer.wait(timeout=timeout)
        return err
    finally:
        for process in (trainer, consumer):
            process.kill()


def stopped_line(stderr, train_dir) -> int:
    """The step in the last line of a trainer whose stdout was closed, which must say
    where it saved; it is checked to be the newest checkpoint on disk."""
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(r"cifar10-train: standard output was closed; stopped at step (\d+); "
                         r"saved (.*)\. Run the same command again to resume\.", last)
    assert match, stderr
    step = int(match[1])
    assert match[2] == f"{train_dir}/model.ckpt-{step}"
    assert checkpoint_steps(train_dir)[-1] == step
    return step


@pytest.mark.slow  # see above
def test_a_reader_that_stops_reading_stops_training_with_a_checkpoint(tmp_path):
    # `cifar10-train ... | head -3`: the fourth line (step 2) meets a closed pipe.
    args = train_args(tmp_path, "--max_steps=100000", "--log_frequency=1", "--steps_per_loop=1",
                      "--checkpoint_steps=100000")
    trainer, head = pipeline(args, ["head", "-3"], stdout=subprocess.PIPE, text=True)
    err = ended_pipeline(trainer, head)
    assert trainer.returncode == 141, err
    assert TRAIN_LINE.match(head.stdout.read().splitlines()[-1])
    assert stopped_line(err, tmp_path / "train") >= 2


def test_a_reader_gone_before_training_started_ends_as_a_closed_pipe_training_nothing(
        tmp_path):
    # `cifar10-train --fresh_start ... | head -1`: the data's note is the one line read;
    # the next one, "Fresh start: removed ...", meets a closed pipe before training.
    first = call("cifar10-train", *train_args(tmp_path, "--max_steps=2"))
    assert first.returncode == 0, first.stderr
    trainer, head = pipeline(train_args(tmp_path, "--max_steps=4", "--fresh_start"),
                             ["head", "-1"], stdout=subprocess.PIPE, text=True)
    err = ended_pipeline(trainer, head)
    assert head.stdout.read().startswith("NOTE: using SYNTHETIC CIFAR-10-format data in ")
    assert trainer.returncode == 141, err
    assert err.splitlines()[-1] == ("cifar10-train: standard output was closed before "
                                    "training started; nothing was trained")
    assert checkpoint_steps(tmp_path / "train") == []  # (the fresh start removed step 2)


def test_a_second_signal_stops_at_once_naming_the_last_checkpoint(tmp_path):
    train_dir = tmp_path / "train"
    first = call("cifar10-train", *train_args(tmp_path, "--max_steps=2"))
    assert first.returncode == 0, first.stderr
    # Resumed at step 2, it runs step 3, then one loop of steps to 100000 (many minutes).
    long = "100000"
    proc = start("cifar10-train", *train_args(
        tmp_path, f"--max_steps={long}", f"--log_frequency={long}", f"--steps_per_loop={long}",
        f"--checkpoint_steps={long}", f"--summary_steps={long}"))
    try:
        wait_for_log_step(proc, 3)
        time.sleep(1)  # into the long loop
        proc.send_signal(signal.SIGINT)
        said = ""
        while "Received SIGINT" not in said:  # the first is seen: the second is a second
            said = proc.stdout.readline()
            assert said, "the trainer ended before it said it received SIGINT"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)  # at once: not at the loop's end
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert said.strip() == (
        "Received SIGINT: finishing the current steps and saving a checkpoint (send it again "
        "to stop at once).")
    assert out.strip() == ""
    assert err.strip().splitlines()[-1] == (
        f"cifar10-train: interrupted at once; the last checkpoint is {train_dir}/model.ckpt-2")
    assert checkpoint_steps(train_dir) == [2]
    assert not [name for name in os.listdir(train_dir) if name.endswith("_temp")]


def test_signals_after_the_save_do_not_end_the_trainer_otherwise_than_it_said(tmp_path):
    # Stopped and saved, the trainer still ends its TensorFlow: further signals from
    # then on (a scheduler's second SIGTERM) are ignored, and the status stays 0.
    args = train_args(tmp_path, "--max_steps=100000", "--batch_size=4", "--log_frequency=1",
                      "--steps_per_loop=1", "--checkpoint_steps=100000")
    proc = start("cifar10-train", *args)
    try:
        wait_for_log_step(proc, 2)
        proc.send_signal(signal.SIGTERM)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Stopped at step "):
                break
        assert lines and lines[-1].startswith("Stopped at step "), "".join(lines)
        deadline = time.time() + 60
        while proc.poll() is None and time.time() < deadline:  # one after another
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.02)
        assert proc.poll() is not None, "still running 60 s after its stop"
        # Read through the file objects: the lines read above may have taken more of
        # stdout into its buffer, which communicate(), reading the pipe, would miss.
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "interrupted" not in err
    assert out.strip().splitlines()[-1].startswith("Evaluate it: cifar10-eval ")
    stopped = int(lines[-1].split()[3].rstrip(";"))
    assert checkpoint_steps(tmp_path / "train") == [stopped]


def test_a_second_signal_on_a_worker_that_is_not_the_chief_names_the_chiefs_folder(tmp_path):
    # (The chief's line: test_a_second_signal_stops_at_once_naming_the_last_checkpoint.)
    script = (
        "import os, signal, sys, time\n"
        "from cifar10.cli import stopping\n"
        f"with stopping.StopRequests('cifar10-train', {str(tmp_path)!r}, task='worker 1') as s:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    s.event.wait(10)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(10)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=env())
    assert result.returncode == stopping.INTERRUPTED, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-train: interrupted at once; this is worker 1: the chief saves the "
        f"checkpoints in {tmp_path}")


def test_the_last_checkpoint_named_is_not_one_being_saved(tmp_path):
    assert stopping.last_good_checkpoint(str(tmp_path)) is None
    for step in (5, 10):
        (tmp_path / f"model.ckpt-{step}.index").write_bytes(b"")
        (tmp_path / f"model.ckpt-{step}.data-00000-of-00001").write_bytes(b"")
    # TensorFlow removes a save's folder after it wrote the .index file, last.
    (tmp_path / "model.ckpt-10_temp").mkdir()
    assert stopping.last_good_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-5")
    (tmp_path / "model.ckpt-10_temp").rmdir()
    assert stopping.last_good_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-10")


def test_a_reader_that_stops_reading_ends_the_program_quietly():
    # As `cifar10-train --help | head -1` does: no traceback for the closed pipe.
    proc = subprocess.Popen([program("cifar10-train"), "--help"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())
    proc.stdout.close()  # before it writes: a program takes about a second to start
    err = proc.stderr.read()
    assert (proc.wait(timeout=60), err) == (141, "")  # 128 + SIGPIPE, as a shell says


@pytest.mark.parametrize("module, args", [
    ("train_main", ["--help"]), ("eval_main", ["--version"]),
    ("train_main", ["--batch_size=100000000"]),
    ("eval_main", ["--eval_data=validation"]), ("export_main", ["--checkpoint=/tmp"]),
    ("predict_main", ["--checkpoint=/tmp", __file__]),
])
def test_help_and_flag_mistakes_are_answered_before_tensorflow_loads(module, args):
    check = (f"import sys; sys.argv = ['prog', *{args!r}]\n"
             f"from cifar10.cli import {module}\n"
             f"try:\n    {module}.run()\n"
             f"finally:\n    print('tensorflow' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            timeout=60, env=env())
    assert result.returncode == (0 if args[0] in ("--help", "--version") else 1), result.stderr
    assert result.stderr.strip().splitlines()[-1] == "False"


def test_downloads_missing_data_from_a_local_server_then_trains(tmp_path):
    tarball = synthetic.tarball_bytes(records_per_file=40)
    served = tmp_path / "served"
    served.mkdir()
    (served / "cifar-10-binary.tar.gz").write_bytes(tarball)
    handler = functools.partial(QuietHandler, directory=str(served))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/cifar-10-binary.tar.gz"
        result = call("cifar10-train", f"--data_dir={tmp_path / 'data'}",
                      f"--train_dir={tmp_path / 'train'}", f"--data_url={url}",
                      f"--data_md5={hashlib.md5(tarball).hexdigest()}", "--max_steps=2",
                      "--batch_size=8")
        server.shutdown()
    assert result.returncode == 0, result.stderr
    batches = tmp_path / "data" / "cifar-10-batches-bin"
    assert (batches / "data_batch_5.bin").stat().st_size == 40 * 3073
    assert (tmp_path / "data" / "cifar-10-binary.tar.gz").read_bytes() == tarball
    assert "SYNTHETIC" in result.stdout  # the served data carries the generator's marker
    assert tf.train.latest_checkpoint(str(tmp_path / "train")).endswith("model.ckpt-2")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


def test_make_synthetic_data_script_writes_a_valid_data_set(tmp_path):
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "make_synthetic_data.py")
    result = subprocess.run([sys.executable, script, str(tmp_path), "--records_per_file=7"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    files = datafolder.split_files(str(tmp_path / "cifar-10-batches-bin"), "train")
    assert datafolder.validate_files(files) == 35
    # A usage error as the programs': one line, exit status 1 (not argparse's 2).
    bad = subprocess.run([sys.executable, script, str(tmp_path), "--records_per_file=0"],
                         capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        1, "", "make_synthetic_data.py: error: --records_per_file must be at least 1, got 0 "
               "(see make_synthetic_data.py --help)\n")


def wait_for_log_step(proc, step):
    """Reads ``proc``'s stdout until it logs ``step`` or more; returns the lines read."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = TRAIN_LINE.match(line.strip())
        if match and int(match[1]) >= step:
            return lines
    raise AssertionError(f"the trainer ended before step {step}:\n{''.join(lines)}")


def test_kill_during_a_save_then_resume_or_fresh_start(tmp_path):
    """kill -9 while TensorFlow writes a checkpoint leaves model.ckpt-N_temp/ behind."""
    train_dir = tmp_path / "train"
    args = train_args(tmp_path, "--max_steps=100000", "--log_frequency=1",
                      "--checkpoint_steps=1", "--summary_steps=100000")
    for _ in range(5):  # each try kills at the first save caught in the act
        proc = start("cifar10-train", *args)
        try:
            wait_for_log_step(proc, 3)
            deadline = time.time() + 60
            while time.time() < deadline and not any(
                    name.endswith("_temp") for name in os.listdir(train_dir)):
                pass
            proc.kill()
            proc.communicate(timeout=60)
        finally:
            proc.kill()
        if any(name.endswith("_temp") for name in os.listdir(train_dir)):
            break
    else:
        pytest.fail("no save was caught in the act in 5 tries")
    [leftover] = [n for n in os.listdir(train_dir) if n.endswith("_temp")]
    (train_dir / "model.ckpt-best.txt").write_text("mine")
    # Caught (rarely) as TensorFlow put the checkpoint's own files in place: they go too.
    cut = [f"model.ckpt-{step}" for step in cleanup.cut_short_steps(str(train_dir))]
    removed = sorted(n for n in os.listdir(train_dir)
                     if n == leftover or cut and n.startswith(f"{cut[0]}."))
    newest = [step for step in checkpoint_steps(train_dir) if f"model.ckpt-{step}" not in cut][-1]
    shutil.copytree(train_dir, tmp_path / "copy")

    # The same directory twice: resumed, and (a copy) started afresh.
    resume = call("cifar10-train", *train_args(tmp_path, f"--max_steps={newest + 1}"))
    assert resume.returncode == 0, resume.stderr
    said = f" (the unfinished checkpoint {cut[0]})" if cut else ""
    assert (f"Removed what an interrupted save left in {train_dir}: {', '.join(removed)}{said}."
            in resume.stdout)
    assert f"Resuming from {train_dir}/model.ckpt-{newest} at step {newest}." in resume.stdout
    assert not (train_dir / leftover).exists()

    fresh = call("cifar10-train", *train_args(tmp_path, "--max_steps=2", "--fresh_start",
                                              f"--train_dir={tmp_path / 'copy'}"))
    assert fresh.returncode == 0, fresh.stderr
    assert "Fresh start: removed " in fresh.stdout
    copy = tmp_path / "copy"
    events = [n for n in os.listdir(copy) if n.startswith("events.out.")]
    assert len(events) == 1
    assert sorted(os.listdir(copy)) == sorted([
        ".cifar10-folder", "checkpoint", "cifar10-train.lock", "class_names.txt", "environment.jsonl", "flags.txt",
        "metrics.csv", "model.ckpt-2.data-00000-of-00001", "model.ckpt-2.index",
        "model.ckpt-best.txt", "training_complete.json", *events])


# cifar10-train with a standard output that fails (a full disk: ENOSPC) from the first
# line that contains FAIL_AT on.
FULL_STDOUT = """
import errno, sys
from cifar10.cli import entry

class Full:
    failing = False
    def write(self, text):
        Full.failing = Full.failing or FAIL_AT in text
        if Full.failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        return sys.__stdout__.write(text)
    def flush(self):
        sys.__stdout__.flush()
    def fileno(self):
        return sys.__stdout__.fileno()

sys.stdout = Full()
sys.argv = ["cifar10-train", *ARGS]
entry.train()
"""


def test_a_standard_output_that_cannot_be_written_stops_the_run_saved_with_one_line(tmp_path):
    fail_at, said = ": step 2,", ("; stopped at step 2; saved {d}/model.ckpt-2. Run the same "
                                  "command again to resume.")
    args = train_args(tmp_path, "--max_steps=1000", "--log_frequency=1", "--steps_per_loop=1",
                      "--checkpoint_steps=1000")
    script = FULL_STDOUT.replace("FAIL_AT", repr(fail_at)).replace("ARGS", repr(args))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env=env())
    train_dir = tmp_path / "train"
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "cifar10-train: error: cannot write to standard output (No space left on device)"
        + said.format(d=train_dir))
    assert "Traceback" not in result.stderr
    assert checkpoint_steps(train_dir) == [2]
