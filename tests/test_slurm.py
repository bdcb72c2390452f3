"""cifar10-train under Slurm: the job step's cluster read from SLURM_* (distribute/slurm.py,
resolver.py), and training, stopping and resuming under a real one-node Slurm
(tests/slurm_cluster.py: Debian's slurm-wlm and munge, started and stopped here)."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from cli import env, program
from cifar10.core.errors import Cifar10Error
from cifar10.cli import workers as launch_workers
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.distribute import cluster, resolver, slurm
import slurm_cluster

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBATCH_SCRIPT = os.path.join(REPO, "scripts", "slurm_train.sbatch")


def step_env(nodes="node[9-10]", tasks_per_node="1(x2)", rank=0, **extra):
    """The variables srun gives task ``rank`` of a job step (as Slurm 22.05 sets them)."""
    counts = slurm.expand_tasks_per_node(tasks_per_node)
    return {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_STEP_NUM_TASKS": str(sum(counts)), "SLURM_STEP_NODELIST": nodes,
            "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, **extra}


@pytest.fixture
def environ(monkeypatch):
    """Replaces the process's Slurm variables (and TF_CONFIG) for one test."""

    def set_env(values):
        for name in list(os.environ):
            if name.startswith("SLURM") or name in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES"):
                monkeypatch.delenv(name)
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    set_env({})
    return set_env


def outside_slurm(**extra):
    """The programs' environment (tests/cli.py's) without the variables of a Slurm job."""
    return {k: v for k, v in env(**extra).items() if not k.startswith("SLURM")}


def test_host_lists_and_task_counts_expand_in_slurms_order():
    assert slurm.expand_hostlist("node[9-10]") == ["node9", "node10"]
    # As `scontrol show hostnames` expands them (each range keeps its own zeros).
    assert slurm.expand_hostlist("gpu[01-02,7],login,r[1-2]n[1-2]") == [
        "gpu01", "gpu02", "gpu7", "login", "r1n1", "r1n2", "r2n1", "r2n2"]
    assert slurm.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    for broken in ("vm[", "vm]", "vm[1-2]]", "vm[[1-2]]", "a[1-2],b[3"):
        with pytest.raises(Cifar10Error, match=rf"^Slurm's node list {re.escape(repr(broken))} "
                                               rf"is not a host list this program reads \(its "
                                               rf"brackets do not pair\)"):
            slurm.expand_hostlist(broken)
    with pytest.raises(Cifar10Error, match=r"^SLURM_STEP_TASKS_PER_NODE='2x' is not Slurm's"):
        slurm.expand_tasks_per_node("2x")


def test_hosts_keep_slurms_order_and_the_rank_is_the_task_index(environ):
    # TensorFlow's SlurmClusterResolver sorts the names as text: node10 before node9.
    for rank in (0, 1):
        environ(step_env(rank=rank, SLURMD_NODENAME=f"node{9 + rank}", SLURM_LOCALID="0"))
        assert cluster.cluster_source() == "slurm"
        assert cluster.strategy_kind("auto") == "multi_worker"
        spec = resolver.SlurmResolver(slurm.read_task(), 24000)
        assert spec.cluster_spec().as_dict() == {"worker": ["node9:24000", "node10:24000"]}
        assert (spec.task_type, spec.task_id) == ("worker", rank)


def test_several_tasks_per_node_take_consecutive_ports_block_or_cyclic():
    block = slurm.read_task(step_env("a[1-2]", "2(x2)", rank=2, SLURMD_NODENAME="a2",
                                     SLURM_LOCALID="0"))
    assert block.addresses(5000) == ["a1:5000", "a1:5001", "a2:5000", "a2:5001"]
    cyclic = slurm.read_task(step_env("a[1-2]", "2,1", rank=2, SLURM_DISTRIBUTION="cyclic",
                                      SLURMD_NODENAME="a1", SLURM_LOCALID="1"))
    assert cyclic.addresses(5000) == ["a1:5000", "a2:5000", "a1:5001"]
    with pytest.raises(Cifar10Error, match=r"^Slurm placed task 2 on a1 as local task 1, not "
                                           r"where --distribution=block puts it \(a2, 0\): "):
        slurm.read_task(step_env("a[1-2]", "2,1", rank=2, SLURMD_NODENAME="a1",
                                 SLURM_LOCALID="1"))
    with pytest.raises(Cifar10Error, match=r"^srun --distribution=plane is not supported"):
        slurm.read_task(step_env(SLURM_DISTRIBUTION="plane=2"))


