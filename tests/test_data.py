"""Tests of cifar10.data.pipeline: records, file checks, preprocessing and the pipelines."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core import config
from cifar10.data import pipeline as data
from cifar10.data import folder as datafolder
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.core.errors import DataError
import cli
from conftest import mirrored

SIZE = ff.IMAGE_SIZE
CROP = config.CROP_SIZE


# One image or record through the batch functions the pipelines use.
def decode_one(record):
    images, labels = data.decode_records(record[None])
    return images[0], labels[0]


def distort_one(image, seed):
    return data.distort_batch(tf.convert_to_tensor(image)[None], seed)[0]


def eval_one(image):
    return data.eval_batch(tf.convert_to_tensor(image)[None])[0]


# Hand-built records: label byte, then the R, G and B planes, each row-major.


def _record(label: int, red, green, blue) -> bytes:
    planes = [np.broadcast_to(np.asarray(p, dtype=np.uint8), (SIZE, SIZE)) for p in (red, green, blue)]
    return bytes([label]) + b"".join(np.ascontiguousarray(p).tobytes() for p in planes)


def _pattern() -> np.ndarray:
    """row * 32 + col mod 256: a value that encodes the position."""
    rows, cols = np.mgrid[0:SIZE, 0:SIZE]
    return ((rows * SIZE + cols) % 256).astype(np.uint8)


def _write(path, records: list[bytes]) -> str:
    with open(path, "wb") as f:
        f.write(b"".join(records))
    return str(path)


def _file_labels(paths) -> np.ndarray:
    return np.concatenate(
        [np.fromfile(p, dtype=np.uint8).reshape(-1, ff.RECORD_BYTES)[:, 0] for p in paths])


def _standardize(image: np.ndarray) -> np.ndarray:
    """numpy version of tf.image.per_image_standardization."""
    image = image.astype(np.float64)
    std = max(image.std(), 1.0 / np.sqrt(image.size))
    return (image - image.mean()) / std


@pytest.fixture(scope="module")
def batches_dir(tmp_path_factory):
    """A synthetic data set of 20 records per file (100 training records)."""
    return synthetic.write_dataset(str(tmp_path_factory.mktemp("data")), records_per_file=20)


@pytest.fixture(scope="module")
def train_files(batches_dir):
    return datafolder.split_files(batches_dir, "train")


# decode_records / read_records


def test_decode_record_solid_planes():
    image, label = decode_one(tf.constant(_record(7, 10, 20, 30)))
    assert label.dtype == tf.int32 and int(label) == 7
    assert image.dtype == tf.uint8 and image.shape == (32, 32, 3)
    expected = np.broadcast_to(np.array([10, 20, 30], np.uint8), (32, 32, 3))
    np.testing.assert_array_equal(image.numpy(), expected)


def test_decode_record_is_row_major_hwc():
    pattern = _pattern()
    image, label = decode_one(tf.constant(_record(9, pattern, 255 - pattern, pattern.T)))
    image = image.numpy()
    assert int(label) == 9
    np.testing.assert_array_equal(image[:, :, 0], pattern)
    np.testing.assert_array_equal(image[:, :, 1], 255 - pattern)
    np.testing.assert_array_equal(image[:, :, 2], pattern.T)
    assert image[0, 1, 0] == 1 and image[1, 0, 0] == 32 and image[2, 3, 0] == 67


def test_read_records_file_then_record_order(tmp_path):
    first = _write(tmp_path / "a.bin", [_record(3, 1, 2, 3), _record(0, 4, 5, 6)])
    second = _write(tmp_path / "b.bin", [_record(8, 7, 8, 9), _record(5, 10, 11, 12),
                                         _record(1, 13, 14, 15)])
    got = list(data.read_records([first, second]).as_numpy_iterator())
    assert [int(label) for _, label in got] == [3, 0, 8, 5, 1]
    assert [image[5, 6].tolist() for image, _ in got] == [
        [1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]
    assert all(image.dtype == np.uint8 and image.shape == (32, 32, 3) for image, _ in got)
    assert all(label.dtype == np.int32 for _, label in got)


# class names


def test_class_names_come_from_the_meta_file_or_are_cifar10s(tmp_path):
    assert datafolder.class_names(str(tmp_path)) == ff.CLASS_NAMES  # no batches.meta.txt
    # CIFAR-10's own file ends in blank lines.
    (tmp_path / ff.META_FILE).write_text("ant\n bee \nsea lion\n\n\n")
    assert datafolder.class_names(str(tmp_path)) == ("ant", "bee", "sea lion")


@pytest.mark.parametrize("text, error", [
    ("\n\n", "lists no class names: list one class name per line, in label order$"),
    ("".join(f"c{i}\n" for i in range(257)),
     "lists 257 class names and a record's one label byte holds 256: list one class name "
     "per line, in label order, at most 256$"),
    ("ant\nbee\nant\n", "lists ant more than once: list one class name per line, in label "
                         "order, each once$"),
    ("\nant\n", r"lists one class name \(ant\), and a classifier needs at least 2 classes: list "
                "a name for each label in the data files, one per line, in label order$"),
])
def test_bad_class_names_files_are_one_line_errors(tmp_path, text, error):
    (tmp_path / ff.META_FILE).write_text(text)
    with pytest.raises(DataError, match=f"^{tmp_path / ff.META_FILE} {error}"):
        datafolder.class_names(str(tmp_path))


@pytest.mark.parametrize("content, error", [
    (b"ant\n\xffbee\n", "is not UTF-8 text (byte 0xff at offset 4): list one class name per "
                        "line, in label order, in UTF-8"),
    (None, "is a folder, not a class names file; run cifar10-prepare again to make {dir} "
           "from your images"),
])
def test_a_names_file_that_cannot_be_read_is_one_line_naming_it_and_the_fix(tmp_path, content,
                                                                             error):
    path = tmp_path / ff.META_FILE
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(DataError) as info:
        datafolder.class_names(str(tmp_path))
    assert str(info.value) == f"{path} {error.format(dir=tmp_path)}"


def test_a_class_list_of_one_name_is_told_as_such_whoever_made_the_data(tmp_path):
    """Not "record 1 has label 1, expected 0-0 ...; run cifar10-prepare again", which
    refuses one class itself: a folder of one name is not its."""
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=10)
    os.remove(os.path.join(batches_dir, synthetic.SYNTHETIC_MARKER))
    meta = os.path.join(batches_dir, ff.META_FILE)
    with open(meta, "w") as f:
        f.write("cat\n")
    before = {name: open(os.path.join(batches_dir, name), "rb").read()
              for name in os.listdir(batches_dir)}
    result = cli.call("cifar10-train", f"--data_dir={tmp_path / 'data'}",
                      f"--train_dir={tmp_path / 'train'}", "--max_steps=1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"cifar10-train: error: {meta} lists one class name (cat), and a classifier needs at "
        f"least 2 classes: list a name for each label in the data files, one per line, in "
        f"label order")
    assert {name: open(os.path.join(batches_dir, name), "rb").read()
            for name in os.listdir(batches_dir)} == before
    assert not (tmp_path / "train").exists()


def _prepared(folder, names, records_per_file=(6, 6, 6, 6, 6, 4)):
    """A data folder as cifar10-prepare writes it, of ``names``."""
    folder.mkdir(parents=True)
    (folder / ff.META_FILE).write_text("".join(f"{name}\n" for name in names))
    for name, count in zip(ff.TRAIN_FILES + ff.TEST_FILES, records_per_file):
        _write(folder / name, [_record(i % len(names), 0, 0, 0) for i in range(count)])
    return folder


def test_a_damaged_file_of_other_data_is_told_by_that_datas_sizes(tmp_path):
    """Data of cifar10-prepare's or made from CIFAR-100: its own record counts and the
    way to make it again, not CIFAR-10's file size."""
    own = _prepared(tmp_path / "own", ("ant", "bee", "cow"), (6, 6, 7, 6, 6, 4))
    (own / "data_batch_2.bin").write_bytes(b"")
    (own / "test_batch.bin").write_bytes(b"\0" * 5000)
    with pytest.raises(DataError) as info:
        datafolder.validate_files(datafolder.split_files(str(own), "train"), 3)
    assert str(info.value) == (
        f"empty data file {own / 'data_batch_2.bin'} (0 bytes; data made by cifar10-prepare: "
        f"its other files hold 6 to 7 records of 3,073 bytes); run cifar10-prepare again to "
        f"make {own} from your images")
    with pytest.raises(DataError) as info:
        datafolder.validate_files(datafolder.split_files(str(own), "test"), 3)
    assert str(info.value) == (
        f"truncated or corrupt data file {own / 'test_batch.bin'}: 5,000 bytes is not a whole "
        f"number of 3,073-byte records (data made by cifar10-prepare: its other files hold 6 "
        f"to 7 records of 3,073 bytes); run cifar10-prepare again to make {own} from your "
        f"images")
    fine = _prepared(tmp_path / "cifar-100-fine-batches-bin", [f"c{i}" for i in range(100)])
    (fine / "data_batch_5.bin").write_bytes(b"")
    with pytest.raises(DataError) as info:
        datafolder.validate_files(datafolder.split_files(str(fine), "train"), 100)
    assert str(info.value) == (
        f"empty data file {fine / 'data_batch_5.bin'} (0 bytes; data made from CIFAR-100: its "
        f"other files hold 6 records of 3,073 bytes); delete {fine} so that it is made again "
        f"from the extracted CIFAR-100 data")


