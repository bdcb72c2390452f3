"""Tests of cifar10.data.prepare and the cifar10-prepare command."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import cli
import numpy as np
import pytest
import tensorflow as tf
from cli import call, run
from specialfiles import watched_fifos
from test_images import COLOURS, palette_bmp

from cifar10.cli import prepare_main
from cifar10.runs import checkpoints
from cifar10.data import classfolders
from cifar10.data import folder as datafolder
from cifar10.data import images as image_files
from cifar10.data import prepare
from cifar10.data import synthetic
from cifar10.core.config import TrainConfig
from cifar10.training import controller
from cifar10.training.run import TrainData
from cifar10.data import fileformat as ff
from cifar10.core.errors import Cifar10Error


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
    """Three classes (bird: 12 images, cat: 6, dog: 18), 32x32 PNGs, in sorted-class order."""
    root = tmp_path / "photos"
    for label, (name, count) in enumerate([("bird", 12), ("cat", 6), ("dog", 18)]):
        for i in range(count):
            write_png(root / name / f"{i:02d}.png", class_image(label, i))
    return root


def records(batches_dir, names):
    return records_from_bytes(
        b"".join(open(os.path.join(batches_dir, n), "rb").read() for n in names))


def records_from_bytes(raw):
    """(labels [n], uint8 images [n, 32, 32, 3]) of CIFAR-format records."""
    rows = np.frombuffer(raw, np.uint8).reshape(-1, ff.RECORD_BYTES)
    images = rows[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return rows[:, 0], images


def test_class_folders_become_cifar_files_split_per_class(image_dir, tmp_path):
    source = classfolders.find_source(str(image_dir), test_fraction=1 / 6, seed=3)
    assert source.class_names == ("bird", "cat", "dog")
    assert len(source.test) == 2 + 1 + 3 and len(source.train) == 10 + 5 + 15
    summary = prepare.convert(source, str(tmp_path / "data"), seed=3)
    batches_dir = str(tmp_path / "data" / ff.BATCHES_DIRNAME)
    assert summary.batches_dir == batches_dir
    assert (summary.train_records, summary.test_records, summary.skipped) == (30, 6, ())
    assert sorted(os.listdir(batches_dir)) == sorted([*ff.TRAIN_FILES, *ff.TEST_FILES,
                                                      ff.META_FILE])
    assert open(os.path.join(batches_dir, ff.META_FILE)).read() == "bird\ncat\ndog\n"
    # The trainer's and the evaluator's own checks take it; five files of 6 records.
    assert datafolder.validate_files(datafolder.split_files(batches_dir, "train")) == 30
    assert datafolder.validate_files(datafolder.split_files(batches_dir, "test")) == 6
    assert [os.path.getsize(os.path.join(batches_dir, n)) for n in ff.TRAIN_FILES] == \
        [6 * ff.RECORD_BYTES] * 5
    labels, images = records(batches_dir, ff.TRAIN_FILES)
    test_labels, test_images = records(batches_dir, ff.TEST_FILES)
    # Every image once, with its own label, in the record layout (label, R, G, B planes).
    seen = sorted((int(l), int(img[0, 0, 1])) for l, img in zip(
        np.concatenate([labels, test_labels]), np.concatenate([images, test_images])))
    assert seen == sorted([(0, i) for i in range(12)] + [(1, i) for i in range(6)]
                          + [(2, i) for i in range(18)])
    for label, image in zip(labels, images):
        assert np.array_equal(image, class_image(label, int(image[0, 0, 1])))
    assert sorted(np.bincount(test_labels).tolist()) == [1, 2, 3]
    assert labels.tolist() != sorted(labels.tolist())  # shuffled
    # The same seed gives the same files.
    again = prepare.convert(classfolders.find_source(str(image_dir), seed=3),
                            str(tmp_path / "again"), seed=3)
    for name in ff.TRAIN_FILES + ff.TEST_FILES:
        assert open(os.path.join(batches_dir, name), "rb").read() == open(
            os.path.join(again.batches_dir, name), "rb").read()


def write_folders(root, counts):
    """{"train/ant": 3, ...}: root/train/ant/0.png .. 2.png, images of their class."""
    for folder, count in counts.items():
        label = sorted({f.split("/")[-1] for f in counts}).index(folder.split("/")[-1])
        for i in range(count):
            write_png(root / folder / f"{i}.png", class_image(label, i))
    return root


@pytest.mark.parametrize("train, test", [("train", "test"), ("train", "val"),
                                         ("train", "valid"), ("train", "validation")])
def test_the_command_keeps_the_split_of_split_folders_and_says_so(tmp_path, train, test):
    root = write_folders(tmp_path / "photos", {f"{train}/ant": 4, f"{train}/bee": 3,
                                               f"{test}/ant": 2, f"{test}/bee": 1})
    result = call("cifar10-prepare", f"--image_dir={root}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    batches_dir = tmp_path / "d" / ff.BATCHES_DIRNAME
    assert result.stdout.splitlines() == [
        f"Found split folders {train}/ and {test}/: {test}/ is the test set.",
        f"Found 10 images of 2 classes in {root}: 7 for training, 3 for testing.",
        f"Wrote 7 training and 3 test records of 2 classes (ant, bee) to {batches_dir}; "
        f"skipped 0 unreadable images."]
    test_labels, test_images = records(batches_dir, ff.TEST_FILES)
    assert test_labels.tolist() == [0, 0, 1]
    assert [int(image[0, 0, 1]) for image in test_images] == [0, 1, 0]  # the images' numbers
    labels, _ = records(batches_dir, ff.TRAIN_FILES)
    assert sorted(labels.tolist()) == [0, 0, 0, 0, 1, 1, 1]


def test_the_command_splits_class_folders_alone_by_the_test_fraction(image_dir, tmp_path):
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}",
                  "--test_fraction=0.25")
    assert result.returncode == 0, result.stderr
    # 12, 6 and 18 images: 3, 2 (1.5 rounded to even) and 4 (4.5 rounded to even) to test.
    assert result.stdout.splitlines() == [
        "Found class folders and no split folders: 25% of each class's images, chosen at "
        "random, go to the test set (--test_fraction, --seed).",
        f"Found 36 images of 3 classes in {image_dir}: 27 for training, 9 for testing.",
        f"Wrote 27 training and 9 test records of 3 classes (bird, cat, dog) to "
        f"{tmp_path / 'd' / ff.BATCHES_DIRNAME}; skipped 0 unreadable images."]
    test_labels, _ = records(tmp_path / "d" / ff.BATCHES_DIRNAME, ff.TEST_FILES)
    assert np.bincount(test_labels).tolist() == [3, 2, 4]


@pytest.mark.parametrize("folders, error", [
    (["train/a", "train/b", "test/a", "val/a"],
     "{root} has both test/ and val/: which one is the test set is unclear; keep one and "
     "move the others out of {root}"),
    (["train/a", "train/b", "val/a", "cat", "dog"],
     "{root} has train/ beside other folders (cat, dog): it can hold split folders or class "
     "folders, not both; move one or the other out of it"),
    (["train/a", "train/b"],
     "{root} has train/ but no test/, val/, valid/ or validation/ beside it: add the test "
     "images as {root}/test/<class>/, or point --image_dir at {root}/train to split its "
     "classes by --test_fraction"),
    (["Train/cat", "Train/dog", "VAL/Cat", "VAL/dog"],
     "{root}/VAL has classes that {root}/Train lacks: Cat; Cat (in VAL/) differs from cat "
     "(in Train/) only in case: rename one so that the names match"),
])
def test_the_command_refuses_an_ambiguous_layout_and_writes_nothing(tmp_path, folders, error):
    root = write_folders(tmp_path / "photos", {folder: 1 for folder in folders})
    result = call("cifar10-prepare", f"--image_dir={root}",
                  f"--data_dir={tmp_path / 'new' / 'd'}")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"cifar10-prepare: error: {error.format(root=root)}\n"
    assert sorted(os.listdir(tmp_path)) == ["photos"]


def test_an_8_bit_palette_bmp_becomes_a_record_of_its_colours(image_dir, tmp_path):
    """TensorFlow alone would store the palette indices as grey levels."""
    indices = np.random.default_rng(8).integers(0, 256, (32, 32))
    (image_dir / "cat" / "palette.bmp").write_bytes(palette_bmp(indices, COLOURS))
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr and "skipped 0 unreadable images." in result.stdout
    batches_dir = tmp_path / "d" / ff.BATCHES_DIRNAME
    labels, images = records(batches_dir, ff.TRAIN_FILES + ff.TEST_FILES)
    found = [int(label) for label, image in zip(labels, images)
             if np.array_equal(image, COLOURS[indices])]
    assert found == [1]  # cat's


def test_images_of_any_size_are_resized_and_unreadable_ones_skipped(image_dir, tmp_path):
    write_png(image_dir / "cat" / "large.png", np.full((64, 48, 3), 90, np.uint8))
    (image_dir / "cat" / "broken.jpg").write_bytes(b"not a jpeg")
    source = classfolders.find_source(str(image_dir), test_fraction=0.5)
    summary = prepare.convert(source, str(tmp_path / "data"))
    assert summary.skipped == ((str(image_dir / "cat" / "broken.jpg"),
                                "not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a "
                                "damaged one"),)
    assert summary.train_records + summary.test_records == 37
    _, images = records(summary.batches_dir, ff.TRAIN_FILES + ff.TEST_FILES)
    assert sum(np.array_equal(image, np.full((32, 32, 3), 90)) for image in images) == 1

    with pytest.raises(Cifar10Error, match=r"^cannot read .*broken\.jpg: not an image .*"
                                           r"\(--strict: nothing written\)$"):
        prepare.convert(source, str(tmp_path / "strict"), strict=True)
    assert not (tmp_path / "strict").exists() or not os.listdir(tmp_path / "strict")


def test_an_unreadable_image_with_a_line_break_in_its_name_is_one_warning_line(image_dir,
                                                                                tmp_path):
    (image_dir / "cat" / "new\nline.png").write_bytes(b"not a png")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning: skipped" in line]
    assert warnings == [f"cifar10-prepare: warning: skipped {image_dir / 'cat'}/new\\nline.png: "
                        f"not an image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a "
                        f"damaged one"]


def test_a_class_whose_images_are_all_unreadable_is_refused(image_dir, tmp_path):
    # A .png that is text: found as an image, skipped when it does not decode.
    for i in range(4):
        (image_dir / "eel" / f"{i}.png").parent.mkdir(exist_ok=True)
        (image_dir / "eel" / f"{i}.png").write_text("no image")
    source = classfolders.find_source(str(image_dir), test_fraction=0.5)
    assert source.class_names == ("bird", "cat", "dog", "eel")
    with pytest.raises(Cifar10Error) as error:
        prepare.convert(source, str(tmp_path / "data"))
    assert re.fullmatch(
        f"class eel has no training image that could be read, such as "
        f"{re.escape(str(image_dir / 'eel'))}/[0-3]\\.png: add readable images to its folder "
        f"or remove the folder; nothing written", str(error.value)), str(error.value)
    assert not (tmp_path / "data").exists()


def test_a_refusal_after_decoding_names_each_unreadable_image_before_it(image_dir, tmp_path):
    # The refusal counts the unreadable images; the lines before it say why each is.
    (image_dir / "eel").mkdir()
    (image_dir / "eel" / "0.png").write_text("no image")
    (image_dir / "eel" / "1.bmp").write_bytes(palette_bmp(np.array([[0, 1]]), COLOURS[:1]))
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}",
                  "--test_fraction=0.3")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert re.fullmatch(
        f"cifar10-prepare: error: class eel has no training image that could be read, such "
        f"as {re.escape(str(image_dir / 'eel'))}/[01]\\.(png|bmp): add readable images to its "
        f"folder or remove the folder; nothing written", lines[-1]), lines[-1]
    assert sorted(line for line in lines if "warning" in line) == [
        f"cifar10-prepare: warning: skipped {image_dir / 'eel' / '0.png'}: not an image "
        f"TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one",
        f"cifar10-prepare: warning: skipped {image_dir / 'eel' / '1.bmp'}: an 8-bit BMP with "
        f"pixels of palette index 1, past the end of its 1-colour palette: a damaged one"]
    assert not (tmp_path / "d").exists()


def test_a_class_whose_images_all_went_to_the_test_split_says_so(image_dir, tmp_path):
    write_png(image_dir / "eel" / "0.png", class_image(3, 0))  # readable, and alone
    source = classfolders.find_source(str(image_dir), test_fraction=0.6)
    with pytest.raises(Cifar10Error) as error:
        prepare.convert(source, str(tmp_path / "data"))
    assert str(error.value) == (
        "class eel has no image in the training split (all of its went to the test split): "
        "add images to its folder, or lower --test_fraction; nothing written")


def test_a_cifar_data_folder_given_as_images_is_named_for_what_it_is(tmp_path):
    synthetic.write_dataset(str(tmp_path / "d10"), records_per_file=4)
    with pytest.raises(Cifar10Error) as error:
        classfolders.find_source(str(tmp_path / "d10"))
    assert str(error.value) == (
        f"{tmp_path / 'd10'} holds CIFAR-format data (cifar-10-batches-bin/), not image "
        f"folders: it needs no converting; pass --data_dir={tmp_path / 'd10'} to cifar10-train")


def test_bad_folders_are_one_line_errors(image_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(Cifar10Error, match=r"^no class folders in .*empty: put the images"):
        classfolders.find_source(str(tmp_path / "empty"))
    with pytest.raises(Cifar10Error, match=r"missing does not exist: point --image_dir at "):
        classfolders.find_source(str(tmp_path / "missing"))
    (image_dir / "eel").mkdir()
    (image_dir / "eel" / "notes.txt").write_text("no images here")
    with pytest.raises(Cifar10Error) as error:
        classfolders.find_source(str(image_dir))
    assert str(error.value) == (
        f"the class folder {image_dir / 'eel'} holds no images (.png, .jpg, .jpeg, .gif, "
        f".bmp, .jfif, .jpe): add the class's images to it, or move it out of {image_dir}")
    many = tmp_path / "many"
    for i in range(257):  # a record's label is one byte
        (many / f"class{i:03d}").mkdir(parents=True)
    with pytest.raises(Cifar10Error) as error:
        classfolders.find_source(str(many))
    assert str(error.value) == (
        f"{many} has 257 class folders; a CIFAR record's one label byte holds at most 256 "
        f"classes: merge classes, or move 1 of the folders out of {many}")
    one = tmp_path / "one"
    write_png(one / "cat" / "0.png", class_image(0, 0))
    with pytest.raises(Cifar10Error, match=r"has one class folder \(cat\): a classifier needs "
                                           r"at least 2 classes"):
        classfolders.find_source(str(one))


def test_eleven_classes_are_taken(tmp_path):
    many = tmp_path / "many"
    for i in range(11):
        write_png(many / f"class{i:02d}" / "0.png", class_image(0, i))
        write_png(many / f"class{i:02d}" / "1.png", class_image(1, i))
    source = classfolders.find_source(str(many), test_fraction=0.5)
    assert source.class_names == tuple(f"class{i:02d}" for i in range(11))
    assert sorted(label for _, label in source.train + source.test) == sorted(list(range(11)) * 2)


def test_an_existing_data_folder_is_kept(image_dir, tmp_path):
    batches_dir = tmp_path / "data" / ff.BATCHES_DIRNAME
    batches_dir.mkdir(parents=True)
    (batches_dir / "data_batch_1.bin").write_bytes(b"the user's")
    with pytest.raises(Cifar10Error, match="exists: it is not replaced; move it aside"):
        prepare.convert(classfolders.find_source(str(image_dir)), str(tmp_path / "data"))
    assert os.listdir(batches_dir) == ["data_batch_1.bin"]
    assert sorted(os.listdir(tmp_path / "data")) == [ff.BATCHES_DIRNAME]


# A conversion killed with kill -9 while it writes its folder (atomic.new_folder).
_KILLED = ("import os, signal, sys; from cifar10.core import atomic; "
           "cm = atomic.new_folder(sys.argv[1]); cm.__enter__(); os.kill(os.getpid(), signal.SIGKILL)")


def test_the_command_converts_and_reports(image_dir, tmp_path):
    (image_dir / "dog" / "broken.png").write_bytes(b"\x89PNG broken")
    killed = subprocess.run([sys.executable, "-c", _KILLED,
                             str(tmp_path / "d" / ff.BATCHES_DIRNAME)])
    assert killed.returncode == -9
    [left] = os.listdir(tmp_path / "d")
    result = run("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    assert (f"Removed what an interrupted conversion left in {tmp_path / 'd'}: {left}."
            in result.stdout.splitlines())
    assert os.listdir(tmp_path / "d") == [ff.BATCHES_DIRNAME]
    assert "Traceback" not in result.stderr
    # Seed 0 puts the broken image among dog's 3 test images (19 / 6, rounded).
    assert result.stdout.strip().splitlines()[-1] == (
        f"Wrote 31 training and 5 test records of 3 classes (bird, cat, dog) to "
        f"{tmp_path / 'd' / ff.BATCHES_DIRNAME}; skipped 1 unreadable image.")
    assert "37/37 images (" in result.stderr
    assert (f"cifar10-prepare: warning: skipped {image_dir / 'dog' / 'broken.png'}: not an "
            f"image TensorFlow decodes (PNG, JPEG, GIF or BMP), or a damaged one"
            in result.stderr.splitlines())
    # The trainer takes the folder as it is.
    batches_dir = str(tmp_path / "d" / ff.BATCHES_DIRNAME)
    assert datafolder.validate_files(datafolder.split_files(batches_dir, "train")) == 31


@pytest.mark.parametrize("args, missing", [
    ([], "--image_dir must be given (the folder of class folders to convert); --data_dir "
         "must be given (where to write the data set)"),
    (["--data_dir=d"], "--image_dir must be given (the folder of class folders to convert)"),
])
def test_the_command_names_the_folders_it_needs(args, missing):
    result = call("cifar10-prepare", *args)
    assert result.returncode == 1
    assert result.stdout == "" and result.stderr == (
        f"cifar10-prepare: error: {missing} (see cifar10-prepare --help)\n")


def test_own_images_train_and_predict_with_their_class_names(tmp_path):
    """Class folders of PNGs and JPEGs -> records -> a short run that learns ->
    cifar10-predict names the folders' classes."""
    names = ("ant", "bee", "cow")
    labels = np.repeat(np.arange(len(names)), 40)
    _, images = records_from_bytes(synthetic.make_records(labels, seed=1, separable=True))
    root = tmp_path / "photos"
    for i, (label, image) in enumerate(zip(labels, images)):
        path = root / names[label] / f"{i:03d}"
        if i % 3:
            write_png(path.with_suffix(".png"), image)
        else:
            tf.io.write_file(str(path.with_suffix(".jpg")), tf.io.encode_jpeg(image, quality=95))
    source = classfolders.find_source(str(root))
    summary = prepare.convert(source, str(tmp_path / "data"))
    assert (summary.train_records, summary.test_records) == (99, 21)  # 7 of 40 per class
    assert datafolder.class_names(summary.batches_dir) == names

    files = datafolder.split_files(summary.batches_dir, "train")
    config = TrainConfig(train_dir=str(tmp_path / "train"), batch_size=32, max_steps=30,
                         log_frequency=30, checkpoint_steps=30, summary_steps=1000,
                         shuffle_buffer=100)
    controller.train(config, tf.distribute.OneDeviceStrategy("/cpu:0"),
                     TrainData(files, datafolder.validate_files(files, len(names)),
                               datafolder.class_names(summary.batches_dir)),
                     print_fn=lambda line: None)
    assert checkpoints.trained_class_names(config.train_dir) == names

    test_paths = [path for path, _ in source.test]
    result = call("cifar10-predict", f"--checkpoint_dir={config.train_dir}", "--output=csv",
                  "--top_k=5", *test_paths)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert rows[0] == "path,class_1,probability_1,class_2,probability_2,class_3,probability_3"
    predicted = [row.split(",")[1] for row in rows[1:]]
    truth = [names[label] for _, label in source.test]
    assert len(predicted) == 21 and set(predicted) <= set(names)
    # It has learned: chance is 7 of the 21 held-out images.
    assert sum(p == t for p, t in zip(predicted, truth)) >= 18, list(zip(predicted, truth))


