"""Fetching and unpacking a data set's binary tarball, safely.

This module owns getting ``cifar-10-batches-bin`` (or CIFAR-100's
``cifar-100-binary``: the archive is a ``fileformat.Archive``) onto disk: choosing
the URL (``--data_url`` flag, then the ``CIFAR10_DATA_URL`` environment variable
for CIFAR-10, then the official address), downloading the tarball with a checksum check, and
extracting it without letting any member land outside the data directory.
It does not look inside the ``.bin`` files; validating them is done elsewhere.

Guarantees:

* A file under the final name ``cifar-10-binary.tar.gz`` is either one the user
  put there or a complete download whose size and MD5 were checked.  Downloads
  go to a marked scratch folder (``atomic.scratch_folder``) that is removed on any
  failure, including ``KeyboardInterrupt``, and by the next run after a ``kill -9``.
* A user's file is never deleted or silently trusted: a tarball that fails the
  check is reported with a ``DataError`` that says to delete it.
* ``cifar-10-batches-bin`` appears only complete (``extract``).

It uses only the standard library (no TensorFlow), so that it stays cheap to
import.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import pathlib
import re
import shlex
import urllib.error
import urllib.request

from cifar10.core import atomic
from cifar10.data import extract
from cifar10.data import fileformat as ff
from cifar10.core.errors import DataError
from cifar10.core.progressline import ProgressLine

# Seconds a blocked connect or read may take before the download gives up.
SOCKET_TIMEOUT_S = 60.0
_CHUNK_BYTES = 1 << 20


def resolve_url(url: str | None, archive: ff.Archive = ff.CIFAR10) -> str:
    """Returns the URL to download the tarball from.

    Args:
      url: an explicit URL (e.g. from ``--data_url``); wins when non-empty.
      archive: the data set.

    Returns:
      ``url`` if non-empty, else the archive's environment variable
      (``CIFAR10_DATA_URL``) if set and non-empty, else the official address.
    """
    if url:
        return url
    return (archive.url_env and os.environ.get(archive.url_env)) or archive.url


def file_md5(path: str) -> str:
    """Returns the hex MD5 digest of the file at ``path``."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def maybe_download_and_extract(
    data_dir: str,
    url: str | None = None,
    md5: str | None = None,
    size: int | None = None,
    progress: bool = True,
    archive: ff.Archive = ff.CIFAR10,
) -> str:
    """Makes sure ``data_dir/cifar-10-batches-bin`` exists, fetching it if needed
    (for another ``archive``, its folder).

    An existing ``cifar-10-batches-bin`` directory is returned as is, without
    network access.  Otherwise an existing ``cifar-10-binary.tar.gz`` in
    ``data_dir`` is checked and extracted, or the tarball is downloaded from
    ``resolve_url(url)``, checked, saved under that name and extracted.

    Args:
      data_dir: directory holding the tarball and the extracted folder; created
        if missing.
      url: where to download from (http, https or file://); see ``resolve_url``.
      md5: expected hex MD5 of the tarball.  When None, the official tarball's
        MD5 and size are expected and ``size`` is ignored.
      size: expected size in bytes, checked only when ``md5`` is given too.
      progress: whether to show download progress on stderr.
      archive: the data set (``fileformat.CIFAR10`` or ``CIFAR100``).

    Returns:
      The path of the extracted folder.

    Raises:
      DataError: the data directory cannot be created, the download fails, a
        tarball does not match the expected checksum, is unreadable, unsafe or
        lacks the ``cifar-10-batches-bin`` folder.
    """
    batches_dir = os.path.join(data_dir, archive.folder)
    if os.path.isdir(batches_dir):
        return batches_dir
    if os.path.lexists(batches_dir):
        raise DataError(
            f"{batches_dir} exists but is not a directory. Remove it so that the "
            f"data can be extracted there."
        )
    if md5 is None:
        md5, size = archive.md5, archive.size
    _refuse_malformed_md5(md5, archive)
    tarball = os.path.join(data_dir, archive.tarball)
    source = None if os.path.exists(tarball) else _checked_url(url, archive)
    _make_dir(data_dir)
    if source is None:
        _verify(tarball, md5, size)
    else:
        _download(source, data_dir, md5, size, progress, archive)
    extract.safe_extract(tarball, data_dir, archive)
    return batches_dir


_URL_SCHEMES = ("http://", "https://", "ftp://", "file:")  # what urllib fetches


def _checked_url(url: str | None, archive: ff.Archive) -> str:
    """``resolve_url(url, archive)``, or DataError where it is no URL urllib fetches (a
    path on disk, or an address without ``http://``), before any folder is made."""
    source = resolve_url(url, archive)
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


def _refuse_malformed_md5(md5: str, archive: ff.Archive) -> None:
    """Raises DataError when ``md5`` (--data_md5) is no MD5 checksum: no tarball could
    match it, so it is refused before one is checked or downloaded (170 MB)."""
    if not re.fullmatch(r"[0-9a-fA-F]{32}", md5):
        raise DataError(
            f"--data_md5={shlex.quote(md5)} is not an MD5 checksum (32 hexadecimal digits, as "
            f"md5sum prints them): give the MD5 of the tarball at --data_url, or leave "
            f"--data_md5 out to expect {archive.title}'s own ({archive.md5})")


