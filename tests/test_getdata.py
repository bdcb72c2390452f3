"""Finding a program's data before TensorFlow loads (cifar10.data.getdata, cifar10.data.folder,
cifar10.data.wrong_data_dir): the data folder itself is taken, the common mistakes get one
line with the fix."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import time

import pytest
import cli
from cli import call, env

from cifar10.core import atomic
from cifar10.data import fileformat as ff
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.data import wrong_data_dir
from cifar10.cli import outdirs
from cifar10.core.errors import Cifar10Error, DataError

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


def test_a_folder_of_loose_image_files_is_refused_with_how_to_sort_them(tmp_path):
    # cifar10-prepare takes class folders only: the line says to make them first, and
    # does not call the folder itself an image folder ("(.)").
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("0002.jpg", "0000.JPG", "0001.png", "notes.txt"):
        (photos / name).write_bytes(b"not read")
    with pytest.raises(DataError) as error:
        getdata.prepare(str(photos), url=OFFLINE)
    assert str(error.value) == (
        f"--data_dir={photos} holds image files (0000.JPG, 0001.png, ...), not CIFAR-format "
        f"data: to train on your own images, put each class's images in a folder of its own "
        f"({photos}/<class>/*.jpg), convert them with cifar10-prepare --image_dir={photos} "
        f"--data_dir=<a new folder>, then pass that folder as --data_dir")
    assert sorted(os.listdir(photos)) == ["0000.JPG", "0001.png", "0002.jpg", "notes.txt"]
    # With class folders beside the loose files, the folders are what prepare converts.
    for name in ("cat", "dog"):
        (photos / name).mkdir()
        (photos / name / "1.png").write_bytes(b"not read")
    with pytest.raises(DataError, match=r"holds image folders \(cat/, dog/\), not CIFAR-format"):
        getdata.prepare(str(photos), url=OFFLINE)


@pytest.mark.parametrize("layout,one_class", [
    (("cat",), "cat"),
    (("cat", "."), "cat"),  # loose images beside it, which prepare leaves out
    (("train/cat", "test/cat"), "train/cat"),
])
def test_a_folder_of_one_class_folder_is_told_that_two_classes_are_needed(tmp_path, layout,
                                                                          one_class):
    # Not sent to cifar10-prepare first, which would refuse it for the same reason.
    photos = tmp_path / "photos"
    for folder in layout:
        os.makedirs(photos / folder, exist_ok=True)
        (photos / folder / "1.png").write_bytes(b"not read")
    with pytest.raises(DataError) as error:
        getdata.prepare(str(photos), url=OFFLINE)
    classes_dir = os.path.dirname(photos / one_class)
    assert str(error.value) == (
        f"--data_dir={photos} holds images of one class alone ({one_class}/), not CIFAR-format "
        f"data: a classifier needs two or more classes, each in a folder of its own "
        f"({classes_dir}/<class>/); add the other classes' folders, convert them with "
        f"cifar10-prepare --image_dir={photos} --data_dir=<a new folder>, then pass that "
        f"folder as --data_dir")
    assert sorted(os.listdir(photos)) == sorted({f.split("/")[0] for f in layout} - {"."}
                                                | ({"1.png"} if "." in layout else set()))


@pytest.mark.parametrize("folder,files,dataset", [
    ("cifar-10-batches-py", ("data_batch_1", "batches.meta", "test_batch"), "cifar10"),
    ("cifar-100-python", ("train", "test", "meta"), "cifar100"),
])
def test_a_python_version_folder_is_refused_before_a_download_into_it(tmp_path, folder, files,
                                                                      dataset):
    # The pickled version other toolkits download: the binary one is not fetched into it
    # (there is no server at OFFLINE: a download would be another error).
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


def test_an_empty_data_dir_that_cannot_be_filled_offers_generated_data_too(tmp_path):
    # As for a --data_dir that does not exist: offline, --synthetic_data is the way on.
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError) as error:
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE)
    message = str(error.value)
    assert message.startswith(f"could not download {OFFLINE} (")
    assert message.endswith("or point --data_url or CIFAR10_DATA_URL at a mirror or a file:// "
                            "path. Or pass --synthetic_data to try the programs on generated "
                            "data.")
    assert os.listdir(tmp_path / "data") == []


def test_a_data_dir_that_is_the_tarball_names_the_folder_that_holds_it(tmp_path):
    tarball = tmp_path / "downloads" / ff.TARBALL_NAME
    tarball.parent.mkdir()
    tarball.write_bytes(b"not read")
    with pytest.raises(DataError) as error:
        getdata.prepare(str(tarball), url=OFFLINE)
    assert str(error.value) == (
        f"--data_dir={tarball} is the tarball, not a folder: pass the folder that holds it, "
        f"--data_dir={tmp_path / 'downloads'}, where it is extracted")
    assert os.listdir(tmp_path / "downloads") == [ff.TARBALL_NAME]


def test_a_half_extracted_folder_beside_its_tarball_is_extracted_again_not_downloaded(
        tmp_path):
    # A tar cut short by hand: the advice names the tarball that is there, not a download.
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=10)
    os.remove(os.path.join(batches_dir, "data_batch_3.bin"))
    os.remove(os.path.join(batches_dir, "SYNTHETIC_DATA.txt"))  # as CIFAR-10's own
    (tmp_path / ff.TARBALL_NAME).write_bytes(synthetic.tarball_bytes(records_per_file=10))
    with pytest.raises(DataError) as error:
        getdata.prepare(str(tmp_path), url=OFFLINE)
    assert str(error.value).endswith(
        f"; delete {batches_dir} so that it is extracted again from "
        f"{tmp_path / ff.TARBALL_NAME}")
    os.remove(tmp_path / ff.TARBALL_NAME)
    with pytest.raises(DataError, match="so that it is downloaded and extracted again$"):
        getdata.prepare(str(tmp_path), url=OFFLINE)


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


def _data_folder_with_a_nested_copy(data_dir) -> dict[str, bytes]:
    """A data folder that holds a second one, cifar-10-batches-bin/ (what cifar10-prepare
    wrote there before it refused to); returns every file's contents by path."""
    synthetic.write_dataset(str(data_dir.parent), records_per_file=10)
    os.rename(data_dir.parent / "cifar-10-batches-bin", data_dir)
    synthetic.write_dataset(str(data_dir), records_per_file=6)
    return {str(p): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}


