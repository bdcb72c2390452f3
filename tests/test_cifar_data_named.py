"""cifar10-predict given CIFAR-format data (cifar10.cli.cifar_data_named): one line,
before TensorFlow loads, with the cifar10-eval command that scores the model on it."""

from __future__ import annotations

import pytest
from cli import assert_refused, call

from cifar10.cli import cifar_data_named
from cifar10.data import synthetic


@pytest.fixture
def data(tmp_path, monkeypatch):
    """A data folder, data/cifar-10-batches-bin, with tmp_path the current folder."""
    monkeypatch.chdir(tmp_path)
    synthetic.write_dataset("data", records_per_file=2)
    return tmp_path / "data"


FILE = ("is CIFAR-format data (records of labelled 32x32 images), not an image: score the "
        "model on it with cifar10-eval")
FOLDER = ("is a folder of CIFAR-format data, not of images: score the model on its test "
          "records with cifar10-eval")


@pytest.mark.parametrize("named, said", [
    ("data/cifar-10-batches-bin/test_batch.bin",
     f"{FILE} --checkpoint_dir=runs/a/train --data_dir=data --run_once"),
    ("data/cifar-10-batches-bin/data_batch_3.bin",
     f"{FILE} --checkpoint_dir=runs/a/train --data_dir=data --eval_data=train_eval --run_once"),
    ("data/cifar-10-batches-bin/", f"{FOLDER} --checkpoint_dir=runs/a/train --data_dir=data "
                                   f"--run_once"),
    ("data", f"{FOLDER} --checkpoint_dir=runs/a/train --data_dir=data --run_once")])
def test_a_record_file_or_a_data_folder_is_one_line_naming_cifar10_eval(data, named, said):
    assert_refused(call("cifar10-predict", "--checkpoint_dir=runs/a/train", "cat.png", named),
                   f"cifar10-predict: error: {named} {said}")


def test_the_command_takes_the_checkpoint_given_and_the_data_dir_from_inside(data,
                                                                           monkeypatch):
    monkeypatch.chdir(data / "cifar-10-batches-bin")
    assert_refused(call("cifar10-predict", "--checkpoint=../../my run/model.ckpt-5",
                        "test_batch.bin"),
                   f"cifar10-predict: error: test_batch.bin {FILE} "
                   f"--checkpoint='../../my run/model.ckpt-5' --data_dir=.. --run_once")


def test_images_and_files_only_named_as_records_are_not_refused(data):
    """A folder of images beside a data folder is searched; a file of a record file's
    name that holds no whole records is an image that does not read, as any other."""
    (data / "photos").mkdir()
    (data / "photos" / "cat.png").write_bytes(b"")
    (data / "test.bin").write_bytes(b"not records")
    cifar_data_named.refuse_cifar_data(["-", str(data), str(data / "test.bin")],
                                       "--checkpoint_dir=runs/a/train")
