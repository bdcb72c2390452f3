"""The cifar10-train flags given to cifar10-launch (after its ``--``): checked, and
the workers' data fetched, once, before any worker starts; and the launcher's hint
for a trainer's flag given before the ``--``.  Nothing here loads TensorFlow.
"""

from __future__ import annotations

import copy
import shlex
from typing import Sequence

from absl import flags
from absl import logging  # defines absl's --verbosity and the like

from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import kind_of_data
from cifar10.cli import outdirs
from cifar10.cli import writable
from cifar10.cli.workers import TRAINER
from cifar10.core import machine
from cifar10.core.errors import Cifar10Error
from cifar10.data import getdata
from cifar10.distribute import cluster
from cifar10.runs import layout

# Flags every program takes from absl (its help flags are answered before parsing).
_ABSL_MODULES = (logging.__name__,)
_HELP = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def check_train_args(args: Sequence[str], num_workers: int) -> flags.FlagValues:
    """Refuses, before any worker starts, what every worker would refuse (each with
    the same line) or what would not make one job; returns the workers' flags.

    Raises:
      Cifar10Error: a flag mistake, as cifar10-train's parse refuses it
        (``flagfiles.parse``); an argument that is not a flag; ``--help``;
        a ``--batch_size`` past memory; a ``--train_dir`` that is an evaluator's
        folder, holds data or is the --data_dir too (``outdirs``), cannot be made or
        written (``writable``), or whose lock file is a folder (``lock``); with
        several workers, a ``--strategy`` other than auto or multi_worker, or
        ``--fresh_start``.
    """
    if any(arg.split("=")[0] in _HELP for arg in args):
        raise Cifar10Error(f"{TRAINER} --help lists the flags that go after --")
    values = flags.FlagValues()
    cifar10_flags.define_train_flags(values)
    for module in _ABSL_MODULES:
        for flag in flags.FLAGS.get_flags_for_module(module):
            # A copy: parsing here leaves this process's own settings alone.
            values[flag.name] = copy.deepcopy(flag)
    try:
        rest = flagfiles.parse(values, [TRAINER, *args], TRAINER)
    except flags.Error as e:
        message = cifar10_flags.flag_error_text(e)
        raise Cifar10Error(f"{TRAINER}'s flags (after --): {message} (see {TRAINER} "
                           f"--help)") from None
    if len(rest) > 1:
        raise Cifar10Error(f"unexpected arguments for {TRAINER}: {' '.join(rest[1:])} (after "
                           f"-- come its flags only, e.g. -- --max_steps=300)")
    # Each worker would refuse these in the same words: said once here instead.
    machine.refuse_batch_beyond_memory(
        values["batch_size"].value, 2 if values["use_bf16"].value or values["use_fp16"].value
        else 4)
    outdirs.refuse_output_as_data_dir("train_dir", values["train_dir"].value,
                                      values["data_dir"].value)
    outdirs.refuse_foreign_train_dir(values["train_dir"].value)
    writable.refuse_unwritable("train_dir", values["train_dir"].value)
    layout.refuse_a_folder_for_the_file(values["train_dir"].value)
    if num_workers > 1:
        if values["strategy"].value not in ("auto", "multi_worker"):
            raise Cifar10Error(f"--strategy={values['strategy'].value} would have each worker "
                               f"train on its own, all in one --train_dir: drop it, the "
                               f"workers of one job use multi_worker")
        if values["fresh_start"].value:
            cluster.refuse_fresh_start("multi_worker", values["train_dir"].value)
    return values


def fetch_data(values: flags.FlagValues) -> None:
    """The workers' data (``values``: their flags) found, or downloaded and extracted
    once, and checked, before any worker starts: each worker would otherwise fetch a
    missing --data_dir itself, all at once, and a data mistake would be each worker's
    error.  Its notes are left to the workers, who find the data and say them.

    Raises:
      Cifar10Error: the run in --train_dir was trained on another kind of data, or
        would download data for a run trained on another --data_dir not given, or the
        data cannot be fetched or is damaged (what ``getdata.prepare`` made for a
        failed fetch is removed).
    """
    no_download = ""
    if not values["fresh_start"].value:
        kind_of_data.refuse_other_kind_of_data(values, values["train_dir"].value)
        no_download = kind_of_data.download_refusal(values, values["train_dir"].value)
    outdirs.refuse_run_as_data_dir(values["data_dir"].value)
    getdata.prepare(values["data_dir"].value, url=values["data_url"].value,
                    md5=values["data_md5"].value, use_synthetic=values["synthetic_data"].value,
                    synthetic_records=values["synthetic_records"].value,
                    dataset=values["dataset"].value, label=values["label"].value,
                    print_fn=lambda line: None, no_download=no_download)


def trainers_flag_hint(error: flags.Error, argv: list[str], program: str) -> str | None:
    """The launcher's error for a flag of cifar10-train's given before the ``--`` that
    its own flags end with (moved after it, its value with it), or None."""
    if not isinstance(error, flags.UnrecognizedFlagError):
        return None
    trainer = flags.FlagValues()
    cifar10_flags.define_train_flags(trainer)
    name = error.flagname[2:] if error.flagname.startswith("no") and \
        error.flagname[2:] in trainer else error.flagname
    if name not in trainer:
        return None
    own = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    at = next((i for i, arg in enumerate(own) if arg.lstrip("-").split("=")[0] == error.flagname),
              None)
    if at is None:
        return None
    # Its value may be the next argument (--max_steps 5), as absl takes it.
    width = 2 if ("=" not in own[at] and not trainer[name].boolean and at + 1 < len(own)) else 1
    given = own[at:at + width]
    after = argv[argv.index("--") + 1:] if "--" in argv else []
    return (f"{' '.join(given)} is cifar10-train's flag: put it after --, as in "
            f"{shlex.join([program, *own[:at], *own[at + width:], '--', *after, *given])}")
