"""Finding a program's data before TensorFlow loads (cifar10.data.getdata, cifar10.data.folder):
the data folder itself is taken, the common mistakes get one line with the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli import env

from cifar10.data import folder as datafolder
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.core.errors import DataError

OFFLINE = "http://127.0.0.1:9/cifar-10-binary.tar.gz"  # nothing listens on port 9


def test_a_data_folder_given_itself_is_taken(tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=10)
    found, counts = getdata.prepare(batches_dir, url=OFFLINE)
    assert found == batches_dir
    assert counts == {"train": 50, "test": 10}


def test_a_folder_that_holds_the_data_folder_is_taken(tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=10)
    assert getdata.prepare(str(tmp_path), url=OFFLINE)[0] == batches_dir


@pytest.mark.parametrize("layout", [("cat", "dog"), ("train/cat", "train/dog", "test/cat")])
def test_a_folder_of_image_folders_is_refused_with_cifar10_prepare(tmp_path, layout):
    for folder in layout:
        os.makedirs(tmp_path / "photos" / folder)
        (tmp_path / "photos" / folder / "1.png").write_bytes(b"not read")
    with pytest.raises(DataError) as error:
        getdata.prepare(str(tmp_path / "photos"), url=OFFLINE)
    shown = "cat/, dog/" if layout[0] == "cat" else "test/, train/"
    assert str(error.value) == (
        f"--data_dir={tmp_path / 'photos'} holds image folders ({shown}), not CIFAR-format "
        f"data: convert them with cifar10-prepare --image_dir={tmp_path / 'photos'} "
        f"--data_dir=<a new folder>, then pass that folder as --data_dir")
    assert sorted(os.listdir(tmp_path / "photos")) == sorted({f.split("/")[0] for f in layout})


def test_a_data_dir_that_does_not_exist_says_so_and_is_not_left_behind(tmp_path):
    missing = tmp_path / "dta"
    with pytest.raises(DataError) as error:
        getdata.prepare(str(missing), url=OFFLINE)
    message = str(error.value)
    assert message.startswith(f"no CIFAR-10 data: --data_dir={missing} does not exist, and "
                              f"downloading it there failed: could not download {OFFLINE}")
    assert message.endswith("a file:// path. Pass --data_dir=<the folder that holds "
                            "cifar-10-batches-bin/> (or that folder itself), or --synthetic_data "
                            "to try the programs on generated data")  # one full stop there
    assert not missing.exists()


def test_the_run_a_data_dir_came_from_is_named(tmp_path):
    with pytest.raises(DataError, match=r"--data_dir=\S+/gone, as the run it scores recorded "
                                        r"\(--data_dir=\S+/gone, from runs/a/flags.txt\)"):
        getdata.prepare(str(tmp_path / "gone"), url=OFFLINE,
                        followed=f"--data_dir={tmp_path / 'gone'}, from runs/a/flags.txt")


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "data").write_text("")
    with pytest.raises(DataError, match=r"^--data_dir=\S+/data is a file, not a folder: pass "
                                        r"the folder that holds cifar-10-batches-bin/$"):
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE)


def test_image_folders_are_found_at_both_depths(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    os.makedirs(tmp_path / "empty")
    assert datafolder.image_folders(str(tmp_path)) == ["."]
    assert datafolder.image_folders(str(tmp_path / "empty")) == []
    assert datafolder.image_folders(str(tmp_path / "missing")) == []


# A program's process, reporting at exit whether it had imported TensorFlow.
_PROBE = """
import atexit, os, sys
atexit.register(lambda: os.write(2, b"tensorflow loaded: %d\\n" % ("tensorflow" in sys.modules)))
sys.argv = sys.argv[1:]
from cifar10.cli import {module}
{module}.run()
"""


@pytest.mark.parametrize("program,module,args,error", [
    ("cifar10-train", "train_main", (), "no CIFAR-10 data: --data_dir="),
    # The evaluator of one checkpoint downloads only once the checkpoint reads, with
    # TensorFlow (test_eval_main); a mistake in the data on disk is answered before.
    ("cifar10-eval", "eval_main", ("--run_once",), "--data_dir="),
])
def test_a_data_mistake_is_answered_before_tensorflow_loads(tmp_path, program, module, args,
                                                            error):
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module), program,
         f"--data_dir={tmp_path / 'dta'}", f"--data_url={OFFLINE}", *_dirs(tmp_path, module),
         *args], capture_output=True, text=True, timeout=120, env=env())
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr
    assert lines[0].startswith(f"{program}: error: {error}"), lines
    assert lines[1:] == ["tensorflow loaded: 0"]
    assert sorted(os.listdir(tmp_path)) == ([] if module == "train_main" else ["dta", "train"])


def _dirs(tmp_path, module):
    if module == "train_main":
        return (f"--train_dir={tmp_path / 'train'}",)
    # A run with a checkpoint (its files, by name): the evaluator looks for one first.
    # Its data is a file.
    (tmp_path / "dta").write_text("")
    (tmp_path / "train").mkdir()
    for name in ("model.ckpt-2.index", "model.ckpt-2.data-00000-of-00001"):
        (tmp_path / "train" / name).write_bytes(b"")
    return (f"--checkpoint_dir={tmp_path / 'train'}", f"--eval_dir={tmp_path / 'eval'}")