def test_an_unwritable_data_dir_is_one_line_before_any_image_is_decoded(image_dir, tmp_path,
                                                                      monkeypatch):
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setattr(image_files, "decode_files", lambda paths: pytest.fail("decoded"))
    target = tmp_path / "a_file" / "data"
    with pytest.raises(Cifar10Error) as info:
        prepare.convert(classfolders.find_source(str(image_dir)), str(target))
    assert str(info.value) == (f"cannot write the data folder {target / ff.BATCHES_DIRNAME} "
                               f"(Not a directory); choose another --data_dir")
    assert (tmp_path / "a_file").read_text() == "not a folder"


@pytest.mark.parametrize("case", ["missing image_dir", "ambiguous layout", "existing data"])
def test_mistakes_in_the_folders_are_answered_before_tensorflow_loads(image_dir, tmp_path, case):
    """The program as a process, its imports listed (python -X importtime): the error
    comes without TensorFlow, which takes seconds to load, and nothing is left behind."""
    data_dir = tmp_path / "new" / "d"
    if case == "missing image_dir":
        image_dir = tmp_path / "nonexistent"
        error = (f"{image_dir} does not exist: point --image_dir at the folder that holds one "
                 f"folder of images per class")
    elif case == "ambiguous layout":
        (image_dir / "train").mkdir()
        error = (f"{image_dir} has train/ beside other folders (bird, cat, dog): it can hold "
                 f"split folders or class folders, not both; move one or the other out of it")
    else:
        data_dir = tmp_path / "d"
        (data_dir / ff.BATCHES_DIRNAME).mkdir(parents=True)
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