def test_the_trainer_speaks_of_prepared_data_when_a_file_of_it_is_empty(tmp_path):
    own = _prepared(tmp_path / "data" / ff.BATCHES_DIRNAME, ("ant", "bee", "cow"))
    (own / "data_batch_3.bin").write_bytes(b"")
    result = cli.run("cifar10-train", f"--data_dir={tmp_path / 'data'}",
                     f"--train_dir={tmp_path / 'train'}", "--max_steps=1", timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: empty data file {own / 'data_batch_3.bin'} (0 bytes; data made "
        f"by cifar10-prepare: its other files hold 6 records of 3,073 bytes); run "
        f"cifar10-prepare again to make {own} from your images"]
    assert not (tmp_path / "train").exists()


# validate_files


def test_validate_files_counts_records(tmp_path):
    first = _write(tmp_path / "a.bin", [_record(k, k, k, k) for k in range(10)])
    second = _write(tmp_path / "b.bin", [_record(9, 0, 0, 0)] * 3)
    assert datafolder.validate_files([first, second]) == 13
    assert datafolder.validate_files([second]) == 3
    assert datafolder.validate_files([]) == 0


def test_validate_files_missing_file(tmp_path):
    good = _write(tmp_path / "a.bin", [_record(1, 0, 0, 0)])
    missing = str(tmp_path / "data_batch_2.bin")
    with pytest.raises(DataError) as info:
        datafolder.validate_files([good, missing])
    assert missing in str(info.value)
    assert "missing" in str(info.value)


@pytest.mark.parametrize("size", [100, ff.RECORD_BYTES + 5, 2 * ff.RECORD_BYTES - 1])
def test_validate_files_truncated_file(tmp_path, size):
    path = _write(tmp_path / "data_batch_1.bin", [(_record(1, 0, 0, 0) * 2)[:size]])
    with pytest.raises(DataError) as info:
        datafolder.validate_files([path])
    message = str(info.value)
    assert path in message
    assert f"{size} bytes" in message or f"{size:,} bytes" in message


def test_validate_files_empty_file(tmp_path):
    path = _write(tmp_path / "test_batch.bin", [])
    with pytest.raises(DataError) as info:
        datafolder.validate_files([path])
    assert str(info.value).startswith(f"empty data file {path} (0 bytes; the real files are "
                                      f"30,730,000 bytes)")
    assert "whole number" not in str(info.value)


@pytest.mark.parametrize("bad_label", [10, 255])
def test_validate_files_bad_label(tmp_path, bad_label):
    good = _write(tmp_path / "a.bin", [_record(9, 0, 0, 0)] * 2)
    records = [_record(k, 0, 0, 0) for k in (0, 1, 2)] + [_record(bad_label, 0, 0, 0),
                                                         _record(4, 0, 0, 0)]
    bad = _write(tmp_path / "b.bin", records)
    with pytest.raises(DataError) as info:
        datafolder.validate_files([good, bad])
    message = str(info.value)
    assert bad in message
    assert "record 3 " in message
    assert f"label {bad_label}," in message
    assert good not in message.split(":")[0]
    assert message.endswith(f"; delete {tmp_path} so that it is downloaded and extracted again")


def test_damaged_generated_data_is_to_be_generated_again_not_downloaded(tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=4)
    with open(os.path.join(batches_dir, "data_batch_2.bin"), "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(DataError) as info:
        datafolder.validate_files(datafolder.split_files(batches_dir, "train"))
    assert str(info.value).endswith(f"; delete {batches_dir} so that --synthetic_data "
                                    f"generates it again")


# split_files


def test_split_files():
    root = os.path.join("some", "dir")
    train = datafolder.split_files(root, "train")
    assert train == [os.path.join(root, f"data_batch_{i}.bin") for i in range(1, 6)]
    assert datafolder.split_files(root, "train_eval") == train
    assert datafolder.split_files(root, "test") == [os.path.join(root, "test_batch.bin")]
    with pytest.raises(ValueError, match="validation"):
        datafolder.split_files(root, "validation")


# distort_batch


def _noise_image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)


def _seed(n: int) -> tf.Tensor:
    return tf.constant([n, 0], dtype=tf.int64)


def test_distortion_shape_and_standardisation():
    image = tf.constant(_noise_image())
    for n in range(5):
        out = distort_one(image, _seed(n))
        assert out.dtype == tf.float32 and out.shape == (24, 24, 3)
        values = out.numpy()
        assert abs(values.mean()) < 1e-3
        assert abs(values.std() - 1.0) < 1e-2


def test_distortion_depends_only_on_seed():
    image = tf.constant(_noise_image())
    first = distort_one(image, _seed(11)).numpy()
    again = distort_one(image, _seed(11)).numpy()
    other = distort_one(image, _seed(12)).numpy()
    np.testing.assert_array_equal(first, again)
    assert np.abs(first - other).max() > 0.1


def test_distortion_flips_both_ways():
    """Left dark, right bright: brightness, contrast and scaling keep the order."""
    image = np.zeros((32, 32, 3), np.uint8)
    image[:, :16] = 20
    image[:, 16:] = 220
    flipped = []
    for n in range(40):
        out = distort_one(tf.constant(image), _seed(n)).numpy()
        left, right = out[:, :12].mean(), out[:, 12:].mean()
        assert left != right
        flipped.append(left > right)
    assert 5 <= sum(flipped) <= 35, sum(flipped)


def test_distortion_is_an_affine_random_crop():
    """Each output channel is a*window + b_c (a > 0) of one 24x24 (maybe flipped) window.

    Brightness adds one delta, contrast scales every channel by one factor around its
    mean and standardisation is affine: so the window can be found by correlation.
    """
    image = _noise_image(3)
    windows = set()
    for n in range(12):
        out = distort_one(tf.constant(image), _seed(n)).numpy().astype(np.float64)
        matches = []
        for top in range(9):
            for left in range(9):
                window = image[top:top + CROP, left:left + CROP].astype(np.float64)
                for flip in (False, True):
                    candidate = window[:, ::-1] if flip else window
                    corr = np.corrcoef(candidate[..., 0].ravel(), out[..., 0].ravel())[0, 1]
                    if corr > 0.9999:
                        matches.append((top, left, flip, candidate))
        assert len(matches) == 1, (n, [m[:3] for m in matches])
        top, left, flip, candidate = matches[0]
        windows.add((top, left, flip))
        # One common positive slope for the three channels, any offsets.
        slopes = []
        for c in range(3):
            slope, offset = np.polyfit(candidate[..., c].ravel(), out[..., c].ravel(), 1)
            np.testing.assert_allclose(slope * candidate[..., c] + offset, out[..., c], atol=1e-4)
            slopes.append(slope)
        assert slopes[0] > 0
        np.testing.assert_allclose(slopes, slopes[0], rtol=1e-4)
    assert len({(t, l) for t, l, _ in windows}) >= 6  # the crop moves
    assert {f for _, _, f in windows} == {False, True}


# eval_batch


def test_eval_preprocessing_is_central_crop_standardised():
    rows, cols = np.mgrid[0:32, 0:32]
    image = np.stack([rows * 7, cols * 7, (rows + cols) * 3], axis=-1).astype(np.uint8)
    out = eval_one(tf.constant(image))
    assert out.dtype == tf.float32 and out.shape == (24, 24, 3)
    np.testing.assert_allclose(out.numpy(), _standardize(image[4:28, 4:28]), atol=1e-5)


def test_eval_preprocessing_constant_image():
    """A flat image has std 0: the divisor is 1/sqrt(24*24*3), the result all zeros."""
    out = eval_one(tf.fill([32, 32, 3], tf.constant(77, tf.uint8)))
    np.testing.assert_array_equal(out.numpy(), np.zeros((24, 24, 3), np.float32))


# train_dataset


def test_train_dataset_shapes_and_is_endless(train_files):
    ds = data.train_dataset(train_files, 7, shuffle_buffer=10)
    assert ds.element_spec[0].shape == (7, 24, 24, 3)  # drop_remainder: static batch size
    assert ds.element_spec[1].shape == (7,)
    # Fixed parallelism: tf.data's autotuning thread delays deleting the iterator.
    assert ds.options().autotune.enabled is False
    count = 0
    for images, labels in ds.take(30):  # 210 examples from 100 records
        assert images.dtype == tf.float32 and images.shape == (7, 24, 24, 3)
        assert labels.dtype == tf.int32 and labels.shape == (7,)
        assert set(labels.numpy().tolist()) <= set(range(10))
        count += 1
    assert count == 30


def test_train_dataset_has_read_its_files_before_it_is_iterated(tmp_path):
    """Its in-memory cache is full before training reads a batch (a cache whose first
    pass stops early is discarded, with a warning, when training stops within its
    first epoch): the files can go, and two epochs still come, each a permutation."""
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=30)
    files = datafolder.split_files(batches_dir, "train")
    want = sorted(_file_labels(files).tolist())
    ds = data.train_dataset(files, 10, seed=1, shuffle_buffer=20)
    for path in files:
        os.remove(path)
    labels = np.concatenate([labels for _, labels in ds.take(30).as_numpy_iterator()])
    assert sorted(labels[:150].tolist()) == want and sorted(labels[150:].tolist()) == want


