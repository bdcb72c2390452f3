"""Tests of cifar10.data.download against a local HTTP server and file:// URLs."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import socket
import tarfile
import threading
import urllib.request
from pathlib import Path

import pytest

from cifar10.data import download
from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cifar10.core.errors import DataError

RECORDS = 5
TARBALL = synthetic.tarball_bytes(records_per_file=RECORDS)
TARBALL_MD5 = hashlib.md5(TARBALL).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


class _TruncatingHandler(http.server.BaseHTTPRequestHandler):
    """Announces 100,000 bytes, sends 1,000, then closes the connection."""

    def do_GET(self):  # noqa: N802 - name required by BaseHTTPRequestHandler
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(TARBALL[:1000])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format, *args):  # noqa: A002
        pass


def _serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
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

    def handler(*args, **kwargs):
        return _QuietHandler(*args, directory=str(root), **kwargs)

    server, thread = _serve(handler)
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _stop(server, thread)


@pytest.fixture
def served_tarball(http_root):
    """URL of the small valid tarball on the local server."""
    root, base = http_root
    (root / ff.TARBALL_NAME).write_bytes(TARBALL)
    return f"{base}/{ff.TARBALL_NAME}"


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def dead_url():
    """A URL on a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{ff.TARBALL_NAME}"


def _leftovers(directory: Path) -> list[str]:
    """Names in ``directory`` other than the final tarball and batches folder."""
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if p.name not in (ff.TARBALL_NAME, ff.BATCHES_DIRNAME))


def _assert_extracted(batches_dir: str, data_dir: Path) -> None:
    assert batches_dir == os.path.join(str(data_dir), ff.BATCHES_DIRNAME)
    for name in ff.TRAIN_FILES + ff.TEST_FILES:
        assert os.path.getsize(os.path.join(batches_dir, name)) == RECORDS * ff.RECORD_BYTES
    assert (data_dir / ff.TARBALL_NAME).read_bytes() == TARBALL
    assert _leftovers(data_dir) == []


def _tarball(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, contents in members:
            if contents is not None:
                info.size = len(contents)
                tar.addfile(info, io.BytesIO(contents))
            else:
                tar.addfile(info)
    return buf.getvalue()


def _file(name: str, contents: bytes = b"x" * 10) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), contents


def _good_member() -> tuple[tarfile.TarInfo, bytes]:
    return _file(f"{ff.BATCHES_DIRNAME}/{ff.TEST_FILES[0]}")


# Successful downloads.


def test_download_over_http(served_tarball, data_dir, capsys):
    got = download.maybe_download_and_extract(
        str(data_dir), url=served_tarball, md5=TARBALL_MD5, size=len(TARBALL))
    _assert_extracted(got, data_dir)
    err = capsys.readouterr().err
    assert f">> Downloading {ff.TARBALL_NAME} 100.0%" in err
    assert err.endswith("\n")


@pytest.mark.parametrize("total", [100 << 20, None])
def test_progress_on_a_log_file_is_a_line_a_tenth_and_on_a_terminal_one_line(total):
    """Not 100 lines rewritten with \\r in a log file; on a terminal, one line."""
    class Stream(io.StringIO):
        def __init__(self, tty):
            super().__init__()
            self.tty = tty

        def isatty(self):
            return self.tty

    for tty in (False, True):
        out = Stream(tty)
        shown = download._Progress("t.tar.gz", total, stream=out)
        size = 100 << 20
        for done in range(0, size + 1, 1 << 20):  # as _stream calls it: each MB, then the end
            shown.show(done)
        shown.end(size)
        text = out.getvalue()
        if tty:
            assert text.count("\r>> Downloading t.tar.gz ") == 101 and text.endswith("\n")
            assert text.count("\n") == 1
        elif total:
            assert text.splitlines() == [f">> Downloading t.tar.gz {p}.0%"
                                         for p in range(0, 101, 10)]
        else:  # a line every 25 MiB
            assert text.splitlines() == [f">> Downloading t.tar.gz {mb} MB"
                                         for mb in ("0.0", "26.2", "52.4", "78.6", "104.9")]


