"""A program's command line parsed: ``--help``, the flags and their flagfiles, the
values refused once parsed, and a flag mistake as one line in the program's words.
Nothing here loads TensorFlow.
"""

from __future__ import annotations

import os
import shlex
import sys

from absl import flags

from cifar10.cli import flag_errors
from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import parsed_values

# The programs that take file names after their flags (a name that starts with a dash
# is taken for a flag unless it follows a --).
FILE_PROGRAMS = ("cifar10-predict",)

_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")
_SHORT_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort")


def parse_flags(argv: list[str], program: str, doc: str,
                flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Parses ``argv`` into ``flag_values``; returns the arguments left.

    ``--help`` prints the program's flags (``doc`` first) and exits with status 0; a
    flag mistake prints ``<program>: error: <message>`` and exits with status 1.
    """
    own = argv[1:argv.index("--")] if "--" in argv else argv[1:]  # after --: another's
    asked = {arg.split("=")[0] for arg in own} & set(_HELP_FLAGS)
    if asked & set(_SHORT_HELP_FLAGS):
        # absl's short help lists only the flags of the __main__ module, which is
        # the console-script stub here; show the program's own flags instead.
        print(f"USAGE: {program} [flags]\n\n{doc.strip()}\n")
        print(flag_values.module_help(cifar10_flags.__name__))
        print("\nTry --helpfull to see absl's own flags too. TensorFlow's own log lines are "
              "hidden;\n-v 0 (absl's --verbosity) or TF_CPP_MIN_LOG_LEVEL=0 shows them (1 "
              "to 3: those of\nlevel W, E or F and above).")
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        sys.exit(0)
    try:
        rest = flagfiles.parse(flag_values, argv, program)
        parsed_values.refuse_parsed_values(flag_values, program)
    except SystemExit:
        if asked:  # absl exits with status 1 after --helpfull; help is not an error
            sys.exit(0)
        raise
    except flagfiles.FlagfileError as e:
        message = str(e)
    except flags.Error as e:
        message = (_trainers_flag(e, argv, program) or _file_name_taken_for_a_flag(e, argv, program)
                   or flag_errors.flag_error_text(e))
    else:
        return rest
    sys.stderr.write(f"{program}: error: {message} (see {program} --help)\n")
    sys.exit(1)


def _trainers_flag(error: flags.Error, argv: list[str], program: str) -> str | None:
    """cifar10-launch's error for one of cifar10-train's flags given before its ``--``
    (``launch_args.trainers_flag_hint``), or None."""
    if program != "cifar10-launch":
        return None
    from cifar10.cli import launch_args  # the launcher's own, loaded for its error alone

    return launch_args.trainers_flag_hint(error, argv, program)


def _file_name_taken_for_a_flag(error: flags.Error, argv: list[str], program: str
                                ) -> str | None:
    """The error for a file name that starts with a dash (``-y.jpg``), which absl
    takes for an unknown flag, given to a program that takes file names
    (``FILE_PROGRAMS``): an existing file's name or an image file's; or None."""
    if program not in FILE_PROGRAMS or not isinstance(error, flags.UnrecognizedFlagError):
        return None
    from cifar10.data import imagefiles  # no TensorFlow

    own = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    name = next((arg for arg in own if arg.startswith("-")
                 and arg.lstrip("-").split("=")[0] == error.flagname), None)
    if name is None or not (os.path.exists(name)
                            or name.lower().endswith(imagefiles.IMAGE_EXTENSIONS)):
        return None
    after = argv[argv.index("--") + 1:] if "--" in argv else []
    others = [arg for arg in own if arg != name]
    return (f"{name} is taken for a flag (unknown flag --{error.flagname}): name that file "
            f"{shlex.quote('./' + name)}, or put the file names after --, as in "
            f"{shlex.join([program, *others, '--', *after, name])}")