def _two_data_folders_error(data_dir, origin="") -> str:
    return (f"--data_dir={data_dir}{origin} is a data folder (it holds batches.meta.txt, "
            f"data_batch_1.bin, ...) and holds another one, {data_dir}/cifar-10-batches-bin: "
            f"which one is meant is unclear; move {data_dir}/cifar-10-batches-bin out of it "
            f"(e.g. to {data_dir}-nested), then pass --data_dir={data_dir} for the first or "
            f"--data_dir={data_dir}-nested for the other")


def test_a_data_folder_that_holds_another_is_refused_naming_both(tmp_path):
    data_dir = tmp_path / "my10"
    files = _data_folder_with_a_nested_copy(data_dir)
    with pytest.raises(DataError) as error:
        getdata.prepare(str(data_dir), url=OFFLINE)
    assert str(error.value) == _two_data_folders_error(data_dir)
    assert {str(p): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()} == files
    assert sorted(os.listdir(tmp_path)) == ["my10"]
    (tmp_path / "my10-nested").mkdir()  # the name it suggests is free
    with pytest.raises(DataError, match=r"\(e\.g\. to \S+/my10-nested2\), then pass "):
        getdata.prepare(str(data_dir), url=OFFLINE)


def test_a_data_folder_with_an_empty_or_linked_nested_folder_is_one_data_set(tmp_path):
    data_dir = tmp_path / "my10"
    _data_folder_with_a_nested_copy(data_dir)
    nested = data_dir / "cifar-10-batches-bin"
    for name in os.listdir(nested):
        os.remove(nested / name)
    # No data files in it: it is no data folder, and the folder's damage is named.
    with pytest.raises(DataError, match=r"^missing data file \S+/my10/cifar-10-batches-bin/"
                                        r"data_batch_1\.bin: "):
        getdata.prepare(str(data_dir), url=OFFLINE)
    nested.rmdir()
    nested.symlink_to(data_dir)  # the folder itself under that name too
    assert getdata.prepare(str(data_dir), url=OFFLINE)[1] == {"train": 50, "test": 10}


