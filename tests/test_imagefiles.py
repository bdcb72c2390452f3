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


def make_files(root, counts):
    """Empty image files: {"train/ant": 3, ...} makes root/train/ant/0.png .. 2.png
    (finding the images reads names only)."""
    for folder, count in counts.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (root / folder / f"{i}.png").write_bytes(b"")
    return root


@pytest.mark.parametrize("train, test", [("train", "test"), ("train", "val"),
                                         ("train", "valid"), ("train", "validation"),
                                         ("Train", "Val")])
def test_split_folders_keep_their_split_and_say_which_is_the_test_set(tmp_path, train, test):
    root = make_files(tmp_path / "photos", {f"{train}/ant": 3, f"{train}/bee": 4,
                                            f"{test}/ant": 1, f"{test}/bee": 2})
    source = imagefiles.find_source(str(root), test_fraction=0.5)
    assert source.layout == (f"Found split folders {train}/ and {test}/: {test}/ is the "
                             f"test set.")
    assert source.class_names == ("ant", "bee")
    assert [(os.path.relpath(path, root), label) for path, label in source.train] == [
        (f"{train}/ant/{i}.png", 0) for i in range(3)] + [
        (f"{train}/bee/{i}.png", 1) for i in range(4)]
    assert [(os.path.relpath(path, root), label) for path, label in source.test] == [
        (f"{test}/ant/0.png", 0), (f"{test}/bee/0.png", 1), (f"{test}/bee/1.png", 1)]


def test_a_test_folder_may_lack_a_class_but_not_add_one(tmp_path):
    root = make_files(tmp_path / "photos", {"train/ant": 3, "train/bee": 2, "val/bee": 1})
    source = imagefiles.find_source(str(root))
    assert [label for _, label in source.test] == [1]
    make_files(root, {"val/cow": 1})
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(root))
    assert str(err.value) == (f"{root / 'val'} has classes that {root / 'train'} lacks: cow; "
                              f"add their training images to {root / 'train'}, or move them "
                              f"out of {root / 'val'}")


def test_a_test_class_that_differs_from_a_training_class_only_in_case_is_named_so(tmp_path):
    """Cat/ beside cat/ would be a class of its own: the error says to rename one."""
    root = make_files(tmp_path / "sp", {"Train/cat": 2, "Train/dog": 2, "Train/ant": 2,
                                        "VAL/Cat": 1, "VAL/DOG": 1, "VAL/cow": 1})
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(root))
    assert str(err.value) == (
        f"{root / 'VAL'} has classes that {root / 'Train'} lacks: Cat, DOG, cow; Cat (in VAL/) "
        f"differs from cat (in Train/) only in case, as does DOG: rename one of each pair so "
        f"that the names match; for the others, add their training images to "
        f"{root / 'Train'}, or move them out of {root / 'VAL'}")


@pytest.mark.parametrize("fraction, layout, counts", [
    (1 / 6, "16.7% of each class's images, chosen at random, go to the test set "
            "(--test_fraction, --seed)", (10 + 5, 2 + 1)),
    (0.5, "50% of each class's images, chosen at random, go to the test set "
          "(--test_fraction, --seed)", (6 + 3, 6 + 3)),
])
def test_class_folders_alone_are_split_by_the_test_fraction(tmp_path, fraction, layout,
                                                            counts):
    root = make_files(tmp_path / "photos", {"cat": 12, "dog": 6})
    source = imagefiles.find_source(str(root), test_fraction=fraction, seed=1)
    assert source.layout == f"Found class folders and no split folders: {layout}."
    assert source.class_names == ("cat", "dog")
    assert (len(source.train), len(source.test)) == counts
    assert sorted(source.train + source.test) == sorted(
        [(str(root / "cat" / f"{i}.png"), 0) for i in range(12)]
        + [(str(root / "dog" / f"{i}.png"), 1) for i in range(6)])
    assert imagefiles.find_source(str(root), test_fraction=fraction, seed=1) == source


@pytest.mark.parametrize("files, fraction, error", [
    ({"cat": 12, "dog": 6}, 0, "no test images in {root}: --test_fraction=0 gives no image of "
     "any class to the test set; the evaluator needs some: add images, or raise "
     "--test_fraction"),
    ({"cat": 2, "dog": 2}, 1 / 6, "no test images in {root}: --test_fraction=0.166667 gives no "
     "image of any class to the test set; the evaluator needs some: add images, or raise "
     "--test_fraction"),
    ({"cat": 2, "dog": 2}, 0.5, "2 training image(s) in {root}: a data folder needs at least 5, "
     "one per data_batch file; add images"),
    ({"train/cat": 4, "train/dog": 4, "test/cat": 1, "test/dog": 1}, 0, None),
    ({"cat": 3, "dog\nx": 3}, 0.5, "class folder b'dog\\nx' in {root}: its name holds a line "
     "break, a space at an end or bytes that are not UTF-8, which the class names file "
     "(batches.meta.txt, one UTF-8 name per line) cannot hold; rename the folder"),
])
def test_too_few_images_and_unstorable_class_names_are_refused(tmp_path, files, fraction,
                                                               error):
    root = make_files(tmp_path / "photos", files)
    if error is None:  # split folders: the fraction does not apply
        assert len(imagefiles.find_source(str(root), test_fraction=fraction).test) == 2
        return
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(root), test_fraction=fraction)
    assert str(err.value) == error.format(root=root)


