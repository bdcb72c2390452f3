"""CIFAR-100: downloaded from a mirror (a generated tarball), checked, extracted, and
trained on with its fine or coarse labels."""

import hashlib
import io
import os
import shutil
import tarfile
import threading

import numpy as np
import pytest

from cli import call
from cifar10.runs import checkpoints
from cifar10.data import cifar100
from cifar10.data import getdata
from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.data import fileformat as ff
from conftest import EVAL_LINE

FINE = [f"fine{i:02d}" for i in range(100)]
COARSE = [f"coarse{i:02d}" for i in range(20)]


def records(count: int, seed: int) -> bytes:
    """``count`` CIFAR-100 records: coarse label, fine label, 3,072 image bytes."""
    rng = np.random.default_rng(seed)
    fine = np.arange(count) % 100
    out = np.zeros((count, 2 + ff.IMAGE_BYTES), np.uint8)
    out[:, 0], out[:, 1] = fine // 5, fine
    out[:, 2:] = rng.integers(0, 256, (count, ff.IMAGE_BYTES))
    return out.tobytes()


@pytest.fixture(scope="module")
def tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, payload in [("train.bin", records(300, 1)), ("test.bin", records(100, 2)),
                              ("fine_label_names.txt", "\n".join(FINE).encode() + b"\n"),
                              ("coarse_label_names.txt", "\n".join(COARSE).encode() + b"\n")]:
            info = tarfile.TarInfo(f"{ff.CIFAR100.folder}/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def url(tarball, tmp_path_factory):
    """The tarball's file:// address (a mirror on disk)."""
    path = tmp_path_factory.mktemp("mirror") / ff.CIFAR100.tarball
    path.write_bytes(tarball)
    return path.as_uri()


def test_records_keep_the_chosen_label_and_the_image(tmp_path):
    path = tmp_path / "train.bin"
    path.write_bytes(records(7, 3))
    raw = np.frombuffer(records(7, 3), np.uint8).reshape(7, -1)
    for label, index in (("coarse", 0), ("fine", 1)):
        got = cifar100.read_records(str(path), label)
        assert got.shape == (7, ff.RECORD_BYTES)
        np.testing.assert_array_equal(got[:, 0], raw[:, index])
        np.testing.assert_array_equal(got[:, 1:], raw[:, 2:])


@pytest.mark.parametrize("label, names", [("fine", FINE), ("coarse", COARSE)])
def test_download_extract_train_and_evaluate_with_either_label(url, tarball, tmp_path, label,
                                                              names):
    md5 = hashlib.md5(tarball).hexdigest()
    data_dir, train_dir = tmp_path / "data", tmp_path / "train"
    flags = ["--dataset=cifar100", f"--label={label}", f"--data_url={url}",
             f"--data_md5={md5}", f"--data_dir={data_dir}"]
    trained = call("cifar10-train", *flags, f"--train_dir={train_dir}", "--max_steps=2",
                   "--batch_size=8", "--summary_steps=1000")
    assert trained.returncode == 0, trained.stderr
    derived = data_dir / cifar100.batches_dir_name(label)
    assert f"Training on 300 examples from {derived} " in trained.stdout
    assert sorted(os.listdir(data_dir)) == sorted(
        [ff.CIFAR100.tarball, ff.CIFAR100.folder, cifar100.batches_dir_name(label)])
    assert datafolder.class_names(str(derived)) == tuple(names)
    assert [os.path.getsize(p) for p in datafolder.split_files(str(derived), "train")] == \
        [60 * ff.RECORD_BYTES] * 5
    assert checkpoints.trained_class_names(str(train_dir)) == tuple(names)
    assert checkpoints.num_outputs(str(train_dir / "model.ckpt-2")) == len(names)

    evaluated = call("cifar10-eval", *flags, f"--checkpoint_dir={train_dir}",
                     f"--eval_dir={tmp_path / 'eval'}", "--run_once", "--batch_size=50")
    assert evaluated.returncode == 0, evaluated.stderr
    out = evaluated.stdout.splitlines()
    assert EVAL_LINE.match(out[0]) and ", 100 examples, " in out[0]
    assert [row.split()[0] for row in out[2:2 + len(names)]] == names  # the class table


def test_the_other_label_of_the_same_data_is_another_run(url, tarball, tmp_path):
    md5 = hashlib.md5(tarball).hexdigest()
    data_dir, train_dir = tmp_path / "data", tmp_path / "train"
    flags = ["--dataset=cifar100", f"--data_url={url}", f"--data_md5={md5}",
             f"--data_dir={data_dir}", f"--train_dir={train_dir}", "--batch_size=8"]
    assert call("cifar10-train", *flags, "--max_steps=1").returncode == 0
    coarse = call("cifar10-train", *flags, "--label=coarse", "--max_steps=2")
    assert coarse.returncode == 1
    assert coarse.stderr.strip().splitlines()[-1] == (
        f"cifar10-train: error: --train_dir={train_dir} holds a run trained on CIFAR-100's "
        f"fine labels (--dataset=cifar100 --label=fine), and this start would go on with it "
        f"on CIFAR-100's coarse labels (--dataset=cifar100 --label=coarse): pass "
        f"--dataset=cifar100 --label=fine to go on with the run, or --fresh_start (or another "
        f"--train_dir) for a new run")


def _extract(tarball: bytes, data_dir) -> str:
    """The ``cifar-100-binary`` folder, extracted into ``data_dir`` as a user would."""
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        tar.extractall(data_dir)
    return str(data_dir / ff.CIFAR100.folder)


def _snapshot(folder) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(root, name), folder):
            open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(folder) for name in names}