def _make_dir(data_dir: str) -> None:
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create the data directory {data_dir}: {_reason(e)}") from e


def _reason(error: BaseException) -> str:
    """Returns a one-line description of a download or file error."""
    if isinstance(error, urllib.error.HTTPError):
        text = f"HTTP error {error.code}: {error.reason}"
    elif isinstance(error, urllib.error.URLError):
        text = str(error.reason)
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split()) or type(error).__name__


def _mismatch(got_size: int, got_md5: str, md5: str, size: int | None) -> str | None:
    """Describes how a file differs from the expected one, or None if it matches."""
    if got_md5.lower() == md5.lower() and (size is None or got_size == size):
        return None
    expected = f"MD5 {md5}" if size is None else f"{size} bytes, MD5 {md5}"
    return f"got {got_size} bytes, MD5 {got_md5}; expected {expected}"


def _verify(path: str, md5: str, size: int | None) -> None:
    """Checks a tarball the user (or an earlier run) left in the data directory.

    Raises:
      DataError: the file cannot be read or its size or MD5 is not the expected
        one.  The file is left in place.
    """
    try:
        got_size, got_md5 = os.path.getsize(path), file_md5(path)
    except OSError as e:
        raise DataError(f"cannot read {path}: {_reason(e)}") from e
    problem = _mismatch(got_size, got_md5, md5, size)
    if problem:
        raise DataError(
            f"{path} is not the expected tarball ({problem}); it may be incomplete "
            f"or corrupt. Delete it so that it is downloaded again (or, if it is other "
            f"data on purpose, give its MD5 as --data_md5)."
        )


class _Progress(ProgressLine):
    """Download progress on stderr (``ProgressLine``): ``>> Downloading <name> 12.3%``,
    or the megabytes done where the size is not known (a log line each
    ``_UNSIZED_STEP`` bytes)."""

    def __init__(self, name: str, total: int | None, stream=None):
        def describe(done: int, _: float) -> str:
            shown = f"{100.0 * done / total:.1f}%" if total else f"{done / 1e6:.1f} MB"
            return f">> Downloading {name} {shown}"

        super().__init__(describe, total, stream, unsized_step=_UNSIZED_STEP)


# Where the size is not known, a line on a log file every this many bytes.
_UNSIZED_STEP = 25 << 20


class DownloadFailed(DataError):
    """The tarball could not be fetched (no network, no such file, a server error)."""


def _download_failed(url: str, dest_dir: str, reason: str, archive: ff.Archive) -> DataError:
    return DownloadFailed(
        f"could not download {url} ({reason}). Put {archive.tarball} in {dest_dir}, "
        f"or extract it there so that {os.path.join(dest_dir, archive.folder)} "
        f"exists, or point {_url_settings(archive)} at a mirror or a file:// path."
    )


def _url_settings(archive: ff.Archive) -> str:
    return f"--data_url or {archive.url_env}" if archive.url_env else "--data_url"


def _content_length(response) -> int | None:
    value = response.headers.get("Content-Length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _stream(response, out, name: str, progress: bool) -> tuple[int, str]:
    """Copies ``response`` to the file ``out``; returns (bytes copied, hex MD5).

    Raises:
      ConnectionError: fewer bytes arrived than the Content-Length announced.
      OSError, http.client.HTTPException: the transfer failed.
    """
    total = _content_length(response)
    digest = hashlib.md5()
    done = 0
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


def _download(
    url: str, dest_dir: str, expected_md5: str, expected_size: int | None, progress: bool,
    archive: ff.Archive,
) -> str:
    """Downloads ``url`` to ``dest_dir/<archive.tarball>`` and checks it.

    The data goes to a file in a scratch folder in ``dest_dir``
    (``atomic.scratch_folder``) and is moved to the final name only once its size
    and MD5 match; on any failure or interruption the scratch folder is removed,
    and after a ``kill -9`` the next run removes it (``atomic.remove_leftovers``).

    Returns:
      The path of the downloaded tarball.

    Raises:
      DataError: the download failed or the file is not the expected one.
    """
    final = os.path.join(dest_dir, archive.tarball)
    try:
        with atomic.scratch_folder(final) as scratch:
            part = os.path.join(scratch, archive.tarball)
            try:
                with open(part, "wb") as out, \
                        urllib.request.urlopen(url, timeout=SOCKET_TIMEOUT_S) as response:
                    got_size, got_md5 = _stream(response, out, archive.tarball, progress)
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                # URLError, HTTPError, timeouts and refused connections are OSErrors;
                # ValueError is a URL urllib cannot parse.
                raise _download_failed(url, dest_dir, _reason(e), archive) from e
            problem = _mismatch(got_size, got_md5, expected_md5, expected_size)
            if problem:
                raise DataError(
                    f"the file downloaded from {url} is not the expected tarball ({problem}). "
                    f"Check {_url_settings(archive)}; for a mirror of other data, give its "
                    f"MD5 as --data_md5; or put the right {archive.tarball} in {dest_dir}."
                )
            os.replace(part, final)
    except OSError as e:
        raise DataError(f"cannot write a file in {dest_dir}: {_reason(e)}") from e
    return final
