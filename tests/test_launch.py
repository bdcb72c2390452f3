"""Tests of cifar10-launch, mostly with stand-in workers (``WORKER``); test_multi_worker.py
runs it with real cifar10-train workers, and ``half_job`` one that waits for the other."""

from __future__ import annotations

import hashlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

import pytest
from absl import flags

from cli import call, env
from test_multi_worker import watchdog_started
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.distribute import cluster
from cifar10.cli import launch

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "launch_workers.py")

WORKER = """
import json, os, signal, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
mode, folder = sys.argv[1], sys.argv[2]
print(f"progress of worker {index}")
print(f"warning of worker {index}", file=sys.stderr)
if mode == "exit":  # worker 1 first, then worker 0
    time.sleep(0.0 if index else 1.0)
    sys.exit(3 + index)
if mode == "kill" and index == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "wait":
    def stop(signum, frame):
        print(f"worker {index} got {signal.Signals(signum).name}")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    open(os.path.join(folder, f"ready-{index}"), "w").close()
    print(f"worker {index} waits", flush=True)
    time.sleep(60)
    sys.exit(9)
"""


@pytest.fixture
def worker(tmp_path):
    """A launch() runner with the fake worker: (mode, **launch kwargs) -> (lines, start line)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)

    def run(mode, num_workers=2, **kwargs):
        out, printed = io.StringIO(), []
        try:
            launch.launch(num_workers, [mode, str(tmp_path)], out=out, print_fn=printed.append,
                          command=[sys.executable, str(script)], **kwargs)
        finally:
            run.lines = out.getvalue().splitlines()
        return run.lines, printed

    return run


def test_each_worker_gets_a_tf_config_of_one_local_cluster():
    ports = launch.free_ports(3)
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)
    configs = [cluster.read_tf_config(text) for text in launch.tf_configs(ports)]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert all(c["cluster"] == {"worker": [f"127.0.0.1:{p}" for p in ports]} for c in configs)
    assert cluster.strategy_kind("auto", launch.tf_configs(ports)[1]) == "multi_worker"


def test_the_trainer_is_the_one_next_to_the_python_that_runs_the_launcher(tmp_path):
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    assert launch.trainer_command(str(python)) == [
        str(python), "-c", "from cifar10.cli import entry; entry.train()"]
    trainer = tmp_path / "bin" / "cifar10-train"
    trainer.write_text("#!/bin/sh\n")
    assert launch.trainer_command(str(python))[1] == "-c"  # not executable
    trainer.chmod(0o755)
    assert launch.trainer_command(str(python)) == [str(trainer)]
    # This test's Python has it installed; the other way starts the same program.
    assert launch.trainer_command() == [os.path.join(os.path.dirname(sys.executable),
                                                     "cifar10-train")]
    result = subprocess.run([sys.executable, "-c", launch.TRAINER_CODE, "--help"],
                            capture_output=True, text=True, timeout=120, env=env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: cifar10-train [flags]")


def test_the_chiefs_lines_are_shown_once_and_of_the_others_only_their_stderr(worker):
    lines, printed = worker("ok")
    [start] = printed
    assert re.fullmatch(r"Starting 2 cifar10-train workers of one job on 127\.0\.0\.1, ports "
                        r"\d+, \d+: worker 0 \(the chief\) shows the job's progress, the "
                        r"others their warnings and errors\.", start), start
    assert sorted(lines) == ["[worker 0] progress of worker 0", "[worker 0] warning of worker 0",
                             "[worker 1] warning of worker 1"]
    assert lines.index("[worker 0] progress of worker 0") < lines.index(
        "[worker 0] warning of worker 0")


def test_all_output_shows_every_workers_lines(worker):
    lines, printed = worker("ok", num_workers=3, all_output=True)
    assert printed[0].endswith(": every worker shows all its lines.")
    assert sorted(lines) == sorted(f"[worker {i}] {kind} of worker {i}" for i in range(3)
                                   for kind in ("progress", "warning"))


def test_the_first_worker_to_fail_gives_the_exit_status(worker):
    with pytest.raises(launch.WorkerFailed) as failed:
        worker("exit")
    assert str(failed.value) == "worker 1 exited with status 4, then worker 0 exited with status 3"
    assert failed.value.status == 4
    assert "[worker 1] warning of worker 1" in worker.lines  # its own lines say why
    with pytest.raises(launch.WorkerFailed) as failed:
        worker("kill")
    assert str(failed.value) == "worker 1 was ended by SIGKILL"
    assert failed.value.status == 128 + signal.SIGKILL
    assert launch.ending(0, -99) == "worker 0 was ended by signal 99"


def test_a_worker_that_cannot_start_is_one_line_and_stops_the_others():
    first = launch._start_worker([sys.executable, "-c", "import time; time.sleep(60)"], "{}",
                                 show_stdout=True)
    with mock.patch.object(launch, "_start_worker", side_effect=[
            first, OSError(11, "Resource temporarily unavailable")]):
        with pytest.raises(launch.Cifar10Error) as failed:
            launch.launch(2, ["--max_steps=3"], command=["cifar10-train"], out=io.StringIO(),
                          print_fn=lambda line: None)
    assert str(failed.value) == ("cannot start worker 1, cifar10-train (Resource temporarily "
                                 "unavailable)")
    assert first[0].wait(timeout=10) == -signal.SIGKILL


def sigterm_once_ready(folder, workers=2) -> threading.Thread:
    """A started thread that sends this process SIGTERM once each of ``workers`` fake
    workers has written its ``ready-<i>`` file in ``folder``."""

    def send_when_ready():
        deadline = time.time() + 60
        while not all((folder / f"ready-{i}").exists() for i in range(workers)):
            assert time.time() < deadline
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send_when_ready, daemon=True)
    sender.start()
    return sender


def test_sigterm_reaches_every_worker_once_and_the_handlers_are_restored(worker, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    sender = sigterm_once_ready(tmp_path)
    lines, _ = worker("wait", all_output=True)  # no error: both exit 0
    sender.join()
    got = sorted(line for line in lines if " got " in line)
    assert got == ["[worker 0] worker 0 got SIGTERM", "[worker 1] worker 1 got SIGTERM"]
    assert signal.getsignal(signal.SIGTERM) is before


# Worker 0 is the real cifar10-train; worker 1 never joins the job (it sleeps, and
# ends at SIGINT or SIGTERM as cifar10-train does before training: status 130), so
# worker 0 waits for it, deaf to a signal to its own pid only (see resolver's watchdog).
HALF_JOB = """
import json, os, signal, sys, time
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
    os.execv(sys.argv[1], sys.argv[1:])
