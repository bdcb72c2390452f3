"""Tests of cifar10.data.download against a local HTTP server and file:// URLs."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from cifar10.data import download
from cifar10.data import fileformat as ff
from cifar10.data import getdata
from cifar10.data import synthetic
from cifar10.core.errors import DataError

RECORDS = 5
TARBALL = synthetic.tarball_bytes(records_per_file=RECORDS)
TARBALL_MD5 = hashlib.md5(TARBALL).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


DEAD_URL = f"http://127.0.0.1:9/{ff.TARBALL_NAME}"  # nothing listens on port 9


class _PartialHandler(_QuietHandler):
    """Announces 100,000 bytes, sends 1,000, then waits for ``server.stalled`` (if set)
    or closes the connection."""

    def do_GET(self):  # noqa: N802 - the base class's name
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(TARBALL[:1000])
        self.wfile.flush()
        if self.server.stalled:
            self.server.stalled.wait(60)
        self.close_connection = True


def _serve(handler, stalled=None):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads, server.stalled = True, stalled
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    return server, thread


def _stop(server, thread):
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def http_root(tmp_path):
    """A directory served over HTTP; yields (directory, base URL)."""
    root = tmp_path / "www"
    root.mkdir()

    server, thread = _serve(functools.partial(_QuietHandler, directory=str(root)))
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _stop(server, thread)


@pytest.fixture
def served_tarball(http_root):
    root, base = http_root
    (root / ff.TARBALL_NAME).write_bytes(TARBALL)
    return f"{base}/{ff.TARBALL_NAME}"


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


def _leftovers(directory: Path) -> list[str]:
    """Names in ``directory`` other than the final tarball and batches folder."""
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if p.name not in (ff.TARBALL_NAME, ff.BATCHES_DIRNAME))


def _tarball(members: list[tarfile.TarInfo]) -> bytes:
    """A gzipped tarball of ``members``, each regular file holding 10 bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info in members:
            info.size = 10 if info.isreg() else 0
            tar.addfile(info, io.BytesIO(b"x" * 10) if info.isreg() else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize("source", ["http", "file", "env", "tarball there", "upper-case md5"])
def test_the_tarball_is_fetched_checked_and_extracted(served_tarball, tmp_path, data_dir,
                                                      monkeypatch, capsys, source):
    url, md5 = served_tarball, TARBALL_MD5
    if source == "file":
        url = tmp_path / "mirror" / ff.TARBALL_NAME
        url.parent.mkdir()
        url.write_bytes(TARBALL)
        url = url.as_uri()
    elif source == "env":
        monkeypatch.setenv(ff.DATA_URL_ENV, served_tarball)
        url = None
    elif source == "tarball there":  # checked and extracted offline
        data_dir.mkdir()
        (data_dir / ff.TARBALL_NAME).write_bytes(TARBALL)
        url = DEAD_URL
    elif source == "upper-case md5":
        md5 = TARBALL_MD5.upper()
    got = download.maybe_download_and_extract(str(data_dir), url=url, md5=md5,
                                              size=len(TARBALL), progress=source == "http")
    assert got == os.path.join(str(data_dir), ff.BATCHES_DIRNAME)
    for name in ff.TRAIN_FILES + ff.TEST_FILES:
        assert os.path.getsize(os.path.join(got, name)) == RECORDS * ff.RECORD_BYTES
    assert (data_dir / ff.TARBALL_NAME).read_bytes() == TARBALL
    assert _leftovers(data_dir) == []
    err = capsys.readouterr().err
    if source == "http":
        assert f">> Downloading {ff.TARBALL_NAME} 100.0%" in err and err.endswith("\n")
    else:
        assert err == ""


@pytest.mark.parametrize("total", [100 << 20, None])
def test_progress_on_a_log_file_is_a_line_a_tenth_or_each_25_mib(total):
    out = io.StringIO()
    shown = download._Progress("t.tar.gz", total, stream=out)
    for done in range(0, (100 << 20) + 1, 1 << 20):  # as _stream calls it: each MB
        shown.show(done)
    shown.end(100 << 20)
    assert out.getvalue().splitlines() == (
        [f">> Downloading t.tar.gz {p}.0%" for p in range(0, 101, 10)] if total else
        [f">> Downloading t.tar.gz {mb} MB" for mb in ("0.0", "26.2", "52.4", "78.6", "104.9")])


def test_an_extracted_folder_needs_no_network_and_a_file_in_its_place_is_refused(
        data_dir, monkeypatch):
    batches = synthetic.write_dataset(str(data_dir / "a"), records_per_file=1)
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("urlopen"))
    assert download.maybe_download_and_extract(str(data_dir / "a"), url=DEAD_URL) == batches
    (data_dir / "b").mkdir()
    (data_dir / "b" / ff.BATCHES_DIRNAME).write_bytes(b"")
    with pytest.raises(DataError, match="not a directory"):
        download.maybe_download_and_extract(str(data_dir / "b"), url=DEAD_URL)