@pytest.mark.parametrize("program", ["cifar10-train", "cifar10-eval"])
def test_the_programs_refuse_a_data_folder_that_holds_another(tmp_path, program):
    data_dir = tmp_path / "my10"
    files = _data_folder_with_a_nested_copy(data_dir)
    if program == "cifar10-train":
        # (A few steps, should it train: not for ever.)
        args = (f"--data_dir={data_dir}", f"--train_dir={tmp_path / 'train'}",
                "--max_steps=1", "--batch_size=2")
        origin = ""
    else:  # the run's own --data_dir, as its flags.txt recorded it
        train = tmp_path / "train"
        _dirs(tmp_path, "eval_main")
        (train / "flags.txt").write_text(f"# cifar10-train, started 2026-11-26 10:00:00\n"
                                         f"--data_dir={data_dir}\n--train_dir={train}\n")
        args = (f"--checkpoint_dir={train}", f"--eval_dir={tmp_path / 'eval'}", "--run_once")
        origin = f" (--data_dir={data_dir}, from {train}/flags.txt)"
    result = call(program, *args, f"--data_url={OFFLINE}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"{program}: error: {_two_data_folders_error(data_dir, origin)}")
    assert {str(p): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()} == files
    # Nothing made: no --train_dir, no --eval_dir (the evaluator's train/ and dta are
    # _dirs' run and its data).
    assert sorted(os.listdir(tmp_path)) == (["dta", "my10", "train"] if origin else ["my10"])


# ---- another task fetches the data (under srun: the first task of the node) -------

FETCHER = "Slurm task 0 (the first task on node7)"


def _later(seconds: float, work) -> threading.Thread:
    """``work()`` in a thread, ``seconds`` from now (another task's fetch)."""
    def run():
        time.sleep(seconds)
        work()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("use_synthetic", [False, True], ids=["download", "generated"])
def test_a_task_whose_data_another_fetches_waits_for_it_and_says_so_once(
        tmp_path, use_synthetic):
    data_dir = tmp_path / "data"
    folder = data_dir / "synthetic" if use_synthetic else data_dir
    # (The other task's fetch ends in a rename, as a download's extraction does.)
    other = _later(1.2, lambda: synthetic.write_dataset(str(folder), records_per_file=10))
    lines = []
    started = time.monotonic()
    found, counts = getdata.prepare(str(data_dir), url=OFFLINE, use_synthetic=use_synthetic,
                                    synthetic_records=10, print_fn=lines.append,
                                    fetched_by=FETCHER, wait_s=30)
    other.join()
    assert 1.2 <= time.monotonic() - started < 10
    assert found == str(folder / ff.BATCHES_DIRNAME)
    assert counts == {"train": 50, "test": 10}
    assert lines[0] == f"Waiting for {FETCHER} to fetch the data into {folder}."
    assert not any(line.startswith("Waiting") for line in lines[1:])


def test_data_already_there_is_not_waited_for(tmp_path):
    batches_dir = synthetic.write_dataset(str(tmp_path), records_per_file=10)
    lines = []
    assert getdata.prepare(str(tmp_path), url=OFFLINE, print_fn=lines.append,
                           fetched_by=FETCHER, wait_s=0.1)[0] == batches_dir
    assert not any(line.startswith("Waiting") for line in lines)


def test_the_wait_ends_in_one_line_when_no_fetch_is_under_way(tmp_path):
    """The other task's fetch failed, or it never started: nothing is downloaded here
    either, and nothing is made."""
    data_dir = tmp_path / "data"
    lines = []
    started = time.monotonic()
    with pytest.raises(DataError) as error:
        getdata.prepare(str(data_dir), url=OFFLINE, print_fn=lines.append,
                        fetched_by=FETCHER, wait_s=1)
    assert 1 <= time.monotonic() - started < 5
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

    def download():
        with atomic.scratch_folder(str(data_dir / ff.TARBALL_NAME)):
            time.sleep(2.5)
        synthetic.write_dataset(str(data_dir), records_per_file=10)

    other = _later(0, download)
    lines = []
    found, _ = getdata.prepare(str(data_dir), url=OFFLINE, print_fn=lines.append,
                               fetched_by=FETCHER, wait_s=1)
    other.join()
    assert found == str(data_dir / ff.BATCHES_DIRNAME)


def test_a_data_mistake_is_not_waited_for(tmp_path):
    """What the other task refuses, this one refuses at once, in the same words."""
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "1.png").write_bytes(b"")
    with pytest.raises(DataError, match=r"holds images of one class alone \(cat/\)"):
        getdata.prepare(str(tmp_path), url=OFFLINE, fetched_by=FETCHER, wait_s=60)
    with pytest.raises(DataError, match="^not downloaded here$"):
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE, fetched_by=FETCHER, wait_s=60,
                        no_download="not downloaded here")


