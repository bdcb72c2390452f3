"""A command line's ``--flagfile`` files read in, as absl reads them, each argument
knowing the file and line it came from (``expand``): a file that cannot be read or
is not UTF-8 text, or a line that names a file being read, is one line naming it
(``FlagfileError``).  ``flagfiles`` checks and parses what is read here.

Nothing here loads TensorFlow.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import os
from typing import Sequence

from absl import flags

from cifar10.runs import records

# The arguments absl takes for a flagfile (a nested one too): '--flagfile=F',
# '-flagfile=F', and '--flagfile F' or '-flagfile F' on the command line.
DIRECTIVES = ("--flagfile", "-flagfile")

# The byte order mark some editors put at the start of a UTF-8 file.
BOM = "\ufeff"


class FlagfileError(flags.Error):
    """A flagfile, or a line of one, that cannot be used, or a flag that one would
    override; its message is the whole line the program prints after
    ``<program>: error:``."""


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument as absl parses it: from the command line (``top`` None), or a
    line of a flagfile: ``file`` (as named), its ``line`` number, and ``top``, the
    file of the command line's ``--flagfile`` that read it (``file`` itself, or one
    whose lines name ``file``)."""

    text: str
    file: str | None = None
    line: int = 0
    top: str | None = None
    in_record: bool = False  # ``file`` holds a start header: a program wrote it as a run's record

    def place(self) -> str:
        """Where the argument was written: 'line 3 of --flagfile=F', or for a nested
        file 'line 3 of G, read by --flagfile=F'."""
        if self.file == self.top:
            return f"line {self.line} of --flagfile={self.top}"
        return f"line {self.line} of {self.file}, read by --flagfile={self.top}"


def expand(args: Sequence[str]) -> list[Arg]:
    """``args`` (the command line without the program's name) with each ``--flagfile``
    replaced by its file's flag lines, as absl's ``read_flags_from_files`` does: a
    line stripped, blank lines and comments (``#``, ``//``) left out, a nested
    ``--flagfile=`` line read in its place (a relative name from the current folder),
    nothing after a ``--`` read.

    Raises:
      FlagfileError: ``--flagfile`` without a name, a file that cannot be read (a
        folder, a missing file, a denied permission), one that is not UTF-8 text,
        or a nested one that names a file being read.
    """
    expanded: list[Arg] = []
    rest = list(args)
    while rest:
        text = rest.pop(0)
        if text == "--":
            expanded.extend(Arg(t) for t in [text, *rest])
            break
        if text in DIRECTIVES:
            if not rest:
                raise FlagfileError(f"{text} needs a file name ({text}=FILE)")
            name = os.path.expanduser(rest.pop(0))
        elif names_flagfile(text):
            name = os.path.expanduser(text.split("=", 1)[1].strip())
        else:
            expanded.append(Arg(text))
            continue
        if name:  # absl reads nothing for an empty name
            expanded.extend(_file_lines(name, top=name, reading=()))
    return expanded


def names_flagfile(text: str) -> bool:
    """Whether ``text`` is a ``--flagfile`` argument, with its file or before it."""
    return text in DIRECTIVES or text.startswith(tuple(d + "=" for d in DIRECTIVES))


def _file_lines(name: str, top: str, reading: tuple[str, ...],
                named_at: Arg | None = None) -> list[Arg]:
    """The flag lines of the flagfile ``name`` and of those it names, in their place
    (``expand``); ``reading``: the files whose lines are being read, outermost first;
    ``named_at``: the line that names a nested file."""
    where = f"--flagfile={name}" + (f" ({named_at.place()})" if named_at else "")
    if os.path.realpath(name) in {os.path.realpath(r) for r in reading}:
        loop = " -> ".join((*reading, name))
        raise FlagfileError(f"{where} names a file that is being read ({loop}): delete "
                            f"that line")
    raw = _read(name, where, named_at)
    text = _decoded(raw, where)
    in_record = _start_headers(text, where)
    lines = []
    for number, line in enumerate(io.StringIO(text, newline=None).readlines(), start=1):
        # absl's tests, in its order, on the line as read (its line break still on).
        if line.isspace() or line.startswith(("#", "//")):
            continue
        arg = Arg(line.strip(), file=name, line=number, top=top, in_record=in_record)
        if arg.text in DIRECTIVES:  # absl takes a nested file's name on its line only
            raise FlagfileError(f"{arg.place()}: {arg.text} without its file: write "
                                f"--flagfile=FILE on one line")
        if names_flagfile(arg.text):
            nested = os.path.expanduser(arg.text.split("=", 1)[1].strip())
            if nested:
                lines.extend(_file_lines(nested, top, (*reading, name), named_at=arg))
        else:
            lines.append(arg)
    return lines


