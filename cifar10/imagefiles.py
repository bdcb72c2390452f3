"""Image files named on a command line: files as given, folders searched.

Kept free of TensorFlow, so that a program can check its arguments before
loading it.
"""

from __future__ import annotations

import os
from typing import Sequence

from cifar10.errors import Cifar10Error

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")


def find_images(paths: Sequence[str]) -> list[str]:
    """The image files named by ``paths``: files as given, folders searched recursively.

    In folders only files ending in one of ``IMAGE_EXTENSIONS`` (any case) are
    taken, in sorted order; a file named directly is taken whatever its name.

    Raises:
      Cifar10Error: a path does not exist, or a folder holds no image.
    """
    found = []
    for path in paths:
        if os.path.isdir(path):
            images = sorted(
                os.path.join(root, name)
                for root, _, names in os.walk(path) for name in names
                if name.lower().endswith(IMAGE_EXTENSIONS))
            if not images:
                raise Cifar10Error(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in the folder "
                                   f"{path} or its subfolders")
            found.extend(images)
        elif os.path.exists(path):
            found.append(path)
        else:
            raise Cifar10Error(f"no such file or folder: {path}")
    return found