def test_download_without_progress_is_silent(served_tarball, data_dir, capsys):
    download.maybe_download_and_extract(
        str(data_dir), url=served_tarball, md5=TARBALL_MD5, progress=False)
    assert capsys.readouterr().err == ""


def test_download_from_file_url(tmp_path, data_dir):
    source = tmp_path / "mirror" / ff.TARBALL_NAME
    source.parent.mkdir()
    source.write_bytes(TARBALL)
    got = download.maybe_download_and_extract(
        str(data_dir), url=source.as_uri(), md5=TARBALL_MD5, progress=False)
    _assert_extracted(got, data_dir)


def test_download_from_env_url(served_tarball, data_dir, monkeypatch):
    monkeypatch.setenv(ff.DATA_URL_ENV, served_tarball)
    got = download.maybe_download_and_extract(str(data_dir), md5=TARBALL_MD5, progress=False)
    _assert_extracted(got, data_dir)


def test_existing_good_tarball_is_extracted_offline(data_dir, dead_url):
    data_dir.mkdir()
    (data_dir / ff.TARBALL_NAME).write_bytes(TARBALL)
    got = download.maybe_download_and_extract(
        str(data_dir), url=dead_url, md5=TARBALL_MD5, size=len(TARBALL), progress=False)
    _assert_extracted(got, data_dir)


# Already extracted data.


def test_existing_batches_dir_needs_no_network(data_dir, dead_url, monkeypatch):
    batches = synthetic.write_dataset(str(data_dir), records_per_file=1)

    def no_network(*args, **kwargs):
        raise AssertionError("urlopen called")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert download.maybe_download_and_extract(str(data_dir), url=dead_url) == batches
    assert not (data_dir / ff.TARBALL_NAME).exists()


def test_batches_path_that_is_a_file_is_refused(data_dir):
    data_dir.mkdir()
    (data_dir / ff.BATCHES_DIRNAME).write_bytes(b"")
    with pytest.raises(DataError, match="not a directory"):
        download.maybe_download_and_extract(str(data_dir), url="file:///nonexistent")


# Checksum mismatch.


# Named ids: the tarball is made at import time, so its MD5 differs between the test
# processes, which must collect the same test names.
@pytest.mark.parametrize("md5,size,what", [
    ("0" * 32, None, "MD5 " + "0" * 32),
    (TARBALL_MD5, len(TARBALL) + 1, f"{len(TARBALL) + 1} bytes"),
], ids=["wrong_md5", "wrong_size"])
def test_checksum_mismatch_is_rejected(served_tarball, data_dir, md5, size, what):
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(
            str(data_dir), url=served_tarball, md5=md5, size=size, progress=False)
    message = str(info.value)
    assert served_tarball in message
    assert what in message
    assert f"got {len(TARBALL)} bytes, MD5 {TARBALL_MD5}" in message
    assert message.endswith(f"Check --data_url or {ff.DATA_URL_ENV}; for a mirror of other "
                            f"data, give its MD5 as --data_md5; or put the right "
                            f"{ff.TARBALL_NAME} in {data_dir}.")
    assert not (data_dir / ff.TARBALL_NAME).exists()
    assert not (data_dir / ff.BATCHES_DIRNAME).exists()
    assert _leftovers(data_dir) == []


def test_default_checksum_is_the_official_one(served_tarball, data_dir):
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=served_tarball, progress=False)
    assert f"expected {ff.TARBALL_BYTES} bytes, MD5 {ff.TARBALL_MD5}" in str(info.value)
    assert list(data_dir.iterdir()) == []


# Interrupted transfers.


def test_truncated_transfer_is_rejected(data_dir):
    server, thread = _serve(_TruncatingHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}/{ff.TARBALL_NAME}"
    try:
        with pytest.raises(DataError) as info:
            download.maybe_download_and_extract(
                str(data_dir), url=url, md5=TARBALL_MD5, progress=False)
    finally:
        _stop(server, thread)
    message = str(info.value)
    assert message.startswith(f"could not download {url} (")
    assert "1000 of 100000 bytes" in message
    assert list(data_dir.iterdir()) == []