@pytest.mark.parametrize("batch_size", [0, -1])
def test_train_dataset_rejects_bad_batch_size(train_files, batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        data.train_dataset(train_files, batch_size)


def test_train_dataset_epochs_are_permutations(train_files):
    file_labels = _file_labels(train_files)
    assert file_labels.size == 100
    ds = data.train_dataset(train_files, 10, seed=5, shuffle_buffer=100)
    labels = np.concatenate([l for _, l in ds.take(20).as_numpy_iterator()])
    first, second = labels[:100], labels[100:]
    want = sorted(collections.Counter(file_labels.tolist()).items())
    assert sorted(collections.Counter(first.tolist()).items()) == want
    assert sorted(collections.Counter(second.tolist()).items()) == want
    assert not np.array_equal(first, file_labels)  # shuffled
    assert not np.array_equal(first, second)  # reshuffled each epoch


def test_train_dataset_is_deterministic_per_seed(train_files):
    def batches(seed):
        ds = data.train_dataset(train_files, 8, seed=seed, shuffle_buffer=50)
        return list(ds.take(3).as_numpy_iterator())

    first, again, other = batches(1), batches(1), batches(2)
    for (a_images, a_labels), (b_images, b_labels) in zip(first, again):
        np.testing.assert_array_equal(a_images, b_images)
        np.testing.assert_array_equal(a_labels, b_labels)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(first, other))


