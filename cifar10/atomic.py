"""Folders that appear whole: written under a temporary name, renamed when complete.

A reader (a trainer finding its data, TensorFlow Serving polling for versions)
never sees half of one, and a failure or an interruption leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def new_folder(target: str) -> Iterator[str]:
    """Yields a scratch folder beside ``target``, renamed to ``target`` when the block ends.

    The scratch folder gets the usual permissions (0777 less the umask), not
    those of a private temporary folder.  If the block raises, it is removed.

    Raises:
      OSError: the scratch folder cannot be made, or the rename fails.
    """
    parent = os.path.dirname(target) or "."
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-incomplete-", dir=parent)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(scratch, 0o777 & ~mask)
        yield scratch
        os.rename(scratch, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
