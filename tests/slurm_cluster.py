"""A one-node Slurm cluster for tests/test_slurm.py: Debian's munged, slurmctld and
slurmd as child processes (root needed), their files in a folder of their own, ended by
their process ids; the clients find it through ``SLURM_CONF``."""

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


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")


def missing() -> str | None:
    """Why a Slurm cluster cannot run here, or None."""
    absent = [name for name in DAEMONS + CLIENTS if not _which(name)]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)}): apt-get install slurm-wlm munge"
    return None if os.geteuid() == 0 else "the Slurm daemons (slurmd) must run as root"


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
        """This environment with ``SLURM_CONF``, without any Slurm job's variables."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("SLURM_") and k not in ("TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL")}
        return dict(base, SLURM_CONF=self.conf, PYTHONUNBUFFERED="1", **extra)

    def start(self, timeout: float = 120) -> None:
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
        d = self.folder
        try:
            self._spawn("munged", "--foreground", "--force", f"--key-file={key}",
                        f"--socket={d}/munge.socket", f"--pid-file={d}/munged.pid",
                        f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed")
            self._wait_for(lambda: os.path.exists(f"{d}/munge.socket"), timeout)
            self._spawn("slurmctld", "-D", "-i", "-f", self.conf)
            self._spawn("slurmd", "-D", "-f", self.conf)
            self._wait_for(lambda: self._run("sinfo", "-h", "-o", "%t").strip() in (
                "idle", "mix", "alloc"), timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, *args: str) -> None:
        with open(os.path.join(self.folder, f"{name}.out"), "w") as log:
            self.processes.append(subprocess.Popen([_which(name), *args], stdout=log,
                                                   stderr=log, env=self.env(),
                                                   start_new_session=True))

    def _run(self, *command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, env=self.env(),
                              timeout=30).stdout

    def _wait_for(self, ready, timeout: float) -> None:
        deadline = time.time() + timeout
        while not ready():
            ended = [p.args[0] for p in self.processes if p.poll() is not None]
            if ended or time.time() > deadline:
                raise RuntimeError(f"Slurm did not start ({', '.join(ended) or 'timeout'}):\n"
                                   + self.logs())
            time.sleep(0.3)

    def logs(self) -> str:
        text = []
        for name in sorted(os.listdir(self.folder)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.folder, name), errors="replace") as f:
                    text.append(f"--- {name}\n" + f.read()[-3000:])
        return "\n".join(text)

    def stop(self) -> None:
        """Cancels the jobs left, waits (a minute at most) for them, then ends the daemons."""
        if len(self.processes) == len(DAEMONS):
            try:
                self._run("scancel", "--user=root")
                deadline = time.time() + 60
                while time.time() < deadline and self._run("squeue", "-h").strip():
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass  # the daemons are stopped below whatever happens here
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