def test_each_nodes_first_task_fetches_the_data_and_the_others_wait_for_it(environ):
    block = [slurm.read_task(step_env("a[1-2]", "2(x2)", rank=rank)) for rank in range(4)]
    assert [task.node_first for task in block] == [0, 0, 2, 2]
    cyclic = [slurm.read_task(step_env("a[1-2]", "2,1", rank=rank, SLURM_DISTRIBUTION="cyclic"))
              for rank in range(3)]  # a1 has ranks 0 and 2, a2 rank 1
    assert [task.node_first for task in cyclic] == [0, 1, 0]
    for rank, fetcher in enumerate(["", "Slurm task 0 (the first task on a1)", "",
                                    "Slurm task 2 (the first task on a2)"]):
        environ(step_env("a[1-2]", "2(x2)", rank=rank))
        assert cluster.data_fetcher() == fetcher
    environ(step_env("a[1-2]", "1(x2)", rank=1))  # one task a node: each its own
    assert cluster.data_fetcher() == ""
    # TF_CONFIG wins: its workers fetch their own, as outside Slurm.
    environ(step_env("a[1-2]", "2(x2)", rank=1, TF_CONFIG=json.dumps(
        {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}})))
    assert cluster.data_fetcher() == ""
    environ({})
    assert cluster.data_fetcher() == ""


def test_gpus_come_from_slurms_allocation_and_a_cpu_node_has_none(environ):
    two_on_node = dict(nodes="n1", tasks_per_node="2", rank=1, SLURM_LOCALID="1")
    # No GPU variable: the task takes what it sees (none here): one CPU replica.
    cpu = slurm.read_task(step_env(**two_on_node))
    assert cpu.gpu_indices() is None
    assert slurm.read_task(step_env(**two_on_node, CUDA_VISIBLE_DEVICES="")).gpu_indices() == []
    # The step's 4 GPUs of the node, not bound to each task: split by SLURM_LOCALID.
    assert slurm.read_task(step_env(**two_on_node, SLURM_STEP_GPUS="4,5,6,7")
                           ).gpu_indices() == [6, 7]
    assert slurm.read_task(step_env(**two_on_node, CUDA_VISIBLE_DEVICES="4,5,6,7",
                                    SLURM_STEP_GPUS="4,5,6,7", SLURM_GPUS_ON_NODE="4")
                           ).gpu_indices() == [2, 3]  # CUDA numbers what it shows from 0
    # Bound to each task (srun --gpus-per-task): this task's own.
    assert slurm.read_task(step_env(**two_on_node, CUDA_VISIBLE_DEVICES="5",
                                    SLURM_STEP_GPUS="4,5", SLURM_GPUS_ON_NODE="2")
                           ).gpu_indices() == [0]
    assert slurm.read_task(step_env("n1", "1", SLURM_JOB_GPUS="3")).gpu_indices() == [3]
    with pytest.raises(Cifar10Error, match=r"^Slurm gave node n1 1 GPU\(s\) for its 2 tasks: "
                                           r"ask for at least one GPU per task"):
        slurm.read_task(step_env(**two_on_node, SLURM_STEP_GPUS="0")).gpu_indices()
    environ(step_env(**two_on_node, SLURM_STEP_GPUS="4,5,6,7"))
    assert resolver.default_num_gpus() == 2
    environ(step_env(**two_on_node, SLURM_STEP_GPUS="4,5,6,7", TF_CONFIG=json.dumps(
        {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}})))
    assert resolver.default_num_gpus() is None  # TF_CONFIG wins


def test_tf_config_wins_and_slurms_own_mistakes_are_one_line(environ):
    tf_config = {"cluster": {"worker": ["h:1", "h:2", "h:3"]}, "task": {"type": "worker",
                                                                        "index": 2}}
    environ(dict(step_env(), TF_CONFIG=json.dumps(tf_config)))
    assert cluster.cluster_source() == "tf_config"
    assert cluster.cluster_workers() == 3
    environ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"})  # a batch script, not srun
    with pytest.raises(Cifar10Error, match=r"^this Slurm job has 2 tasks \(SLURM_NTASKS\) but "
                                           r"cifar10-train was started once, not by srun: "
                                           r"start it as `srun cifar10-train \.\.\.`"):
        cluster.strategy_kind("auto")
    environ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"})
    assert cluster.cluster_source() is None  # a batch job of one task: one machine
    assert cluster.strategy_kind("auto") == "mirrored"
    with pytest.raises(Cifar10Error, match=r"^the Slurm job step's task count does not match: "
                                           r"SLURM_STEP_NUM_TASKS=3, SLURM_PROCID=0, "
                                           r"SLURM_STEP_TASKS_PER_NODE=1\(x2\) on "):
        slurm.read_task(step_env(SLURM_STEP_NUM_TASKS="3"))
    assert slurm.job_record(step_env(SLURM_RESTART_COUNT="1")) == {"slurm": {
        "job_id": "42", "step_id": "0", "task": "0", "restart_count": "1"}}
    assert slurm.job_record({}) == {}


