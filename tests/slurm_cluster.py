"""A one-node Slurm for tests/test_slurm.py, set up by the recipe of
docs/multi-machine.md as written there: its first ```` ```bash root ```` block starts
munged, slurmctld and slurmd (Debian's munge and slurm-wlm; root needed) with their
files in ``$SLURM_DIR``, here a test's folder, on free ports; its last block stops them.
The ```` ```bash cluster ```` blocks between the two are the page's srun and sbatch
examples."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "multi-machine.md"
DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = DAEMONS + ("mungekey", "srun", "sbatch", "squeue", "scancel", "sinfo")


def blocks(page: pathlib.Path = PAGE) -> list[tuple[str, str]]:
    """(the words after the opening ```, the text) of each fenced block of ``page``."""
    found, words, lines = [], None, []
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            if words is None:
                words, lines = line[3:].strip(), []
            else:
                found.append((words, "".join(f"{text}\n" for text in lines)))
                words = None
        elif words is not None:
            lines.append(line)
    return found


def recipe() -> tuple[str, list[str], str]:
    """(the block that starts the one-node Slurm, the ``bash cluster`` blocks after it,
    the block that stops it)."""
    fenced = blocks()
    roots = [i for i, (words, _) in enumerate(fenced) if words == "bash root"]
    assert len(roots) == 2, (f"{PAGE} should have two ```bash root blocks, the one-node "
                             f"Slurm's start and stop; it has {len(roots)}")
    first, last = roots
    examples = [text for words, text in fenced[first + 1:last] if words == "bash cluster"]
    return fenced[first][1], examples, fenced[last][1]


def _path() -> str:
    """PATH with the daemons' folders (root's shell has them; a test's may not)."""
    path = os.environ.get("PATH", "")
    return path + "".join(f":{d}" for d in ("/usr/sbin", "/sbin") if d not in path.split(":"))


def missing() -> str | None:
    """Why a Slurm cluster cannot run here, or None."""
    absent = [name for name in COMMANDS if not shutil.which(name, path=_path())]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)}): apt-get install slurm-wlm munge"
    return None if os.geteuid() == 0 else "the Slurm daemons (slurmd) must run as root"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _running(pid: int, name: str) -> bool:
    """Whether ``pid`` is still the daemon ``name`` (not a process that took its id)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return name.encode() in f.read()
    except OSError:
        return False


class SlurmCluster:
    """The page's one-node Slurm with its files in ``folder``."""

    def __init__(self, folder: str):
        self.folder = folder
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(folder, "slurm.conf")
        self.settings = {"SLURM_DIR": folder, "SLURMCTLD_PORT": str(_free_port()),
                         "SLURMD_PORT": str(_free_port())}

    def env(self, **extra: str) -> dict[str, str]:
        """This environment with ``SLURM_CONF``, without any Slurm job's variables."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("SLURM_") and k not in ("TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL")}
        return {**base, "PATH": _path(), "SLURM_CONF": self.conf, "PYTHONUNBUFFERED": "1",
                **extra}

    def _bash(self, text: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-e", "-u", "-c", text], capture_output=True, text=True,
                              timeout=120, cwd=self.folder, env=self.env(**self.settings))

    def _pid_files(self) -> dict[str, int]:
        """{daemon: the process id its pid file names} of the pid files written."""
        found = {}
        for name in DAEMONS:
            try:
                with open(os.path.join(self.folder, f"{name}.pid")) as f:
                    found[name] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return found

    def pids(self) -> dict[str, int]:
        """{daemon: process id} of the daemons running from this folder."""
        return {name: pid for name, pid in self._pid_files().items() if _running(pid, name)}

    def start(self, timeout: float = 120) -> None:
        """Runs the page's recipe and waits until the node takes jobs; stops the daemons
        on failure."""
        try:
            result = self._bash(recipe()[0])
            if result.returncode:
                raise RuntimeError(f"the recipe of {PAGE.name} failed (status "
                                   f"{result.returncode}):\n{result.stdout}{result.stderr}"
                                   + self.logs())
            deadline = time.time() + timeout
            while self._run("sinfo", "-h", "-o", "%t").strip() not in ("idle", "mix", "alloc"):
                ended = sorted(set(self._pid_files()) - set(self.pids()))
                if ended or time.time() > deadline:
                    raise RuntimeError(f"Slurm did not start ({', '.join(ended) or 'timeout'}):\n"
                                       + self.logs())
                time.sleep(0.3)
        except BaseException:
            self.stop(check=False)
            raise

    def _run(self, *command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, env=self.env(),
                              timeout=30).stdout

    def logs(self) -> str:
        text = []
        for name in sorted(os.listdir(self.folder)):
            if name.endswith(".log"):
                with open(os.path.join(self.folder, name), errors="replace") as f:
                    text.append(f"--- {name}\n" + f.read()[-3000:])
        return "\n".join(text)

    def stop(self, check: bool = True) -> None:
        """Cancels the jobs left and waits (a minute at most) for them, then runs the
        page's block that stops the daemons; ends by their ids any it left running, and
        those of a cluster that did not start whole (whose pid files may be stale).
        ``check``: raise if that block failed or left one running."""
        before = self.pids()
        whole = set(before) == set(DAEMONS)
        result = None
        if whole:
            try:
                self._run("scancel", "--user=root")
                deadline = time.time() + 60
                while time.time() < deadline and self._run("squeue", "-h").strip():
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass  # the daemons are stopped below whatever happens here
            result = self._bash(recipe()[2])
        else:
            for pid in before.values():
                os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 60
        while time.time() < deadline and any(_running(pid, name)
                                             for name, pid in before.items()):
            time.sleep(0.2)
        left = [name for name, pid in before.items() if _running(pid, name)]
        for name in left:
            os.kill(before[name], signal.SIGKILL)
        if check and result is not None and (result.returncode or left):
            raise RuntimeError(f"the stop block of {PAGE.name} ended with status "
                               f"{result.returncode}, leaving {left or 'none'} running:\n"
                               f"{result.stdout}{result.stderr}")