def test_a_download_ruled_out_is_an_error_of_its_own_kind(tmp_path):
    """``no_download``'s error is told apart from other data errors by its type, not by
    its words (cifar10-eval's look for the data on disk)."""
    with pytest.raises(getdata.NotDownloaded, match="^not downloaded here$"):
        getdata.prepare(str(tmp_path / "data"), url=OFFLINE, no_download="not downloaded here")
    assert not (tmp_path / "data").exists()
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "1.png").write_bytes(b"")
    with pytest.raises(DataError) as raised:
        getdata.prepare(str(tmp_path), url=OFFLINE, no_download="not downloaded here")
    assert not isinstance(raised.value, getdata.NotDownloaded)


def test_image_folders_are_found_at_both_depths(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    os.makedirs(tmp_path / "empty")
    assert wrong_data_dir.image_folders(str(tmp_path)) == ["."]
    assert wrong_data_dir.image_folders(str(tmp_path / "empty")) == []
    assert wrong_data_dir.image_folders(str(tmp_path / "missing")) == []


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


# ---- a --data_dir that is a run's folder ---------------------------------------------

RUN_START = "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n"


def _run_folder(folder, kind):
    """A folder that is a training run's by ``kind`` (one of its marks), or an
    evaluator's; returns {path: bytes} of its files."""
    folder.mkdir(parents=True)
    if kind == "lock":
        (folder / "cifar10-train.lock").write_text('{"pid": 1}\n')
    elif kind == "flags":
        (folder / "flags.txt").write_text(RUN_START + f"--train_dir={folder}\n")
    elif kind == "checkpoint":
        (folder / "model.ckpt-5.index").write_bytes(b"i")
        (folder / "model.ckpt-5.data-00000-of-00001").write_bytes(b"d")
    else:  # an evaluator's
        (folder / "flags.txt").write_text(
            "# cifar10-eval, started 2026-11-26T10:00:00+00:00 on h\n--eval_dir=x\n")
    return {str(p): p.read_bytes() for p in folder.rglob("*")}


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    requests = 0

    def do_GET(self):  # noqa: N802 - name required by the base class
        type(self).requests += 1
        super().do_GET()

    def log_message(self, format, *args):  # noqa: A002
        pass


@pytest.fixture
def counted_tarball(tmp_path):
    """(URL of a small data set's tarball on 127.0.0.1, its MD5, the handler that counts
    the requests)."""
    www = tmp_path / "www"
    www.mkdir()
    tarball = synthetic.tarball_bytes(records_per_file=5)
    (www / ff.TARBALL_NAME).write_bytes(tarball)
    handler = type("Handler", (_CountingHandler,), {"requests": 0})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(www)))
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield (f"http://127.0.0.1:{server.server_address[1]}/{ff.TARBALL_NAME}",
               hashlib.md5(tarball).hexdigest(), handler)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


RUN_FOLDER = {"lock": "a training run's folder (cifar10-train.lock)",
              "flags": "a training run's folder (flags.txt)",
              "checkpoint": "a training run's folder (model.ckpt-*)",
              "eval": "an evaluator's folder (its flags.txt records cifar10-eval)"}


@pytest.mark.parametrize("kind", sorted(RUN_FOLDER))
@pytest.mark.parametrize("synthetic_data", [False, True])
def test_a_data_dir_that_is_a_runs_folder_is_refused_before_anything_is_fetched(
        tmp_path, counted_tarball, kind, synthetic_data):
    url, md5, handler = counted_tarball
    run = tmp_path / "runs" / "a" / "train"
    files = _run_folder(run, kind)
    result = call("cifar10-train", f"--data_dir={run}", f"--train_dir={tmp_path / 'new1'}",
                  f"--data_url={url}", f"--data_md5={md5}", "--max_steps=1",
                  *(["--synthetic_data"] if synthetic_data else []))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"cifar10-train: error: --data_dir={run} is {RUN_FOLDER[kind]}, not a data folder: "
        f"pass the folder that holds the data (cifar-10-batches-bin/), or a new folder to "
        f"download it into"]
    assert handler.requests == 0
    assert {str(p): p.read_bytes() for p in run.rglob("*")} == files
    assert not (tmp_path / "new1").exists()