def test_a_port_in_use_is_one_line_naming_the_flag():
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        task = slurm.read_task(step_env("vm", "2", rank=1))
        with pytest.raises(Cifar10Error) as raised:
            slurm.check_port(task, port - 1)
    assert str(raised.value) == (
        f"port {port} on vm (--slurm_port_base={port - 1} + local task 1) is in use by "
        f"another program or job: choose another --slurm_port_base, e.g. {port + 999}")
    slurm.check_port(task, port - 1)  # free again


def waiting_worker_config() -> tuple[str, list[str]]:
    """The TF_CONFIG of worker 0 of two whose other never starts, on free ports (fixed
    ones would clash with another test run on the machine); and the two addresses."""
    workers = [f"127.0.0.1:{port}" for port in launch_workers.free_ports(2)]
    return json.dumps({"cluster": {"worker": workers},
                       "task": {"type": "worker", "index": 0}}), workers


def test_a_worker_that_never_starts_ends_the_others_within_the_timeout(tmp_path):
    config, workers = waiting_worker_config()
    started = time.time()
    result = subprocess.run(
        [program("cifar10-train"), "--synthetic_data", "--synthetic_records=50",
         f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
         "--worker_timeout_secs=3"], capture_output=True, text=True, timeout=120,
        env=outside_slurm(TF_CONFIG=config))
    assert time.time() - started < 60
    assert result.returncode == 1  # not killed: the shell says nothing after the line
    assert result.stderr.splitlines()[-1] == (
        "cifar10-train: error: the 2 workers did not all start within 3 s "
        "(--worker_timeout_secs): this is worker 0 (the chief); check that every task "
        f"started (see the others' errors) and that each node reaches worker 0 at "
        f"{workers[0]}, worker 1 at {workers[1]}, then start the job again")
    assert not (tmp_path / "train" / "model.ckpt-0.index").exists()


def _watchdog_started(pid: int) -> bool:
    """Whether the process ``pid`` waits for the other workers: its watchdog runs, and
    catches SIGINT and SIGTERM (its handlers are set: /proc's SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return False
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    for child in children:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"select.select" not in f.read():
                    continue
            with open(f"/proc/{child}/status") as f:
                caught = next(int(line.split()[1], 16) for line in f
                              if line.startswith("SigCgt:"))
            return caught & wanted == wanted
        except (OSError, StopIteration):
            pass
    return False


@pytest.mark.parametrize("nohup, status", [(False, 1), (True, 0)])
def test_a_hang_up_while_waiting_exits_with_status_1_unless_it_is_ignored(nohup, status):
    """The watchdog's way to end the wait (SIGHUP, the C library's _exit(1) its handler);
    under nohup (SIGHUP ignored) a hang-up leaves the wait alone, and the watchdog
    would use SIGKILL."""
    script = ("import os, signal\n"
              "from cifar10.distribute import resolver\n"
              f"if {nohup}:\n"
              "    signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
              "with resolver._exit_on_sighup() as exits:\n"
              "    print(exits, flush=True)\n"
              "    os.kill(os.getpid(), signal.SIGHUP)\n"
              "print('went on', flush=True)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env=env())
    assert result.returncode == status, result.stderr
    assert result.stdout.split() == (["True"] if status else ["False", "went", "on"])


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc")
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 128 + signal.SIGINT),
                                            (signal.SIGTERM, 128 + signal.SIGINT)])
def test_ctrl_c_or_sigterm_while_waiting_for_the_workers_ends_with_one_line(
        tmp_path, signum, status):
    """Ctrl-C (to the process group, as a terminal sends it) ends the worker as it ends
    any program; scancel's SIGTERM to every process of the step too (status 130, as
    cifar10-train interrupted anywhere before training); each after one line, the
    last, and not by SIGKILL ("Killed" after it, status 137)."""
    config, _ = waiting_worker_config()
    proc = subprocess.Popen(
        [program("cifar10-train"), "--synthetic_data", "--synthetic_records=50",
         f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
         "--worker_timeout_secs=300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, env=outside_slurm(TF_CONFIG=config))
    try:
        deadline = time.time() + 120
        while not _watchdog_started(proc.pid):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.2)
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode if proc.returncode >= 0 else 128 - proc.returncode) == status
    assert err.splitlines()[-1] == (
        f"cifar10-train: error: stopped by {signum.name} while waiting for the other "
        f"workers to start")


# ---- under a real Slurm ------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm_job(tmp_path_factory):
    """A one-node Slurm cluster (its daemons stopped by pid at the end, also on failure)."""
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


def free_port_base(tasks: int = 2) -> int:
    """A --slurm_port_base whose ``tasks`` ports are free now (not the default, which
    another job or program on this machine may hold)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("", 0))
            base = probe.getsockname()[1]
        if base + tasks > 65000 or base < 1024:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + tasks):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("", port))
            except OSError:
                continue
        return base
    raise AssertionError("no free ports for a --slurm_port_base")