def test_a_failed_conversion_leaves_no_folder_it_made(image_dir, tmp_path):
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


def test_a_data_dir_that_cannot_hold_the_data_set_is_refused(image_dir, tmp_path):
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
    assert prepare.check_output(str(tmp_path / "new" / "d"), str(image_dir)) == str(
        tmp_path / "new" / "d" / ff.BATCHES_DIRNAME)
    assert not (tmp_path / "new").exists()


def test_the_command_refuses_data_its_trainer_would_refuse_and_writes_nothing(image_dir,
                                                                             tmp_path):
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}",
                  "--test_fraction=0")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-prepare: error: no test images in {image_dir}: --test_fraction=0 gives no "
        f"image of any class to the test set; the evaluator needs some: add images, or raise "
        f"--test_fraction"]
    assert not (tmp_path / "d").exists()


def listing(root):
    """Every path under ``root`` with its size and mode: a folder left as it was."""
    return sorted((str(path.relative_to(root)), path.stat().st_size, path.stat().st_mode)
                  for path in root.rglob("*"))


@pytest.mark.parametrize("name", [ff.BATCHES_DIRNAME, "my10"])
def test_a_data_folder_given_as_data_dir_is_refused_and_left_as_it_was(image_dir, tmp_path, name):
    # It would get a data set nested in it, which the trainer given it would then take.
    data = tmp_path / "data" / name
    synthetic.write_dataset(str(data.parent), records_per_file=2)
    if name != ff.BATCHES_DIRNAME:
        os.rename(data.parent / ff.BATCHES_DIRNAME, data)
    before = listing(tmp_path / "data")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={data}")
    instead = ("a new folder" if name == ff.BATCHES_DIRNAME
               else f"its parent ({tmp_path / 'data'}) or a new folder")
    cli.assert_refused(result,
        f"cifar10-prepare: error: --data_dir={data} is a data folder itself (it holds "
        f"batches.meta.txt, data_batch_1.bin, ...): the data set would be written inside it, as "
        f"{ff.BATCHES_DIRNAME}/; pass {instead} as --data_dir")
    assert listing(tmp_path / "data") == before


