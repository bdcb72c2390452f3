"""A command line's ``--flagfile`` files read in (``flagfile_lines``), as absl reads
them, each argument knowing the file and line it came from; checked; then parsed by
absl.

absl would read them itself, but a file it cannot decode ends in a traceback, and
what it says of a file or of a line of one names neither.  Here a file that cannot
be read, a line that sets a flag no program takes, and a flag the command line
gives before a flagfile that sets it to another value (the file's value wins, and
the user's is lost) are each one line naming the file, the line and what to do.
Nothing here loads TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Sequence

from absl import flags

from cifar10.cli import flag_errors
from cifar10.cli import flags as cifar10_flags
# FlagfileError is the programs' to catch from here, as flagfiles.FlagfileError.
from cifar10.cli.flagfile_lines import BOM, DIRECTIVES, Arg, FlagfileError, expand, names_flagfile
from cifar10.runs import records


def parse(flag_values: flags.FlagValues, argv: Sequence[str], program: str) -> list[str]:
    """Parses ``argv`` (the program's name first) into ``flag_values`` as absl would,
    its flagfiles read here (``expand``); returns the arguments left, the program's
    name first.

    Raises:
      FlagfileError: a flagfile cannot be read or is not UTF-8 text; it is another
        program's record (``other_programs_flagfile``); the command line gives a
        flag before a flagfile that sets it to another value (``refuse_lost_flags``);
        a line of a flagfile sets a flag ``program`` does not take, or a bad value;
        a run's flags.txt records another folder than its own
        (``refuse_a_record_elsewhere``).
      flags.Error: any other flag mistake, as absl raises it.
    """
    args = expand(argv[1:])
    other = other_programs_flagfile(args, argv, program)
    if other:
        raise FlagfileError(other)
    refuse_lost_flags(args, flag_values)
    refuse_a_record_elsewhere(args, flag_values, program)
    try:
        rest = flag_values([argv[0], *(arg.text for arg in args)])
    except flags.Error as e:
        line = _line_at_fault(e, args, flag_values)
        if line is None:
            raise
        spaced = _spaced_flag(line.text, flag_values)
        if isinstance(e, flags.UnrecognizedFlagError) and spaced:
            raise FlagfileError(f"{line.place()}: {line.text}: {spaced}") from None
        fix = ("delete or fix" if isinstance(e, flags.UnrecognizedFlagError)
               else "fix or delete")
        raise FlagfileError(f"{line.place()}: {flag_errors.flag_error_text(e)}; {fix} that "
                            f"line") from None
    except ValueError:  # absl's for --noname=value, which is not one of its flags.Error
        arg, name = next(((arg, name) for arg in args if (name := _negated_with_value(
            arg.text, flag_values))), (None, None))
        if arg is None:
            raise
        message = f"{arg.text}: --no{name} takes no value; write --no{name}, or --{name}=VALUE"
        if arg.top is not None:
            raise FlagfileError(f"{arg.place()}: {message}; fix or delete that line") from None
        raise flags.Error(message) from None
    refuse_unexpanded_tilde(args, flag_values)
    if program != PREDICTOR:
        refuse_lines_that_are_no_flags(args, flag_values)
    return rest


# The program whose arguments (the files to classify) a flagfile's lines may give too.
PREDICTOR = "cifar10-predict"


def refuse_lines_that_are_no_flags(args: Sequence[Arg], flag_values: flags.FlagValues) -> None:
    """Refuses a flagfile line that absl leaves to the program as an argument, being
    no flag (``max_steps=5``, without its dashes) nor a flag's value: the program
    would say ``unexpected arguments: max_steps=5``, naming neither file nor line.

    Raises:
      FlagfileError: naming the line.
    """
    left: list[Arg] = []
    _settings(args, flag_values, left)
    for arg in left:
        if arg.top is not None:
            raise FlagfileError(f"{arg.place()}: {arg.text} is not a flag (flags start with "
                                f"--); fix or delete that line")


def refuse_unexpanded_tilde(args: Sequence[Arg], flag_values: flags.FlagValues) -> None:
    """Refuses a path flag set by a flagfile line to a value that starts with a ~
    (``--data_dir=~/data``): no shell reads a flagfile, so the ~ is not expanded, and
    taken as it is it would make a folder named ~ in the current folder.  The line
    to write is the expanded path (``--data_dir ~/data``, the command line's fix,
    would not do in a flagfile: absl takes a line as one argument).  A ~ of the
    command line is ``programs``' to refuse, with the shell's fix.

    Raises:
      FlagfileError: naming the line and the path to write on it.
    """
    settings = {}
    for setting in _settings(args, flag_values):
        settings[setting.name] = setting  # the last, whose value absl keeps
    for name, value, home in cifar10_flags.unexpanded_tildes(flag_values):
        setting = settings.get(name)
        if setting is None or setting.arg.top is None:
            continue  # a ~ of the command line: path_flags' to refuse
        raise FlagfileError(f"{setting.arg.place()}: {setting.written} starts with a ~, which "
                            f"a flagfile does not expand (no shell reads it): write "
                            f"--{name}={home} on that line; for a folder "
                            f"named ~, --{name}=./{value}")


def _negated_with_value(text: str, flag_values: flags.FlagValues) -> str | None:
    """The boolean flag's name of ``--noname=value`` (which absl refuses with a
    ValueError), or None."""
    name, sep, _ = text.lstrip("-").partition("=")
    if (text.startswith("-") and sep and name.startswith("no") and name not in flag_values
            and name[2:] in flag_values and flag_values[name[2:]].boolean):
        return name[2:]
    return None


@dataclasses.dataclass(frozen=True)
class _Setting:
    """A flag set by an argument: the flag's name (an alias's flag's), the value as
    absl parses it ('true' or 'false' for a bare boolean), as it was written, and the
    argument of the flag's name."""

    name: str
    value: str
    written: str
    arg: Arg


