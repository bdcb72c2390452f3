"""Compiles the package's C++ kernels for this machine and TensorFlow, once.

The library is built with the system's C++ compiler against the headers of the
TensorFlow that is running (``tf.sysconfig``), and kept in a cache directory under
a name that hashes everything the build depends on: the sources and headers,
TensorFlow's version and flags, the compiler and the CPU's instruction sets.  A
second run, another worker of the same job, or a node of another CPU kind sharing
the home directory, each find their own build or make it.  A build goes to a temporary
file that is renamed into place, so that concurrent builders never load half a
library.  The compiler's output is never printed: a failed build is one error
line (``KernelBuildError``) with the compiler's first error.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile

from cifar10.core import cpu
from cifar10.core.errors import Cifar10Error

SOURCE_DIR = pathlib.Path(__file__).parent
CACHE_ENV = "CIFAR10_KERNEL_CACHE"
COMPILE_TIMEOUT_SECS = 300


class KernelBuildError(Cifar10Error):
    """A kernel library could not be compiled or loaded on this machine."""


def cache_dir() -> pathlib.Path:
    """Where built libraries are kept: $CIFAR10_KERNEL_CACHE, else the user's cache
    directory ($XDG_CACHE_HOME or ~/.cache) under cifar10/kernels."""
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "cifar10" / "kernels"


def compiler() -> list[str] | None:
    """The C++ compiler's command: $CXX (which may hold arguments, as "ccache g++"),
    else c++, g++ or clang++ from PATH (None: none)."""
    if os.environ.get("CXX", "").strip():
        return shlex.split(os.environ["CXX"])
    found = next((path for name in ("c++", "g++", "clang++") if (path := shutil.which(name))),
                 None)
    return [found] if found else None


def _cpu_features() -> str:
    """The CPU's instruction-set flags (Linux), else what the platform says."""
    flags = cpu.features()
    return " ".join(sorted(flags)) if flags is not None else platform.processor()


def _tf_flags() -> tuple[list[str], list[str]]:
    import tensorflow as tf
    return list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=COMPILE_TIMEOUT_SECS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelBuildError(f"cannot {what}: {error}") from None
    if done.returncode != 0:
        # The compiler's first error ("file.cc:3:5: error: ..."), else its last line.
        lines = done.stderr.strip().splitlines()
        errors = [line.strip() for line in lines if "error:" in line] or lines[-1:]
        raise KernelBuildError(
            f"cannot {what}: {errors[0] if errors else f'exit status {done.returncode}'}")


def _key(parts: list[str | bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def library(name: str, native_sources: list[str], tf_sources: list[str]) -> pathlib.Path:
    """The path of the built library ``name``, building it if the cache has none.

    Args:
      name: the library's name (the file is ``<name>-<hash>.so``).
      native_sources: files of this package that include no TensorFlow header,
        compiled for this machine's CPU (``-march=native`` where the compiler takes it).
      tf_sources: files that use TensorFlow's headers, compiled with its flags.
      (The package's own headers, ``*.h`` beside them, count as sources too.)

    Raises:
      KernelBuildError: no compiler, a failed compile or link, or an unwritable cache.
    """
    cxx = compiler()
    if cxx is None:
        raise KernelBuildError("no C++ compiler found (install g++, or set CXX)")
    compile_flags, link_flags = _tf_flags()
    try:
        version = subprocess.run([*cxx, "--version"], capture_output=True, text=True,
                                 errors="replace", timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelBuildError(f"cannot run the C++ compiler {shlex.join(cxx)}: "
                               f"{error}") from None
    sources = [(SOURCE_DIR / f).read_bytes() for f in native_sources + tf_sources]
    sources += [header.read_bytes() for header in sorted(SOURCE_DIR.glob("*.h"))]  # included
    key = _key([*sources, *compile_flags, *link_flags, *cxx, version, sys.platform,
                platform.machine(), _cpu_features()])
    directory = cache_dir()
    target = directory / f"{name}-{key}.so"
    if target.is_file():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
        work = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=directory))
    except OSError as error:
        raise KernelBuildError(f"cannot write the kernel cache {directory} "
                               f"({error.strerror or error}); set {CACHE_ENV} to a "
                               "writable directory") from None
    try:
        os.replace(_build(name, cxx, native_sources, tf_sources, compile_flags, link_flags,
                          work), target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _build(name: str, cxx: list[str], native_sources: list[str], tf_sources: list[str],
           compile_flags: list[str], link_flags: list[str], work: pathlib.Path
           ) -> pathlib.Path:
    """Compiles and links the library in ``work`` with TensorFlow's flags; returns its
    path there."""
    objects = [_compile_native(cxx, SOURCE_DIR / source, work) for source in native_sources]
    for source in tf_sources:
        obj = work / (pathlib.Path(source).stem + ".o")
        _run([*cxx, "-c", "-fPIC", "-O2", "-w", *compile_flags, str(SOURCE_DIR / source),
              "-o", str(obj)], f"compile {source}")
        objects.append(obj)
    built = work / f"{name}.so"
    _run([*cxx, "-shared", *map(str, objects), "-o", str(built), *link_flags], f"link {name}")
    return built


def _compile_native(cxx: list[str], source: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    obj = work / (source.stem + ".o")
    base = [*cxx, "-c", "-fPIC", "-O3", "-fno-math-errno", "-std=c++17", str(source), "-o",
            str(obj)]
    try:
        _run([*base, "-march=native"], f"compile {source.name}")
    except KernelBuildError:
        _run(base, f"compile {source.name}")  # a compiler without -march=native
    return obj
