"""Tests of cifar10.data.prepare and the cifar10-prepare command."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import cli
import numpy as np
import pytest
import tensorflow as tf
from cli import call

from cifar10.core.errors import Cifar10Error
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.data import imagefiles
from cifar10.data import images as image_files
from cifar10.data import prepare
from cifar10.data import synthetic


def write_png(path, image):
    path.parent.mkdir(parents=True, exist_ok=True)
    tf.io.write_file(str(path), tf.io.encode_png(image))


def class_image(label, index):
    """A 32x32 image whose pixels say its class and number (so records can be traced)."""
    image = np.zeros((32, 32, 3), np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = label * 20, index, 255 - index
    return image


@pytest.fixture
def image_dir(tmp_path):
    """Three classes (bird: 12 images, cat: 6, dog: 18), 32x32 PNGs."""
    root = tmp_path / "photos"
    for label, (name, count) in enumerate([("bird", 12), ("cat", 6), ("dog", 18)]):
        for i in range(count):
            write_png(root / name / f"{i:02d}.png", class_image(label, i))
    return root


def records(batches_dir, names):
    """(labels [n], uint8 images [n, 32, 32, 3]) of the records in ``names``."""
    raw = b"".join(open(os.path.join(batches_dir, n), "rb").read() for n in names)
    rows = np.frombuffer(raw, np.uint8).reshape(-1, ff.RECORD_BYTES)
    return rows[:, 0], rows[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def test_class_folders_become_cifar_files_split_per_class(image_dir, tmp_path):
    write_png(image_dir / "cat" / "large.png", np.full((64, 48, 3), 90, np.uint8))
    source = imagefiles.find_source(str(image_dir), test_fraction=1 / 6, seed=3)
    assert source.class_names == ("bird", "cat", "dog")
    summary = prepare.convert(source, str(tmp_path / "data"), seed=3)
    batches_dir = str(tmp_path / "data" / ff.BATCHES_DIRNAME)
    assert (summary.batches_dir, summary.train_records, summary.test_records,
            summary.skipped) == (batches_dir, 31, 6, ())
    assert sorted(os.listdir(batches_dir)) == sorted([*ff.TRAIN_FILES, *ff.TEST_FILES,
                                                      ff.META_FILE])
    assert datafolder.class_names(batches_dir) == ("bird", "cat", "dog")
    # The trainer's own checks take it.
    assert datafolder.validate_files(datafolder.split_files(batches_dir, "train"), 3) == 31
    labels, images = records(batches_dir, ff.TRAIN_FILES)
    test_labels, test_images = records(batches_dir, ff.TEST_FILES)
    # Every image once, with its own label, in the record layout (label, R, G, B planes);
    # the large one area-averaged.
    all_labels = np.concatenate([labels, test_labels])
    all_images = np.concatenate([images, test_images])
    large = [np.array_equal(image, np.full((32, 32, 3), 90)) for image in all_images]
    assert sum(large) == 1 and all_labels[large.index(True)] == 1
    seen = sorted((int(label), int(image[0, 0, 1])) for label, image, big
                  in zip(all_labels, all_images, large) if not big)
    assert seen == sorted([(0, i) for i in range(12)] + [(1, i) for i in range(6)]
                          + [(2, i) for i in range(18)])
    assert sorted(np.bincount(test_labels).tolist()) == [1, 2, 3]
    assert labels.tolist() != sorted(labels.tolist())  # shuffled
    again = prepare.convert(source, str(tmp_path / "again"), seed=3)  # the same seed: same files
    for name in ff.TRAIN_FILES + ff.TEST_FILES:
        assert open(os.path.join(batches_dir, name), "rb").read() == open(
            os.path.join(again.batches_dir, name), "rb").read()


def test_the_command_keeps_the_split_of_split_folders_and_says_so(tmp_path):
    root = tmp_path / "photos"
    for folder, count in {"train/ant": 4, "train/bee": 3, "val/ant": 2, "val/bee": 1}.items():
        for i in range(count):
            write_png(root / folder / f"{i}.png", class_image(folder.endswith("bee"), i))
    result = call("cifar10-prepare", f"--image_dir={root}", f"--data_dir={tmp_path / 'd'}",
                  "--test_fraction=0.3")
    assert result.returncode == 0, result.stderr
    batches_dir = tmp_path / "d" / ff.BATCHES_DIRNAME
    assert result.stdout.splitlines() == [
        "Found split folders train/ and val/: val/ is the test set.",
        f"Found 10 images of 2 classes in {root}: 7 for training, 3 for testing.",
        f"Wrote 7 training and 3 test records of 2 classes (ant, bee) to {batches_dir}; "
        f"skipped 0 unreadable images."]
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        f"cifar10-prepare: warning: --test_fraction=0.3 is not used: val/ is the test set of the "
        f"split folders; to split the classes of train/ by --test_fraction instead, point "
        f"--image_dir at {root / 'train'}"]
    test_labels, test_images = records(batches_dir, ff.TEST_FILES)
    assert test_labels.tolist() == [0, 0, 1]
    assert [int(image[0, 0, 1]) for image in test_images] == [0, 1, 0]  # the images' numbers


def test_the_command_converts_and_reports(image_dir, tmp_path):
    """What a killed conversion left is removed; unreadable images are skipped, named in
    path order (a line break in a name escaped); the images left out are named; the
    progress is a line at each tenth in a log."""
    bad = [image_dir / "bird" / f"bad{i}.png" for i in range(2)] + [image_dir / "cat" / "a\nb.png"]
    for path in bad:
        path.write_text("no image")
    (image_dir / "stray.jpg").write_bytes(b"")
    (image_dir / "cat" / "holiday.heic").write_bytes(b"")
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sys; from cifar10.core import atomic; "
        "cm = atomic.new_folder(sys.argv[1]); cm.__enter__(); os.kill(os.getpid(), 9)"),
        str(tmp_path / "d" / ff.BATCHES_DIRNAME)])
    assert killed.returncode == -9
    [left] = os.listdir(tmp_path / "d")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[1:3] == [
        f"Found 39 images of 3 classes in {image_dir}: 33 for training, 6 for testing.",
        f"Removed what an interrupted conversion left in {tmp_path / 'd'}: {left}."]
    assert re.fullmatch(rf"Wrote \d+ training and \d+ test records of 3 classes \(bird, cat, "
                        rf"dog\) to {re.escape(str(tmp_path / 'd' / ff.BATCHES_DIRNAME))}; "
                        rf"skipped 3 unreadable images\.", out[3])
    assert os.listdir(tmp_path / "d") == [ff.BATCHES_DIRNAME]
    not_an_image = "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one"
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        f"cifar10-prepare: warning: left out 1 image in no class folder ({image_dir / 'stray.jpg'}"
        f"): a class's images go in its folder, {image_dir / '<class>'}/",
        f"cifar10-prepare: warning: left out 1 file of a format it does not read "
        f"({image_dir / 'cat' / 'holiday.heic'}): it reads PNG, JPEG, GIF and BMP; convert it to "
        f"one of those to take it",
        f"cifar10-prepare: warning: skipped {bad[0]}: {not_an_image}",
        f"cifar10-prepare: warning: skipped {bad[1]}: {not_an_image}",
        f"cifar10-prepare: warning: skipped {image_dir / 'cat'}/a\\nb.png: {not_an_image}"]
    progress = [line.split(" ")[0] for line in result.stderr.splitlines() if "/39 images" in line]
    assert progress == ["0/39", "4/39", "8/39", "12/39", "16/39", "20/39", "24/39", "28/39",
                        "32/39", "36/39", "39/39"]


def test_too_few_readable_images_are_refused_naming_each_and_writing_nothing(image_dir,
                                                                            tmp_path):
    (image_dir / "eel").mkdir()
    for i in range(3):
        (image_dir / "eel" / f"{i}.png").write_text("no image")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}",
                  "--test_fraction=0.3")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[-1] == ("cifar10-prepare: error: class eel has no training image that could "
                         "be read: add readable images to its folder (or lower "
                         "--test_fraction); nothing written")
    assert sorted(line for line in lines if "warning" in line) == [
        f"cifar10-prepare: warning: skipped {image_dir / 'eel' / f'{i}.png'}: not an image "
        f"TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one" for i in range(3)]
    assert not (tmp_path / "d").exists()


def test_strict_stops_at_an_unreadable_image_and_leaves_no_folder_it_made(image_dir, tmp_path):
    (tmp_path / "kept").mkdir()
    (image_dir / "cat" / "broken.png").write_bytes(b"\x89PNG broken")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", "--strict",
                  f"--data_dir={tmp_path / 'kept' / 'new' / 'deeper'}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-prepare: error: cannot read {image_dir / 'cat' / 'broken.png'}: not an image "
        f"TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one (--strict: nothing "
        f"written)")
    assert os.listdir(tmp_path / "kept") == []  # made by the user, so kept


@pytest.mark.parametrize("case", ["missing image_dir", "existing data"])
def test_mistakes_in_the_folders_are_answered_before_tensorflow_loads(image_dir, tmp_path, case):
    """The program as a process, its imports listed (python -X importtime): the error
    comes without TensorFlow, and nothing is left behind or replaced."""
    data_dir = tmp_path / "new" / "d"
    if case == "missing image_dir":
        image_dir = tmp_path / "nonexistent"
        error = (f"{image_dir} does not exist: point --image_dir at the folder that holds one "
                 f"folder of images per class")
    else:
        data_dir = tmp_path / "d"
        (data_dir / ff.BATCHES_DIRNAME).mkdir(parents=True)
        (data_dir / ff.BATCHES_DIRNAME / "data_batch_1.bin").write_bytes(b"the user's")
        error = (f"{data_dir / ff.BATCHES_DIRNAME} exists: it is not replaced; move it aside or "
                 f"choose another --data_dir")
    result = subprocess.run(
        [sys.executable, "-X", "importtime", cli.program("cifar10-prepare"),
         f"--image_dir={image_dir}", f"--data_dir={data_dir}"],
        capture_output=True, text=True, timeout=120, env=cli.env())
    imported = [line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")]
    own_lines = [line for line in result.stderr.splitlines()
                 if not line.startswith("import time:")]
    assert "cifar10.data.prepare" in imported and "numpy" in imported  # (the listing works)
    assert [name for name in imported if name.split(".")[0] in ("tensorflow", "keras")] == []
    assert (result.returncode, result.stdout, own_lines) == (
        1, "", [f"cifar10-prepare: error: {error}"])
    assert not (tmp_path / "new").exists()
    if case == "existing data":
        assert os.listdir(data_dir / ff.BATCHES_DIRNAME) == ["data_batch_1.bin"]


@pytest.mark.parametrize("args, missing", [
    ([], "--image_dir must be given (the folder of class folders to convert); --data_dir "
         "must be given (where to write the data set)"),
    (["--data_dir=d"], "--image_dir must be given (the folder of class folders to convert)"),
])
def test_the_command_names_the_folders_it_needs(args, missing):
    cli.assert_refused(call("cifar10-prepare", *args),
                       f"cifar10-prepare: error: {missing} (see cifar10-prepare --help)")


def test_a_data_dir_that_cannot_hold_the_data_set_is_refused(image_dir, tmp_path, monkeypatch):
    with pytest.raises(Cifar10Error) as info:
        prepare.check_output(str(image_dir / "cat" / "data"), str(image_dir))
    assert str(info.value) == (
        f"--data_dir {image_dir / 'cat' / 'data'} is inside --image_dir {image_dir}, where the "
        f"data set would be taken for images; choose a --data_dir outside it")
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(Cifar10Error) as info:
        prepare.check_output(str(tmp_path / "a_file"), str(image_dir))
    assert str(info.value) == (f"--data_dir={tmp_path / 'a_file'} is a file, not a folder: name "
                               f"a folder to write the data set in (it is made if missing)")
    # Under a file: one line before any image is decoded.
    monkeypatch.setattr(image_files, "decode_files", lambda paths: pytest.fail("decoded"))
    target = tmp_path / "a_file" / "data"
    with pytest.raises(Cifar10Error) as info:
        prepare.convert(imagefiles.find_source(str(image_dir)), str(target))
    assert str(info.value) == (f"cannot write the data folder {target / ff.BATCHES_DIRNAME} "
                               f"(Not a directory); choose another --data_dir")
    assert prepare.check_output(str(tmp_path / "new" / "d"), str(image_dir)) == str(
        tmp_path / "new" / "d" / ff.BATCHES_DIRNAME)
    assert not (tmp_path / "new").exists()


def test_a_data_folder_given_as_data_dir_or_image_dir_is_refused(image_dir, tmp_path):
    data = tmp_path / "data" / "my10"
    synthetic.write_dataset(str(data.parent), records_per_file=2)
    os.rename(data.parent / ff.BATCHES_DIRNAME, data)
    before = sorted((str(p), p.stat().st_size) for p in (tmp_path / "data").rglob("*"))
    cli.assert_refused(
        call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={data}"),
        f"cifar10-prepare: error: --data_dir={data} is a data folder itself (it holds "
        f"batches.meta.txt, data_batch_1.bin, ...): pass its parent or a new folder as "
        f"--data_dir")
    assert sorted((str(p), p.stat().st_size) for p in (tmp_path / "data").rglob("*")) == before
    synthetic.write_dataset(str(tmp_path / "d10"), records_per_file=2)
    (tmp_path / "d10" / "cat").mkdir()
    with pytest.raises(Cifar10Error) as error:
        imagefiles.find_source(str(tmp_path / "d10"))
    assert str(error.value) == (
        f"{tmp_path / 'd10'} holds CIFAR-format data (cifar-10-batches-bin/), not image "
        f"folders: it needs no converting; pass --data_dir={tmp_path / 'd10'} to cifar10-train")
