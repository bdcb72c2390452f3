"""Starts N local cifar10-train workers of one job: cifar10-launch under its
former name (docs/multi-machine.md), with the same flags.

    python scripts/launch_workers.py --num_workers=2 -- --synthetic_data --max_steps=200

Run it with the Python the cifar10 package is installed in (.venv/bin/python);
the installed cifar10-launch runs from any shell.
"""

import sys

try:
    from cifar10.cli import launch
except ImportError as e:
    sys.exit(f"launch_workers.py: error: {sys.executable} cannot import the cifar10 package "
             f"({e}); run cifar10-launch, or this script with the Python the package is "
             f"installed in (e.g. .venv/bin/python scripts/launch_workers.py)")

if __name__ == "__main__":
    launch.run()
