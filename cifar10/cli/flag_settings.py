"""The flags a command line's arguments set, read as absl reads them
(``flag_settings``), each knowing the argument (and so the flagfile line) that set
it: what ``flagfiles`` checks a command line with before absl parses it.  Nothing
here loads TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from absl import flags

from cifar10.cli import flags as cifar10_flags
from cifar10.cli.flagfile_lines import Arg


@dataclasses.dataclass(frozen=True)
class Setting:
    """A flag set by an argument: the flag's name (an alias's flag's), the value as
    absl parses it ('true' or 'false' for a bare boolean), as it was written, and the
    argument of the flag's name."""

    name: str
    value: str
    written: str
    arg: Arg


def flag_settings(args: Sequence[Arg], flag_values: flags.FlagValues,
                  left: list[Arg] | None = None) -> list[Setting]:
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
        found.append(Setting(cifar10_flags.FORMER_NAMES.get(flag.name, flag.name), value,
                              written, arg))
    return found
