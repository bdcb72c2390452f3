#!/usr/bin/env bash
# Checks cifar10 on this machine's first GPU in at most 10 minutes and prints one table
# (docs/performance.md, "Check a GPU machine"); scripts/gpu_check.py does the work:
#   bash scripts/gpu_check.sh [--quick] [--dir=NEW_FOLDER] [--budget_secs=540]
# Its Python: $PYTHON, else the active virtual environment's, else the clone's .venv.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-}
if [ -z "$python" ] && [ -n "${VIRTUAL_ENV:-}" ]; then python=$VIRTUAL_ENV/bin/python; fi
if [ -z "$python" ] && [ -x "$here/../.venv/bin/python" ]; then python=$here/../.venv/bin/python; fi
exec "${python:-python3}" "$here/gpu_check.py" "$@"
