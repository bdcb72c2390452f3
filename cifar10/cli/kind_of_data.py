"""cifar10-train refuses to go on with a run on another kind of data than it was
trained on (generated against real, CIFAR-10 against CIFAR-100, fine against coarse
labels), as the run's latest start recorded it in ``<train_dir>/flags.txt``
(``runs.records``) or, where that file is missing, empty or holds no data flags, as
the data folder recorded in ``environment.jsonl`` shows it; and to download data for
a run trained on another --data_dir that the start was not given.  No TensorFlow:
this runs before it loads.
"""

from __future__ import annotations

import os

from absl import flags
from absl import logging

from cifar10.cli.flags import pasted
from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.runs import layout
from cifar10.runs import records


def refuse_other_kind_of_data(flag_values: flags.FlagValues, run_dir: str) -> None:
    """Raises Cifar10Error when the run in ``run_dir`` (one with checkpoints) was
    trained on another kind of data than ``flag_values`` ask for: going on would train
    weights learned on one kind on the other (after the README's quick start on
    generated data, say, a first run on CIFAR-10 in the same default --train_dir).

    The kind is --synthetic_data, --dataset and, for CIFAR-100, --label, as the run's
    flags.txt recorded them.  Where it recorded none of them (the file is missing,
    empty or edited), the kind is that of the data folder the run's environment.jsonl
    last recorded (``_folder_kind``), compared with the kind of the data this start
    would read; where neither file tells, one warning says the data was not checked.
    A changed --data_dir of the same kind is a notice of the run's records, not
    refused here.
    """
    if not layout.holds_checkpoints(run_dir):
        return
    now = _kind({name: flag_values[name].value
                 for name in ("synthetic_data", "dataset", "label") if name in flag_values})
    recorded = records.recorded_flags(run_dir) or {}
    if "synthetic_data" not in recorded and "dataset" not in recorded:
        _refuse_other_than_recorded_folder(flag_values, run_dir, now)
        return
    before = _kind(recorded)
    if now != before:
        raise Cifar10Error(
            f"--train_dir={run_dir} holds a run trained on {_kind_name(before)}, and this "
            f"start would go on with it on {_kind_name(now)}: pass "
            f"{' '.join(before) or 'no --synthetic_data or --dataset'} to go on with the run, "
            f"or --fresh_start (or another --train_dir) for a new run")


def _refuse_other_than_recorded_folder(flag_values: flags.FlagValues, run_dir: str,
                                       now: tuple[str, ...]) -> None:
    """``refuse_other_kind_of_data`` where the run's flags.txt records no data flags:
    the kind ``now`` that this start asks for (or, with no flag of a kind, that of the
    data folder it would read) against that of the data folder the run's
    environment.jsonl last recorded; a warning where neither file tells."""
    folder = _recorded_data_folder(run_dir)
    if folder is None:
        logging.warning(
            "--train_dir=%s holds checkpoints, but neither its %s nor its %s records "
            "the data the run was trained on (missing or empty): this start's data is "
            "not checked against the run's", run_dir, records.FLAGS_FILE,
            records.ENVIRONMENT_FILE)
        return
    before = _folder_kind(folder)
    if not now and flag_values["dataset"].value == ff.CIFAR10.name:
        found = datafolder.find_batches_dir(flag_values["data_dir"].value)
        now = _folder_kind(found) if found else ()
    if now != before:
        raise Cifar10Error(
            f"--train_dir={run_dir} holds a run trained on {_kind_name(before)} in "
            f"{folder} (its {records.ENVIRONMENT_FILE}; its {records.FLAGS_FILE} is "
            f"missing, empty or holds no data flags), and this start would go on with it "
            f"on {_kind_name(now)}: pass {_flags_for(before, folder)} to go on with the run, "
            f"or --fresh_start (or another --train_dir) for a new run")