def _settings(args: Sequence[Arg], flag_values: flags.FlagValues,
              left: list[Arg] | None = None) -> list[_Setting]:
    """The flags ``args`` set, in order, read as absl's ``_parse_args`` reads them;
    arguments absl would refuse (unknown flags, a missing value) are left out.  The
    arguments before a ``--`` that absl leaves to the program (no flag, nor a flag's
    value) go into ``left``, if given."""
    known = {name: flag_values[name] for name in flag_values}
    found = []
    at = 0
    while at < len(args):
        arg = args[at]
        at += 1
        text = arg.text
        if text == "--":
            break
        if not text.startswith("-"):
            if left is not None:
                left.append(arg)
            continue
        name, sep, value = (text[2:] if text.startswith("--") else text[1:]).partition("=")
        if not name:
            continue
        if name == "undefok":
            at += 0 if sep else 1
            continue
        flag = known.get(name)
        written = text
        if flag is not None and flag.boolean and not sep:
            value = "true"
        elif flag is not None and not sep:
            if at >= len(args):
                continue
            value = args[at].text
            written = f"{text} {value}"
            at += 1
        elif flag is None and name.startswith("no") and not sep:
            flag = known.get(name[2:])
            if flag is None or not flag.boolean:
                continue
            value = "false"
        elif flag is None:
            continue
        found.append(_Setting(cifar10_flags.FORMER_NAMES.get(flag.name, flag.name), value,
                              written, arg))
    return found


