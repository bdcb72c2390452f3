"""cifar10-train refuses to go on with a run on another kind of data than it was
trained on (generated against real, CIFAR-10 against CIFAR-100, fine against coarse
labels), as the run's latest start recorded it in ``<train_dir>/flags.txt``
(``runs.records``), and to download data for a run trained on another --data_dir
that the start was not given.  No TensorFlow: this runs before it loads.
"""

from __future__ import annotations

import os

from absl import flags

from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.runs import checkpoint_files
from cifar10.runs import records


def refuse_other_kind_of_data(flag_values: flags.FlagValues, run_dir: str) -> None:
    """Raises Cifar10Error when the run in ``run_dir`` (one with checkpoints) was
    trained on another kind of data than ``flag_values`` ask for: going on would train
    weights learned on one kind on the other (after the README's quick start on
    generated data, say, a first run on CIFAR-10 in the same default --train_dir).

    The kind is --synthetic_data, --dataset and, for CIFAR-100, --label.  A changed
    --data_dir of the same kind is a notice of the run's records, not refused here.
    """
    recorded = records.recorded_flags(run_dir)
    if recorded is None or not checkpoint_files.holds_checkpoints(run_dir):
        return
    now = _kind({name: flag_values[name].value
                 for name in ("synthetic_data", "dataset", "label") if name in flag_values})
    before = _kind(recorded)
    if now != before:
        raise Cifar10Error(
            f"--train_dir={run_dir} holds a run trained on {_kind_name(before)}, and this "
            f"start would go on with it on {_kind_name(now)}: pass "
            f"{' '.join(before) or 'no --synthetic_data or --dataset'} to go on with the run, "
            f"or --fresh_start (or another --train_dir) for a new run")


def download_refusal(flag_values: flags.FlagValues, run_dir: str) -> str:
    """The error for a start that would download a data set (``getdata.prepare``'s
    ``no_download``) where the run in ``run_dir`` (one with checkpoints) was trained on
    the data of another --data_dir, which this start was not given: a resume without
    the run's data flags would otherwise fetch CIFAR-10 into the default --data_dir
    and go on with it.  '' when there is no such run, or --data_dir is given."""
    recorded = records.recorded_flags(run_dir)
    if (recorded is None or "data_dir" not in recorded or flag_values["data_dir"].present
            or not checkpoint_files.holds_checkpoints(run_dir)):
        return ""
    theirs, ours = recorded["data_dir"], flag_values["data_dir"].value
    if os.path.realpath(theirs) == os.path.realpath(ours):
        return ""
    source = os.path.join(run_dir, records.FLAGS_FILE)
    title = ff.ARCHIVES[flag_values["dataset"].value].title
    return (f"the run in --train_dir={run_dir} was trained on --data_dir={theirs} ({source}), "
            f"and this start, not given --data_dir, would download {title} into {ours} "
            f"instead: pass --data_dir={theirs} (or --flagfile={source}) to go on with the "
            f"run's data, or --data_dir={ours} to download {title} there")


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
