"""cifar10-train and scripts/slurm_train.sbatch under a real one-node Slurm, started
and stopped by the recipe of docs/multi-machine.md as written there
(tests/slurm_cluster.py), the page's srun and sbatch examples, and the batch script's
decisions with stand-ins for srun and scontrol."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import http.server
import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from cli import BIN_DIR, program
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.distribute import cluster
import slurm_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBATCH_SCRIPT = os.path.join(ROOT, "scripts", "slurm_train.sbatch")


@pytest.fixture(scope="module")
def slurm_job(tmp_path_factory):
    """The page's one-node Slurm (its daemons stopped by the page's block at the end, also
    on failure; by their ids where that block leaves one running)."""
    why = slurm_cluster.missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm tests: {why}")
        pytest.skip(why)
    folder = tmp_path_factory.mktemp("slurm")
    daemons = slurm_cluster.SlurmCluster(str(folder))
    daemons.start()
    try:
        yield daemons
    finally:
        daemons.stop()


def ports_free(base: int, count: int = 2) -> bool:
    """Whether ports ``base`` to ``base + count - 1`` are free now."""
    with contextlib.ExitStack() as held:
        try:
            for port in range(base, base + count):
                held.enter_context(socket.socket()).bind(("", port))
        except OSError:
            return False
    return True


def free_port_base(tasks: int = 2) -> int:
    """A --slurm_port_base whose ``tasks`` ports are free now (not the default, which
    another job or program on this machine may hold)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("", 0))
            base = probe.getsockname()[1]
        if 1024 <= base and base + tasks <= 65000 and ports_free(base, tasks):
            return base
    raise AssertionError("no free ports for a --slurm_port_base")


def train_args(folder, *extra):
    # (absl takes the last of a flag given twice: --slurm_port_base in ``extra``)
    return ("--synthetic_data", "--synthetic_records=50", f"--data_dir={folder}/data",
            f"--train_dir={folder}/train", "--batch_size=8", "--worker_timeout_secs=300",
            f"--slurm_port_base={free_port_base()}", *extra)