# eval_dataset


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory):
    """45 records per file."""
    return synthetic.write_dataset(str(tmp_path_factory.mktemp("eval")), records_per_file=45)


def test_eval_dataset_file_order_and_partial_batch(eval_dir):
    paths = datafolder.split_files(eval_dir, "test")
    batches = list(data.eval_dataset(paths, 20).as_numpy_iterator())
    assert [b[1].shape[0] for b in batches] == [20, 20, 5]
    assert all(images.shape == (n, 24, 24, 3) and images.dtype == np.float32
               for images, n in ((b[0], b[1].shape[0]) for b in batches))
    labels = np.concatenate([b[1] for b in batches])
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, _file_labels(paths))
    # The last image is the central crop of the last record.
    raw = np.fromfile(paths[0], dtype=np.uint8).reshape(-1, ff.RECORD_BYTES)[-1, 1:]
    image = raw.reshape(3, 32, 32).transpose(1, 2, 0)
    np.testing.assert_allclose(batches[-1][0][-1], _standardize(image[4:28, 4:28]), atol=1e-5)


def test_eval_dataset_over_several_files_once(eval_dir):
    paths = datafolder.split_files(eval_dir, "train_eval")
    labels = np.concatenate([l for _, l in data.eval_dataset(paths, 64).as_numpy_iterator()])
    np.testing.assert_array_equal(labels, _file_labels(paths))
    assert labels.size == 225


