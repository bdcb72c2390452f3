"""cifar10.data.pipeline and cifar10.data.folder: records, file checks, the pipelines."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core import config, machine
from cifar10.data import pipeline as data
from cifar10.data import folder as datafolder
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.core.errors import DataError

SIZE = ff.IMAGE_SIZE
CROP = config.CROP_SIZE


def distort_one(image, seed):
    return data.distort_batch(tf.convert_to_tensor(image)[None], seed)[0]


def _record(label: int, red, green, blue) -> bytes:
    planes = [np.broadcast_to(np.asarray(p, dtype=np.uint8), (SIZE, SIZE)) for p in (red, green, blue)]
    return bytes([label]) + b"".join(np.ascontiguousarray(p).tobytes() for p in planes)


def _write(path, records: list[bytes]) -> str:
    with open(path, "wb") as f:
        f.write(b"".join(records))
    return str(path)


def _file_labels(paths) -> np.ndarray:
    return np.concatenate(
        [np.fromfile(p, dtype=np.uint8).reshape(-1, ff.RECORD_BYTES)[:, 0] for p in paths])


@pytest.fixture(scope="module")
def batches_dir(tmp_path_factory):
    """A synthetic data set of 20 records per file (100 training records)."""
    return synthetic.write_dataset(str(tmp_path_factory.mktemp("data")), records_per_file=20)


@pytest.fixture(scope="module")
def train_files(batches_dir):
    return datafolder.split_files(batches_dir, "train")


def test_decode_record_is_row_major_hwc():
    pattern = (np.arange(SIZE * SIZE) % 256).astype(np.uint8).reshape(SIZE, SIZE)  # position
    images, labels = data.decode_records(tf.constant([_record(9, pattern, 255 - pattern,
                                                              pattern.T)]))
    assert labels.dtype == tf.int32 and labels.numpy().tolist() == [9]
    assert images.dtype == tf.uint8 and images.shape == (1, 32, 32, 3)
    np.testing.assert_array_equal(images[0].numpy(),
                                  np.stack([pattern, 255 - pattern, pattern.T], axis=-1))


def test_read_records_file_then_record_order(tmp_path):
    first = _write(tmp_path / "a.bin", [_record(3, 1, 2, 3), _record(0, 4, 5, 6)])
    second = _write(tmp_path / "b.bin", [_record(8, 7, 8, 9), _record(5, 10, 11, 12),
                                         _record(1, 13, 14, 15)])
    got = list(data.read_records([first, second]).as_numpy_iterator())
    assert [int(label) for _, label in got] == [3, 0, 8, 5, 1]
    assert [image[5, 6].tolist() for image, _ in got] == [
        [1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]


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
                "one class name per line, in label order, a name for each label in the data "
                "files$"),
    (b"ant\n\xffbee\n", r"is not UTF-8 text \(byte 0xff at offset 4\): list one class name "
                         "per line, in label order, in UTF-8$"),
    (None, "is a folder, not a class names file; run cifar10-prepare again to make {dir} "
           "from your images$"),
])
def test_bad_class_names_files_are_one_line_errors(tmp_path, text, error):
    path = tmp_path / ff.META_FILE
    if text is None:
        path.mkdir()
    else:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DataError, match=f"^{path} {error.format(dir=tmp_path)}"):
        datafolder.class_names(str(tmp_path))


def _prepared(folder, names, records_per_file=(6, 6, 6, 6, 6, 4)):
    """A data folder as cifar10-prepare writes it, of ``names``."""
    folder.mkdir(parents=True)
    (folder / ff.META_FILE).write_text("".join(f"{name}\n" for name in names))
    for name, count in zip(ff.TRAIN_FILES + ff.TEST_FILES, records_per_file):
        _write(folder / name, [_record(i % len(names), 0, 0, 0) for i in range(count)])
    return folder


@pytest.mark.parametrize("kind, redo", [
    ("downloaded", "delete {dir} so that it is downloaded and extracted again"),
    ("tarball", "delete {dir} so that it is extracted again from {tarball}"),
    ("generated", "delete {dir} so that --synthetic_data generates it again"),
    ("own", "run cifar10-prepare again to make {dir} from your images"),
    ("cifar100", "delete {dir} so that it is made again from the extracted CIFAR-100 data"),
])
def test_a_damaged_data_file_is_named_with_the_way_to_make_it_again(tmp_path, kind, redo):
    name = "cifar-100-fine-batches-bin" if kind == "cifar100" else ff.BATCHES_DIRNAME
    folder = _prepared(tmp_path / name, ff.CLASS_NAMES if kind != "own" else ("ant", "bee"))
    if kind == "tarball":
        (tmp_path / ff.TARBALL_NAME).write_bytes(b"")
    if kind == "generated":
        (folder / synthetic.SYNTHETIC_MARKER).write_text("")
    (folder / "data_batch_2.bin").write_bytes(b"")
    (folder / "test_batch.bin").write_bytes(b"\0" * 5000)
    redo = redo.format(dir=folder, tarball=tmp_path / ff.TARBALL_NAME)
    with pytest.raises(DataError) as info:
        datafolder.validate_files(datafolder.split_files(str(folder), "train"))
    assert str(info.value) == (f"truncated or corrupt data file {folder / 'data_batch_2.bin'}: "
                               f"0 bytes is not a whole number of 3,073-byte records; {redo}")
    with pytest.raises(DataError) as info:
        datafolder.validate_files([str(folder / "test_batch.bin")])
    assert str(info.value) == (f"truncated or corrupt data file {folder / 'test_batch.bin'}: "
                               f"5,000 bytes is not a whole number of 3,073-byte records; {redo}")


def test_validate_files_counts_records_and_names_a_missing_file_or_a_bad_label(tmp_path):
    first = _write(tmp_path / "a.bin", [_record(k, k, k, k) for k in range(10)])
    second = _write(tmp_path / "b.bin", [_record(9, 0, 0, 0)] * 3)
    assert datafolder.validate_files([first, second]) == 13
    assert datafolder.validate_files([]) == 0
    with pytest.raises(DataError, match=f"^missing data file {tmp_path / 'c.bin'}: expected a "
                                        f"CIFAR-10-format binary file of 3,073-byte records; "):
        datafolder.validate_files([first, str(tmp_path / "c.bin")])
    (tmp_path / ff.META_FILE).write_text("ant\nbee\n")
    path = _write(tmp_path / "data_batch_1.bin", [_record(k, 0, 0, 0) for k in (0, 1, 2)])
    assert datafolder.validate_files([path], num_classes=3) == 3
    with pytest.raises(DataError) as info:
        datafolder.validate_files([path], num_classes=2)
    assert str(info.value) == (
        f"corrupt data file {path}: record 2 has label 2, expected 0-1 (batches.meta.txt names "
        f"2 classes); run cifar10-prepare again to make {tmp_path} from your images")


def _seed(n: int) -> tf.Tensor:
    return tf.constant([n, 0], dtype=tf.int64)


def test_distortion_depends_only_on_the_seed():
    """(Its values: test_batched_distortions_equal_tf_image_ops_one_image_at_a_time.)"""
    image = tf.constant(np.random.default_rng(0).integers(0, 256, (32, 32, 3), np.uint8))
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


def test_eval_batch_equals_tf_image_central_crop_and_standardisation():
    images = np.random.default_rng(9).integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    got = data.eval_batch(tf.constant(images)).numpy()
    for i in range(5):
        crop = tf.image.resize_with_crop_or_pad(tf.cast(images[i], tf.float32), 24, 24)
        want = tf.image.per_image_standardization(crop).numpy()
        np.testing.assert_allclose(got[i], want, atol=2e-5)
    # A flat image has std 0: the divisor is 1/sqrt(24*24*3), the result all zeros.
    out = data.eval_batch(tf.fill([1, 32, 32, 3], tf.constant(77, tf.uint8)))
    np.testing.assert_array_equal(out.numpy(), np.zeros((1, 24, 24, 3), np.float32))


def test_train_dataset_is_endless_shuffled_batches_each_epoch_a_permutation(train_files):
    ds = data.train_dataset(train_files, 10, seed=5, shuffle_buffer=100)
    assert ds.element_spec[0].shape == (10, 24, 24, 3)  # drop_remainder: static batch size
    assert ds.element_spec[1].shape == (10,)
    # Fixed parallelism: tf.data's autotuning thread delays deleting the iterator.
    assert ds.options().autotune.enabled is False
    batches = list(ds.take(20).as_numpy_iterator())  # 200 examples from 100 records
    assert all(images.dtype == np.float32 and labels.dtype == np.int32
               for images, labels in batches)
    labels = np.concatenate([labels for _, labels in batches])
    file_labels = _file_labels(train_files)
    first, second = labels[:100], labels[100:]
    assert sorted(first.tolist()) == sorted(second.tolist()) == sorted(file_labels.tolist())
    assert not np.array_equal(first, file_labels)  # shuffled
    assert not np.array_equal(first, second)  # reshuffled each epoch
    # The same seed gives the same batches; another seed others.
    again = list(data.train_dataset(train_files, 10, seed=5, shuffle_buffer=100).take(3)
                 .as_numpy_iterator())
    other = list(data.train_dataset(train_files, 10, seed=6, shuffle_buffer=100).take(3)
                 .as_numpy_iterator())
    for (a_images, a_labels), (b_images, b_labels) in zip(batches, again):
        np.testing.assert_array_equal(a_images, b_images)
        np.testing.assert_array_equal(a_labels, b_labels)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(batches, other))
    # Without ``deterministic`` the same batches, each as soon as it is ready: the k-th
    # out is one of the first k + (parallel calls) in order, never another.
    def batch_set(deterministic, count):
        ds = data.train_dataset(train_files, 10, seed=5, shuffle_buffer=100,
                                deterministic=deterministic).take(count)
        return [labels.tobytes() + images.tobytes() for images, labels in ds.as_numpy_iterator()]

    unordered = batch_set(False, 20)
    assert len(set(unordered)) == 20
    assert set(unordered) <= set(batch_set(True, 20 + machine.host_cores()))


def _settings(ds: tf.data.Dataset) -> dict:
    """The parallel map's and the prefetch's settings in ``ds``'s graph."""
    graph = tf.compat.v1.GraphDef.FromString(
        tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor).numpy())
    nodes = {node.name: node for node in graph.node}
    value = lambda name: int(tf.make_ndarray(nodes[name].attr["value"].tensor))  # noqa: E731
    [distort] = [n for n in graph.node if n.op == "ParallelMapDatasetV2"]
    [prefetch] = [n for n in graph.node if n.op == "PrefetchDataset"]
    return {"parallel": value(distort.input[-1]), "in order": distort.attr["deterministic"].s,
            "prefetch": value(prefetch.input[1])}


