"""Tests of cifar10.data.synthetic: generated data in the CIFAR-10 binary layout."""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest

from cifar10.data import folder as datafolder
from cifar10.data import fileformat as ff
from cifar10.data import synthetic

BIN_FILES = ff.TRAIN_FILES + ff.TEST_FILES


def _records(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels [n], images [n, 32, 32, 3] uint8) of a .bin file, read with numpy."""
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, ff.RECORD_BYTES)
    return raw[:, 0], raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def _eval_crops(images: np.ndarray) -> np.ndarray:
    """Central 24x24 crops, standardised per image, flattened (numpy)."""
    crops = images[:, 4:28, 4:28].astype(np.float64).reshape(len(images), -1)
    std = np.maximum(crops.std(axis=1, keepdims=True), 1 / np.sqrt(crops.shape[1]))
    return (crops - crops.mean(axis=1, keepdims=True)) / std


def _nearest_class_mean(batches_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels, guesses) of the test file by the nearest class mean of the training
    files' eval crops: a cheap classifier on the pixels alone."""
    train = [_records(p) for p in datafolder.split_files(batches_dir, "train")]
    train_labels = np.concatenate([l for l, _ in train])
    train_x = _eval_crops(np.concatenate([i for _, i in train]))
    means = np.stack([train_x[train_labels == k].mean(axis=0) for k in range(10)])
    test_labels, test_images = _records(datafolder.split_files(batches_dir, "test")[0])
    test_x = _eval_crops(test_images)
    distances = ((test_x[:, None, :] - means[None, :, :]) ** 2).sum(axis=2)
    return test_labels, distances.argmin(axis=1)


@pytest.fixture(scope="module")
def batches_dir(tmp_path_factory):
    """The data of --synthetic_data (look-alike classes)."""
    return synthetic.write_dataset(str(tmp_path_factory.mktemp("data")), records_per_file=50)


def test_write_dataset_layout(batches_dir, tmp_path):
    assert os.path.basename(batches_dir) == ff.BATCHES_DIRNAME
    assert sorted(os.listdir(batches_dir)) == sorted(
        BIN_FILES + (ff.META_FILE, synthetic.SYNTHETIC_MARKER))  # no temporary files left
    assert datafolder.validate_files(datafolder.split_files(batches_dir, "train")) == 250
    assert datafolder.validate_files(datafolder.split_files(batches_dir, "test")) == 50
    assert datafolder.class_names(batches_dir) == ff.CLASS_NAMES
    contents = [open(os.path.join(batches_dir, n), "rb").read() for n in BIN_FILES]
    assert len(set(contents)) == len(BIN_FILES)  # the files differ
    assert synthetic.is_synthetic(batches_dir)
    assert not synthetic.is_synthetic(str(tmp_path))
    os.makedirs(tmp_path / ff.BATCHES_DIRNAME)
    assert not synthetic.is_synthetic(str(tmp_path / ff.BATCHES_DIRNAME))


def test_labels_cover_classes_evenly(batches_dir):
    for name in BIN_FILES:
        labels, _ = _records(os.path.join(batches_dir, name))
        np.testing.assert_array_equal(np.bincount(labels, minlength=10), [5] * 10)
        assert not np.array_equal(labels, np.arange(50) % 10)  # shuffled within a file


def test_separable_data_is_told_apart_by_a_nearest_class_mean(tmp_path):
    labels, guesses = _nearest_class_mean(
        synthetic.write_dataset(str(tmp_path), records_per_file=50, separable=True))
    assert np.mean(guesses == labels) > 0.9


def test_default_classes_overlap_most_with_their_look_alike_partners(tmp_path):
    """On the data of --synthetic_data a nearest-mean rule is far above chance and far
    from perfect, and its mistakes fall on each class's partner more than twice as often
    as chance would."""
    labels, guesses = _nearest_class_mean(
        synthetic.write_dataset(str(tmp_path), records_per_file=200))
    assert 0.2 < np.mean(guesses == labels) < 0.6
    wrong = guesses != labels
    assert np.mean(guesses[wrong] == synthetic.PARTNER[labels[wrong]]) > 2 / 9