def test_a_file_given_as_data_dir_is_named_as_the_other_programs_name_it(image_dir, tmp_path):
    (tmp_path / "cat.jpg").write_bytes(b"a photo")
    result = call("cifar10-prepare", f"--image_dir={image_dir}",
                  f"--data_dir={tmp_path / 'cat.jpg'}")
    cli.assert_refused(result,
        f"cifar10-prepare: error: --data_dir={tmp_path / 'cat.jpg'} is a file, not a folder: "
        f"name a folder to write the data set in (it is made if missing)")
    assert (tmp_path / "cat.jpg").read_bytes() == b"a photo"


@pytest.mark.parametrize("layout", ["class folders", "split folders"])
def test_macos_zip_metadata_is_passed_over_with_a_note(tmp_path, layout):
    # A zip made on a Mac, extracted elsewhere: __MACOSX/ holds a ._ file per file.
    split = layout == "split folders"
    classes = ["train/ant", "train/bee", "test/ant", "test/bee"] if split else ["ant", "bee"]
    root = write_folders(tmp_path / "photos", {folder: 6 for folder in classes})
    metadata = [root / "__MACOSX"] + ([root / "train" / "__MACOSX"] if split else [])
    for folder in metadata:
        (folder / "ant").mkdir(parents=True)
        (folder / "ant" / "._0.png").write_bytes(b"\0\5\26\7 AppleDouble")
    result = call("cifar10-prepare", f"--image_dir={root}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:1 + len(metadata)] == [
        f"Skipped {folder}/: macOS's zip metadata, not a class." for folder in metadata]
    assert lines[-1].endswith("records of 2 classes (ant, bee) to "
                              f"{tmp_path / 'd' / ff.BATCHES_DIRNAME}; skipped 0 unreadable "
                              f"images.")
    assert "warning" not in result.stderr


