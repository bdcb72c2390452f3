"""cifar10.data.imagefiles: the files a command line names; a folder of class folders."""

from __future__ import annotations

import os

import pytest

from cifar10.core.errors import Cifar10Error
from cifar10.data import imagefiles


def make_files(root, names):
    """Empty files under ``root`` (finding images reads names only); {"cat": 3} makes
    cat/0.png .. cat/2.png."""
    if isinstance(names, dict):
        names = [f"{folder}/{i}.png" for folder, count in names.items() for i in range(count)]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")
    return root


def test_folders_are_searched_by_extension_hidden_and_metadata_ones_passed_over(tmp_path):
    make_files(tmp_path, ["b.png", "a.JPG", "sub/c.jpeg", "sub/deeper/d.gif", "e.BMP",
                          "notes.txt", "sub/f.png.txt", "g.jfif", "cat/._1.jpg",
                          "cat/.hidden/2.jpg", "cat/@eaDir/1.jpg/x.jpg", "__MACOSX/cat/._1.jpg",
                          "other/scan.tiff", "left/2.webp", "left/sub/3.TIFF"])
    left_out = []
    found = imagefiles.find_images([str(tmp_path / "other" / "scan.tiff"), str(tmp_path)],
                                   left_out)
    assert found == [str(tmp_path / name) for name in (
        "other/scan.tiff", "a.JPG", "b.png", "e.BMP", "g.jfif", "sub/c.jpeg",
        "sub/deeper/d.gif")]
    assert left_out == [str(tmp_path / "left" / "2.webp"), str(tmp_path / "left/sub/3.TIFF")]
    assert imagefiles.left_out_warning(left_out) == (
        f"left out 2 files of formats it does not read ({left_out[0]}, {left_out[1]}): it "
        f"reads PNG, JPEG, GIF and BMP; convert them to one of those to take them")