# Named ids: the tarball is made at import time, so its MD5 differs between the test
# processes, which must collect the same test names.
@pytest.mark.parametrize("md5,size,expected", [
    ("0" * 32, None, "MD5 " + "0" * 32),
    (TARBALL_MD5, len(TARBALL) + 1, f"{len(TARBALL) + 1} bytes, MD5 {TARBALL_MD5}"),
    (None, None, f"{ff.TARBALL_BYTES} bytes, MD5 {ff.TARBALL_MD5}"),  # the official one's
], ids=["wrong_md5", "wrong_size", "official"])
def test_a_download_of_other_data_is_refused_and_not_kept(served_tarball, data_dir, md5, size,
                                                          expected):
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(
            str(data_dir), url=served_tarball, md5=md5, size=size, progress=False)
    assert str(info.value) == (
        f"the file downloaded from {served_tarball} is not the expected tarball (got "
        f"{len(TARBALL)} bytes, MD5 {TARBALL_MD5}; expected {expected}). Check --data_url or "
        f"{ff.DATA_URL_ENV}; for a mirror of other data, give its MD5 as --data_md5; or put "
        f"the right {ff.TARBALL_NAME} in {data_dir}.")
    assert list(data_dir.iterdir()) == []


def test_a_transfer_cut_short_or_interrupted_leaves_nothing(served_tarball, data_dir,
                                                            monkeypatch):
    server, thread = _serve(_PartialHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}/{ff.TARBALL_NAME}"
    try:
        with pytest.raises(DataError) as info:
            download.maybe_download_and_extract(
                str(data_dir), url=url, md5=TARBALL_MD5, progress=False)
    finally:
        _stop(server, thread)
    assert str(info.value).startswith(f"could not download {url} (transfer ended after 1000 "
                                      f"of 100000 bytes)")
    assert list(data_dir.iterdir()) == []
    calls = []

    def interrupt(self, done):
        calls.append(done)
        if done > 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(download._Progress, "show", interrupt)
    with pytest.raises(KeyboardInterrupt):
        download.maybe_download_and_extract(str(data_dir), url=served_tarball, md5=TARBALL_MD5)
    assert calls[-1] > 0  # the interrupt came after data was written
    assert list(data_dir.iterdir()) == []


@pytest.mark.parametrize("member", [
    lambda tmp: _member("../evil.bin"),
    lambda tmp: _member(f"{ff.BATCHES_DIRNAME}/../../evil.bin"),
    lambda tmp: _member(str(tmp / "evil.bin")),
    lambda tmp: _member(f"{ff.BATCHES_DIRNAME}/link", tarfile.SYMTYPE, str(tmp / "evil.bin")),
    lambda tmp: _member(f"{ff.BATCHES_DIRNAME}/rel", tarfile.SYMTYPE, "../../evil.bin"),
    lambda tmp: _member(f"{ff.BATCHES_DIRNAME}/hard", tarfile.LNKTYPE, "/etc/passwd"),
    lambda tmp: _member(f"{ff.BATCHES_DIRNAME}/dev", tarfile.CHRTYPE),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink-abs", "symlink-rel", "hardlink",
        "device"])
@pytest.mark.parametrize("filters", [True, False], ids=["filters", "no-filters"])
def test_an_unsafe_member_is_refused_before_anything_is_written(tmp_path, data_dir, member,
                                                                filters, monkeypatch):
    if not filters:  # Pythons without tarfile's filter='data'
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    bad = member(tmp_path)
    contents = _tarball([_member(f"{ff.BATCHES_DIRNAME}/{ff.TEST_FILES[0]}"), bad])
    (tmp_path / "bad.tar.gz").write_bytes(contents)
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=(tmp_path / "bad.tar.gz").as_uri(),
                                            md5=hashlib.md5(contents).hexdigest(), progress=False)
    assert f"member {bad.name!r} is not a plain file or folder inside the data directory" \
        in str(info.value)
    for place in (tmp_path, tmp_path.parent, data_dir.parent):
        assert not (place / "evil.bin").exists()
    assert _leftovers(data_dir) == [] and not (data_dir / ff.BATCHES_DIRNAME).exists()


@pytest.mark.parametrize("contents, md5_given, error", [
    (lambda: _tarball([_member("something_else/data_batch_1.bin")]), True,
     "{tarball} has no cifar-10-batches-bin/ folder; it is not the CIFAR-10 binary tarball. "
     "Delete it and get cifar-10-binary.tar.gz again."),
    (lambda: TARBALL[:len(TARBALL) // 2], True,
     "cannot read {tarball} (Compressed file ended before the end-of-stream marker was "
     "reached); it is corrupt or not a tarball. Delete it so that it is downloaded again."),
    (lambda: b"not a tarball", False,
     "{tarball} is not the expected tarball (got 13 bytes, MD5 {md5}; expected "
     f"{ff.TARBALL_BYTES} bytes, MD5 {ff.TARBALL_MD5}); it may be incomplete or corrupt. "
     "Delete it so that it is downloaded again (or, if it is other data on purpose, give its "
     "MD5 as --data_md5)."),
], ids=["no-folder", "cut", "wrong-md5"])
def test_a_tarball_there_that_fails_is_named_and_kept(data_dir, contents, md5_given, error):
    data_dir.mkdir()
    contents = contents()
    md5 = hashlib.md5(contents).hexdigest()
    tarball = data_dir / ff.TARBALL_NAME
    tarball.write_bytes(contents)
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=DEAD_URL,
                                            md5=md5 if md5_given else None, progress=False)
    assert str(info.value) == error.format(tarball=tarball, md5=md5)
    assert tarball.read_bytes() == contents and _leftovers(data_dir) == []
    assert not (data_dir / ff.BATCHES_DIRNAME).exists()