OFFLINE = f"http://127.0.0.1:9/{ff.CIFAR100.tarball}"  # nothing listens on port 9


def test_the_extracted_folder_or_a_labels_folder_given_itself_is_trained_on(tarball,
                                                                            tmp_path):
    """As --data_dir=<cifar-10-batches-bin> is for CIFAR-10: no download (there is no
    server), the records with the label written inside the folder the user named."""
    extracted = _extract(tarball, tmp_path / "data")
    before = _snapshot(extracted)
    fine = os.path.join(extracted, cifar100.batches_dir_name("fine"))
    for data_dir in (extracted, fine):
        trained = call("cifar10-train", "--dataset=cifar100", f"--data_dir={data_dir}",
                       f"--data_url={OFFLINE}", f"--train_dir={tmp_path / 'train'}",
                       "--max_steps=1", "--batch_size=8", "--summary_steps=1000", "--fresh_start")
        assert trained.returncode == 0, trained.stderr
        assert f"Training on 300 examples from {fine} " in trained.stdout
    assert datafolder.class_names(fine) == tuple(FINE)
    after = _snapshot(extracted)
    assert {k: v for k, v in after.items() if k in before} == before  # the user's files
    assert sorted(set(after) - set(before)) == sorted(
        os.path.join(cifar100.batches_dir_name("fine"), name)
        for name in (*ff.TRAIN_FILES, *ff.TEST_FILES, ff.META_FILE))
    assert _train_error(tmp_path / "coarse", fine, "--label=coarse") == (
        f"cifar10-train: error: --data_dir={fine} holds CIFAR-100's fine labels, and "
        f"--label=coarse asks for its coarse ones: pass --label=fine, or the folder that "
        f"holds (or will hold) the data set asked for")
    # CIFAR-100's extracted folder without --dataset=cifar100: no CIFAR-10 download into it.
    result = call("cifar10-train", f"--data_dir={extracted}", f"--data_url={OFFLINE}",
                  f"--train_dir={tmp_path / 'as_cifar10'}", "--max_steps=1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"cifar10-train: error: --data_dir={extracted} holds CIFAR-100's data, and CIFAR-10's "
        f"is asked for: pass --dataset=cifar100, or the folder that holds (or will hold) the "
        f"data set asked for")
    assert not (tmp_path / "as_cifar10").exists()


def _train_error(tmp_path, data_dir, *flags: str) -> str:
    """The last line of cifar10-train on CIFAR-100 in ``data_dir``, which must fail."""
    result = call("cifar10-train", "--dataset=cifar100", f"--data_dir={data_dir}",
                  f"--data_url={OFFLINE}", f"--train_dir={tmp_path / 'train'}",
                  "--max_steps=1", *flags)
    assert result.returncode == 1, result.stderr
    assert not (tmp_path / "train").exists()
    return result.stderr.strip().splitlines()[-1]


