"""cifar10-eval follows the run it scores: it scores the run on the data it was
trained on without being told again, waiting for the run's start if need be.

The data flags that the command line leaves unset take the values the run's
latest start recorded in ``<train_dir>/flags.txt`` (``runs.records``).  A flag given
on the command line wins; where its value differs from the run's, one notice line
says so.  No TensorFlow: this runs before it loads.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

from absl import flags
from absl import logging

from cifar10.cli import flags as cifar10_flags
from cifar10.runs import layout
from cifar10.runs import records
from cifar10.core.errors import Cifar10Error

# The flags that say which data a run read, in the order they are described.
DATA_FLAGS = ("dataset", "label", "synthetic_data", "data_dir", "synthetic_records",
              "data_url", "data_md5")


@dataclasses.dataclass
class Followed:
    """What a program took from a run's record."""

    source: str  # the run's flags.txt
    taken: dict[str, str]  # {flag: value as recorded} of the flags taken from it

    def describe(self) -> str:
        """'--data_dir=/x --synthetic_data, from runs/a/flags.txt', or '' if none."""
        if not self.taken:
            return ""
        shown = " ".join(_as_flag(name, value) for name, value in self.taken.items())
        return f"{shown}, from {self.source}"


def follow_run(flag_values: flags.FlagValues, run_dir: str, program: str,
               names: tuple[str, ...] = DATA_FLAGS) -> Followed | None:
    """Sets each flag of ``names`` that the command line left unset to the value the
    training run in ``run_dir`` recorded; returns what was taken (None: no record).

    A flag given on the command line keeps its value; a notice (absl warning marked
    as a notice) says where it differs from the run's.

    Raises:
      Cifar10Error: the resulting data flags contradict each other.
    """
    recorded = records.recorded_flags(run_dir)
    if recorded is None:
        _warn_of_flags_of_no_start(flag_values, run_dir, names)
        _check_together(flag_values, None)
        return None
    source = os.path.join(run_dir, records.FLAGS_FILE)
    taken: dict[str, str] = {}
    for name in names:
        if name not in recorded or name not in flag_values:
            continue
        flag = flag_values[name]
        try:
            value = flag.parser.parse(recorded[name])
        except (ValueError, flags.Error):
            logging.warning("%s records --%s=%s, which %s does not take; using %s.",
                            source, name, recorded[name], program, _shown(name, flag.value))
            continue
        if flag.present:
            if not _equal(name, flag.value, value):
                logging.warning("%s differs from the run it scores (%s in %s); using %s.",
                                _as_flag(name, flag.value), _as_flag(name, value), source,
                                _shown(name, flag.value), extra={"notice": True})
        elif flag.value != value:
            flag.value = value
            taken[name] = recorded[name]
    _check_together(flag_values, source)
    return Followed(source, taken)


def _warn_of_flags_of_no_start(flag_values: flags.FlagValues, run_dir: str,
                               names: tuple[str, ...]) -> None:
    """One warning when the run's flags.txt holds data flags under no header line
    that are not clearly cifar10-train's (no --train_dir among them; a trainer's
    lines whose header was edited away are its start, ``records.recorded_starts``),
    naming the file and the values used instead.  Flags the command line gives, and
    those whose value is the one used, lose nothing and are not named."""
    unclaimed = {name: value for start in records.recorded_starts(run_dir) or ()
                 if not start.program for name, value in start.flags.items()}
    unused = [name for name in names
              if name in unclaimed and name in flag_values and not flag_values[name].present
              and not _same(flag_values[name], unclaimed[name])]
    if unused:
        logging.warning(
            "%s holds %s with no '# cifar10-train, started ...' line above them and no "
            "--train_dir: not taken as the run's flags; using %s; put that header line back, "
            "or pass the run's data flags",
            os.path.join(run_dir, records.FLAGS_FILE),
            " ".join(_as_flag(name, unclaimed[name]) for name in unused),
            " ".join(_shown(name, flag_values[name].value) for name in unused))


def _same(flag: flags.Flag, recorded: str) -> bool:
    """Whether ``recorded`` (a flag line's value) is the value ``flag`` has."""
    try:
        return _equal(flag.name, flag.value, flag.parser.parse(recorded))
    except (ValueError, flags.Error):
        return False


# The flags that name a folder: the same folder however it is written.
_PATH_FLAGS = ("data_dir",)


def _equal(name: str, value, other) -> bool:
    """Whether two values of flag ``name`` are the same: for a folder, the same folder
    (``--data_dir=d1`` and ``/runs/d1`` written from /runs), as cifar10-eval compares."""
    if name in _PATH_FLAGS and value and other:
        return os.path.realpath(value) == os.path.realpath(other)
    return value == other


def wait_for_run(run_dir: str, timeout: float | None, print_fn: Callable[[str], None],
                 poll_secs: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """Waits until ``run_dir`` holds a training run to follow: a recorded start of
    cifar10-train (its flags.txt) or a checkpoint.  An evaluator started beside a new
    trainer would otherwise read the run's flags before the trainer writes them, and
    score the run on the default data.  Says once that it waits.

    Raises:
      Cifar10Error: no run started within ``timeout`` seconds (None: no limit), as
        with a mistyped --checkpoint_dir: the evaluator scored nothing.
    """
    start, said = clock(), False
    while (records.recorded_flags(run_dir) is None
           and not layout.holds_checkpoints(run_dir)):
        if timeout is not None and clock() - start > timeout:
            raise Cifar10Error(
                f"no training run started in {run_dir} within --eval_timeout={timeout:g} "
                f"seconds: check --checkpoint_dir, or start cifar10-train --train_dir={run_dir}")
        if not said:
            print_fn(f"No training run in {run_dir} yet; waiting for cifar10-train to start "
                     f"there, to evaluate on the data it trains on.")
            said = True
        sleep(poll_secs)


def _check_together(flag_values: flags.FlagValues, source: str | None) -> None:
    """The data flags' own rules (``cifar10_flags.DATA_RULES``), on the values taken
    from the run (``source``: its flags.txt; None: there was no record)."""
    broken = cifar10_flags.broken_data_rule(flag_values)
    if broken:
        where = f" (the run's data flags are in {source})" if source else ""
        raise Cifar10Error(f"{broken}{where}")


def _as_flag(name: str, value) -> str:
    if isinstance(value, bool) or value in ("true", "false"):
        return f"--{name}" if value in (True, "true") else f"--no{name}"
    return f"--{name}={value}"


def _shown(name: str, value) -> str:
    return _as_flag(name, value) if value is not None else f"--{name}'s default"