def refuse_lost_flags(args: Sequence[Arg], flag_values: flags.FlagValues) -> None:
    """Refuses a flag that the command line gives before a ``--flagfile`` which sets
    it again to another value and is the last to set it: absl takes the last value,
    so the user's would be lost without a word (a run's flags.txt sets every flag).
    The same value, or the flag given again after the file, is no mistake.

    Raises:
      FlagfileError: naming the flag as given, the file and the value that would win.
    """
    by_flag: dict[str, list[_Setting]] = {}
    for setting in _settings(args, flag_values):
        by_flag.setdefault(setting.name, []).append(setting)
    for name, settings in by_flag.items():
        last = settings[-1]
        given = [s for s in settings[:-1] if s.arg.top is None]
        if last.arg.top is None or not given or _same(flag_values[name], given[-1], last):
            continue
        where = "" if last.arg.file == last.arg.top else f" ({last.arg.place()})"
        raise FlagfileError(f"{given[-1].written} comes before --flagfile={last.arg.top}, "
                            f"which sets {last.written}{where} and wins; put "
                            f"{given[-1].written} after --flagfile")


def refuse_a_record_elsewhere(args: Sequence[Arg], flag_values: flags.FlagValues,
                              program: str) -> None:
    """Refuses a run's record (``<X>/flags.txt`` holding start headers) that sets the
    program's own folder (``records.OWN_FLAG``: --train_dir, --eval_dir) to another
    folder than X, when no later argument sets it again.  Such a record was copied or
    moved: replayed, it would go on with the run it names (pruning its checkpoints),
    or start a new run there from step 0, and leave the run beside the file alone.

    Raises:
      FlagfileError: naming the file, both folders and the flag to pass for each.
    """
    own = records.OWN_FLAG.get(program)
    if own is None or own not in flag_values:
        return
    settings = [s for s in _settings(args, flag_values) if s.name == own]
    if not settings or settings[-1].arg.file is None:
        return
    arg, recorded = settings[-1].arg, settings[-1].value
    folder = os.path.dirname(arg.file) or "."
    if (os.path.basename(arg.file) != records.FLAGS_FILE or not arg.in_record
            or os.path.realpath(recorded) == os.path.realpath(folder)):
        return
    where = f"--flagfile={arg.top}" if arg.file == arg.top else f"{arg.file}, read by " \
        f"--flagfile={arg.top}"
    gone = "" if os.path.isdir(recorded) else " (not there now: a new run would start there)"
    raise FlagfileError(f"{where} records --{own}={recorded}, not the folder it is in "
                        f"({folder}): pass --{own}={folder} after it to go on with this "
                        f"copy, or --{own}={recorded} for the recorded run{gone}")


def _same(flag: flags.Flag, a: _Setting, b: _Setting) -> bool:
    """Whether two settings give ``flag`` the same value (paths as absolute paths);
    a value that does not parse is left to absl, which refuses it."""
    try:
        values = [flag.parser.parse(s.value) for s in (a, b)]
    except (ValueError, TypeError, flags.Error):
        return True
    if flag.name in cifar10_flags.PATH_FLAGS and all(isinstance(v, str) for v in values):
        values = [os.path.abspath(os.path.expanduser(v)) for v in values]
    return values[0] == values[1]


def _line_at_fault(error: flags.Error, args: Sequence[Arg],
                   flag_values: flags.FlagValues) -> Arg | None:
    """The flagfile line of the flag that ``error`` (absl's, for the first bad flag
    in order) is about, or None when it is not one line of a flagfile."""
    if isinstance(error, flags.UnrecognizedFlagError):
        for arg in args:
            if arg.text == "--":
                break
            if arg.text.startswith("-") and arg.text.lstrip("-").split("=")[0] == error.flagname:
                return arg if arg.top is not None else None
        return None
    bad = flag_errors.bad_flag_value(error)
    if bad is None:
        return None
    name, value = bad
    setting = next((s for s in _settings(args, flag_values)
                    if s.arg.text.lstrip("-").split("=")[0] == name and s.value == value), None)
    return setting.arg if setting and setting.arg.top is not None else None


