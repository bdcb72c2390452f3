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
    own = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    copied = []
    for at, arg in enumerate(own):
        if arg in _DIRECTIVES and at + 1 < len(own):
            copied.append((at, check_flagfile(own[at + 1], program)))
        elif arg.startswith(tuple(f"{d}=" for d in _DIRECTIVES)):
            copied.append((at, check_flagfile(arg.split("=", 1)[1], program)))
    try:
        rest = flag_values(list(argv))
    except UnicodeDecodeError as e:  # a flagfile read by another one (absl's traceback)
        raise flags.Error(f"a --flagfile is not UTF-8 text ({e}): name a file of flags, "
                          f"one per line") from None
    except ValueError as e:  # absl's for --noname=value, not one of its flags.Error
        raise flags.Error(str(e)) from None
    for at, (name, flag, recorded) in ((at, c) for at, c in copied if c):
        if not any(arg.lstrip("-").split("=")[0] == flag for arg in own[at + 1:]):
            folder = os.path.dirname(name) or "."
            raise flags.Error(
                f"--flagfile={name} records --{flag}={recorded}, not the folder it is in "
                f"({folder}): pass --{flag}={folder} after it to go on with this copy, or "
                f"--{flag}={recorded} for the recorded run")
    cifar10_flags.refuse_paths(flag_values)
    outdirs.refuse_folders_that_are_not(flag_values)
    if program in cifar10_flags.RECORDING_PROGRAMS:
        cifar10_flags.refuse_values_it_cannot_hold(flag_values)
    return rest


def check_flagfile(name: str, program: str) -> tuple[str, str, str] | None:
    """Refuses a run's record ``program`` cannot replay (another program's, one cut short);
    returns (name, flag, folder) for a copied flags.txt, which ``parse`` refuses unless a
    later flag sets the folder."""
    name = os.path.expanduser(name)
    try:
        with open(name, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        raise flags.Error(f"--flagfile={name} is not UTF-8 text: name a file of flags, one "
                          f"per line") from None
    except OSError:
        return
    starts = [at for at, line in enumerate(lines) if records.is_start_header(line)]
    if not starts:
        return  # no run's record: any file of flags
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
            return name, flag, recorded[-1]
        return None
    raise flags.Error(f"--flagfile={name} is a record cut short: its last start (line "
                      f"{starts[-1] + 1}) {problem}; give the run's whole flags.txt, or the "
                      f"flags on the command line")