@pytest.mark.parametrize("failure", ["no server", "404", "no file"])
def test_a_failed_download_is_one_line_and_leaves_nothing(http_root, tmp_path, data_dir,
                                                          failure):
    url, reason = {"no server": (DEAD_URL, "Connection refused"),
                   "404": (f"{http_root[1]}/missing.tar.gz", "HTTP error 404: File not found"),
                   "no file": ((tmp_path / "nowhere.tar.gz").as_uri(), "No such file")}[failure]
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=url, progress=False)
    message = str(info.value)
    assert message.startswith(f"could not download {url} (") and reason in message
    assert message.endswith(
        f"). Put {ff.TARBALL_NAME} in {data_dir}, or extract it there so that "
        f"{data_dir / ff.BATCHES_DIRNAME} exists, or point --data_url or {ff.DATA_URL_ENV} at "
        f"a mirror or a file:// path.")
    assert "\n" not in message and list(data_dir.iterdir()) == []


_KILLED_DOWNLOAD = """
import sys
from cifar10.data import download
download.maybe_download_and_extract(sys.argv[1], url=sys.argv[2], md5=sys.argv[3],
                                    progress=False)
"""


def test_a_download_killed_with_sigkill_is_cleaned_up_by_the_next_run(tmp_path):
    """kill -9 in the middle of a download leaves its scratch folder; the next run
    (getdata.prepare, as the programs call it) removes it and says so, and leaves a
    look-alike that it did not make."""
    server, thread = _serve(_PartialHandler, threading.Event())
    data_dir = tmp_path / "data"
    url = f"http://127.0.0.1:{server.server_address[1]}/cifar-10-binary.tar.gz"
    process = subprocess.Popen([sys.executable, "-c", _KILLED_DOWNLOAD, str(data_dir), url,
                                TARBALL_MD5])
    try:
        while not list(data_dir.glob(".cifar-10-binary.tar.gz-incomplete-*/*.tar.gz")):
            assert process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        process.kill()
        server.stalled.set()
        _stop(server, thread)
    [left] = [p.name for p in data_dir.iterdir()]
    assert left.startswith(".cifar-10-binary.tar.gz-incomplete-")
    foreign = data_dir / ".cifar-10-binary.tar.gz-incomplete-mine"  # no marker: not ours
    foreign.mkdir()
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "c.tar.gz").write_bytes(TARBALL)
    lines = []
    getdata.prepare(str(data_dir), url=(tmp_path / "www" / "c.tar.gz").as_uri(),
                    md5=TARBALL_MD5, print_fn=lines.append)
    assert lines[0] == (f"NOTE: removed what an interrupted download or conversion left in "
                        f"{data_dir}: {left}.")
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(
        [foreign.name, "cifar-10-batches-bin", "cifar-10-binary.tar.gz"])


@pytest.mark.parametrize("url, md5, error", [
    ("http://127.0.0.1:9/x.tar.gz", "xyz", "--data_md5=xyz is not an MD5 checksum (32 "
     "hexadecimal digits, as md5sum prints them): give the MD5 of the tarball at --data_url, "
     f"or leave --data_md5 out to expect CIFAR-10's own ({ff.TARBALL_MD5})"),
    ("copy.tar.gz", TARBALL_MD5, "--data_url=copy.tar.gz is a path, not a URL: pass "
     "--data_url=file://{tmp}/copy.tar.gz (or copy the file into --data_dir as "
     f"{ff.TARBALL_NAME})"),
    ("mirror.lan:8000/c.tar.gz", TARBALL_MD5, "--data_url=mirror.lan:8000/c.tar.gz is not a "
     "URL: give one that starts with http:// or https://, or file:// for a tarball on disk "
     f"(file:///path/to/{ff.TARBALL_NAME})"),
], ids=["md5", "url-path", "url-no-scheme"])
def test_a_malformed_setting_is_refused_before_anything_is_fetched_or_made(
        tmp_path, monkeypatch, url, md5, error):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "copy.tar.gz").write_bytes(TARBALL)
    data_dir = tmp_path / "data"
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=url, md5=md5, progress=False)
    assert str(info.value).startswith(error.format(tmp=tmp_path))
    assert not data_dir.exists()
    monkeypatch.setenv(ff.DATA_URL_ENV, str(tmp_path / "copy.tar.gz"))
    with pytest.raises(DataError, match=f"^{ff.DATA_URL_ENV}=.* is a path, not a URL: set "
                                        f"{ff.DATA_URL_ENV}=file://"):
        download.maybe_download_and_extract(str(data_dir), md5=TARBALL_MD5)