def train_args(folder, *extra):
    base = () if any(arg.startswith("--slurm_port_base=") for arg in extra) else (
        f"--slurm_port_base={free_port_base()}",)
    return ("--synthetic_data", "--synthetic_records=50", f"--data_dir={folder}/data",
            f"--train_dir={folder}/train", "--batch_size=8", "--worker_timeout_secs=60",
            *base, *extra)


class _SlowTarball(http.server.BaseHTTPRequestHandler):
    """Serves ``body`` once ``release`` is set (or 60 s have passed), counting requests."""

    body, requests, release = b"", [], threading.Event()

    def do_GET(self):  # noqa: N802 - the name BaseHTTPRequestHandler calls
        type(self).requests.append(self.path)
        type(self).release.wait(60)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@contextlib.contextmanager
def held_tarball(body: bytes):
    """(the URL of a local server of ``body`` that answers once told to, or after 60 s;
    the handler: its ``release`` event, its ``requests``)."""
    handler = type("Handler", (_SlowTarball,), {"body": body, "requests": [],
                                                "release": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{ff.TARBALL_NAME}", handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


def test_srun_trains_two_workers_on_data_the_nodes_first_task_fetched_once(slurm_job,
                                                                          tmp_path):
    """The missing --data_dir is downloaded by task 0 alone (one request, its progress
    lines only), while task 1 says once that it waits; then the chief writes."""
    tarball = synthetic.tarball_bytes(records_per_file=50)
    data_dir = tmp_path / "data"
    with held_tarball(tarball) as (url, server):
        proc = subprocess.Popen(
            ["srun", "-n", "2", "--overcommit", "-l", "--kill-on-bad-exit=1",
             program("cifar10-train"), f"--data_dir={data_dir}", f"--data_url={url}",
             f"--data_md5={hashlib.md5(tarball).hexdigest()}", f"--train_dir={tmp_path}/train",
             "--batch_size=8", "--worker_timeout_secs=60", "--max_steps=4",
             "--log_frequency=2", "--checkpoint_steps=2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm_job.env())
        lines = []
        try:
            for line in proc.stdout:  # the download is answered once task 1 waits for it
                lines.append(line)
                if line.startswith("1: Waiting for"):
                    server.release.set()
            err = proc.communicate(timeout=240)[1]
        finally:
            proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert server.requests == [f"/{ff.TARBALL_NAME}"]
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
    names = os.listdir(tmp_path / "train")
    assert sorted(n for n in names if n.endswith(".index")) == ["model.ckpt-2.index",
                                                                "model.ckpt-4.index"]
    assert len([n for n in names if n.startswith("events.out")]) == 1
    with open(tmp_path / "train" / "environment.jsonl") as f:
        [record] = [json.loads(line) for line in f]
    assert record["slurm"]["step_id"] == "0" and record["slurm"]["task"] == "0"
    assert record["slurm"]["job_id"].isdigit()


def test_a_port_in_use_stops_the_step_in_one_line(slurm_job, tmp_path):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        started = time.time()
        result = subprocess.run(
            ["srun", "-n", "2", "--overcommit", "-l", "--kill-on-bad-exit=1",
             program("cifar10-train"), *train_args(tmp_path, f"--slurm_port_base={port}")],
            capture_output=True, text=True, timeout=240, env=slurm_job.env())
    # Task 1, waiting for task 0, ends at srun's SIGTERM, not --worker_timeout_secs later.
    assert time.time() - started < 50
    assert result.returncode != 0
    assert (f"0: cifar10-train: error: port {port} on {slurm_job.host} (--slurm_port_base="
            f"{port} + local task 0) is in use by another program or job: choose another "
            f"--slurm_port_base, e.g. {port + 1000}") in result.stderr.splitlines()


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
def test_a_signalled_job_requeues_itself_a_cancelled_one_resumes_when_submitted_again(
        slurm_job, tmp_path):
    args = ("--max_steps=80", "--log_frequency=1", "--checkpoint_steps=1000")
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
    assert len(stops) == 2 and 3 <= first < stops[1] < 80, text()
    assert (tmp_path / "train" / f"model.ckpt-{stops[1]}.index").exists()

    again = submit(slurm_job, tmp_path, *args)
    wait_for(lambda: not squeue(slurm_job, again), 240,
             lambda: (tmp_path / f"job-{again}.out").read_text())
    out = (tmp_path / f"job-{again}.out").read_text()
    assert f"at step {stops[1]}." in out, out
    assert re.search(rf": step {stops[1] + 1}, loss", out), out
    assert "Training complete at step 80; saved" in out, out
    assert "requeueing" not in out
    assert "this is worker 1" not in out  # srun --output=0: the chief's lines only
    with open(tmp_path / "train" / "environment.jsonl") as f:
        records = [json.loads(line)["slurm"] for line in f]
    assert [(r["job_id"], r.get("restart_count")) for r in records] == [
        (job, None), (job, "1"), (again, None)]


def run_batch_script(tmp_path, *args, status=0, srun_does="", **environ):
    """scripts/slurm_train.sbatch run by bash with stand-ins for srun (printing its
    arguments, doing ``srun_does``, ending with ``status``) and scontrol (recording its
    arguments), no Slurm cluster: (the result, scontrol's arguments)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text(f"#!/bin/sh\necho \"srun $*\"\n{srun_does}\nexit {status}\n")
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/scontrol\n")
    for stand_in in ("srun", "scontrol"):
        os.chmod(bin_dir / stand_in, 0o755)
    result = subprocess.run(
        ["bash", SBATCH_SCRIPT, *args], capture_output=True, text=True, timeout=30,
        cwd=tmp_path, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                           "SLURM_JOB_ID": "77", "CIFAR10_TRAIN": "cifar10-train",
                           **environ})
    recorded = (tmp_path / "scontrol").read_text() if (tmp_path / "scontrol").exists() else ""
    return result, recorded


REQUEUED = "slurm_train.sbatch: stopped before --max_steps; requeueing job 77"
A_TASK_FAILED = ("slurm_train.sbatch: error: job 77 is not requeued because a task failed "
                 "(srun's status {}): the first task error above is the cause")


@pytest.mark.parametrize("status, complete, requeued", [
    (0, False, True),     # stopped by --signal=TERM@secs, its checkpoint saved
    (0, True, False),     # the run reached --max_steps
    (1, False, False),    # an error: the job ends with it
    # A task failed (a port in use) while the others waited for it to start: srun's
    # --kill-on-bad-exit stopped them (130, "stopped by SIGTERM while waiting ...").
    (130, False, False),
    (143, False, False),  # killed
])
def test_the_batch_script_requeues_a_stopped_incomplete_run_only(tmp_path, status, complete,
                                                                   requeued):
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    if complete:
        (train_dir / "training_complete.json").write_text("{}")
    result, recorded = run_batch_script(tmp_path, f"--train_dir={train_dir}", "--max_steps=10",
                                        status=status)
    assert result.returncode == status
    assert result.stdout.splitlines()[0] == (
        f"srun --kill-on-bad-exit=1 --output=0 --error=all cifar10-train "
        f"--train_dir={train_dir} --max_steps=10")
    assert recorded == ("requeue 77\n" if requeued else "")
    assert (REQUEUED in result.stdout) == requeued
    failed = status != 0 and not complete
    assert result.stderr.splitlines() == ([A_TASK_FAILED.format(status)] if failed else [])


def test_a_requeued_job_resumes_its_run_even_if_it_was_submitted_with_fresh_start(tmp_path):
    """Requeued, the job runs the script again with its arguments: --fresh_start would
    delete the checkpoint it stopped at and start over, at every requeue."""
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    args = (f"--train_dir={train_dir}", "--fresh_start")
    result, _ = run_batch_script(tmp_path, *args)
    assert result.stdout.splitlines()[0] == (
        f"srun --kill-on-bad-exit=1 --output=0 --error=all cifar10-train "
        f"--train_dir={train_dir} --fresh_start")
    result, recorded = run_batch_script(tmp_path, *args, SLURM_RESTART_COUNT="2")
    assert result.stdout.splitlines()[:2] == [
        "slurm_train.sbatch: job 77 requeued (restart 2): resuming its run "
        "(--nofresh_start added)",
        f"srun --kill-on-bad-exit=1 --output=0 --error=all cifar10-train "
        f"--train_dir={train_dir} --fresh_start --nofresh_start"]
    assert (result.returncode, result.stderr) == (0, "")
    # Before a --, which cifar10-train's flags end at.
    result, _ = run_batch_script(tmp_path, *args, "--", "x", SLURM_RESTART_COUNT="1")
    assert result.stdout.splitlines()[1].endswith("--fresh_start --nofresh_start -- x")


def test_a_job_stopped_at_the_checkpoint_it_started_from_is_not_requeued(tmp_path):
    """A time limit too short for one step: requeued, the job would start, save the
    same checkpoint and stop, again and again."""
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    state = train_dir / "checkpoint"
    state.write_text('model_checkpoint_path: "model.ckpt-40"\n'
                     'all_model_checkpoint_paths: "model.ckpt-40"\n')
    saves_again = f"cp {state} {state}.new && mv {state}.new {state}"
    result, recorded = run_batch_script(tmp_path, f"--train_dir={train_dir}",
                                        srun_does=saves_again)
    assert (result.returncode, recorded) == (1, "")
    assert result.stderr.splitlines() == [
        "slurm_train.sbatch: error: job 77 stopped at the checkpoint it started from "
        "(model.ckpt-40): no step was trained, so it is not requeued; give it a longer "
        "time limit (sbatch --time)"]
    # A step trained since: requeued.
    result, recorded = run_batch_script(
        tmp_path, f"--train_dir={train_dir}",
        srun_does=f"echo 'model_checkpoint_path: \"model.ckpt-41\"' > {state}")
    assert (result.returncode, recorded, result.stderr) == (0, "requeue 77\n", "")


def test_the_batch_script_takes_the_train_dir_of_a_run_records_flagfile(tmp_path):
    """``--flagfile=<run>/flags.txt`` replays a run: its last --train_dir line not
    commented out is the one cifar10-train takes (an earlier start's is)."""
    old, train_dir = tmp_path / "old", tmp_path / "train"
    for folder in (old, train_dir):
        folder.mkdir()
    (old / "training_complete.json").write_text("{}")
    flags_txt = train_dir / "flags.txt"
    flags_txt.write_text(f"# cifar10-train, started 2026-01-01T00:00:00 on vm\n"
                         f"# --train_dir={old}\n# --max_steps=5\n"
                         f"# cifar10-train, started 2026-01-02T00:00:00 on vm at step 5\n"
                         f"--train_dir={old}\n\n  --train_dir={train_dir}  \r\n"
                         f"--max_steps=10\n")
    result, recorded = run_batch_script(tmp_path, f"--flagfile={flags_txt}", "--max_steps=30")
    assert result.stdout.splitlines()[0].endswith(
        f"cifar10-train --flagfile={flags_txt} --max_steps=30")
    assert (result.returncode, recorded, REQUEUED in result.stdout) == (0, "requeue 77\n", True)
    # The command line's own --train_dir after the flagfile wins, as in cifar10-train.
    result, recorded = run_batch_script(tmp_path, "--flagfile", str(flags_txt),
                                        "--train_dir", str(old))
    assert (result.returncode, REQUEUED in result.stdout) == (0, False)

    (tmp_path / "no_dir.txt").write_text("# cifar10-train, started ...\n--max_steps=30\n")
    for args in (["--flagfile=no_dir.txt"], []):
        result, _ = run_batch_script(tmp_path, *args, "--max_steps=30")
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr.splitlines() == [
            "slurm_train.sbatch: error: give cifar10-train's --train_dir=DIR (a folder every "
            "node shares), on the command line or in the --flagfile"]
    result, _ = run_batch_script(tmp_path, "--flagfile=missing.txt")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "slurm_train.sbatch: error: --flagfile=missing.txt cannot be read (no such file, or "
        "not a file): name a file of cifar10-train's flags, such as a run's flags.txt"]
