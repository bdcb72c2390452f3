"""Fetching and unpacking a data set's binary tarball, safely: a download is kept only if
its size and MD5 match (a user's file that fails is named, never deleted), every tar
member is checked first, and the data folder appears only complete.  No TensorFlow."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import pathlib
import re
import shlex
import shutil
import tarfile
import urllib.error
import urllib.request
import zlib

from cifar10.core import atomic
from cifar10.core.errors import DataError
from cifar10.core.logs import ProgressLine
from cifar10.data import fileformat as ff

SOCKET_TIMEOUT_S = 60.0  # a blocked connect or read gives up after this
_CHUNK_BYTES = 1 << 20
_UNSIZED_STEP = 25 << 20  # with no known size, a log line every this many bytes
_URL_SCHEMES = ("http://", "https://", "ftp://", "file:")  # what urllib fetches


class DownloadFailed(DataError):
    """The tarball could not be fetched (no network, no such file, a server error)."""


def file_md5(path: str) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def maybe_download_and_extract(data_dir: str, url: str | None = None, md5: str | None = None,
                               size: int | None = None, progress: bool = True,
                               archive: ff.Archive = ff.CIFAR10) -> str:
    """The archive's extracted folder in ``data_dir``: there already, else extracted from
    the tarball there or downloaded, once its ``md5`` and ``size`` (by default the
    official tarball's) match.  DataError where it cannot be had."""
    batches_dir = os.path.join(data_dir, archive.folder)
    if os.path.isdir(batches_dir):
        return batches_dir
    if os.path.lexists(batches_dir):
        raise DataError(f"{batches_dir} exists but is not a directory. Remove it so that the "
                        f"data can be extracted there.")
    if md5 is None:
        md5, size = archive.md5, archive.size
    if not re.fullmatch(r"[0-9a-fA-F]{32}", md5):
        raise DataError(
            f"--data_md5={shlex.quote(md5)} is not an MD5 checksum (32 hexadecimal digits, as "
            f"md5sum prints them): give the MD5 of the tarball at --data_url, or leave "
            f"--data_md5 out to expect {archive.title}'s own ({archive.md5})")
    tarball = os.path.join(data_dir, archive.tarball)
    source = None if os.path.exists(tarball) else _checked_url(url, archive)
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create the data directory {data_dir}: {_reason(e)}") from e
    if source is None:
        try:
            problem = _mismatch(os.path.getsize(tarball), file_md5(tarball), md5, size)
        except OSError as e:
            raise DataError(f"cannot read {tarball}: {_reason(e)}") from e
        if problem:
            raise DataError(
                f"{tarball} is not the expected tarball ({problem}); it may be incomplete "
                f"or corrupt. Delete it so that it is downloaded again (or, if it is other "
                f"data on purpose, give its MD5 as --data_md5).")
    else:
        _download(source, data_dir, md5, size, progress, archive)
    return safe_extract(tarball, data_dir, archive)


def _checked_url(url: str | None, archive: ff.Archive) -> str:
    """``url``, else the archive's environment variable, else its address; DataError
    where it is not a URL (a path on disk, say)."""
    source = url or (archive.url_env and os.environ.get(archive.url_env)) or archive.url
    if source.lower().startswith(_URL_SCHEMES):
        return source
    setting, verb = ("--data_url", "pass") if url else (archive.url_env, "set")
    if os.path.isfile(source):
        raise DataError(
            f"{setting}={source} is a path, not a URL: {verb} "
            f"{setting}={pathlib.Path(os.path.abspath(source)).as_uri()} (or copy the file "
            f"into --data_dir as {archive.tarball})")
    raise DataError(
        f"{setting}={source} is not a URL: give one that starts with http:// or https://, "
        f"or file:// for a tarball on disk (file:///path/to/{archive.tarball})")


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        text = f"HTTP error {error.code}: {error.reason}"
    elif isinstance(error, urllib.error.URLError):
        text = str(error.reason)
    else:
        text = str(error)
    return " ".join(text.split()) or type(error).__name__


def _mismatch(got_size: int, got_md5: str, md5: str, size: int | None) -> str | None:
    """How a file differs from the expected one, or None if it matches."""
    if got_md5.lower() == md5.lower() and (size is None or got_size == size):
        return None
    expected = f"MD5 {md5}" if size is None else f"{size} bytes, MD5 {md5}"
    return f"got {got_size} bytes, MD5 {got_md5}; expected {expected}"


class _Progress(ProgressLine):
    """``>> Downloading <name> 12.3%`` on stderr (megabytes where the size is unknown)."""

    def __init__(self, name: str, total: int | None, stream=None):
        def describe(done: int, _: float) -> str:
            shown = f"{100.0 * done / total:.1f}%" if total else f"{done / 1e6:.1f} MB"
            return f">> Downloading {name} {shown}"

        super().__init__(describe, total, stream, unsized_step=_UNSIZED_STEP)


def _stream(response, out, name: str, progress: bool) -> tuple[int, str]:
    """Copies ``response`` to ``out``; (bytes, hex MD5).  ConnectionError for fewer
    bytes than the Content-Length."""
    try:
        total = int(response.headers.get("Content-Length"))
    except (TypeError, ValueError):
        total = None
    digest, done = hashlib.md5(), 0
    shown = _Progress(name, total) if progress else None
    try:
        while True:
            if shown:
                shown.show(done)
            chunk = response.read(_CHUNK_BYTES)
            if not chunk:
                break
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
    finally:
        if shown:
            shown.end(done)
    if total is not None and done != total:
        raise ConnectionError(f"transfer ended after {done} of {total} bytes")
    return done, digest.hexdigest()


def _download(url: str, dest_dir: str, md5: str, size: int | None, progress: bool,
              archive: ff.Archive) -> None:
    """Downloads ``url`` to ``dest_dir/<archive.tarball>``, moved there once it matches."""
    final = os.path.join(dest_dir, archive.tarball)
    settings = f"--data_url or {archive.url_env}" if archive.url_env else "--data_url"
    try:
        with atomic.scratch_folder(final) as scratch:
            part = os.path.join(scratch, archive.tarball)
            try:
                with open(part, "wb") as out, \
                        urllib.request.urlopen(url, timeout=SOCKET_TIMEOUT_S) as response:
                    got_size, got_md5 = _stream(response, out, archive.tarball, progress)
            except (http.client.HTTPException, OSError, ValueError) as e:
                # (URLError and timeouts are OSErrors; ValueError: a URL urllib cannot parse.)
                raise DownloadFailed(
                    f"could not download {url} ({_reason(e)}). Put {archive.tarball} in "
                    f"{dest_dir}, or extract it there so that "
                    f"{os.path.join(dest_dir, archive.folder)} exists, or point {settings} at "
                    f"a mirror or a file:// path.") from e
            problem = _mismatch(got_size, got_md5, md5, size)
            if problem:
                raise DataError(
                    f"the file downloaded from {url} is not the expected tarball ({problem}). "
                    f"Check {settings}; for a mirror of other data, give its MD5 as "
                    f"--data_md5; or put the right {archive.tarball} in {dest_dir}.")
            os.replace(part, final)
    except OSError as e:
        raise DataError(f"cannot write a file in {dest_dir}: {_reason(e)}") from e


def safe_extract(tarball: str, data_dir: str, archive: ff.Archive = ff.CIFAR10) -> str:
    """Extracts the archive's folder from ``tarball`` into ``data_dir``; its path."""
    batches_dir = os.path.join(data_dir, archive.folder)
    try:
        with atomic.new_folder(batches_dir) as scratch:
            _extract_into(tarball, scratch, archive)
    except OSError as e:
        if not os.path.isdir(batches_dir):  # else another process won the race
            raise DataError(f"cannot extract {tarball} into {data_dir}: {_reason(e)}") from e
    return batches_dir


def _extract_into(tarball: str, scratch: str, archive: ff.Archive) -> None:
    """Unpacks ``tarball`` in ``scratch`` and keeps its ``archive.folder``'s files there."""
    unpacked = os.path.join(scratch, ".unpacked")
    os.mkdir(unpacked)
    root = os.path.realpath(unpacked)
    try:
        with tarfile.open(tarball, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                target = os.path.realpath(os.path.join(root, member.name))
                if not (member.isreg() or member.isdir()) or \
                        os.path.commonpath([root, target]) != root:
                    raise DataError(f"refusing to extract {tarball}: member {member.name!r} "
                                    f"is not a plain file or folder inside the data directory")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(unpacked, members=members, filter="data")
            else:  # (members checked above)
                tar.extractall(unpacked, members=members)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DataError(f"cannot read {tarball} ({_reason(e)}); it is corrupt or not a "
                        f"tarball. Delete it so that it is downloaded again.") from e
    extracted = os.path.join(unpacked, archive.folder)
    if not os.path.isdir(extracted):
        raise DataError(f"{tarball} has no {archive.folder}/ folder; it is not the "
                        f"{archive.title} binary tarball. Delete it and get {archive.tarball} "
                        f"again.")
    for name in os.listdir(extracted):
        os.rename(os.path.join(extracted, name), os.path.join(scratch, name))
    shutil.rmtree(unpacked)