@contextlib.contextmanager
def held_tarball(body: bytes):
    """(the URL of a local server of ``body`` that answers once ``release`` is set; the
    list of the paths requested; ``release``)."""
    requests, release = [], threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name BaseHTTPRequestHandler calls
            requests.append(self.path)
            release.wait(300)  # a bound only
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{ff.TARBALL_NAME}", requests, release
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_srun_trains_two_workers_on_data_the_nodes_first_task_fetched_once(slurm_job,
                                                                          tmp_path):
    """The missing --data_dir is downloaded by task 0 alone (one request, its progress
    lines only), while task 1 says once that it waits; then the chief writes."""
    tarball = synthetic.tarball_bytes(records_per_file=50)
    data_dir = tmp_path / "data"
    with held_tarball(tarball) as (url, requests, release):
        proc = subprocess.Popen(
            ["srun", "-n", "2", "--overcommit", "-l", "--kill-on-bad-exit=1",
             program("cifar10-train"), f"--data_dir={data_dir}", f"--data_url={url}",
             f"--data_md5={hashlib.md5(tarball).hexdigest()}", f"--train_dir={tmp_path}/train",
             "--batch_size=8", "--worker_timeout_secs=300", "--max_steps=4",
             "--log_frequency=2", "--checkpoint_steps=2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm_job.env())
        lines = []
        try:
            for line in proc.stdout:  # the download is answered once task 1 waits for it
                lines.append(line)
                if line.startswith("1: Waiting for"):
                    release.set()
            err = proc.communicate(timeout=240)[1]
        finally:
            proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert requests == [f"/{ff.TARBALL_NAME}"]
    assert [line for line in lines if "Waiting" in line] == [
        f"1: Waiting for Slurm task 0 (the first task on {slurm_job.host}) to fetch the data "
        f"into {data_dir}.\n"]
    downloads = [line for line in err.splitlines() if ">> Downloading" in line]
    assert downloads and all(line.startswith("0: ") for line in downloads), err
    assert sorted(os.listdir(data_dir)) == [ff.BATCHES_DIRNAME, ff.TARBALL_NAME]
    assert re.search(r"^0: Training on 250 examples .* with 2 replica\(s\), global batch 16; "
                     r"checkpoints and summaries in ", out, re.M), out
    assert re.search(r"^1: .*this is worker 1: the chief writes checkpoints", out, re.M), out
    assert f"0: Training complete at step 4; saved {tmp_path}/train/model.ckpt-4." in out
    with open(tmp_path / "train" / "environment.jsonl") as f:
        [record] = [json.loads(line) for line in f]
    assert record["slurm"]["step_id"] == "0" and record["slurm"]["task"] == "0"
    assert record["slurm"]["job_id"].isdigit()


def test_a_port_in_use_stops_the_step_in_one_line(slurm_job, tmp_path):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        # Task 1, waiting for task 0, ends at srun's SIGTERM (within the run's timeout),
        # not --worker_timeout_secs later.
        result = subprocess.run(
            ["srun", "-n", "2", "--overcommit", "-l", "--kill-on-bad-exit=1",
             program("cifar10-train"), *train_args(tmp_path, f"--slurm_port_base={port}",
                                                   "--worker_timeout_secs=3600")],
            capture_output=True, text=True, timeout=300, env=slurm_job.env())
    assert result.returncode != 0
    assert (f"0: cifar10-train: error: port {port} on {slurm_job.host} (--slurm_port_base="
            f"{port} + local task 0) is in use by another program or job: choose another "
            f"--slurm_port_base, e.g. {port + 1000}") in result.stderr.splitlines()


@pytest.mark.slow  # the srun and sbatch trainings of the tests above, as the page has them
def test_the_pages_one_node_srun_and_sbatch_examples_run_as_written(slurm_job, tmp_path):
    """In a folder of their own, with the venv's programs first on PATH and the
    repository's scripts/ (the page's commands run in a clone)."""
    _, examples, _ = slurm_cluster.recipe()
    assert [text.split()[0] for text in examples] == ["srun", "sbatch"], examples
    (tmp_path / "scripts").symlink_to(os.path.join(ROOT, "scripts"))
    env = slurm_job.env(PATH=f"{BIN_DIR}:{slurm_job.env()['PATH']}")
    outputs = []
    for text in examples:
        if not ports_free(cluster.DEFAULT_PORT_BASE):  # held by another job or program
            text = f"{text.rstrip()} --slurm_port_base={free_port_base()}\n"
        result = subprocess.run(["bash", "-e", "-u", "-c", text], capture_output=True,
                                text=True, timeout=600, cwd=tmp_path, env=env)
        assert result.returncode == 0, f"{text}{result.stdout[-3000:]}{result.stderr[-3000:]}"
        outputs.append(result.stdout)
    assert "Training complete at step 20; saved runs/slurm/train/model.ckpt-20." in outputs[0]
    [job_output] = glob.glob(f"{tmp_path}/cifar10-train-*.out")
    with open(job_output) as f:
        out = f.read()
    assert "Resuming from runs/slurm/train/model.ckpt-20 at step 20." in out, out
    assert "Training complete at step 30; saved runs/slurm/train/model.ckpt-30." in out, out
    assert "requeueing" not in out
    assert "this is worker 1" not in out  # srun --output=0: the chief's lines only


def submit(slurm_job, folder, *args) -> str:
    """sbatch's job id of scripts/slurm_train.sbatch with 2 tasks on this node."""
    result = subprocess.run(
        ["sbatch", "--parsable", "-n", "2", "--ntasks-per-node=2", "--overcommit",
         f"--output={folder}/job-%j.out", SBATCH_SCRIPT, *train_args(folder, *args)],
        capture_output=True, text=True, timeout=60,
        env=slurm_job.env(CIFAR10_TRAIN=program("cifar10-train")))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def wait_for(condition, timeout, what):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what()
        time.sleep(0.5)


def squeue(slurm_job, job_id) -> str:
    """The job's state and reason ('' once it has ended)."""
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True,
                          text=True, env=slurm_job.env(), timeout=30).stdout.strip()


@pytest.mark.slow  # Slurm and the batch script's: TensorFlow's, as the srun test's
def test_a_signalled_job_requeues_itself_a_cancelled_one_saves_and_ends(slurm_job, tmp_path):
    """(A job submitted again resumes: the page's sbatch example.)"""
    args = ("--max_steps=100000", "--log_frequency=1", "--steps_per_loop=1",
            "--checkpoint_steps=100000")
    job = submit(slurm_job, tmp_path, *args)
    log = tmp_path / f"job-{job}.out"
    text = lambda: log.read_text() if log.exists() else ""  # noqa: E731
    wait_for(lambda: re.search(r": step [3-9]\d*, loss", text()), 180, text)
    # What `sbatch --signal=TERM@secs` sends before the time limit: SIGTERM to the
    # job's steps, not to the batch script, which requeues the job.
    scancel = ["scancel", "--signal=TERM", job]
    subprocess.run(scancel, env=slurm_job.env(), timeout=30, check=True)
    wait_for(lambda: re.search(r"at step (\d+)\.\n", text()), 180, text)
    first = int(re.findall(r"Stopped at step (\d+); saved ", text())[0])
    assert f"requeueing job {job}" in text()
    assert f"Resuming from {tmp_path}/train/model.ckpt-{first} at step {first}." in text()
    wait_for(lambda: re.search(rf": step {first + 3}, loss", text()), 180, text)

    subprocess.run(["scancel", job], env=slurm_job.env(), timeout=30, check=True)
    wait_for(lambda: not squeue(slurm_job, job), 120, text)
    stops = [int(n) for n in re.findall(r"Stopped at step (\d+); saved ", text())]
    assert len(stops) == 2 and 3 <= first < stops[1], text()
    assert (tmp_path / "train" / f"model.ckpt-{stops[1]}.index").exists()

    with open(tmp_path / "train" / "environment.jsonl") as f:
        records = [json.loads(line)["slurm"] for line in f]
    assert [(r["job_id"], r.get("restart_count")) for r in records] == [(job, None), (job, "1")]


def run_batch_script(tmp_path, *args, status=0, srun_does="", **environ):
    """scripts/slurm_train.sbatch run by bash with stand-ins for srun (printing its
    arguments, doing ``srun_does``, ending with ``status``) and scontrol (recording its
    arguments): (the result, scontrol's arguments)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text(f"#!/bin/sh\necho \"srun $*\"\n{srun_does}\nexit {status}\n")
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/scontrol\n")
    for stand_in in ("srun", "scontrol"):
        os.chmod(bin_dir / stand_in, 0o755)
    result = subprocess.run(
        ["bash", SBATCH_SCRIPT, *args], capture_output=True, text=True, timeout=30,
        cwd=tmp_path, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                           "SLURM_JOB_ID": "77", "CIFAR10_TRAIN": "cifar10-train", **environ})
    recorded = (tmp_path / "scontrol").read_text() if (tmp_path / "scontrol").exists() else ""
    return result, recorded


SRUN = "srun --kill-on-bad-exit=1 --output=0 --error=all cifar10-train"
REQUEUED = "slurm_train.sbatch: stopped before --max_steps; requeueing job 77"


@pytest.mark.parametrize("status, complete, requeued", [
    (0, False, True),     # stopped by --signal=TERM@secs, its checkpoint saved
    (0, True, False),     # the run reached --max_steps
    (1, False, False),    # an error: the job ends with it
    (130, False, False),  # a task failed and srun stopped the others as they waited
])
def test_the_batch_script_requeues_a_stopped_incomplete_run_only(tmp_path, status, complete,
                                                                   requeued):
    (tmp_path / "train").mkdir()
    if complete:
        (tmp_path / "train" / "training_complete.json").write_text("{}")
    result, recorded = run_batch_script(tmp_path, f"--train_dir={tmp_path}/train", status=status)
    assert result.returncode == status
    assert result.stdout.splitlines()[0] == f"{SRUN} --train_dir={tmp_path}/train"
    assert (recorded == "requeue 77\n", REQUEUED in result.stdout) == (requeued, requeued)
    assert result.stderr.splitlines() == ([] if status == 0 or complete else [
        f"slurm_train.sbatch: error: job 77 is not requeued because a task failed (srun's "
        f"status {status}): the first task error above is the cause"])


def test_a_requeued_job_resumes_its_run_even_if_it_was_submitted_with_fresh_start(tmp_path):
    """Requeued, the job runs the script again with its arguments: --fresh_start would
    delete the checkpoint it stopped at, at every requeue."""
    (tmp_path / "train").mkdir()
    args = (f"--train_dir={tmp_path}/train", "--fresh_start")
    result, _ = run_batch_script(tmp_path, *args)
    assert result.stdout.splitlines()[0] == f"{SRUN} {' '.join(args)}"
    result, _ = run_batch_script(tmp_path, *args, "--", "x", SLURM_RESTART_COUNT="2")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[:2] == [
        "slurm_train.sbatch: job 77 requeued (restart 2): resuming its run "
        "(--nofresh_start added)",
        f"{SRUN} {' '.join(args)} --nofresh_start -- x"]  # before a --, where flags end


def test_a_job_stopped_at_the_checkpoint_it_started_from_is_not_requeued(tmp_path):
    """A time limit too short for one step would requeue the job for ever."""
    (tmp_path / "train").mkdir()
    state = tmp_path / "train" / "checkpoint"
    state.write_text('model_checkpoint_path: "model.ckpt-40"\n')
    result, recorded = run_batch_script(tmp_path, f"--train_dir={tmp_path}/train",
                                        srun_does=f"touch {state}")
    assert (result.returncode, recorded) == (1, "")
    assert result.stderr.splitlines() == [
        "slurm_train.sbatch: error: job 77 stopped at the checkpoint it started from "
        "(model.ckpt-40): no step was trained, so it is not requeued; give it a longer "
        "time limit (sbatch --time)"]
    result, recorded = run_batch_script(
        tmp_path, f"--train_dir={tmp_path}/train",
        srun_does=f"echo 'model_checkpoint_path: \"model.ckpt-41\"' > {state}")
    assert (result.returncode, recorded, result.stderr) == (0, "requeue 77\n", "")


def test_the_batch_script_takes_the_train_dir_cifar10_train_takes(tmp_path):
    """The last --train_dir of the command line or of a --flagfile (a run's flags.txt,
    whose commented lines are an earlier start's); none is one line."""
    old, train_dir = tmp_path / "old", tmp_path / "train"
    for folder in (old, train_dir):
        folder.mkdir()
    (old / "training_complete.json").write_text("{}")
    flags_txt = train_dir / "flags.txt"
    flags_txt.write_text(f"# cifar10-train, started 2026-01-01T00:00:00 on vm\n"
                         f"# --train_dir={old}\n--train_dir={old}\n\n"
                         f"  --train_dir={train_dir}  \r\n--max_steps=10\n")
    result, recorded = run_batch_script(tmp_path, f"--flagfile={flags_txt}")
    assert (result.returncode, recorded, REQUEUED in result.stdout) == (0, "requeue 77\n", True)
    result, _ = run_batch_script(tmp_path, "--flagfile", str(flags_txt), "--train_dir", str(old))
    assert (result.returncode, REQUEUED in result.stdout) == (0, False)  # old is complete
    (tmp_path / "no_dir.txt").write_text("--max_steps=30\n")
    for args, line in [(["--flagfile=no_dir.txt"], "give cifar10-train's --train_dir=DIR (a "
                        "folder every node shares), on the command line or in the --flagfile"),
                       (["--flagfile=missing.txt"], "--flagfile=missing.txt cannot be read (no "
                        "such file, or not a file): name a file of cifar10-train's flags, such "
                        "as a run's flags.txt")]:
        result, _ = run_batch_script(tmp_path, *args)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr.splitlines() == [f"slurm_train.sbatch: error: {line}"]