@pytest.mark.parametrize("num_examples,sizes", [(30, [20, 10]), (40, [20, 20]), (1, [1]),
                                                (1000, [20, 20, 5])])
def test_eval_dataset_num_examples(eval_dir, num_examples, sizes):
    paths = datafolder.split_files(eval_dir, "test")
    batches = list(data.eval_dataset(paths, 20, num_examples=num_examples).as_numpy_iterator())
    assert [b[1].shape[0] for b in batches] == sizes
    labels = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(labels, _file_labels(paths)[:num_examples])


def test_eval_dataset_rejects_bad_batch_size(eval_dir):
    with pytest.raises(ValueError, match="batch_size"):
        data.eval_dataset(datafolder.split_files(eval_dir, "test"), 0)


# Distribution


def test_train_dataset_under_mirrored_strategy(train_files):
    strategy = mirrored(2)
    assert strategy.num_replicas_in_sync == 2
    contexts = []

    def dataset_fn(ctx):
        contexts.append(ctx)
        return data.train_dataset(train_files, 4, input_context=ctx, shuffle_buffer=50)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    assert contexts and contexts[0].num_replicas_in_sync == 2
    iterator = iter(dist)
    for _ in range(3):
        images, labels = next(iterator)
        local_images = strategy.experimental_local_results(images)
        local_labels = strategy.experimental_local_results(labels)
        assert len(local_images) == 2 and len(local_labels) == 2
        for i, (x, y) in enumerate(zip(local_images, local_labels)):
            assert x.shape == (4, 24, 24, 3) and x.dtype == tf.float32
            assert y.shape == (4,) and y.dtype == tf.int32
            assert x.device.endswith(f"CPU:{i}")
        assert not np.array_equal(local_images[0].numpy(), local_images[1].numpy())


