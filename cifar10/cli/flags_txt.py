"""A run's flags.txt, as the programs that record their flags write it: its text
(``flagfile_text``), and the flag values it could not give back on replay, refused.
Nothing here loads TensorFlow.
"""

from __future__ import annotations

import os

from absl import flags

from cifar10.cli import flags as cifar10_flags

# The programs that record their flags in flags.txt (``flagfile_text``), for replay.
RECORDING_PROGRAMS = ("cifar10-train", "cifar10-eval")


def refuse_values_it_cannot_hold(flag_values: flags.FlagValues) -> None:
    """A string flag whose value flags.txt cannot give back on replay is a flag error:
    absl reads a flag file a line at a time (``\\n``, ``\\r``) and strips each line, so
    a line break would split the value (and could set another flag) and white space
    at its end would be dropped."""
    for flag in flag_values.get_flags_for_module(cifar10_flags.__name__):
        value = flag.value
        if not isinstance(value, str):
            continue
        if "\n" in value or "\r" in value:
            problem = "holds a line break, which would end its line"
        elif value != value.rstrip():
            problem = "ends with white space, which would be dropped"
        else:
            continue
        raise flags.Error(f"--{flag.name}={value!r} {problem} in the run's flags.txt (one "
                          f"flag per line, replayed with --flagfile): choose a value without it")


def flagfile_text(flag_values: flags.FlagValues = flags.FLAGS,
                  not_replayed: tuple[str, ...] = ("fresh_start",)) -> str:
    """The program's flags and their values, one per line in absl's flagfile format
    (``--name=value``, ``--name`` / ``--noname``), as ``--flagfile`` reads them.

    Paths (``cifar10_flags.PATH_FLAGS``) are written absolute.  Flags left unset
    (None) are left out; each flag of ``not_replayed`` (booleans that delete
    something) is written as false, so that replaying the file never does that again.  A flag of
    ``cifar10_flags.UNSET_IS_NOT_DEFAULT`` that was not given is written commented
    out (``# --num_gpus=1``): its value stays on record (``records.recorded_starts``
    reads it) and a replay leaves it unset, as the start did.
    """
    lines = []
    for flag in flag_values.get_flags_for_module(cifar10_flags.__name__):
        if flag.name in cifar10_flags.UNSET_IS_NOT_DEFAULT and not flag.present:
            lines.append(f"# {flag.serialize()}")
        elif flag.name in not_replayed:
            lines.append(f"--no{flag.name}")
        elif flag.name in cifar10_flags.PATH_FLAGS and isinstance(flag.value, str):
            # Absolute, so that a replay from another directory finds the same run.
            lines.append(f"--{flag.name}={os.path.abspath(flag.value)}")
        elif flag.value is not None:
            lines.append(flag.serialize())
    return "".join(f"{line}\n" for line in lines)
