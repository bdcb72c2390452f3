"""The rules flags keep together, which absl checks once they are parsed: the data
flags' of cifar10-train and cifar10-eval (``DATA_RULES``; cifar10-eval checks them
once it has taken the data flags of the run it scores, ``follow``), and the settings
that exclude each other two by two (``EXCLUSIVE_PAIRS``).  ``flags`` registers them.
Nothing here loads TensorFlow.
"""

from __future__ import annotations

from typing import Any

from absl import flags

from cifar10.core import config
from cifar10.data import fileformat as ff


# Rules the data flags keep together: (flags, rule on their values, what breaks it).
DATA_RULES = (
    (("dataset", "label"), lambda v: v["dataset"] == ff.CIFAR100.name or v["label"] == "fine",
     "--label=coarse applies to --dataset=cifar100 only"),
    (("dataset", "synthetic_data"),
     lambda v: not (v["dataset"] == ff.CIFAR100.name and v["synthetic_data"]),
     "--synthetic_data generates CIFAR-10-format data: drop --dataset=cifar100 or "
     "--synthetic_data"),
)


def broken_data_rule(flag_values: flags.FlagValues) -> str | None:
    """The message of the first of ``DATA_RULES`` the flags' values break ('--label=coarse
    applies to --dataset=cifar100 only', as ``flag_errors.flag_error_text`` words a rule absl
    checks), or None."""
    for names, rule, message in DATA_RULES:
        if not rule({name: flag_values[name].value for name in names}):
            return message
    return None


# Settings that exclude each other, two by two: (their flags, the error that says so).
EXCLUSIVE_PAIRS = (
    (("use_fp16", "use_bf16"), config.PRECISION_CONFLICT),
    (("deterministic", "xla"), config.DETERMINISTIC_XLA_CONFLICT),
)


def not_both(values: dict[str, Any]) -> bool:
    """One pair of ``EXCLUSIVE_PAIRS``' rule: not both set."""
    return not all(values.values())
