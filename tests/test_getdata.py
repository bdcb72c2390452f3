"""Finding a program's data before TensorFlow loads (cifar10.data.getdata): the data
folder itself is taken, the common mistakes get one line with the fix."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import pytest
from cli import call, env

from cifar10.core import atomic
from cifar10.data import fileformat as ff
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.core.errors import DataError

OFFLINE = "http://127.0.0.1:9/cifar-10-binary.tar.gz"  # nothing listens on port 9


def test_a_data_folder_or_the_folder_that_holds_it_is_taken(tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=10)
    assert getdata.prepare(batches_dir, url=OFFLINE) == (batches_dir, {"train": 50, "test": 10})
    assert getdata.prepare(str(tmp_path), url=OFFLINE)[0] == batches_dir


@pytest.mark.parametrize("layout, held", [
    (("cat", "dog"), "image folders (cat/, dog/)"),
    (("train/cat", "train/dog", "test/cat"), "image folders (test/, train/)"),
    (("cat", "."), "image folders (cat/)"),  # one class, loose images beside it
    ((".",), "image files"),
])
def test_a_folder_of_images_is_refused_with_cifar10_prepare(tmp_path, layout, held):
    photos = tmp_path / "photos"
    for folder in layout:
        os.makedirs(photos / folder, exist_ok=True)
        (photos / folder / "1.png").write_bytes(b"not read")
    before = sorted(str(p) for p in photos.rglob("*"))
    with pytest.raises(DataError) as error:
        getdata.prepare(str(photos), url=OFFLINE)
    assert str(error.value) == (
        f"--data_dir={photos} holds {held}, not CIFAR-format data: put each class's images in "
        f"a folder of its own, convert them with cifar10-prepare --image_dir={photos} "
        f"--data_dir=<a new folder>, then pass that folder as --data_dir")
    assert sorted(str(p) for p in photos.rglob("*")) == before


@pytest.mark.parametrize("folder,files,dataset", [
    ("cifar-10-batches-py", ("data_batch_1", "batches.meta", "test_batch"), "cifar10"),
    ("cifar-100-python", ("train", "test", "meta"), "cifar100"),
])
def test_a_python_version_folder_is_refused_before_a_download_into_it(tmp_path, folder, files,
                                                                      dataset):
    # (No server at OFFLINE: a download into it would be another error.)
    python_dir = tmp_path / "data" / folder
    python_dir.mkdir(parents=True)
    for name in files:
        (python_dir / name).write_bytes(b"pickled")
    with pytest.raises(DataError) as error:
        getdata.prepare(str(python_dir), url=OFFLINE, dataset=dataset)
    assert str(error.value) == (
        f"--data_dir={python_dir} holds a data set's Python version ({', '.join(files[:2])}"
        f"{', meta' if dataset == 'cifar100' else ''}: pickled batches), not the binary "
        f"version read here: pass another folder to download the binary version into, such "
        f"as --data_dir={tmp_path / 'data'} (its data folder goes beside this one)")
    assert sorted(os.listdir(python_dir)) == sorted(files)


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
    # An existing one: offline, --synthetic_data is the way on too.
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError) as error:
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE)
    message = str(error.value)
    assert message.startswith(f"could not download {OFFLINE} (")
    assert message.endswith("or point --data_url or CIFAR10_DATA_URL at a mirror or a file:// "
                            "path. Or pass --synthetic_data to try the programs on generated "
                            "data.")
    assert os.listdir(tmp_path / "data") == []


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / ff.TARBALL_NAME).write_bytes(b"not read")
    with pytest.raises(DataError) as error:
        getdata.prepare(str(tmp_path / ff.TARBALL_NAME), url=OFFLINE)
    assert str(error.value) == (
        f"--data_dir={tmp_path / ff.TARBALL_NAME} is the tarball, not a folder: pass the folder "
        f"that holds it, --data_dir={tmp_path}, where it is extracted")
    (tmp_path / "data").write_text("")
    with pytest.raises(DataError, match=r"^--data_dir=\S+/data is a file, not a folder: pass "
                                        r"the folder that holds cifar-10-batches-bin/$"):
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE)
    with pytest.raises(DataError, match=r"--data_dir=\S+/gone, as the run it scores recorded "
                                        r"\(--data_dir=\S+/gone, from runs/a/flags.txt\)"):
        getdata.prepare(str(tmp_path / "gone"), url=OFFLINE,
                        followed=f"--data_dir={tmp_path / 'gone'}, from runs/a/flags.txt")


def test_a_data_folder_that_holds_another_is_refused_naming_both(tmp_path):
    data_dir = tmp_path / "my10"
    synthetic.write_dataset(str(tmp_path), records_per_file=10)
    os.rename(tmp_path / "cifar-10-batches-bin", data_dir)
    synthetic.write_dataset(str(data_dir), records_per_file=6)  # (as cifar10-prepare once did)
    files = {str(p): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}
    with pytest.raises(DataError) as error:
        getdata.prepare(str(data_dir), url=OFFLINE)
    assert str(error.value) == (
        f"--data_dir={data_dir} is a data folder (it holds batches.meta.txt, data_batch_1.bin, "
        f"...) and holds another one, {data_dir}/cifar-10-batches-bin: which one is meant is "
        f"unclear; move {data_dir}/cifar-10-batches-bin out of it, then pass the folder meant "
        f"as --data_dir")
    assert {str(p): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()} == files
    assert sorted(os.listdir(tmp_path)) == ["my10"]


# ---- another task fetches the data (under srun: the first task of the node) -------

FETCHER = "Slurm task 0 (the first task on node7)"


@pytest.mark.parametrize("use_synthetic", [False, True], ids=["download", "generated"])
def test_a_task_whose_data_another_fetches_waits_for_it_and_says_so_once(
        tmp_path, use_synthetic):
    data_dir = tmp_path / "data"
    folder = data_dir / "synthetic" if use_synthetic else data_dir
    # (The other task's fetch ends in a rename, as a download's extraction does.)
    other = threading.Timer(0.5, synthetic.write_dataset, (str(folder), 10))
    other.start()
    lines = []
    found, counts = getdata.prepare(str(data_dir), url=OFFLINE, use_synthetic=use_synthetic,
                                    synthetic_records=10, print_fn=lines.append,
                                    fetched_by=FETCHER, wait_s=60)
    other.join()
    assert found == str(folder / ff.BATCHES_DIRNAME)
    assert counts == {"train": 50, "test": 10}
    assert lines[0] == f"Waiting for {FETCHER} to fetch the data into {folder}."
    assert not any(line.startswith("Waiting") for line in lines[1:])


def test_the_wait_ends_in_one_line_when_no_fetch_is_under_way(tmp_path):
    """The other task's fetch failed, or it never started: nothing is downloaded here
    either, and nothing is made."""
    data_dir = tmp_path / "data"
    lines = []
    with pytest.raises(DataError) as error:
        getdata.prepare(str(data_dir), url=OFFLINE, print_fn=lines.append,
                        fetched_by=FETCHER, wait_s=1)
    assert str(error.value) == (
        f"no data appeared in {data_dir} while this task waited for {FETCHER} to fetch it, "
        f"and no fetch was under way there for 1 s (--worker_timeout_secs): see that task's "
        f"error, then start the job again (or put the data in {data_dir} before it starts)")
    assert lines == [f"Waiting for {FETCHER} to fetch the data into {data_dir}."]
    assert os.listdir(tmp_path) == []


def test_a_fetch_under_way_keeps_the_wait_going_past_its_time(tmp_path):
    """A download of 170 MB can take longer than --worker_timeout_secs: while its scratch
    folder's writer is alive, the wait goes on."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    fetch = contextlib.ExitStack()
    fetch.enter_context(atomic.scratch_folder(str(data_dir / ff.TARBALL_NAME)))

    def finish():
        time.sleep(2.5)  # past wait_s
        synthetic.write_dataset(str(data_dir), records_per_file=10)
        fetch.close()

    other = threading.Thread(target=finish)
    other.start()
    found, _ = getdata.prepare(str(data_dir), url=OFFLINE, print_fn=lambda line: None,
                               fetched_by=FETCHER, wait_s=1)
    other.join()
    assert found == str(data_dir / ff.BATCHES_DIRNAME)


