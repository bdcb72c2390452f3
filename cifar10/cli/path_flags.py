"""The values of path flags refused once parsed: a name not in UTF-8, and a ~ the
shell left unexpanded (``unexpanded_tildes``, which ``flagfiles`` refuses on a
flagfile's line); and a path flag as a line suggests it, to be pasted (``pasted``).
Nothing here loads TensorFlow.
"""

from __future__ import annotations

import os
import shlex

from absl import flags

from cifar10.cli import flags as cifar10_flags


def refuse_paths_not_utf8(flag_values: flags.FlagValues) -> None:
    """A path flag whose value is not UTF-8 (bytes the file system allows) is a flag
    error: the runs' records (flags.txt, environment.jsonl) are UTF-8 text, and
    TensorFlow reads and writes checkpoints and SavedModels by UTF-8 names."""
    for name in cifar10_flags.PATH_FLAGS:
        value = flag_values[name].value if name in flag_values else None
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                why = _TENSORFLOW_NAMES if name in _TENSORFLOW_PATHS else _RECORDED_NAMES
                raise flags.Error(f"--{name}={os.fsencode(value)!r} is not UTF-8: choose a "
                                  f"name in UTF-8 ({why})") from None


def refuse_unexpanded_tilde(flag_values: flags.FlagValues) -> None:
    """A path flag whose value starts with a ~ the shell left as it is (it expands none
    after '=': ``--data_dir=~/data``) is a flag error: taken as it is, it would make a
    folder named ~ in the current folder (and a later ``rm -rf ~`` of it, the home)."""
    found = unexpanded_tildes(flag_values)
    if found:
        name, value, home = found[0]
        raise flags.Error(
            f"--{name}={value} starts with a ~ that was not expanded (the shell does "
            f"not expand a ~ after '='): write --{name} {value} or {pasted(name, home)}; "
            f"for a folder named ~, write ./{value}")


def unexpanded_tildes(flag_values: flags.FlagValues) -> list[tuple[str, str, str]]:
    """(name, value, the value with its ~ expanded) of each path flag whose value starts
    with a ~ that names a home folder but was not expanded (the shell expands none after
    '=', and no shell reads a flagfile): taken as it is, it would make a folder named ~
    in the current folder."""
    found = []
    for name in cifar10_flags.PATH_FLAGS:
        value = flag_values[name].value if name in flag_values else None
        if isinstance(value, str) and value.startswith("~"):
            home = os.path.expanduser(value)
            if home != value:
                found.append((name, value, home))
    return found


def pasted(name: str, path: str) -> str:
    """``--name=path`` as a line suggests it, to be pasted into a shell: the path
    quoted where it holds a space or another character the shell would read
    (``shlex.quote``; a plain path stays as it is).  A path in the prose of a line is
    left as it is."""
    return f"--{name}={shlex.quote(path)}"


# Why a path flag's value must be UTF-8.
_RECORDED_NAMES = "the run's records, flags.txt and environment.jsonl, are UTF-8 text"
_TENSORFLOW_NAMES = "TensorFlow reads and writes checkpoints and SavedModels by UTF-8 names"
_TENSORFLOW_PATHS = ("checkpoint_dir", "checkpoint", "export_dir")