def _start_headers(text: str, where: str) -> bool:
    """Whether ``text`` holds a start header (``records.is_start_header``): a program
    wrote it as a run's record (flags.txt).

    Refuses a record whose last start header has no flag line under it: cut short
    inside its first start, or its latest start's lines commented out, it sets no
    flag, and the program would run on its defaults without a word (downloading
    CIFAR-10 into /tmp, training into another folder).  No program writes such a
    file: each start's header is followed by its flags.  Refuses too a record whose
    last start was recorded with its completeness mark and lacks its end line
    (``records.announces_end``): cut short inside its flags (``--max_steps=100000``
    cut to ``--max_steps=10``, the last lines gone), it would replay another run.

    Raises:
      FlagfileError: naming the file and the header line.
    """
    header = None  # the line number of the last header with no flag line under it yet
    unended = None  # the line number of the last header whose end line has not come yet
    seen = False
    for number, line in enumerate(io.StringIO(text, newline=None).readlines(), start=1):
        if records.is_start_header(line):
            header, seen = number, True
            unended = number if records.announces_end(line) else None
        elif records.is_end_line(line):
            unended = None
        elif not (line.isspace() or line.startswith(("#", "//"))):  # absl's flag line
            header = None
    fix = "give the run's whole flags.txt, or the flags on the command line"
    if header is not None:
        raise FlagfileError(
            f"{where}: the start it records last (line {header}) has no flag line under it, "
            f"only comments (a record cut short, or its flags commented out), so it sets no "
            f"flag and the program would run on its defaults: {fix}")
    if unended is not None:
        raise FlagfileError(
            f"{where}: the start it records last (line {unended}) is cut short (a disk that "
            f"filled, a copy interrupted): its flags do not reach the line "
            f"\"{records.END_LINE}\" written after them, so it would replay another run: {fix}")
    return seen


def _read(name: str, where: str, named_at: Arg | None) -> bytes:
    """The bytes of the flagfile ``name``; ``where`` names it in an error."""
    try:
        with open(name, "rb") as f:
            return f.read()
    except IsADirectoryError:
        inside = os.path.join(name, records.FLAGS_FILE)
        raise FlagfileError(f"{where} is a folder: name a file of flags, one per line"
                            + (f", such as its {inside}" if os.path.isfile(inside) else "")
                            ) from None
    except FileNotFoundError:
        fix = "name a file of flags, one per line"
        if named_at:
            fix = "fix or delete that line"
            beside = os.path.join(os.path.dirname(named_at.file), name)
            if not os.path.isabs(name) and os.path.isfile(beside):
                fix += (f" (a name in a flagfile is taken from the current folder, not from "
                        f"the file's: write --flagfile={beside})")
        raise FlagfileError(f"{where}: No such file or directory; {fix}") from None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            fix = "make it readable (chmod u+r), or copy it to a file you can read"
        else:
            fix = "name a file of flags, one per line"
        raise FlagfileError(f"{where} cannot be read ({e.strerror or e}); {fix}") from None


def _decoded(raw: bytes, where: str) -> str:
    """``raw`` as text, without a leading byte order mark (which some editors write
    and absl would keep, making the first flag an argument that is no flag); a file
    that is not UTF-8 text (absl would end in a traceback) is an error naming the
    line of the first byte at fault."""
    try:
        text = raw.decode("utf-8").removeprefix(BOM)
        at = text.find("\0")
        if at < 0:
            return text
        problem, good = "a NUL byte", text[:at]
    except UnicodeDecodeError as e:
        problem, good = f"the byte {raw[e.start]:#04x}", raw[:e.start].decode("utf-8")
    line = len(io.StringIO(good + "x", newline=None).readlines())
    raise FlagfileError(f"{where} is not a UTF-8 text file of flags: its line {line} holds "
                        f"{problem}; name a file of flags (UTF-8 text, one flag per line), or "
                        f"fix that line")