def test_a_data_mistake_or_a_download_ruled_out_is_not_waited_for(tmp_path):
    """What the other task refuses, this one refuses at once; ``no_download``'s error is
    told apart by its type (cifar10-eval's look for the data on disk)."""
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "1.png").write_bytes(b"")
    with pytest.raises(DataError, match=r"holds image folders \(cat/\)") as raised:
        getdata.prepare(str(tmp_path), url=OFFLINE, fetched_by=FETCHER, wait_s=60,
                        no_download="not downloaded here")
    assert not isinstance(raised.value, getdata.NotDownloaded)
    with pytest.raises(getdata.NotDownloaded, match="^not downloaded here$"):
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE, fetched_by=FETCHER, wait_s=60,
                        no_download="not downloaded here")
    assert not (tmp_path / "data").exists()


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
    # A run with a checkpoint (the evaluator looks for one first), its data a file.
    (tmp_path / "dta").write_text("")
    (tmp_path / "train").mkdir()
    for name in ("model.ckpt-2.index", "model.ckpt-2.data-00000-of-00001"):
        (tmp_path / "train" / name).write_bytes(b"")
    return (f"--checkpoint_dir={tmp_path / 'train'}", f"--eval_dir={tmp_path / 'eval'}")


# ---- a --data_dir that is a run's folder ---------------------------------------------

