"""A ``--flagfile`` of the command line that is another program's flags.txt (its
first line a start header, ``records.header_program``), and what to pass instead,
worded for the pair of programs: cifar10-eval given a training run's record takes
--checkpoint_dir, cifar10-launch takes cifar10-train's flags after ``--``, and so
on.  Nothing here loads TensorFlow.
"""

from __future__ import annotations

import os
from typing import Sequence

from cifar10.cli.flagfile_lines import BOM, DIRECTIVES, Arg, names_flagfile
from cifar10.runs import records


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