signal.signal(signal.SIGTERM, signal.default_int_handler)
try:
    time.sleep(120)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _children(pid):
    """The pids of ``pid``'s child processes (Linux /proc)."""
    children = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # not a process, or it ended
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children.append(int(name))
    return children


def when_waiting(act) -> threading.Thread:
    """A started thread that calls ``act(others)`` (the other children's pids) once a
    child of this process, the real cifar10-train, waits for the others (its watchdog runs)."""

    def act_when_waiting():
        deadline = time.time() + 120  # a guard against a hang only
        while time.time() < deadline:
            workers = _children(os.getpid())
            for pid in workers:
                if watchdog_started(pid):
                    act([w for w in workers if w != pid])
                    return
            time.sleep(0.1)

    actor = threading.Thread(target=act_when_waiting, daemon=True)
    actor.start()
    return actor


@pytest.fixture
def half_job(tmp_path):
    """(the workers' command, their flags) of HALF_JOB."""
    script = tmp_path / "half_job.py"
    script.write_text(HALF_JOB)
    return ([sys.executable, str(script), *launch.trainer_command()],
            ["--synthetic_data", "--synthetic_records=50", f"--data_dir={tmp_path / 'data'}",
             f"--train_dir={tmp_path / 'train'}", "--batch_size=8", "--max_steps=5",
             "--worker_timeout_secs=120"])