def _run_folder(folder, kind):
    """A training run's folder (its lock) or an evaluator's; {path: bytes} of its files."""
    folder.mkdir(parents=True)
    if kind == "lock":
        (folder / "cifar10-train.lock").write_text('{"pid": 1}\n')
    else:
        (folder / "flags.txt").write_text(
            "# cifar10-eval, started 2026-11-26T10:00:00+00:00 on h\n--eval_dir=x\n")
    return {str(p): p.read_bytes() for p in folder.rglob("*")}


RUN_FOLDER = {"lock": "cifar10-train's folder", "eval": "cifar10-eval's folder"}


@pytest.mark.parametrize("kind, synthetic_data", [("lock", False), ("eval", True)])
def test_a_data_dir_that_is_a_runs_folder_is_refused_before_anything_is_fetched(
        tmp_path, kind, synthetic_data):
    run = tmp_path / "runs" / "a" / "train"
    files = _run_folder(run, kind)
    result = call("cifar10-train", f"--data_dir={run}", f"--train_dir={tmp_path / 'new1'}",
                  f"--data_url={OFFLINE}", "--max_steps=1",
                  *(["--synthetic_data"] if synthetic_data else []))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: --data_dir={run} is {RUN_FOLDER[kind]}, not a data folder: "
        f"pass the folder that holds the data (cifar-10-batches-bin/), or a new folder to "
        f"download it into"]
    assert {str(p): p.read_bytes() for p in run.rglob("*")} == files
    assert not (tmp_path / "new1").exists()


# ---- --synthetic_data where a file stands in the way ---------------------------------

@pytest.mark.parametrize("file", ["afile", "afile/synthetic", "afile/synthetic/cifar-10-batches-bin"])
def test_generated_data_where_a_file_stands_in_the_way_names_the_file(tmp_path, file):
    (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / file).write_text("mine")
    with pytest.raises(DataError) as err:
        getdata.prepare(str(tmp_path / "afile"), use_synthetic=True, synthetic_records=5,
                        print_fn=lambda line: None)
    assert str(err.value) == (
        f"{tmp_path / file} is a file, where --synthetic_data keeps its generated data (in a "
        f"folder under --data_dir={tmp_path / 'afile'}): pass a folder as --data_dir (made if "
        f"missing), or move the file away")
    assert (tmp_path / file).read_text() == "mine"


def test_generated_data_is_made_once_announced_and_reused_as_it_is_with_a_note(tmp_path,
                                                                               caplog):
    lines = []
    batches_dir, counts = getdata.prepare(str(tmp_path), use_synthetic=True,
                                          synthetic_records=20, print_fn=lines.append)
    assert batches_dir == str(tmp_path / "synthetic" / ff.BATCHES_DIRNAME)
    assert counts == {"train": 100, "test": 20}
    assert "SYNTHETIC" in lines[0] and batches_dir in lines[0]
    stamp = os.stat(os.path.join(batches_dir, "test_batch.bin")).st_mtime_ns
    _, counts = getdata.prepare(str(tmp_path), use_synthetic=True, synthetic_records=30,
                                print_fn=lines.append)
    assert os.stat(os.path.join(batches_dir, "test_batch.bin")).st_mtime_ns == stamp
    assert counts == {"train": 100, "test": 20}
    # A flag's value not taken is a warning (stderr), not one of the notes.
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{batches_dir} already holds generated data of another size (20 records a file); it "
        f"is used as it is: --synthetic_records=30 applies only when it is generated (delete "
        f"the folder to regenerate)"]
    # Generated data of an earlier, easier kind.
    synthetic.write_dataset(str(tmp_path / "old" / getdata.SYNTHETIC_SUBDIR),
                            records_per_file=20, separable=True)
    lines.clear()
    old_dir, _ = getdata.prepare(str(tmp_path / "old"), use_synthetic=True,
                                 synthetic_records=20, print_fn=lines.append)
    assert lines[0] == (f"NOTE: {old_dir} holds generated data of an earlier, easier kind "
                        f"(no look-alike classes: a model scores 1.000 on it); delete the "
                        f"folder to have the current kind generated.")