def _recorded_data_folder(run_dir: str) -> str | None:
    """The data folder of the run's latest start, as its environment.jsonl recorded it
    (``settings``' ``data_dir``: the ``cifar-10-batches-bin`` folder read), or None."""
    record = records.last_record(run_dir) or {}
    settings = record.get("settings")
    folder = settings.get("data_dir") if isinstance(settings, dict) else None
    return folder if isinstance(folder, str) and folder else None


def _folder_kind(batches_dir: str) -> tuple[str, ...]:
    """The kind of data of a data folder (as ``_kind`` names it), from where it is
    and what it holds: generated data where it is --synthetic_data's folder
    (``<data_dir>/synthetic/cifar-10-batches-bin``) or holds the generated data's
    marker, CIFAR-100's where it is a folder made from it for a label, else CIFAR-10
    or data of its format."""
    path = os.path.normpath(batches_dir)
    parent, name = os.path.split(path)
    if ((name == ff.BATCHES_DIRNAME and os.path.basename(parent) == getdata.SYNTHETIC_SUBDIR)
            or synthetic.is_synthetic(path)):
        return ("--synthetic_data",)
    for label, made in ff.CIFAR100_BATCHES_DIRS.items():
        if name == made:
            return ("--dataset=cifar100", f"--label={label}")
    return ()


def _flags_for(kind: tuple[str, ...], batches_dir: str) -> str:
    """The flags that read ``batches_dir`` again, as data of ``kind``."""
    parent, name = os.path.split(os.path.normpath(batches_dir))
    if kind == ("--synthetic_data",) and os.path.basename(parent) == getdata.SYNTHETIC_SUBDIR:
        return f"--synthetic_data {pasted('data_dir', os.path.dirname(parent))}"
    if kind and kind[0] == "--dataset=cifar100":
        return f"{' '.join(kind)} {pasted('data_dir', parent)}"
    data_dir = parent if name == ff.BATCHES_DIRNAME else batches_dir
    return pasted("data_dir", data_dir) + ("" if kind else " (no --synthetic_data or --dataset)")


def download_refusal(flag_values: flags.FlagValues, run_dir: str) -> str:
    """The error for a start that would download a data set (``getdata.prepare``'s
    ``no_download``) where the run in ``run_dir`` (one with checkpoints) was trained on
    the data of another --data_dir, which this start was not given: a resume without
    the run's data flags would otherwise fetch CIFAR-10 into the default --data_dir
    and go on with it.  '' when there is no such run, or --data_dir is given."""
    recorded = records.recorded_flags(run_dir)
    if (recorded is None or "data_dir" not in recorded or flag_values["data_dir"].present
            or not layout.holds_checkpoints(run_dir)):
        return ""
    theirs, ours = recorded["data_dir"], flag_values["data_dir"].value
    if os.path.realpath(theirs) == os.path.realpath(ours):
        return ""
    source = os.path.join(run_dir, records.FLAGS_FILE)
    title = ff.ARCHIVES[flag_values["dataset"].value].title
    return (f"the run in --train_dir={run_dir} was trained on --data_dir={theirs} ({source}), "
            f"and this start, not given --data_dir, would download {title} into {ours} "
            f"instead: pass {pasted('data_dir', theirs)} (or {pasted('flagfile', source)}) to go "
            f"on with the run's data, or {pasted('data_dir', ours)} to download {title} there")


def _kind(values: dict) -> tuple[str, ...]:
    """The flags that name a kind of data, from flag values or a run's record."""
    if str(values.get("synthetic_data", "false")).lower() == "true":
        return ("--synthetic_data",)
    if values.get("dataset", "cifar10") == "cifar100":
        return ("--dataset=cifar100", f"--label={values.get('label', 'fine')}")
    return ()


def _kind_name(kind: tuple[str, ...]) -> str:
    if kind == ("--synthetic_data",):
        return "generated data (--synthetic_data)"
    if kind:
        return f"CIFAR-100's {kind[1].split('=')[1]} labels ({' '.join(kind)})"
    return "CIFAR-10 or data of its format (no --synthetic_data or --dataset)"
