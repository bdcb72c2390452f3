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

import os
import re
from typing import Sequence

from absl import flags

from cifar10.cli import flag_errors
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import path_flags
from cifar10.cli.flag_settings import Setting, flag_settings
# FlagfileError is the programs' to catch from here, as flagfiles.FlagfileError.
from cifar10.cli.flagfile_lines import Arg, FlagfileError, expand
from cifar10.cli.other_programs import other_programs_flagfile
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
        error = _flagfile_line_error(e, args, flag_values)
        if error is None:
            raise
        raise error from None
    except ValueError:  # absl's for --noname=value, which is not one of its flags.Error
        error = _negated_with_value_error(args, flag_values)
        if error is None:
            raise
        raise error from None
    refuse_unexpanded_tilde(args, flag_values)
    if program != PREDICTOR:
        refuse_lines_that_are_no_flags(args, flag_values)
    return rest


def _flagfile_line_error(error: flags.Error, args: Sequence[Arg],
                         flag_values: flags.FlagValues) -> FlagfileError | None:
    """absl's ``error`` as the one line naming the flagfile line at fault (a flag no
    program takes, a bad value, spaces around =), or None where no line is."""
    line = _line_at_fault(error, args, flag_values)
    if line is None:
        return None
    spaced = _spaced_flag(line.text, flag_values)
    if isinstance(error, flags.UnrecognizedFlagError) and spaced:
        return FlagfileError(f"{line.place()}: {line.text}: {spaced}")
    fix = "delete or fix" if isinstance(error, flags.UnrecognizedFlagError) else "fix or delete"
    return FlagfileError(f"{line.place()}: {flag_errors.flag_error_text(error)}; {fix} that "
                         f"line")


def _negated_with_value_error(args: Sequence[Arg],
                              flag_values: flags.FlagValues) -> flags.Error | None:
    """The error for the first ``--noname=value`` of ``args`` (absl's ValueError
    names neither flag nor line): a FlagfileError for a flagfile's line, else
    absl's ``flags.Error``; None where there is none."""
    arg, name = next(((arg, name) for arg in args if (name := _negated_with_value(
        arg.text, flag_values))), (None, None))
    if arg is None:
        return None
    message = f"{arg.text}: --no{name} takes no value; write --no{name}, or --{name}=VALUE"
    if arg.top is not None:
        return FlagfileError(f"{arg.place()}: {message}; fix or delete that line")
    return flags.Error(message)


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
    flag_settings(args, flag_values, left)
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
    for setting in flag_settings(args, flag_values):
        settings[setting.name] = setting  # the last, whose value absl keeps
    for name, value, home in path_flags.unexpanded_tildes(flag_values):
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


def refuse_lost_flags(args: Sequence[Arg], flag_values: flags.FlagValues) -> None:
    """Refuses a flag that the command line gives before a ``--flagfile`` which sets
    it again to another value and is the last to set it: absl takes the last value,
    so the user's would be lost without a word (a run's flags.txt sets every flag).
    The same value, or the flag given again after the file, is no mistake.

    Raises:
      FlagfileError: naming the flag as given, the file and the value that would win.
    """
    by_flag: dict[str, list[Setting]] = {}
    for setting in flag_settings(args, flag_values):
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
    settings = [s for s in flag_settings(args, flag_values) if s.name == own]
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
                        f"({folder}): pass {path_flags.pasted(own, folder)} after it to go on "
                        f"with this copy, or {path_flags.pasted(own, recorded)} for the "
                        f"recorded run{gone}")


def _same(flag: flags.Flag, a: Setting, b: Setting) -> bool:
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
    setting = next((s for s in flag_settings(args, flag_values)
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
