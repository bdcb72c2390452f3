"""A program's command line parsed by absl, once each flagfile it names is checked: a
run's flags.txt must be this program's record, and whole.  No TensorFlow here.
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import flags

from cifar10.cli import flags as cifar10_flags
from cifar10.cli import outdirs
from cifar10.runs import records

_DIRECTIVES = ("--flagfile", "-flagfile")
# The programs that take a training run's folder as --checkpoint_dir.
_CHECKPOINT_READERS = ("cifar10-eval", "cifar10-predict", "cifar10-export")
_OWN_FOLDER = {"cifar10-train": "train_dir", "cifar10-eval": "eval_dir"}


def parse(flag_values: flags.FlagValues, argv: Sequence[str], program: str) -> list[str]:
    """Parses ``argv`` into ``flag_values``; returns the arguments left, the program's name
    first.  flags.Error for a flagfile refused, a flag mistake, or a value refused."""
    own = cifar10_flags.own_args(argv)
    copied = {}
    _refuse_lost_settings(_settings(own, flag_values, program, copied), flag_values, copied,
                          _OWN_FOLDER.get(program))
    try:
        rest = flag_values(list(argv))
    except UnicodeDecodeError as e:  # a flagfile read by another one (absl's traceback)
        raise flags.Error(f"a --flagfile is not UTF-8 text ({e}): name a file of flags, "
                          f"one per line") from None
    except ValueError as e:  # absl's for --noname=value, not one of its flags.Error
        raise flags.Error(str(e)) from None
    cifar10_flags.refuse_paths(flag_values)
    outdirs.refuse_folders_that_are_not(flag_values)
    if program in cifar10_flags.RECORDING_PROGRAMS:
        cifar10_flags.refuse_values_it_cannot_hold(flag_values)
    return rest


def _settings(args: Sequence[str], flag_values: flags.FlagValues, program: str,
              copied: dict, file: str | None = None, depth: int = 0) -> list[tuple]:
    """(flag, value, the flagfile that sets it or None) for each flag ``args`` set, in
    absl's order, each flagfile checked (``check_flagfile``; ``copied`` takes the copied
    records) and its lines read in its place."""
    found, at = [], 0
    while at < len(args):
        arg, at = args[at].strip(), at + 1
        name, eq, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or not name:
            continue
        if name == "flagfile":
            if not eq and file is None and at < len(args):
                value, at = args[at], at + 1
            path = os.path.expanduser(value)
            if path and depth < 20:
                lines, copy = check_flagfile(path, program)
                if copy:
                    copied[path] = copy
                lines = [line for line in lines
                         if line.strip() and not line.startswith(("#", "//"))]
                found += _settings(lines, flag_values, program, copied, path, depth + 1)
            continue
        if name not in flag_values and name[2:] in flag_values and name.startswith("no"):
            name, value = name[2:], "false"
        elif name in flag_values and not eq:
            if flag_values[name].boolean:
                value = "true"
            elif file is None and at < len(args):
                value, at = args[at], at + 1
        if name in flag_values:
            found.append((name, value, file))
    return found


def _refuse_lost_settings(settings: list[tuple], flag_values: flags.FlagValues,
                          copied: dict, own_folder: str | None) -> None:
    """Refuses a flag of the command line that a later flagfile sets to another value
    (absl takes the file's: the flag would be lost without a word), and a copied record
    whose folder no later flag sets (``check_flagfile``)."""
    last = {name: (value, file) for name, value, file in settings}
    for name, value, file in settings:
        final, source = last[name]
        if file is None and source is not None and (
                _parsed(flag_values, name, value) != _parsed(flag_values, name, final)):
            raise flags.Error(f"--{name}={value} comes before --flagfile={source}, which sets "
                              f"--{name}={final} and wins; put --{name}={value} after "
                              f"--flagfile")
    if own_folder in last and last[own_folder][1] in copied:
        name, flag, recorded = copied[last[own_folder][1]]
        folder = os.path.dirname(name) or "."
        raise flags.Error(
            f"--flagfile={name} records --{flag}={recorded}, not the folder it is in "
            f"({folder}): pass --{flag}={folder} after it to go on with this copy, or "
            f"--{flag}={recorded} for the recorded run")


def _parsed(flag_values: flags.FlagValues, name: str, text: str):
    """A flag's value as absl parses ``text`` (paths made absolute); ``text`` where absl
    refuses it (it says so when it parses the command line)."""
    try:
        value = flag_values[name].parser.parse(text)
    except (ValueError, TypeError, flags.Error):
        return text
    if name in cifar10_flags.PATH_FLAGS and isinstance(value, str):
        return os.path.realpath(os.path.expanduser(value))
    return value


def check_flagfile(name: str, program: str) -> tuple[list[str], tuple[str, str, str] | None]:
    """Refuses a run's record ``program`` cannot replay (another program's, one cut short);
    returns the file's lines ([] where absl will say it cannot read it) and, for a copied
    flags.txt, (name, flag, folder), which ``parse`` refuses unless a later flag sets the
    folder."""
    name = os.path.expanduser(name)
    try:
        with open(name, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        raise flags.Error(f"--flagfile={name} is not UTF-8 text: name a file of flags, one "
                          f"per line") from None
    except OSError:
        return [], None
    starts = [at for at, line in enumerate(lines) if records.is_start_header(line)]
    if not starts:
        return lines, None  # no run's record: any file of flags
    header, last = lines[starts[-1]], lines[starts[-1] + 1:]
    other = records.header_program(header)
    if other != program:
        if other == "cifar10-train" and program == "cifar10-launch":
            fix = "cifar10-train's flags go after --"
        elif other == "cifar10-train" and program in _CHECKPOINT_READERS:
            fix = f"pass --checkpoint_dir={os.path.dirname(os.path.abspath(name))} instead"
        else:
            fix = f"give {program} its own flags"
        raise flags.Error(f"--flagfile={name} holds {other}'s flags, not {program}'s: {fix}")
    if not any(line.strip() and not line.startswith(("#", "//")) for line in last):
        problem = "sets no flag"
    elif records.announces_end(header) and not any(map(records.is_end_line, last)):
        problem = f"lacks its end line \"{records.END_LINE}\""
    else:
        flag = _OWN_FOLDER.get(program)
        recorded = [line.split("=", 1)[1] for line in last
                    if line.startswith(f"--{flag}=")]
        if (recorded and os.path.basename(name) == records.FLAGS_FILE and
                os.path.realpath(recorded[-1]) != os.path.realpath(os.path.dirname(name))):
            return lines, (name, flag, recorded[-1])
        return lines, None
    raise flags.Error(f"--flagfile={name} is a record cut short: its last start (line "
                      f"{starts[-1] + 1}) {problem}; give the run's whole flags.txt, or the "
                      f"flags on the command line")