def test_a_missing_path_or_link_or_a_folder_without_images_is_an_error(tmp_path):
    with pytest.raises(Cifar10Error, match=f"^no such file or folder: {tmp_path / 'nope.png'}$"):
        imagefiles.find_images([str(tmp_path / "nope.png")])
    (tmp_path / "moved.png").symlink_to("/nonexistent/cat.png")
    with pytest.raises(Cifar10Error, match="moved.png is a link to /nonexistent/cat.png, which "
                                           "does not exist$"):
        imagefiles.find_images([str(tmp_path / "moved.png")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_images([str(tmp_path / "empty")])
    assert str(err.value) == (f"no images (.png, .jpg, .jpeg, .gif, .bmp, .jfif, .jpe) in the "
                              f"folder {tmp_path / 'empty'} or its subfolders")


def test_links_are_followed_and_each_real_folder_and_file_taken_once(tmp_path):
    """A link to a folder above ends the search instead of looping; a file reached by
    two paths (a link, a hard link, a folder given twice) is taken once, under the first;
    - is standard input each time."""
    make_files(tmp_path, ["elsewhere/ship/1.png", "elsewhere/ship/2.png", "cat/a/3.png",
                          "cat/4.png", "cat/5.webp"])
    cat = tmp_path / "cat"
    (cat / "ships").symlink_to(tmp_path / "elsewhere" / "ship")
    (cat / "z_same_ships").symlink_to(tmp_path / "elsewhere" / "ship")
    (cat / "a" / "up").symlink_to(cat)  # a cycle: cat/a/up/a/up/...
    (cat / "copy.png").symlink_to(cat / "4.png")
    (cat / "gone.png").symlink_to(tmp_path / "missing.png")  # broken: decoding says so
    os.link(cat / "a" / "3.png", tmp_path / "hard.png")
    left_out = []
    assert imagefiles.find_images([str(cat), "-", str(cat / "ships"), f"{cat}/./4.png",
                                   str(tmp_path / "hard.png"), str(cat), "-"], left_out) == [
        str(cat / name) for name in ("4.png", "a/3.png", "gone.png", "ships/1.png",
                                     "ships/2.png")] + ["-", "-"]
    assert left_out == [str(cat / "5.webp")]


@pytest.mark.parametrize("train, test", [("train", "val"), ("Train", "validation")])
def test_split_folders_keep_their_split_and_a_test_folder_may_lack_a_class(tmp_path, train,
                                                                           test):
    root = make_files(tmp_path / "photos", {f"{train}/ant": 3, f"{train}/bee": 4,
                                            f"{test}/bee": 2})
    source = imagefiles.find_source(str(root), test_fraction=0.5)
    assert source.layout == (f"Found split folders {train}/ and {test}/: {test}/ is the "
                             f"test set.")
    assert source.class_names == ("ant", "bee") and source.split == (train, test)
    assert [(os.path.relpath(path, root), label) for path, label in source.train] == [
        (f"{train}/ant/{i}.png", 0) for i in range(3)] + [
        (f"{train}/bee/{i}.png", 1) for i in range(4)]
    assert [(os.path.relpath(path, root), label) for path, label in source.test] == [
        (f"{test}/bee/0.png", 1), (f"{test}/bee/1.png", 1)]
    make_files(root, {f"{test}/cow": 1})
    with pytest.raises(Cifar10Error, match=f"{test} has classes that .*{train} lacks: cow; "):
        imagefiles.find_source(str(root))


def test_class_folders_alone_are_split_by_the_test_fraction(tmp_path):
    root = make_files(tmp_path / "photos", {"cat": 12, "dog": 6})
    source = imagefiles.find_source(str(root), test_fraction=1 / 6, seed=1)
    assert source.layout == ("Found class folders and no split folders: 16.7% of each class's "
                             "images, chosen at random, go to the test set (--test_fraction, "
                             "--seed).")
    assert source.class_names == ("cat", "dog")
    assert (len(source.train), len(source.test)) == (10 + 5, 2 + 1)
    assert sorted(source.train + source.test) == sorted(
        [(str(root / "cat" / f"{i}.png"), 0) for i in range(12)]
        + [(str(root / "dog" / f"{i}.png"), 1) for i in range(6)])
    assert imagefiles.find_source(str(root), test_fraction=1 / 6, seed=1) == source


@pytest.mark.parametrize("files, fraction, error", [
    ({"cat": 12, "dog": 6}, 0, "no test images in {root}: --test_fraction=0 gives no image of "
     "any class to the test set; the evaluator needs some: add images, or raise "
     "--test_fraction"),
    ({"cat": 2, "dog": 2}, 0.5, "2 training image(s) in {root}: a data folder needs at least 5, "
     "one per data_batch file; add images"),
    ({"cat": 3, "dog\nx": 3}, 0.5, "a class folder in {root} has a name that the class names "
     "file (batches.meta.txt, one UTF-8 name per line) cannot hold; rename the folder"),
    ({"cat": 3}, 0.5, "{root} has 1 class folder: a classifier needs at least 2 classes, each "
     "in a folder of its own ({root}/cat/*.jpg, {root}/dog/*.jpg, ...)"),
    ({"train/a": 1, "test/a": 1, "val/a": 1}, 0.5, "{root} mixes split folders and class "
     "folders (test/, train/, val/): it can hold either class folders, or train/ beside one "
     "of test/, val/, valid/, validation/ (each holding class folders); move the others out "
     "of it"),
    ({"train/a": 1, "cat": 1}, 0.5, "{root} mixes split folders and class folders (cat/, "
     "train/): it can hold either class folders, or train/ beside one of test/, val/, "
     "valid/, validation/ (each holding class folders); move the others out of it"),
    (None, 0.5, "{root} does not exist: point --image_dir at the folder that holds one folder "
     "of images per class"),
    ("a file", 0.5, "{root} is a file, not a folder: point --image_dir at the folder that "
     "holds one folder of images per class"),
    ({"train/ant": 6, "train/bee": 6, "test": 3}, 0.5, "no test images in {root}: the test "
     "folder holds no image that could be read; the evaluator needs some: add images, or "
     "raise --test_fraction"),
])
def test_layouts_that_cannot_make_a_data_set_are_refused_with_one_line(tmp_path, files,
                                                                       fraction, error):
    root = tmp_path / "photos"
    if files == "a file":
        root.write_bytes(b"")
    elif files:
        make_files(root, files)
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(root), test_fraction=fraction)
    assert str(err.value) == error.format(root=root)


@pytest.mark.parametrize("layout", ["class folders", "split folders"])
def test_images_in_no_class_folder_and_of_formats_not_read_are_named(tmp_path, layout):
    base = tmp_path / "train" if layout == "split folders" else tmp_path
    make_files(tmp_path, {"train/ant": 6, "train/bee": 6, "test/ant": 2} if layout ==
               "split folders" else {"ant": 6, "bee": 6})
    make_files(base, ["stray.jpg", "notes.txt", ".hidden.png", "bee/x.webp"])
    source = imagefiles.find_source(str(tmp_path))
    assert source.unfiled == (str(base / "stray.jpg"),)
    assert source.left_out == (str(base / "bee" / "x.webp"),)
    assert imagefiles.unfiled_warning(source.unfiled) == (
        f"left out 1 image in no class folder ({base / 'stray.jpg'}): a class's images go in its "
        f"folder, {base / '<class>'}/")


def test_a_folder_of_images_is_told_from_other_folders(tmp_path):
    """What the programs use to refuse a folder of images given as another folder."""
    make_files(tmp_path / "photos", ["cat/1.jpg", "train/dog/2.png"])
    make_files(tmp_path / "run", ["flags.txt", "pictures/a.png"])
    assert imagefiles.holds_images(str(tmp_path / "photos"))
    assert not imagefiles.holds_images(str(tmp_path / "run"))  # a program's folder
    assert imagefiles.image_folders(str(tmp_path / "photos")) == ["cat/", "train/"]