def test_the_evaluators_data_dir_from_its_run_is_refused_naming_where_it_came_from(tmp_path):
    run = tmp_path / "train"
    files = _run_folder(run, "checkpoint")
    with pytest.raises(Cifar10Error, match=re.escape(
            f"--data_dir={run} (from {run}/flags.txt) is a training run's folder "
            f"(model.ckpt-*), not a data folder: ")):
        outdirs.refuse_run_as_data_dir(str(run), followed=f"from {run}/flags.txt")
    assert {str(p): p.read_bytes() for p in run.rglob("*")} == files


def test_cifar10_prepare_refuses_a_runs_folder_as_its_data_dir(tmp_path):
    images = tmp_path / "img3"
    for name in ("cat", "dog"):
        (images / name).mkdir(parents=True)
        for i in range(6):  # (one each for testing, by --test_fraction's default)
            (images / name / f"{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    run = tmp_path / "runs" / "a" / "train"
    files = _run_folder(run, "flags")
    result = call("cifar10-prepare", f"--image_dir={images}", f"--data_dir={run}")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"cifar10-prepare: error: --data_dir={run} is a training run's folder (flags.txt), "
        f"not a data folder: name a new folder to write the data set in"]
    assert {str(p): p.read_bytes() for p in run.rglob("*")} == files


# ---- --synthetic_data where a file stands in the way ---------------------------------

def _synthetic_in_a_file(tmp_path, data_dir: str) -> str:
    with pytest.raises(DataError) as err:
        getdata.prepare(str(tmp_path / data_dir), use_synthetic=True, synthetic_records=5,
                        print_fn=lambda line: None)
    return str(err.value)


@pytest.mark.parametrize("data_dir", ["data", "data/"])
def test_generated_data_asked_in_a_data_dir_that_is_a_file_names_the_folder_to_pass(
        tmp_path, data_dir):
    (tmp_path / "data").write_text("")
    assert _synthetic_in_a_file(tmp_path, data_dir) == (
        f"--data_dir={tmp_path / data_dir} is a file, not a folder: --synthetic_data generates "
        f"its data in a folder under --data_dir (<data_dir>/synthetic); pass a folder (made if "
        f"missing), such as --data_dir={tmp_path}")
    assert os.listdir(tmp_path) == ["data"]


@pytest.mark.parametrize("file", ["synthetic", "synthetic/cifar-10-batches-bin"])
def test_generated_data_where_a_file_has_its_name_names_the_file(tmp_path, file):
    (tmp_path / "data" / file).parent.mkdir(parents=True)
    (tmp_path / "data" / file).write_text("mine")
    assert _synthetic_in_a_file(tmp_path, "data") == (
        f"{tmp_path / 'data' / file} is a file, where --synthetic_data keeps its generated data "
        f"(under --data_dir={tmp_path / 'data'}): move the file away, or pass another --data_dir")
    assert (tmp_path / "data" / file).read_text() == "mine"


@pytest.mark.parametrize("program", ["cifar10-train", "cifar10-eval"])
def test_the_programs_given_a_file_as_data_dir_for_generated_data_say_so(tmp_path, program):
    (tmp_path / "afile").write_text("")
    if program == "cifar10-train":
        dirs = (f"--train_dir={tmp_path / 'train'}",)
    else:
        _dirs(tmp_path, "eval_main")  # a run with a checkpoint, by its files' names
        dirs = (f"--checkpoint_dir={tmp_path / 'train'}", f"--eval_dir={tmp_path / 'eval'}",
                "--run_once")
    result = cli.call(program, "--synthetic_data", f"--data_dir={tmp_path / 'afile'}", *dirs)
    cli.assert_refused(result, (
        f"{program}: error: --data_dir={tmp_path / 'afile'} is a file, not a folder: "
        f"--synthetic_data generates its data in a folder under --data_dir "
        f"(<data_dir>/synthetic); pass a folder (made if missing), such as "
        f"--data_dir={tmp_path}"))


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