def test_keyboard_interrupt_leaves_no_temp_file(served_tarball, data_dir, monkeypatch):
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


# Unsafe or wrong tarballs.


def _symlink(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info, None


def _hardlink(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE
    info.linkname = target
    return info, None


def _device(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    return info, None


@pytest.mark.parametrize("bad_member,named", [
    (lambda tmp: _file("../evil.bin"), "../evil.bin"),
    (lambda tmp: _file(f"{ff.BATCHES_DIRNAME}/../../evil.bin"),
     f"{ff.BATCHES_DIRNAME}/../../evil.bin"),
    (lambda tmp: _file(str(tmp / "evil.bin")), "evil.bin"),
    (lambda tmp: _symlink(f"{ff.BATCHES_DIRNAME}/link", str(tmp / "evil.bin")),
     f"{ff.BATCHES_DIRNAME}/link"),
    (lambda tmp: _symlink(f"{ff.BATCHES_DIRNAME}/rel", "../../evil.bin"),
     f"{ff.BATCHES_DIRNAME}/rel"),
    (lambda tmp: _hardlink(f"{ff.BATCHES_DIRNAME}/hard", "/etc/passwd"),
     f"{ff.BATCHES_DIRNAME}/hard"),
    (lambda tmp: _device(f"{ff.BATCHES_DIRNAME}/dev"), f"{ff.BATCHES_DIRNAME}/dev"),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink-abs", "symlink-rel", "hardlink",
        "device"])
def test_unsafe_member_is_refused(http_root, tmp_path, data_dir, bad_member, named):
    root, base = http_root
    contents = _tarball([_good_member(), bad_member(tmp_path)])
    (root / ff.TARBALL_NAME).write_bytes(contents)
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(
            str(data_dir), url=f"{base}/{ff.TARBALL_NAME}",
            md5=hashlib.md5(contents).hexdigest(), progress=False)
    message = str(info.value)
    assert "unsafe member" in message and named in message
    for place in (tmp_path, tmp_path.parent, data_dir.parent):
        assert not (place / "evil.bin").exists()
    assert not (data_dir / ff.BATCHES_DIRNAME).exists()
    assert _leftovers(data_dir) == []


def test_tarball_without_batches_dir_is_refused(tmp_path, data_dir):
    contents = _tarball([_file("something_else/data_batch_1.bin")])
    source = tmp_path / ff.TARBALL_NAME
    source.write_bytes(contents)
    with pytest.raises(DataError, match=f"has no {ff.BATCHES_DIRNAME}/ folder"):
        download.maybe_download_and_extract(
            str(data_dir), url=source.as_uri(), md5=hashlib.md5(contents).hexdigest(),
            progress=False)
    assert not (data_dir / ff.BATCHES_DIRNAME).exists()
    assert _leftovers(data_dir) == []


def test_corrupt_tarball_with_matching_md5_is_refused(data_dir):
    data_dir.mkdir()
    contents = TARBALL[: len(TARBALL) // 2]
    (data_dir / ff.TARBALL_NAME).write_bytes(contents)
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(
            str(data_dir), md5=hashlib.md5(contents).hexdigest(), progress=False)
    message = str(info.value)
    assert str(data_dir / ff.TARBALL_NAME) in message and "Delete it" in message
    assert (data_dir / ff.TARBALL_NAME).read_bytes() == contents
    assert _leftovers(data_dir) == []


# No server.


def test_no_server_gives_one_line_error(data_dir, dead_url):
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=dead_url, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"could not download {dead_url} (")
    assert ff.TARBALL_NAME in message
    assert str(data_dir) in message
    assert ff.DATA_URL_ENV in message and "--data_url" in message
    assert list(data_dir.iterdir()) == []


def test_http_404_is_reported(http_root, data_dir):
    _, base = http_root
    url = f"{base}/missing.tar.gz"
    with pytest.raises(DataError, match="HTTP error 404") as info:
        download.maybe_download_and_extract(str(data_dir), url=url, progress=False)
    assert url in str(info.value) and "\n" not in str(info.value)
    assert list(data_dir.iterdir()) == []


def test_missing_file_url_is_reported(tmp_path, data_dir):
    url = (tmp_path / "nowhere.tar.gz").as_uri()
    with pytest.raises(DataError, match="could not download file://"):
        download.maybe_download_and_extract(str(data_dir), url=url, progress=False)
    assert list(data_dir.iterdir()) == []


def test_uncreatable_data_dir_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(DataError, match="cannot create the data directory"):
        download.maybe_download_and_extract(str(blocker / "data"), url="file:///x")


# A bad tarball the user left.


def test_existing_bad_tarball_is_reported_not_deleted(data_dir, dead_url):
    data_dir.mkdir()
    tarball = data_dir / ff.TARBALL_NAME
    tarball.write_bytes(b"not a tarball")
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url=dead_url, progress=False)
    message = str(info.value)
    assert str(tarball) in message
    assert message.endswith("Delete it so that it is downloaded again (or, if it is other "
                            "data on purpose, give its MD5 as --data_md5).")
    assert f"got 13 bytes, MD5 {hashlib.md5(b'not a tarball').hexdigest()}" in message
    assert f"expected {ff.TARBALL_BYTES} bytes, MD5 {ff.TARBALL_MD5}" in message
    assert tarball.read_bytes() == b"not a tarball"
    assert not (data_dir / ff.BATCHES_DIRNAME).exists()


# URL precedence.


def test_resolve_url_precedence(monkeypatch):
    monkeypatch.delenv(ff.DATA_URL_ENV, raising=False)
    assert download.resolve_url(None) == ff.DATA_URL
    monkeypatch.setenv(ff.DATA_URL_ENV, "")
    assert download.resolve_url(None) == ff.DATA_URL
    monkeypatch.setenv(ff.DATA_URL_ENV, "file:///mirror/x.tar.gz")
    assert download.resolve_url(None) == "file:///mirror/x.tar.gz"
    assert download.resolve_url("") == "file:///mirror/x.tar.gz"
    assert download.resolve_url("http://explicit/x.tar.gz") == "http://explicit/x.tar.gz"


def test_extraction_without_tarfile_filters(served_tarball, http_root, tmp_path, data_dir,
                                            monkeypatch):
    """Pythons without ``filter='data'`` still extract, and still refuse bad members."""
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    got = download.maybe_download_and_extract(
        str(data_dir), url=served_tarball, md5=TARBALL_MD5, progress=False)
    _assert_extracted(got, data_dir)

    root, base = http_root
    contents = _tarball([_good_member(), _file("../evil.bin")])
    (root / "evil.tar.gz").write_bytes(contents)
    other = tmp_path / "other"
    with pytest.raises(DataError, match=r"unsafe member '\.\./evil\.bin'"):
        download.maybe_download_and_extract(
            str(other), url=f"{base}/evil.tar.gz", md5=hashlib.md5(contents).hexdigest(),
            progress=False)
    assert not (tmp_path / "evil.bin").exists()
    assert _leftovers(other) == []


class _StallingHandler(http.server.BaseHTTPRequestHandler):
    """Announces the tarball, sends its first 1,000 bytes, then waits (up to 60 s)."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(len(TARBALL)))
        self.end_headers()
        self.wfile.write(TARBALL[:1000])
        self.wfile.flush()
        self.server.stalled.wait(60)

    def log_message(self, format, *args):  # noqa: A002
        pass


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
    import signal
    import subprocess
    import sys
    import time

    from cifar10.data import getdata

    server, thread = _serve(_StallingHandler)
    server.stalled = threading.Event()
    data_dir = tmp_path / "data"
    url = f"http://127.0.0.1:{server.server_address[1]}/cifar-10-binary.tar.gz"
    process = subprocess.Popen([sys.executable, "-c", _KILLED_DOWNLOAD, str(data_dir), url,
                                TARBALL_MD5])
    try:
        deadline = time.monotonic() + 60
        while not list(data_dir.glob(".cifar-10-binary.tar.gz-incomplete-*/*.tar.gz")):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
        server.stalled.set()
        _stop(server, thread)
    left = [p.name for p in data_dir.iterdir()]
    assert len(left) == 1 and left[0].startswith(".cifar-10-binary.tar.gz-incomplete-")
    foreign = data_dir / ".cifar-10-binary.tar.gz-incomplete-mine"  # no marker: not ours
    foreign.mkdir()
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "c.tar.gz").write_bytes(TARBALL)
    lines = []
    batches_dir, _ = getdata.prepare(str(data_dir), url=(tmp_path / "www" / "c.tar.gz").as_uri(),
                                     md5=TARBALL_MD5, print_fn=lines.append)
    assert lines[0] == (f"NOTE: removed what an interrupted download or conversion left in "
                        f"{data_dir}: {left[0]}.")
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(
        [foreign.name, "cifar-10-batches-bin", "cifar-10-binary.tar.gz"])
    assert sorted(os.listdir(batches_dir)) == sorted(
        [*ff.TRAIN_FILES, *ff.TEST_FILES, "batches.meta.txt", synthetic.SYNTHETIC_MARKER])


@pytest.mark.parametrize("md5,shown", [("xyz", "xyz"), ("", "''"), (" " + "a" * 32, f"' {'a' * 32}'"),
                                       ("a" * 31, "a" * 31)],
                         ids=["word", "empty", "space", "short"])
def test_a_malformed_data_md5_is_refused_before_anything_is_downloaded(tmp_path, md5, shown):
    # No tarball could match it: refused before the 170 MB are fetched (nothing listens
    # at the URL, so a download would be another error) and before the folder is made.
    data_dir = tmp_path / "data"
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url="http://127.0.0.1:9/x.tar.gz",
                                            md5=md5, progress=False)
    assert str(info.value) == (
        f"--data_md5={shown} is not an MD5 checksum (32 hexadecimal digits, as md5sum prints "
        f"them): give the MD5 of the tarball at --data_url, or leave --data_md5 out to expect "
        f"CIFAR-10's own ({ff.TARBALL_MD5})")
    assert not data_dir.exists()


def test_an_upper_case_data_md5_is_an_md5(served_tarball, data_dir):
    got = download.maybe_download_and_extract(str(data_dir), url=served_tarball,
                                              md5=TARBALL_MD5.upper(), progress=False)
    _assert_extracted(got, data_dir)


def test_a_path_given_as_data_url_is_refused_with_its_file_url(tmp_path, monkeypatch):
    # urllib fetches no bare path ("unknown url type"): the line gives the URL to pass,
    # and nothing is made in --data_dir.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "copy.tar.gz").write_bytes(TARBALL)
    data_dir = tmp_path / "data"
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url="copy.tar.gz", md5=TARBALL_MD5)
    assert str(info.value) == (
        f"--data_url=copy.tar.gz is a path, not a URL: pass --data_url=file://{tmp_path}"
        f"/copy.tar.gz (or copy the file into --data_dir as {ff.TARBALL_NAME})")
    monkeypatch.setenv(ff.DATA_URL_ENV, str(tmp_path / "copy.tar.gz"))
    with pytest.raises(DataError, match=f"^{ff.DATA_URL_ENV}=.* is a path, not a URL: set "
                                        f"{ff.DATA_URL_ENV}=file://"):
        download.maybe_download_and_extract(str(data_dir), md5=TARBALL_MD5)
    assert not data_dir.exists()


def test_an_address_without_its_scheme_is_refused_before_a_folder_is_made(tmp_path):
    data_dir = tmp_path / "data"
    with pytest.raises(DataError) as info:
        download.maybe_download_and_extract(str(data_dir), url="mirror.lan:8000/c.tar.gz",
                                            md5=TARBALL_MD5)
    assert str(info.value) == (
        f"--data_url=mirror.lan:8000/c.tar.gz is not a URL: give one that starts with http:// "
        f"or https://, or file:// for a tarball on disk (file:///path/to/{ff.TARBALL_NAME})")
    assert not data_dir.exists()
