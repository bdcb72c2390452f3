"""Tests of cifar10.imagefiles: which files a command line names."""

from __future__ import annotations

import pytest

from cifar10 import imagefiles
from cifar10.errors import Cifar10Error


def test_files_as_given_and_folders_searched_recursively_by_extension(tmp_path):
    for name in ("b.png", "a.JPG", "sub/c.jpeg", "sub/deeper/d.gif", "e.BMP", "notes.txt",
                 "sub/f.png.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "scan.tiff").write_bytes(b"")
    found = imagefiles.find_images([str(tmp_path / "other" / "scan.tiff"), str(tmp_path)])
    assert found == [str(tmp_path / name) for name in (
        "other/scan.tiff", "a.JPG", "b.png", "e.BMP", "sub/c.jpeg", "sub/deeper/d.gif")]


def test_a_missing_path_or_a_folder_without_images_is_an_error(tmp_path):
    with pytest.raises(Cifar10Error, match=f"^no such file or folder: {tmp_path / 'nope.png'}$"):
        imagefiles.find_images([str(tmp_path / "nope.png")])
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_images([str(tmp_path)])
    assert str(err.value) == (f"no images (.png, .jpg, .jpeg, .gif, .bmp) in the folder "
                              f"{tmp_path} or its subfolders")