def test_a_worker_that_dies_before_the_job_forms_stops_the_waiting_others(half_job):
    command, args = half_job
    actor = when_waiting(lambda others: os.kill(others[0], signal.SIGKILL))
    out = io.StringIO()
    with pytest.raises(launch.WorkerFailed) as failed:
        launch.launch(2, args, all_output=True, out=out, print_fn=lambda line: None,
                      command=command)
    actor.join()
    lines = out.getvalue().splitlines()
    # The launcher's SIGTERM ends the waiting worker 0 (not its --worker_timeout_secs).
    assert str(failed.value) == ("worker 1 was ended by SIGKILL, then worker 0 was ended by "
                                 "SIGINT")
    assert failed.value.status == 128 + signal.SIGKILL
    assert lines.count("[worker 0] cifar10-train: error: stopped by SIGTERM while waiting for "
                       "the other workers to start") == 1, lines
    assert not [line for line in lines if "did not all start" in line]


def test_ctrl_c_to_the_launcher_while_the_job_forms_exits_130_saying_nothing_was_trained(
        half_job, tmp_path):
    # Every worker ends 130 at the one stop: the launcher's interrupt.
    command, args = half_job
    when_waiting(lambda others: os.kill(os.getpid(), signal.SIGINT))
    with mock.patch.object(launch, "trainer_command", return_value=command):
        result = call("cifar10-launch", "--num_workers=2", "--", *args)
    assert result.returncode == 130, result.stdout + result.stderr
    assert result.stderr.splitlines()[-1] == (
        "cifar10-launch: interrupted before training started; nothing was trained")
    assert "[worker 0] cifar10-train: error: stopped by SIGINT while waiting for the other " \
           "workers to start" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "train").exists() or not [
        n for n in os.listdir(tmp_path / "train") if n.startswith("model.ckpt")]


@pytest.mark.parametrize("args, error", [
    (["--num_workers=0"], "--num_workers=0: must be a whole number of at least 1 (see "
                          "cifar10-launch --help)"),
    (["--synthetic_data"], "--synthetic_data is cifar10-train's flag: put it after --, as in "
                           "cifar10-launch -- --synthetic_data (see cifar10-launch --help)"),
    (["--num_workers=2", "--max_steps=3", "--", "--synthetic_data"],
     "--max_steps=3 is cifar10-train's flag: put it after --, as in cifar10-launch "
     "--num_workers=2 -- --synthetic_data --max_steps=3 (see cifar10-launch --help)"),
    (["--max_steps", "3", "--num_workers=2"],
     "--max_steps 3 is cifar10-train's flag: put it after --, as in cifar10-launch "
     "--num_workers=2 -- --max_steps 3 (see cifar10-launch --help)"),
    (["--no_such_flag"], "unknown flag --no_such_flag (see cifar10-launch --help)"),
    (["--", "--max_step=3"], "cifar10-train's flags (after --): unknown flag --max_step (did "
                             "you mean --max_steps?) (see cifar10-train --help)"),
    (["--", "--batch_size=0"], "cifar10-train's flags (after --): --batch_size=0: must be a "
                               "whole number of at least 1 (see cifar10-train --help)"),
    (["--", f"--train_dir={__file__}"], f"cifar10-train's flags (after --): --train_dir="
                                        f"{__file__} is a file, not a folder: name a folder "
                                        f"for its output (see cifar10-train --help)"),
    (["--", "--train_dir="], "cifar10-train's flags (after --): --train_dir is empty: name a "
                             "folder (default: /tmp/cifar10_train) (see cifar10-train --help)"),
    (["--", "--synthetic_data", "200"], "unexpected arguments for cifar10-train: 200 (after -- "
                                        "come its flags only, e.g. -- --max_steps=300)"),
    (["--", "--strategy=mirrored"], "--strategy=mirrored would have each worker train on its "
                                    "own, all in one --train_dir: drop it, the workers of one "
                                    "job use multi_worker"),
    (["--", "--fresh_start", "--train_dir=/tmp/x"],
     "--fresh_start is not supported with several workers (one worker could restore what the "
     "chief is deleting); delete the checkpoints in /tmp/x by hand, or use a new --train_dir"),
])
def test_wrong_usage_is_one_line_before_any_worker_starts(args, error):
    with mock.patch.object(launch.subprocess, "Popen", side_effect=AssertionError("started")):
        result = call("cifar10-launch", *args)
    assert result.returncode == 1
    assert result.stderr == f"cifar10-launch: error: {error}\n"
    assert result.stdout == ""