def test_a_fifo_among_the_images_is_skipped_without_being_opened(image_dir, tmp_path):
    """Reading a FIFO waits for a writer: the conversion would hang."""
    fifo = image_dir / "cat" / "feed.png"
    with watched_fifos(fifo) as opened:
        result = call("cifar10-prepare", f"--image_dir={image_dir}",
                      f"--data_dir={tmp_path / 'd'}")
        source = classfolders.find_source(str(image_dir))
        with pytest.raises(Cifar10Error) as strict:
            prepare.convert(source, str(tmp_path / "strict"), strict=True)
    assert opened == []
    assert result.returncode == 0, result.stderr
    assert (f"cifar10-prepare: warning: skipped {fifo}: not a regular file"
            in result.stderr.splitlines())
    assert result.stdout.strip().splitlines()[-1].endswith("; skipped 1 unreadable image.")
    assert str(strict.value) == f"cannot read {fifo}: not a regular file (--strict: nothing written)"


def test_progress_in_a_log_is_a_line_at_each_tenth_and_on_a_terminal_one_line(image_dir,
                                                                              tmp_path):
    """Not one line at the end only: a long conversion shows it is at work in a log."""
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "/36 images" in line]
    # 36 images: a line at the start and at each tenth (10 * done // 36 grows).
    assert [line.split(" ")[0] for line in lines] == [
        "0/36", "4/36", "8/36", "11/36", "15/36", "18/36", "22/36", "26/36", "29/36",
        "33/36", "36/36"]
    assert re.fullmatch(r"36/36 images \([0-9,]+ images/s\)", lines[-1])

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    line = prepare_main.progress_line(36, out)
    prepare.convert(classfolders.find_source(str(image_dir)), str(tmp_path / "t"),
                    progress=lambda done, _: line.show(done))
    line.end()
    text = out.getvalue()
    assert text.startswith("\r0/36 images\r1/36 images (") and text.count("\r") == 37
    assert text.count("\n") == 1 and text.endswith("\n")