def test_a_damaged_source_is_named_and_following_the_advice_does_not_loop(tarball, tmp_path):
    """A derived folder made from a damaged source (by an earlier version) is to be made
    again; made again, the source is checked first and named, not the derived folder."""
    data_dir = tmp_path / "data"
    extracted = _extract(tarball, data_dir)
    derived = cifar100.batches_dir(extracted, str(data_dir), "fine")
    # Record 7's fine label made 150 (of 100 classes) in the source and, as an earlier
    # version copied it unchecked, in the derived folder.
    for path, record_bytes, at in ((os.path.join(extracted, "train.bin"), 2 + ff.IMAGE_BYTES, 1),
                                   (os.path.join(derived, ff.TRAIN_FILES[0]), ff.RECORD_BYTES, 0)):
        with open(path, "r+b") as f:
            f.seek(7 * record_bytes + at)
            f.write(bytes([150]))
    first = _train_error(tmp_path, data_dir)
    assert first.endswith(f"; delete {derived} so that it is made again from the extracted "
                          f"CIFAR-100 data"), first
    shutil.rmtree(derived)  # the advice followed
    before = _snapshot(data_dir)
    assert _train_error(tmp_path, data_dir) == (
        f"cifar10-train: error: corrupt data file {extracted}/train.bin: record 7 has fine "
        f"label 150, expected 0-99 (fine_label_names.txt names 100 classes); delete "
        f"{extracted} (and cifar-100-binary.tar.gz beside it, unless it is the published one) "
        f"so that it is extracted or downloaded again")
    assert _snapshot(data_dir) == before  # no derived folder made from it


@pytest.mark.parametrize("damage, problem", [
    ("cut", "truncated or corrupt data file {extracted}/test.bin: 307,410 bytes is not a "
            "whole number of 3,074-byte CIFAR-100 records"),
    ("", "{extracted}/fine_label_names.txt lists no class names"),
    ("".join(f"{name}\n" for name in FINE[:50]),
     "corrupt data file {extracted}/train.bin: record 50 has fine label 50, expected 0-49 "
     "(fine_label_names.txt names 50 classes)"),
])
def test_a_damaged_source_given_itself_is_the_users_to_replace(tarball, tmp_path, damage,
                                                               problem):
    extracted = _extract(tarball, tmp_path / "data")
    if damage == "cut":
        with open(os.path.join(extracted, "test.bin"), "ab") as f:
            f.write(b"\0" * 10)
    else:
        with open(os.path.join(extracted, "fine_label_names.txt"), "w") as f:
            f.write(damage)
    before = _snapshot(extracted)
    assert _train_error(tmp_path, extracted) == (
        f"cifar10-train: error: {problem.format(extracted=extracted)}; replace {extracted} "
        f"with a sound copy (extract the published cifar-100-binary.tar.gz again)")
    assert _snapshot(extracted) == before


def test_a_task_whose_data_another_converts_waits_for_the_labels_folder(tarball, tmp_path):
    """Under srun the node's first task writes the label's folder from the extracted
    data; the others wait for it rather than write it too."""
    data_dir = tmp_path / "data"
    extracted = _extract(tarball, data_dir)
    first = "Slurm task 0 (the first task on node7)"
    converter = threading.Timer(0.5, cifar100.batches_dir, (extracted, str(data_dir), "fine"))
    lines = []
    converter.start()
    try:
        found, counts = getdata.prepare(str(data_dir), url=OFFLINE, dataset="cifar100",
                                        label="fine", print_fn=lines.append,
                                        fetched_by=first, wait_s=60)
    finally:
        converter.join()
    assert found == str(data_dir / cifar100.batches_dir_name("fine"))
    assert counts == {"train": 300, "test": 100}
    assert lines == [f"Waiting for {first} to fetch the data into {data_dir}."]


def test_a_cifar100_run_scored_on_own_data_of_cifar10s_format_is_refused(url, tmp_path):
    # The evaluator takes --dataset=cifar100 from the run; the --data_dir given holds
    # data of CIFAR-10's format: nothing is downloaded into it, and the error says why.
    own = tmp_path / "own"
    data_dir = synthetic.write_dataset(str(own), records_per_file=10)
    files = _snapshot(own)
    train = tmp_path / "train"
    train.mkdir()
    (train / "flags.txt").write_text(
        "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n"
        f"--data_dir={tmp_path / 'c100'}\n--dataset=cifar100\n--label=fine\n")
    for name in ("model.ckpt-5.index", "model.ckpt-5.data-00000-of-00001"):
        (train / name).write_bytes(b"")
    result = call("cifar10-eval", f"--checkpoint_dir={train}", f"--eval_dir={tmp_path / 'eval'}",
                  f"--data_dir={data_dir}", f"--data_url={url}", "--run_once")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-eval: error: --data_dir={data_dir} (--dataset=cifar100, from "
        f"{train}/flags.txt) holds data of CIFAR-10's format, and --dataset=cifar100 asks for "
        f"CIFAR-100's: pass --dataset=cifar10, or the folder that holds (or will hold) the "
        f"data set asked for")
    assert _snapshot(own) == files