def test_a_batch_past_memory_is_one_line_before_any_worker_starts(tmp_path):
    """Said once by the launcher, in the trainer's words, not once by each worker."""
    with mock.patch.object(launch.subprocess, "Popen", side_effect=AssertionError("started")):
        result = call("cifar10-launch", "--", "--batch_size=99999999999999999999",
                      f"--train_dir={tmp_path / 'train'}")
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("cifar10-launch: error: --batch_size=99999999999999999999 cannot "
                           "fit: conv1's output alone would take at least 1.47e+16 GB a "
                           "replica, more than "), line
    assert line.endswith("; give a smaller --batch_size (the tutorial's is 128)")
    assert not (tmp_path / "train").exists()


@pytest.mark.parametrize("train_dir, data_dir, error", [
    ("data", "d", "--train_dir={t}/data is a folder of other files: choose a new or empty "
                  "folder for cifar10-train (or one it wrote before)"),
    ("new", "run", "--data_dir={t}/run is cifar10-train's folder, not a data folder: pass the "
                   "folder that holds the data (cifar-10-batches-bin/), or a new folder to "
                   "download it into"),
    ("new", "new", "--data_dir={t}/new is the program's output folder too: give the data a "
                   "folder of its own"),
    ("t3", "d", "{t}/t3/cifar10-train.lock is a folder, not cifar10-train's lock file: move "
                "that folder away (the trainer keeps its lock in a file of that name in "
                "--train_dir)"),
])
def test_a_folder_the_workers_refuse_is_one_line_before_any_data_or_worker(
        tmp_path, train_dir, data_dir, error):
    (tmp_path / "data" / "test_batch.bin").parent.mkdir()
    (tmp_path / "data" / "test_batch.bin").write_bytes(b"")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "cifar10-train.lock").write_text('{"pid": 1}\n')
    (tmp_path / "t3" / "cifar10-train.lock").mkdir(parents=True)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with mock.patch.object(launch.subprocess, "Popen", side_effect=AssertionError("started")):
        result = call("cifar10-launch", "--num_workers=2", "--", "--synthetic_data",
                      f"--train_dir={tmp_path / train_dir}", f"--data_dir={tmp_path / data_dir}")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"cifar10-launch: error: {error.format(t=tmp_path)}\n"
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_absls_own_flags_pass_to_the_workers_and_this_process_keeps_its_settings():
    verbosity = flags.FLAGS["verbosity"].value
    launch.check_train_args(["-v", "1", "--max_steps=3"], num_workers=2)
    launch.check_train_args(["--fresh_start"], num_workers=1)  # one worker may start afresh
    assert flags.FLAGS["verbosity"].value == verbosity