def test_images_in_no_class_folder_or_of_formats_it_does_not_read_are_named(image_dir, tmp_path):
    (image_dir / "stray.jpg").write_bytes(b"")
    (image_dir / "cat" / "holiday.heic").write_bytes(b"")
    (image_dir / "README.txt").write_text("not an image: passed over unsaid")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        f"cifar10-prepare: warning: left out 1 image in no class folder ({image_dir / 'stray.jpg'}"
        f"): a class's images go in its folder, {image_dir / '<class>'}/",
        f"cifar10-prepare: warning: left out 1 file of a format it does not read "
        f"({image_dir / 'cat' / 'holiday.heic'}): it reads PNG, JPEG, GIF and BMP; convert it to "
        f"one of those to take it"]
    assert result.stdout.splitlines()[1] == (
        f"Found 36 images of 3 classes in {image_dir}: 30 for training, 6 for testing.")


def test_a_test_fraction_given_for_split_folders_is_said_to_be_unused(tmp_path):
    root = write_folders(tmp_path / "photos", {"train/ant": 4, "train/bee": 3, "val/ant": 2,
                                               "val/bee": 1})
    result = call("cifar10-prepare", f"--image_dir={root}", f"--data_dir={tmp_path / 'd'}",
                  "--test_fraction=0.3")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [
        f"cifar10-prepare: warning: --test_fraction=0.3 is not used: val/ is the test set of the "
        f"split folders; to split the classes of train/ by --test_fraction instead, point "
        f"--image_dir at {root / 'train'}"]
    assert "Wrote 7 training and 3 test records" in result.stdout
    # Not given, it is not named.
    result = call("cifar10-prepare", f"--image_dir={root}", f"--data_dir={tmp_path / 'e'}")
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr


def test_skipped_images_are_named_in_path_order(image_dir, tmp_path):
    bad = [image_dir / "bird" / f"bad{i}.png" for i in range(6)]
    for path in bad:
        path.write_text("no image")
    result = call("cifar10-prepare", f"--image_dir={image_dir}", f"--data_dir={tmp_path / 'd'}")
    assert result.returncode == 0, result.stderr
    named = [line.split("skipped ")[1].split(": ")[0] for line in result.stderr.splitlines()
             if "warning: skipped" in line]
    assert named == [str(path) for path in bad]
