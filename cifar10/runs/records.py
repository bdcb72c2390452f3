"""What a run records about each start in its ``--train_dir`` (or ``--eval_dir``):
``flags.txt``, the flags under a header line per start (earlier starts' commented out,
so that ``--flagfile=flags.txt`` replays the latest), and ``environment.jsonl``, one
JSON object per start (versions, host, devices, command, trained settings).  Read from
a trainer's best/, they are its run's (``layout.run_of``)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import socket
from typing import Any, Mapping, Sequence

import numpy as np
from absl import logging

import cifar10
from cifar10.core import atomic
from cifar10.core.config import marked
from cifar10.core.errors import io_error
from cifar10.distribute import cluster
from cifar10.runs.layout import run_of

FLAGS_FILE = "flags.txt"
ENVIRONMENT_FILE = "environment.jsonl"

# A start's completeness mark (comments absl skips): its header line ends with ENDS_AT
# and END_LINE follows its flags, so that a copy cut short is known from an old record.
END_LINE = "# end of this start"
ENDS_AT = f' (flags to "{END_LINE}")'

# Settings of a training run that change what is trained, with the words that name
# them: TrainConfig's (``setting(trained=...)``), then what the trainer derives.  A run
# resumed with another value of one goes on with it, and says so.
TRAINED_SETTINGS = {
    **marked("trained"),
    "num_replicas": "the number of replicas",
    "num_workers": "the number of workers",
    "precision": "the compute precision",
    "data_dir": "the training data",
    "examples_per_epoch": "the examples per epoch, which the learning-rate schedule counts",
}


def environment(program: str, command: Sequence[str], devices: Sequence[Mapping[str, str]],
                tensorflow_version: str, start_time: str | None = None) -> dict[str, Any]:
    """The environment of a start (under Slurm with its job and step)."""
    return {
        "program": program,
        "start_time": start_time or datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "cifar10": cifar10.__version__,
        "tensorflow": tensorflow_version,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "command": list(command),
        "devices": [dict(d) for d in devices],
        **cluster.job_record(),  # the Slurm job and step, under Slurm
    }


def last_record(directory: str) -> dict[str, Any] | None:
    """The newest object of ``directory``'s environment.jsonl, or None (none, or damaged)."""
    try:
        with open(os.path.join(run_of(directory), ENVIRONMENT_FILE), encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        record = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def last_settings(directory: str) -> dict[str, Any] | None:
    """The trained ``settings`` of the newest start recorded in ``directory``, or None
    (with one warning where its last record is damaged)."""
    path = os.path.join(run_of(directory), ENVIRONMENT_FILE)
    if not os.path.isfile(path):
        return None  # none; a folder in its place is said when the start is recorded
    record = last_record(directory)
    settings = record.get("settings") if record else None
    if isinstance(settings, dict):
        return settings
    logging.warning("%s: its last record is damaged (no settings object): this start's "
                    "settings are not compared with the last start's; its own record is "
                    "appended as usual.", path)
    return None


def changes(before: Mapping[str, Any] | None, now_: Mapping[str, Any]) -> list[dict[str, Any]]:
    """[{'setting', 'from', 'to'}] of the trained settings that differ between two starts'
    ``settings`` (one the earlier start did not record is not a change)."""
    if not before:
        return []
    return [{"setting": name, "from": before[name], "to": now_.get(name)}
            for name in TRAINED_SETTINGS if name in before and before[name] != now_.get(name)]


# The settings whose product is the global batch (the examples of one step).
_GLOBAL_BATCH_FACTORS = ("batch_size", "num_replicas", "num_workers")


def describe_changes(changes_: Sequence[Mapping[str, Any]], step: int, directory: str,
                     before: Mapping[str, Any] | None = None,
                     now_: Mapping[str, Any] | None = None) -> list[str]:
    """A line for each change; the last change of the global batch's factors also names
    the global batch's change, where ``before`` and ``now_`` both recorded it."""
    factors = [i for i, change in enumerate(changes_)
               if change["setting"] in _GLOBAL_BATCH_FACTORS]
    was, is_ = (before or {}).get("global_batch"), (now_ or {}).get("global_batch")
    lines = []
    for i, change in enumerate(changes_):
        new = _shown(change["to"])
        batch = (f", the global batch from {was} to {is_}" if factors and i == factors[-1]
                 and was is not None and is_ is not None and was != is_ else "")
        lines.append(f"{change['setting']} ({TRAINED_SETTINGS[change['setting']]}) changed "
                     f"from {_shown(change['from'])} to {new}{batch}; the run goes on from "
                     f"step {step} with {new} (recorded in "
                     f"{os.path.join(directory, ENVIRONMENT_FILE)})")
    return lines


def _shown(value: Any) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) \
        else str(value)