def test_the_script_is_the_same_program_and_says_where_the_package_is_missing():
    result = subprocess.run([sys.executable, SCRIPT, "--num_workers=0"], capture_output=True,
                            text=True, timeout=120, env=env())
    assert (result.returncode, result.stderr) == (1, "cifar10-launch: error: "
                                                  "--num_workers=0: must be a whole number "
                                                  "of at least 1 (see cifar10-launch --help)\n")
    # -S -I: a Python without the virtual environment's packages, as the system's python3.
    result = subprocess.run([sys.executable, "-S", "-I", SCRIPT, "--num_workers=2"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"launch_workers.py: error: {sys.executable} cannot import the "
                           f"cifar10 package (No module named 'cifar10'); run cifar10-launch")


class ClosedOnceBothWait(io.StringIO):
    """An output whose reader stops reading when both workers wait (with their SIGTERM
    handlers set, as trainers have once they train)."""

    def write(self, text):
        if "waits" in text and "waits" in self.getvalue():
            raise BrokenPipeError("closed")
        return super().write(text)


def test_a_closed_output_stops_every_worker_as_a_sigterm_and_ends_as_a_closed_pipe(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = ClosedOnceBothWait()
    # (Not stopped, the workers would end 9 after 60 s: WorkerFailed.)
    with pytest.raises(BrokenPipeError):
        launch.launch(2, ["wait", str(tmp_path)], out=out, print_fn=lambda line: None,
                      command=[sys.executable, str(script)], all_output=True)
    assert sum("waits" in line for line in out.getvalue().splitlines()) == 1
    # Both got SIGTERM (and exited 0, as a trainer does after it saved): no WorkerFailed.
    assert sorted(os.listdir(tmp_path)) == ["ready-0", "ready-1", "worker.py"]


def tarball_url(folder) -> tuple[str, str]:
    """A file:// URL of a small tarball in ``folder``, and its MD5."""
    tarball = synthetic.tarball_bytes(records_per_file=5)
    folder.mkdir()
    (folder / ff.TARBALL_NAME).write_bytes(tarball)
    return f"file://{folder / ff.TARBALL_NAME}", hashlib.md5(tarball).hexdigest()


def test_a_missing_data_dir_is_fetched_once_before_the_workers_start(tmp_path):
    """Not by each worker at once (each its own download and progress lines)."""
    url, md5 = tarball_url(tmp_path / "served")
    data_dir = tmp_path / "data"
    seen = []

    def started(num_workers, train_args, **kwargs):
        seen.append(sorted(os.listdir(data_dir / ff.BATCHES_DIRNAME)))

    with mock.patch.object(launch, "launch", side_effect=started):
        result = call("cifar10-launch", "--num_workers=2", "--", f"--data_dir={data_dir}",
                      f"--data_url={url}", f"--data_md5={md5}",
                      f"--train_dir={tmp_path / 'train'}")
    assert result.returncode == 0, result.stderr
    assert seen == [sorted([*ff.TRAIN_FILES, *ff.TEST_FILES, ff.META_FILE,
                            synthetic.SYNTHETIC_MARKER])]
    assert result.stdout == ""  # the data's notes are the workers' to say


def test_a_failed_fetch_is_one_line_before_any_worker_and_leaves_no_data_dir(tmp_path):
    url, _ = tarball_url(tmp_path / "served")
    with mock.patch.object(launch.subprocess, "Popen", side_effect=AssertionError("started")):
        result = call("cifar10-launch", "--num_workers=2", "--",
                      f"--data_dir={tmp_path / 'data'}", f"--data_url={url}",
                      f"--data_md5={'0' * 32}", f"--train_dir={tmp_path / 'train'}")
    assert (result.returncode, result.stdout) == (1, "")
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("cifar10-launch: error: ") and "is not the expected tarball" in last
    assert sorted(os.listdir(tmp_path)) == ["served"]  # no data folder, half-made or empty


# ---- how the workers end, with stand-in processes -----------------------------------

class _Process:
    """A process that ends with ``returncode`` at its ``ends_at``-th poll."""

    def __init__(self, returncode, ends_at=1, pid=100):
        self.returncode, self._ends_at, self._polls, self.pid = None, ends_at, 0, pid
        self._code = returncode

    def poll(self):
        self._polls += 1
        if self._polls >= self._ends_at:
            self.returncode = self._code
        return self.returncode


def test_the_others_are_stopped_once_when_they_outlive_a_failure_by_the_grace_time():
    assert launch.wait([_Process(0, ends_at=3), _Process(1, ends_at=1)], grace_secs=0) == [
        (1, 1), (0, 0)]  # in the order they ended
    calls = []
    ended = launch.wait([_Process(2, ends_at=1), _Process(0, ends_at=4)],
                        on_failure=lambda: calls.append("stop"), grace_secs=0)
    assert calls == ["stop"] and ended == [(0, 2), (1, 0)]
    launch.wait([_Process(0, ends_at=2), _Process(0, ends_at=3)],
                on_failure=lambda: calls.append("stop"), grace_secs=0)
    assert calls == ["stop"]  # no failure, no stop


def test_a_worker_already_signalled_is_not_signalled_again(monkeypatch):
    sent = []
    monkeypatch.setattr(launch.os, "killpg", lambda pid, signum: sent.append(pid))
    job = launch._Job(processes=[_Process(0, ends_at=99, pid=7), _Process(0, ends_at=99, pid=8)],
                      signalled={7})
    launch._stop_unsignalled(job)
    assert sent == [8] and job.signalled == {7, 8}
