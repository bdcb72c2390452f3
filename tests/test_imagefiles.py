"""Tests of cifar10.data.imagefiles: which files a command line names."""

from __future__ import annotations

import os

import pytest

from cifar10.data import imagefiles
from cifar10.core.errors import Cifar10Error


def test_files_as_given_and_folders_searched_recursively_by_extension(tmp_path):
    for name in ("b.png", "a.JPG", "sub/c.jpeg", "sub/deeper/d.gif", "e.BMP", "notes.txt",
                 "sub/f.png.txt", "g.jfif", "h.JPE"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "scan.tiff").write_bytes(b"")
    found = imagefiles.find_images([str(tmp_path / "other" / "scan.tiff"), str(tmp_path)])
    assert found == [str(tmp_path / name) for name in (
        "other/scan.tiff", "a.JPG", "b.png", "e.BMP", "g.jfif", "h.JPE", "sub/c.jpeg",
        "sub/deeper/d.gif")]


def test_hidden_files_and_metadata_folders_are_not_images(tmp_path):
    """macOS's ._ copies (beside each image, and in __MACOSX/), hidden folders and a
    Synology NAS's @eaDir thumbnails: none is an image of the folder."""
    for name in ("cat/1.jpg", "cat/._1.jpg", "cat/.hidden/2.jpg", "cat/@eaDir/1.jpg/x.jpg",
                 "__MACOSX/cat/._1.jpg", "cat/sub/3.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert imagefiles.find_images([str(tmp_path)]) == [
        str(tmp_path / "cat" / "1.jpg"), str(tmp_path / "cat" / "sub" / "3.png")]
    hidden = tmp_path / "cat" / "._1.jpg"
    assert imagefiles.find_images([str(hidden)]) == [str(hidden)]  # named: taken as given


def test_a_missing_path_or_a_folder_without_images_is_an_error(tmp_path):
    with pytest.raises(Cifar10Error, match=f"^no such file or folder: {tmp_path / 'nope.png'}$"):
        imagefiles.find_images([str(tmp_path / "nope.png")])
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_images([str(tmp_path)])
    assert str(err.value) == (f"no images (.png, .jpg, .jpeg, .gif, .bmp, .jfif, .jpe) in the folder "
                              f"{tmp_path} or its subfolders")


def test_links_to_folders_are_followed_each_real_folder_and_file_taken_once(tmp_path):
    """A subfolder that is a link is searched (as a class folder that is one is); a
    link to a folder above ends the search there instead of looping; a folder or a file
    reached by two paths is taken once, under the first path in sorted order."""
    for name in ("elsewhere/ship/1.png", "elsewhere/ship/2.png", "cat/a/3.png", "cat/4.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    cat = tmp_path / "cat"
    (cat / "ships").symlink_to(tmp_path / "elsewhere" / "ship")
    (cat / "z_same_ships").symlink_to(tmp_path / "elsewhere" / "ship")
    (cat / "a" / "up").symlink_to(cat)  # a cycle: cat/a/up/a/up/...
    (cat / "copy.png").symlink_to(cat / "4.png")  # the same file twice
    (cat / "gone.png").symlink_to(tmp_path / "missing.png")  # broken: decoding says so
    assert imagefiles.find_images([str(cat)]) == [
        str(cat / name) for name in ("4.png", "a/3.png", "gone.png", "ships/1.png",
                                     "ships/2.png")]
    # Each folder given is searched on its own; a file named is taken as given.
    assert imagefiles.find_images([str(cat / "ships"), str(cat / "copy.png")]) == [
        str(cat / "ships" / "1.png"), str(cat / "ships" / "2.png"), str(cat / "copy.png")]


def test_images_of_formats_not_read_are_listed_as_left_out(tmp_path):
    for name in ("cat/1.jpg", "cat/2.webp", "cat/sub/3.TIFF", "cat/._4.webp", "cat/notes.txt",
                 "cat/Thumbs.db"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    left_out = []
    assert imagefiles.find_images([str(tmp_path)], left_out) == [str(tmp_path / "cat" / "1.jpg")]
    assert left_out == [str(tmp_path / "cat" / "2.webp"), str(tmp_path / "cat" / "sub" / "3.TIFF")]
    assert imagefiles.left_out_warning(left_out) == (
        f"left out 2 files of formats it does not read ({tmp_path / 'cat' / '2.webp'}, "
        f"{tmp_path / 'cat' / 'sub' / '3.TIFF'}): it reads PNG, JPEG, GIF and BMP; convert them "
        f"to one of those to take them")
    assert imagefiles.left_out_warning([]) == ""


def test_a_link_named_to_a_missing_file_says_where_it_points(tmp_path):
    (tmp_path / "moved.png").symlink_to("/nonexistent/cat.png")
    with pytest.raises(Cifar10Error) as error:
        imagefiles.find_images([str(tmp_path / "moved.png")])
    assert str(error.value) == (f"{tmp_path / 'moved.png'} is a link to /nonexistent/cat.png, "
                                f"which does not exist")


def test_a_file_named_or_reached_twice_across_arguments_is_taken_once(tmp_path):
    """Under the first path that names or reaches it, in the order given: a folder
    given twice, a file named and in a folder given, another name of it (./, a link, a
    hard link); an image left out is listed once; - is standard input each time."""
    photos = tmp_path / "photos"
    for name in ("b.png", "a.jpg", "c.webp", "sub/d.png"):
        (photos / name).parent.mkdir(parents=True, exist_ok=True)
        (photos / name).write_bytes(b"")
    (tmp_path / "link.png").symlink_to(photos / "b.png")
    os.link(photos / "a.jpg", tmp_path / "hard.jpg")
    left_out = []
    found = imagefiles.find_images(
        [str(photos / "b.png"), str(photos), "-", str(photos), f"{photos}/./b.png",
         str(tmp_path / "link.png"), str(tmp_path / "hard.jpg"), str(photos / "sub"), "-"],
        left_out)
    assert found == [str(photos / "b.png"), str(photos / "a.jpg"), str(photos / "sub" / "d.png"),
                     "-", "-"]
    assert left_out == [str(photos / "c.webp")]