def test_partners_are_pairs():
    partner = synthetic.PARTNER
    np.testing.assert_array_equal(partner[partner], np.arange(ff.NUM_CLASSES))
    assert not np.any(partner == np.arange(ff.NUM_CLASSES))
    names = [(ff.CLASS_NAMES[k], ff.CLASS_NAMES[partner[k]]) for k in range(ff.NUM_CLASSES)]
    assert {("cat", "dog"), ("automobile", "truck"), ("deer", "horse")} <= set(names)


def test_the_marker_says_which_data_and_a_marker_of_before_still_counts(tmp_path):
    look_alike = synthetic.dataset_files(3)[synthetic.SYNTHETIC_MARKER].decode()
    separable = synthetic.dataset_files(3, separable=True)[synthetic.SYNTHETIC_MARKER].decode()
    assert "look-alike classes" in look_alike and "separable classes" in separable
    assert "NOT the real CIFAR-10" in look_alike and "NOT the real CIFAR-10" in separable
    # A folder generated before the data had look-alike classes: only the marker's text differs.
    old = synthetic.write_dataset(str(tmp_path), records_per_file=3, separable=True)
    with open(os.path.join(old, synthetic.SYNTHETIC_MARKER), "w") as f:
        f.write("Generated by cifar10.data.synthetic: 3 records per file, seed 0. This is NOT the "
                "real CIFAR-10 data set.\n")
    assert synthetic.is_synthetic(old)


@pytest.mark.parametrize("separable", [False, True])
def test_the_seed_determines_the_bytes(separable):
    same = synthetic.dataset_files(records_per_file=10, seed=3, separable=separable)
    assert synthetic.dataset_files(records_per_file=10, seed=3, separable=separable) == same
    other = synthetic.dataset_files(records_per_file=10, seed=4, separable=separable)
    assert all(same[name] != other[name] for name in BIN_FILES)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="records_per_file must be at least 1, got 0"):
        synthetic.write_dataset(str(tmp_path), records_per_file=0)
    assert not (tmp_path / ff.BATCHES_DIRNAME).exists()
    with pytest.raises(ValueError, match="labels must be in 0-9, got 10"):
        synthetic.make_records(np.array([0, 3, 10]))


def test_tarball_bytes():
    contents = synthetic.tarball_bytes(records_per_file=4, seed=2)
    files = synthetic.dataset_files(records_per_file=4, seed=2)
    with tarfile.open(fileobj=io.BytesIO(contents), mode="r:gz") as tar:
        members = tar.getmembers()
        assert sorted(m.name for m in members) == sorted(
            f"{ff.BATCHES_DIRNAME}/{name}" for name in files)
        for m in members:
            assert tar.extractfile(m).read() == files[m.name.split("/", 1)[1]]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)],
                         ids=["umask-022", "umask-077"])
def test_generated_files_get_the_usual_permissions_of_the_umask(tmp_path, umask, mode):
    # As open() gives them (0666 less the umask), not a private temporary file's 0600:
    # the default --data_dir, /tmp/cifar10_data, is shared by the machine's users.
    old = os.umask(umask)
    try:
        batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=2)
        written = {name: os.stat(os.path.join(batches_dir, name)).st_mode & 0o777
                   for name in os.listdir(batches_dir)}
        synthetic.write_dataset(str(tmp_path), records_per_file=2, seed=1)  # in place
        rewritten = {name: os.stat(os.path.join(batches_dir, name)).st_mode & 0o777
                     for name in os.listdir(batches_dir)}
    finally:
        os.umask(old)
    assert written == rewritten == {name: mode for name in
                                    [*ff.TRAIN_FILES, *ff.TEST_FILES, ff.META_FILE,
                                     synthetic.SYNTHETIC_MARKER]}
    assert os.stat(batches_dir).st_mode & 0o777 == mode | 0o111 & ~umask
