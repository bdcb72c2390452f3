"""A one-node Slurm cluster on this machine, for the tests of cifar10 under Slurm.

``SlurmCluster`` writes a ``slurm.conf`` into a folder of its own and starts
Debian's ``munged``, ``slurmctld`` and ``slurmd`` in the foreground as child
processes (no systemd), with their sockets, state, logs and ports in that folder
or free; ``stop`` ends them by their process ids.  A requeued job may start again
10 s after it stopped (``cred_expire``; Slurm's default is 120 s), and pending
jobs are looked at every 2 s.  The programs ``srun``,
``sbatch``, ``squeue`` and ``scancel`` find the cluster through ``SLURM_CONF``
(``env()``).  Running the daemons needs root (slurmd starts tasks as any user).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "squeue", "scancel", "sinfo")
SLURM_CONF = """\
ClusterName=cifar10test
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge.socket,cred_expire=10
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
KillWait=30
InactiveLimit=0
MinJobAge=300
NodeName={host} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str | None:
    """Why a Slurm cluster cannot run here (a sentence), or None when it can."""
    absent = [name for name in DAEMONS + CLIENTS
              if not shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} not found): "
                f"apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        return "the Slurm daemons (slurmd) must run as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """munged, slurmctld and slurmd of a one-node cluster whose files are in ``folder``."""

    def __init__(self, folder: str):
        self.folder = folder
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(folder, "slurm.conf")
        self.processes: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the Slurm programs: this one with ``SLURM_CONF``, without
        the variables of any Slurm job these tests run in."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("SLURM_") and k not in ("TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL")}
        return dict(base, SLURM_CONF=self.conf, PYTHONUNBUFFERED="1", **extra)

    def start(self, timeout: float = 60) -> None:
        """Starts the daemons and waits until the node takes jobs; stops them on failure."""
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.folder, sub), exist_ok=True)
        os.chmod(self.folder, 0o755)
        key = os.path.join(self.folder, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(host=self.host, folder=self.folder,
                                      ctld_port=_free_port(), slurmd_port=_free_port()))
        try:
            self._spawn("munged", "--foreground", "--force", f"--key-file={key}",
                        f"--socket={self.folder}/munge.socket",
                        f"--pid-file={self.folder}/munged.pid",
                        f"--log-file={self.folder}/munged.log",
                        f"--seed-file={self.folder}/munged.seed")
            self._wait_for(lambda: os.path.exists(f"{self.folder}/munge.socket"), 15, "munged")
            self._spawn("slurmctld", "-D", "-i", "-f", self.conf)
            self._spawn("slurmd", "-D", "-f", self.conf)
            self._wait_for(self._node_is_idle, timeout, "the node")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, *args: str) -> None:
        path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")
        log = open(os.path.join(self.folder, f"{name}.out"), "w")
        self.processes.append(subprocess.Popen([path, *args], stdout=log, stderr=log,
                                               env=self.env(), start_new_session=True))
        log.close()

    def _node_is_idle(self) -> bool:
        result = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                                env=self.env(), timeout=30)
        return result.returncode == 0 and result.stdout.strip() in ("idle", "mix", "alloc")

    def _wait_for(self, ready, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while not ready():
            for p in self.processes:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with status {p.returncode}:\n"
                                       + self.logs())
            if time.time() > deadline:
                raise RuntimeError(f"{what} not ready within {timeout} s:\n" + self.logs())
            time.sleep(0.3)

    def _cancel_jobs(self, timeout: float) -> None:
        try:
            subprocess.run(["scancel", "--user=root"], env=self.env(), timeout=30,
                           capture_output=True)
            deadline = time.time() + timeout
            while time.time() < deadline and subprocess.run(
                    ["squeue", "-h"], env=self.env(), timeout=30, capture_output=True,
                    text=True).stdout.strip():
                time.sleep(0.5)
        except (OSError, subprocess.SubprocessError):
            pass  # the daemons are stopped below whatever happens here

    def logs(self) -> str:
        """The daemons' logs, for a failure's message."""
        text = []
        for name in sorted(os.listdir(self.folder)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.folder, name), errors="replace") as f:
                    text.append(f"--- {name}\n" + f.read()[-3000:])
        return "\n".join(text)

    def stop(self) -> None:
        """Cancels the jobs left and waits (up to a minute) for their tasks to end, then
        ends the daemons by their process ids (SIGTERM, then SIGKILL after 10 s)."""
        if len(self.processes) == len(DAEMONS):
            self._cancel_jobs(timeout=60)
        for p in reversed(self.processes):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.processes):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.processes = []