def _spaced_flag(text: str, flag_values: flags.FlagValues) -> str | None:
    """What is wrong with the flagfile line ``text`` and the line to write, where white
    space follows its flag's name, before an ``=`` or in its place (``--max_steps = 5``,
    ``--max_steps 5``: absl reads the whole line as one argument, so a flag named
    'max_steps '); None when there is no such space, or the name is not a flag of
    ``flag_values``."""
    dashes = text[:len(text) - len(text.lstrip("-"))]
    body = text[len(dashes):]
    name = re.match(r"[^\s=]*", body)[0]
    rest = body[len(name):].strip()
    if not dashes or not body[len(name):][:1].isspace():
        return None  # no white space after the flag's name: absl's own error says it
    if name not in flag_values and not (name.startswith("no") and name[2:] in flag_values):
        return None
    around = rest.startswith("=")
    value = rest[1:].strip() if around else rest
    why = ("spaces around = are not allowed" if around
           else "a flag's value goes after =, not after a space")
    return (f"{why} (absl reads the line as one argument): write {dashes}{name}"
            + (f"={value}" if value else ""))


def other_programs_flagfile(args: Sequence[Arg], argv: Sequence[str], program: str) -> str | None:
    """The error for a ``--flagfile`` of the command line that is another program's
    flags.txt (its first line a start header, ``records.header_program``), worded for
    the pair of programs; or None."""
    for top in dict.fromkeys(arg.top for arg in args if arg.top):
        try:
            with open(top, encoding="utf-8", errors="replace") as f:
                other = records.header_program(f.readline().removeprefix(BOM))
        except OSError:
            continue
        if not other.startswith("cifar10-") or other == program:
            continue
        # The latest start's flags, as flags.txt writes them (--name=value).
        recorded = dict(arg.text[2:].split("=", 1) for arg in args
                        if arg.top == top and arg.text.startswith("--") and "=" in arg.text)
        return _advice(top, other, program, recorded, argv)
    return None


def _advice(top: str, other: str, program: str, recorded: dict[str, str],
            argv: Sequence[str]) -> str:
    """``other_programs_flagfile``'s line for ``program`` given ``other``'s flags.txt
    ``top``, whose latest start set ``recorded``."""
    head = f"--flagfile={top} holds {other}'s flags, not {program}'s"
    if other == "cifar10-train":
        # The run is where its records are, even when it moved since; a copy of the
        # file elsewhere is of the run it recorded.
        run = os.path.dirname(os.path.abspath(top))
        if os.path.basename(top) != records.FLAGS_FILE and recorded.get("train_dir"):
            run = recorded["train_dir"]
        if program == "cifar10-eval":
            return (f"{head}; {program} reads the data settings of the run it is given by "
                    f"itself: pass --checkpoint_dir={run} instead")
        if program == "cifar10-predict":
            return f"{head}: pass --checkpoint_dir={run} to classify with that run's model"
        if program == "cifar10-export":
            return f"{head}: pass --checkpoint_dir={run} to export that run's model"
        if program == "cifar10-launch":
            own = list(argv[1:argv.index("--")] if "--" in argv else argv[1:])
            after = list(argv[argv.index("--") + 1:]) if "--" in argv else []
            kept = [a for i, a in enumerate(own) if not names_flagfile(a)
                    and not (i and own[i - 1] in DIRECTIVES)]
            return (f"{head}: {other}'s flags go after --, as in "
                    f"{' '.join([program, *kept, '--', f'--flagfile={top}', *after])}")
    if other == "cifar10-eval" and recorded.get("checkpoint_dir"):
        scored = recorded["checkpoint_dir"]
        if program == "cifar10-train":
            replay = os.path.join(scored, records.FLAGS_FILE)
            if os.path.isfile(replay):
                return (f"{head}: to replay the training run it scores, pass "
                        f"--flagfile={replay}")
            return (f"{head}: give {program} a training run's own flags.txt ({top} scores "
                    f"--checkpoint_dir={scored}, which holds none)")
        if program in ("cifar10-predict", "cifar10-export"):
            return f"{head}: pass --checkpoint_dir={scored}, the run it scores"
    return f"{head}: give {program} its own flags"
