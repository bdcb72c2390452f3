"""The command lines of scripts/ (argparse), refused as the programs refuse theirs: a
usage error is one line, ``<script>: error: ...``, and exit status 1 (argparse's own
is a usage message and status 2).  Here, not in scripts/, so that a script finds it
wherever the cifar10 package is importable (``runpy.run_path``, ``python -P`` put no
script folder on sys.path)."""

import argparse

# The exit status of a usage error in the programs (cifar10.cli): 1, as any error's.
USAGE_ERROR = 1


class ArgumentParser(argparse.ArgumentParser):
    """argparse, its errors as the programs give theirs: one line, exit status 1."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