@pytest.mark.parametrize("apply", [data.apply_distortions, data.apply_distortions_fused],
                         ids=["ops", "xla"])
def test_batched_distortions_equal_tf_image_ops_one_image_at_a_time(apply):
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, size=(6, 32, 32, 3), dtype=np.uint8)
    top = np.array([0, 8, 3, 5, 1, 7], np.int32)
    left = np.array([8, 0, 2, 6, 4, 1], np.int32)
    flip = np.array([True, False, True, False, False, True])
    delta = np.array([-63, 0, 12.5, 40, -7, 63], np.float32)
    factor = np.array([0.2, 1.8, 1.0, 0.5, 1.3, 0.9], np.float32)
    got = apply(tf.constant(images), tf.constant(top), tf.constant(left),
                tf.constant(flip), tf.constant(delta), tf.constant(factor))
    for i in range(6):
        x = tf.image.crop_to_bounding_box(tf.cast(images[i], tf.float32), int(top[i]),
                                          int(left[i]), 24, 24)
        if flip[i]:
            x = tf.image.flip_left_right(x)
        x = tf.image.adjust_brightness(x, float(delta[i]))
        x = tf.image.adjust_contrast(x, float(factor[i]))
        want = tf.image.per_image_standardization(x)
        np.testing.assert_allclose(got[i].numpy(), want.numpy(), atol=2e-5)


