"""Tests of cifar10.data.classfolders: the classes and images of a folder of class
folders, and their split into training and test."""

from __future__ import annotations

import os

import pytest

from cifar10.data import classfolders
from cifar10.data import imagefiles
from cifar10.core.errors import Cifar10Error


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
    source = classfolders.find_source(str(root), test_fraction=0.5)
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
    source = classfolders.find_source(str(root))
    assert [label for _, label in source.test] == [1]
    make_files(root, {"val/cow": 1})
    with pytest.raises(Cifar10Error) as err:
        classfolders.find_source(str(root))
    assert str(err.value) == (f"{root / 'val'} has classes that {root / 'train'} lacks: cow; "
                              f"add their training images to {root / 'train'}, or move them "
                              f"out of {root / 'val'}")


def test_a_test_class_that_differs_from_a_training_class_only_in_case_is_named_so(tmp_path):
    """Cat/ beside cat/ would be a class of its own: the error says to rename one."""
    root = make_files(tmp_path / "sp", {"Train/cat": 2, "Train/dog": 2, "Train/ant": 2,
                                        "VAL/Cat": 1, "VAL/DOG": 1, "VAL/cow": 1})
    with pytest.raises(Cifar10Error) as err:
        classfolders.find_source(str(root))
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
    source = classfolders.find_source(str(root), test_fraction=fraction, seed=1)
    assert source.layout == f"Found class folders and no split folders: {layout}."
    assert source.class_names == ("cat", "dog")
    assert (len(source.train), len(source.test)) == counts
    assert sorted(source.train + source.test) == sorted(
        [(str(root / "cat" / f"{i}.png"), 0) for i in range(12)]
        + [(str(root / "dog" / f"{i}.png"), 1) for i in range(6)])
    assert classfolders.find_source(str(root), test_fraction=fraction, seed=1) == source


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
        assert len(classfolders.find_source(str(root), test_fraction=fraction).test) == 2
        return
    with pytest.raises(Cifar10Error) as err:
        classfolders.find_source(str(root), test_fraction=fraction)
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
        classfolders.find_source(str(root))
    assert str(err.value) == error.format(root=root)


def test_a_test_folder_without_labelled_images_is_refused(tmp_path):
    """Kaggle's layout: test/ holds unlabelled images, which cannot be a test set."""
    root = make_files(tmp_path / "photos", {"train/ant": 2, "train/bee": 2, "test": 3})
    with pytest.raises(Cifar10Error) as err:
        classfolders.find_source(str(root))
    assert str(err.value) == (
        f"{root}/test holds no images in class folders: put the test images in "
        f"{root}/test/<class>/ as in {root}/train, or point --image_dir at {root}/train to "
        f"split its classes by --test_fraction")


def test_an_image_dir_that_is_missing_or_a_file_is_named(tmp_path):
    advice = "point --image_dir at the folder that holds one folder of images per class"
    with pytest.raises(Cifar10Error) as err:
        classfolders.find_source(str(tmp_path / "missing"))
    assert str(err.value) == f"{tmp_path / 'missing'} does not exist: {advice}"
    (tmp_path / "a.png").write_bytes(b"")
    with pytest.raises(Cifar10Error) as err:
        classfolders.find_source(str(tmp_path / "a.png"))
    assert str(err.value) == f"{tmp_path / 'a.png'} is a file, not a folder: {advice}"


def test_a_class_gathered_by_a_link_to_a_subfolder_keeps_its_images(tmp_path):
    make_files(tmp_path / "src", {"ship": 30})
    make_files(tmp_path / "p", {"a/real": 6, "b": 6})
    (tmp_path / "p" / "b" / "sub").symlink_to(tmp_path / "src" / "ship")
    (tmp_path / "p" / "c").symlink_to(tmp_path / "src" / "ship")
    source = classfolders.find_source(str(tmp_path / "p"), test_fraction=0.5)
    assert source.class_names == ("a", "b", "c")
    assert len(source.train) + len(source.test) == 6 + 36 + 30


@pytest.mark.parametrize("layout", ["class folders", "split folders"])
def test_images_in_no_class_folder_and_of_formats_not_read_are_named(tmp_path, layout):
    base = tmp_path / "train" if layout == "split folders" else tmp_path
    make_files(tmp_path, {"train/ant": 6, "train/bee": 6, "test/ant": 2} if layout ==
               "split folders" else {"ant": 6, "bee": 6})
    for name in ("stray.jpg", "notes.txt", ".hidden.png", "bee/x.webp"):
        (base / name).write_bytes(b"")
    source = classfolders.find_source(str(tmp_path))
    assert source.unfiled == (str(base / "stray.jpg"),)
    assert source.left_out == (str(base / "bee" / "x.webp"),)
    assert imagefiles.unfiled_warning(source.unfiled) == (
        f"left out 1 image in no class folder ({base / 'stray.jpg'}): a class's images go in its "
        f"folder, {base / '<class>'}/")