def test_the_training_input_uses_the_cores_it_may_run_on_and_feeds_each_replica(
        train_files, monkeypatch, tmp_path):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5, 7}, raising=False)
    monkeypatch.setattr(machine, "CPU_QUOTA_FILE", str(tmp_path / "cpu.max"))
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # a container's 2.5 CPUs
    assert _settings(data.train_dataset(train_files, 10)) == {
        "parallel": 3, "in order": b"true", "prefetch": 4}
    (tmp_path / "cpu.max").write_text("max 100000\n")  # no quota: the affinity
    # A worker's pipeline feeding its 8 GPUs keeps 4 steps' batches for each ready.
    gpus = tf.distribute.InputContext(num_input_pipelines=1, num_replicas_in_sync=8)
    assert _settings(data.train_dataset(train_files, 10, input_context=gpus,
                                        deterministic=False)) == {
        "parallel": 4, "in order": b"false", "prefetch": 32}
    # Three CPU replicas' pipelines on this host share its cores.
    cpus = tf.distribute.InputContext(num_input_pipelines=3, num_replicas_in_sync=3)
    assert _settings(data.train_dataset(train_files, 10, input_context=cpus,
                                        local_pipelines=3))["parallel"] == 1


def test_train_dataset_has_read_its_files_before_it_is_iterated(tmp_path):
    """Its memory cache is full before training reads a batch (one whose first pass
    stops early is discarded): the files can go, and epochs still come."""
    batches_dir = synthetic.write_dataset(str(tmp_path / "data"), records_per_file=30)
    files = datafolder.split_files(batches_dir, "train")
    want = sorted(_file_labels(files).tolist())
    ds = data.train_dataset(files, 10, seed=1, shuffle_buffer=20)
    for path in files:
        os.remove(path)
    labels = np.concatenate([labels for _, labels in ds.take(30).as_numpy_iterator()])
    assert sorted(labels[:150].tolist()) == want and sorted(labels[150:].tolist()) == want


def test_the_datasets_reject_a_batch_size_below_one(train_files):
    for dataset in (data.train_dataset, data.eval_dataset):
        with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
            dataset(train_files, 0)


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory):
    return synthetic.write_dataset(str(tmp_path_factory.mktemp("eval")), records_per_file=45)


@pytest.mark.parametrize("split,num_examples,sizes", [
    ("test", 30, [20, 10]), ("test", 1000, [20, 20, 5]),
    ("train_eval", None, [20] * 11 + [5])])
def test_eval_dataset_takes_the_first_examples_once(eval_dir, split, num_examples, sizes):
    paths = datafolder.split_files(eval_dir, split)
    batches = list(data.eval_dataset(paths, 20, num_examples=num_examples).as_numpy_iterator())
    assert [b[1].shape[0] for b in batches] == sizes
    assert all(b[0].shape[1:] == (24, 24, 3) and b[0].dtype == np.float32 for b in batches)
    labels = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(labels, _file_labels(paths)[:num_examples])


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