def test_input_pipelines_of_two_workers_read_disjoint_shards(tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=20)
    files = datafolder.split_files(batches_dir, "train")
    every = [label for _, labels in data.eval_dataset(files, 100) for label in labels.numpy()]
    shards = []
    for pipeline in (0, 1):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                         num_replicas_in_sync=2)
        shards.append([int(label) for _, labels in data.eval_dataset(files, 7, input_context=ctx)
                       for label in labels.numpy()])
        # One epoch of the training pipeline of this worker holds its 50 records.
        train_labels = np.concatenate([labels.numpy() for _, labels in data.train_dataset(
            files, 10, shuffle_buffer=100, input_context=ctx).take(5)])
        assert sorted(train_labels) == sorted(shards[-1])
    assert shards[0] == every[0::2] and shards[1] == every[1::2]


def test_eval_batch_equals_tf_image_central_crop_and_standardisation():
    images = np.random.default_rng(9).integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    got = data.eval_batch(tf.constant(images)).numpy()
    for i in range(5):
        crop = tf.image.resize_with_crop_or_pad(tf.cast(images[i], tf.float32), 24, 24)
        want = tf.image.per_image_standardization(crop).numpy()
        np.testing.assert_allclose(got[i], want, atol=2e-5)


def test_labels_beyond_the_named_classes_are_refused_with_advice_for_own_data(tmp_path):
    (tmp_path / ff.META_FILE).write_text("ant\nbee\n")
    path = _write(tmp_path / "data_batch_1.bin", [_record(k, 0, 0, 0) for k in (0, 1, 2)])
    assert datafolder.validate_files([path], num_classes=3) == 3
    with pytest.raises(DataError) as info:
        datafolder.validate_files([path], num_classes=2)
    assert str(info.value) == (
        f"corrupt data file {path}: record 2 has label 2, expected 0-1 (batches.meta.txt names "
        f"2 classes); run cifar10-prepare again to make {tmp_path} from your images")


def test_with_fewer_training_records_than_pipelines_each_pipeline_reads_them_all(tmp_path):
    # 5 records and 8 CPU replicas, each with its own pipeline: a disjoint share would
    # leave 3 of them none, and training would stop at step 0 (End of sequence).
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=1)
    files = datafolder.split_files(batches_dir, "train")
    every = sorted(int(label) for _, labels in data.eval_dataset(files, 100)
                   for label in labels.numpy())
    assert len(every) == 5
    for pipeline in (0, 7):
        ctx = tf.distribute.InputContext(num_input_pipelines=8, input_pipeline_id=pipeline,
                                         num_replicas_in_sync=8)
        [(_, labels)] = data.train_dataset(files, 5, shuffle_buffer=100,
                                           input_context=ctx).take(1)
        assert sorted(labels.numpy()) == every
