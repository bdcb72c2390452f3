"""The values of a program's flags refused once they are parsed, whichever program
parsed them: cifar10-train's own parse (``command_line``), and cifar10-launch's of
the trainer's flags it is given (``launch_args``).  Nothing here loads TensorFlow.
"""

from __future__ import annotations

from absl import flags

from cifar10.cli import flags_txt
from cifar10.cli import outdirs
from cifar10.cli import path_flags


def refuse_parsed_values(flag_values: flags.FlagValues, program: str) -> None:
    """The values ``program``'s flags are refused once parsed (also cifar10-train's
    given to cifar10-launch, checked there before it fetches their data): paths not in
    UTF-8, a ~ the shell left, a folder flag that names no folder, and (for the
    programs that record flags.txt) a value it could not give back.

    Raises:
      flags.Error: the first of those, as one line.
    """
    path_flags.refuse_paths_not_utf8(flag_values)
    path_flags.refuse_unexpanded_tilde(flag_values)
    outdirs.refuse_folders_that_are_not(flag_values)
    if program in flags_txt.RECORDING_PROGRAMS:
        flags_txt.refuse_values_it_cannot_hold(flag_values)
