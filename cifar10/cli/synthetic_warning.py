"""cifar10-predict's and cifar10-export's warning that the model they are given was
trained on generated data.  No TensorFlow."""

from __future__ import annotations

import os

from absl import logging

from cifar10.runs import records


def warn_if_trained_on_synthetic_data(run_dir: str) -> None:
    """One warning when the run in ``run_dir`` recorded --synthetic_data: what
    cifar10-predict and cifar10-export make of its model says nothing about real
    images, as everything the evaluator shows of such a run says SYNTHETIC."""
    recorded = records.recorded_flags(run_dir)
    if recorded is not None and recorded.get("synthetic_data") == "true":
        logging.warning("the model of %s was trained on SYNTHETIC data (--synthetic_data in "
                        "%s): its classes say nothing about real images", run_dir,
                        os.path.join(run_dir, records.FLAGS_FILE))