@pytest.mark.parametrize("folders, error", [
    (["train/a", "test/a", "val/a"],
     "{root} has both test/ and val/: which one is the test set is unclear; keep one and "
     "move the others out of {root}"),
    (["train/a", "test/a", "valid/a", "validation/a"],
     "{root} has test/, valid/ and validation/: which one is the test set is unclear; keep "
     "one and move the others out of {root}"),
    (["train/a", "val/a", "cat", "dog"],
     "{root} has train/ beside other folders (cat, dog): it can hold split folders or class "
     "folders, not both; move one or the other out of it"),
    (["train/a", "train/b"],
     "{root} has train/ but no test/, val/, valid/ or validation/ beside it: add the test "
     "images as {root}/test/<class>/, or point --image_dir at {root}/train to split its "
     "classes by --test_fraction"),
    (["val/a", "cat"],
     "{root} has val/ but no train/ beside it: put the training images in "
     "{root}/train/<class>/, or rename val/ if it is a class"),
])
def test_ambiguous_layouts_are_refused_with_one_line(tmp_path, folders, error):
    root = make_files(tmp_path / "photos", {folder: 1 for folder in folders})
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(root))
    assert str(err.value) == error.format(root=root)


def test_a_test_folder_without_labelled_images_is_refused(tmp_path):
    """Kaggle's layout: test/ holds unlabelled images, which cannot be a test set."""
    root = make_files(tmp_path / "photos", {"train/ant": 2, "train/bee": 2, "test": 3})
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(root))
    assert str(err.value) == (
        f"{root}/test holds no images in class folders: put the test images in "
        f"{root}/test/<class>/ as in {root}/train, or point --image_dir at {root}/train to "
        f"split its classes by --test_fraction")


def test_an_image_dir_that_is_missing_or_a_file_is_named(tmp_path):
    advice = "point --image_dir at the folder that holds one folder of images per class"
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(tmp_path / "missing"))
    assert str(err.value) == f"{tmp_path / 'missing'} does not exist: {advice}"
    (tmp_path / "a.png").write_bytes(b"")
    with pytest.raises(Cifar10Error) as err:
        imagefiles.find_source(str(tmp_path / "a.png"))
    assert str(err.value) == f"{tmp_path / 'a.png'} is a file, not a folder: {advice}"


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


def test_a_class_gathered_by_a_link_to_a_subfolder_keeps_its_images(tmp_path):
    make_files(tmp_path / "src", {"ship": 30})
    make_files(tmp_path / "p", {"a/real": 6, "b": 6})
    (tmp_path / "p" / "b" / "sub").symlink_to(tmp_path / "src" / "ship")
    (tmp_path / "p" / "c").symlink_to(tmp_path / "src" / "ship")
    source = imagefiles.find_source(str(tmp_path / "p"), test_fraction=0.5)
    assert source.class_names == ("a", "b", "c")
    assert len(source.train) + len(source.test) == 6 + 36 + 30


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


@pytest.mark.parametrize("layout", ["class folders", "split folders"])
def test_images_in_no_class_folder_and_of_formats_not_read_are_named(tmp_path, layout):
    base = tmp_path / "train" if layout == "split folders" else tmp_path
    make_files(tmp_path, {"train/ant": 6, "train/bee": 6, "test/ant": 2} if layout ==
               "split folders" else {"ant": 6, "bee": 6})
    for name in ("stray.jpg", "notes.txt", ".hidden.png", "bee/x.webp"):
        (base / name).write_bytes(b"")
    source = imagefiles.find_source(str(tmp_path))
    assert source.unfiled == (str(base / "stray.jpg"),)
    assert source.left_out == (str(base / "bee" / "x.webp"),)
    assert imagefiles.unfiled_warning(source.unfiled) == (
        f"left out 1 image in no class folder ({base / 'stray.jpg'}): a class's images go in its "
        f"folder, {base / '<class>'}/")


def test_a_link_named_to_a_missing_file_says_where_it_points(tmp_path):
    (tmp_path / "moved.png").symlink_to("/nonexistent/cat.png")
    with pytest.raises(Cifar10Error) as error:
        imagefiles.find_images([str(tmp_path / "moved.png")])
    assert str(error.value) == (f"{tmp_path / 'moved.png'} is a link to /nonexistent/cat.png, "
                                f"which does not exist")