def record_start(directory: str, record: Mapping[str, Any], flags_text: str | None) -> None:
    """Appends ``record`` to environment.jsonl and, if given, ``flags_text`` under a
    header line to flags.txt, in ``directory`` (Cifar10Error where one cannot be written)."""
    if flags_text is not None:
        header = (f"# {record['program']}, started {record['start_time']} on {record['host']}"
                  + (f" at step {record['start_step']}" if "start_step" in record else ""))
        flag_lines = flags_text.rstrip("\n")
        _append(os.path.join(directory, FLAGS_FILE),
                f"{header}{ENDS_AT}\n{flag_lines}\n{END_LINE}\n", earlier=_commented)
    _append(os.path.join(directory, ENVIRONMENT_FILE), json.dumps(record, sort_keys=False) + "\n")


def _append(path: str, text: str, earlier=lambda old: old) -> None:
    """Appends ``text`` to ``path``, rewriting it whole; what was there goes through
    ``earlier`` first, its bytes that are not UTF-8 as U+FFFD (with one warning)."""
    try:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        old = raw.decode("utf-8", "replace")
        if old.encode("utf-8") != raw:
            logging.warning("%s holds bytes that are not UTF-8; they are kept as U+FFFD.", path)
        if old and not old.endswith("\n"):
            old += "\n"
        atomic.write_text(path, earlier(old) + text)
    except IsADirectoryError as e:
        raise io_error("cannot record the run's start in", path, e,
                       "a folder of that name is not the run's record: move it away") from e
    except OSError as e:
        raise io_error("cannot record the run's start in", path, e) from e


def _commented(text: str) -> str:
    """flags.txt's earlier starts with their flag lines commented out (``# --name=...``)."""
    return "\n".join("# " + line if line.startswith("--") else line
                     for line in text.split("\n"))


# A start's header line, as ``record_start`` writes it: group 1 is its program.
_HEADER = re.compile(r"# (cifar10-[\w-]+), started ")


def header_program(line: str) -> str:
    """The program of a flags.txt start header ('# cifar10-train, started ...'), or ''."""
    return line[2:].split(",")[0] if line.startswith("# ") else ""


def is_start_header(line: str) -> bool:
    return bool(_HEADER.match(line))


def announces_end(header: str) -> bool:
    """Whether a start's header line says that its flags end with ``END_LINE``."""
    return header.rstrip().endswith(ENDS_AT)


def is_end_line(line: str) -> bool:
    return line.strip() == END_LINE


# The flag only each program's records hold: whose are the flag lines under no header.
OWN_FLAG = {"cifar10-train": "train_dir", "cifar10-eval": "eval_dir"}


# The header of a cifar10-train start at step 0 (``record_start``): group 1 its time.
_NEW_RUN = re.compile(rf"^# cifar10-train, started (\S+) on .* at step 0"
                      rf"(?:{re.escape(ENDS_AT)})?$", re.MULTILINE)


def last_new_run(directory: str) -> str | None:
    """The ISO time of the newest cifar10-train start at step 0 in ``directory``, or None."""
    try:
        with open(os.path.join(run_of(directory), FLAGS_FILE), encoding="utf-8",
                  errors="replace") as f:
            starts = _NEW_RUN.findall(f.read())
    except OSError:
        return None
    return starts[-1] if starts else None


def recorded_flags(directory: str, program: str = "cifar10-train") -> dict[str, str] | None:
    """The flags of ``program``'s latest start in ``directory``'s flags.txt, or None.

    A start is a header line and the flag lines under it (``--noname`` is 'false'; an
    earlier start's ``# --name=value`` too); flag lines above the first header are the
    start of the program whose ``OWN_FLAG`` they hold.  Other lines are skipped.
    """
    try:
        with open(os.path.join(run_of(directory), FLAGS_FILE), encoding="utf-8",
                  errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    starts: list[tuple[str, dict[str, str]]] = [("", {})]  # the lines above any header
    # Lines as absl's --flagfile reads them: ended by \n or \r only, stripped.
    for line in (line.strip() for line in text.split("\n")):
        header = _HEADER.match(line)
        if header:
            starts.append((header[1], {}))
            continue
        if line.startswith("# --"):  # a flag of an earlier start (``_commented``)
            line = line[2:]
        if line.startswith("--"):
            name, sep, value = line[2:].partition("=")
            if not sep:
                name, value = (name[2:], "false") if name.startswith("no") else (name, "true")
            starts[-1][1][name] = value
    unheaded = starts.pop(0)[1]
    if unheaded:
        starts.insert(0, (next((p for p, own in OWN_FLAG.items() if own in unheaded), ""),
                          unheaded))
    found = [flags for start, flags in starts if start == program]
    return found[-1] if found else None
