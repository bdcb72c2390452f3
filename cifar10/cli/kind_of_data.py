"""cifar10-train refuses to go on with a run on another kind of data than it was
trained on (generated against real, CIFAR-10 against CIFAR-100, fine against coarse
labels), as the run's latest start recorded it in ``<train_dir>/flags.txt``
(``runs.records``).  No TensorFlow: this runs before it loads.
"""

from __future__ import annotations

from absl import flags

from cifar10.core.errors import Cifar10Error
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
