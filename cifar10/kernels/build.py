"""Compiles the package's C++ kernels once for this machine and TensorFlow, and loads
their ops (``load``).  The library is cached under a name that hashes all the build
depends on (sources, flags, compiler, CPU), so that each machine kind finds its own."""

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
import threading

from absl import logging
import tensorflow as tf

from cifar10.core import machine
from cifar10.core.errors import Cifar10Error, first_line

SOURCE_DIR = pathlib.Path(__file__).parent
CACHE_ENV = "CIFAR10_KERNEL_CACHE"
# The one library: Cifar10Lrn, Cifar10BiasReluLrn, Cifar10BiasReluPool and gradients.
NAME = "cifar10_kernels"
NATIVE_SOURCES = ["lrn_rows.cc", "pool_rows.cc"]  # no TensorFlow header: -march=native
TF_SOURCES = ["lrn_op.cc", "pool_op.cc"]


class KernelBuildError(Cifar10Error):
    """A kernel library could not be compiled or loaded on this machine."""


def cache_dir() -> pathlib.Path:
    """$CIFAR10_KERNEL_CACHE, else the user's cache directory's cifar10/kernels."""
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "cifar10" / "kernels"


def compiler() -> list[str] | None:
    """$CXX (which may hold arguments, as "ccache g++"), else c++, g++ or clang++."""
    if os.environ.get("CXX", "").strip():
        return shlex.split(os.environ["CXX"])
    found = next(filter(None, map(shutil.which, ("c++", "g++", "clang++"))), None)
    return [found] if found else None


def _run(command: list[str], what: str) -> str:
    """The command's output; KernelBuildError naming ``what`` with its first error."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelBuildError(f"cannot {what}: {error}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        errors = [line.strip() for line in lines if "error:" in line] or lines[-1:]
        raise KernelBuildError(
            f"cannot {what}: {errors[0] if errors else f'exit status {done.returncode}'}")
    return done.stdout


def library(name: str, native_sources: list[str], tf_sources: list[str]) -> pathlib.Path:
    """The path of the built library ``name``, building it if the cache has none.
    ``native_sources`` include no TensorFlow header and are compiled for this CPU;
    ``tf_sources`` are compiled with TensorFlow's flags."""
    cxx = compiler()
    if cxx is None:
        raise KernelBuildError("no C++ compiler found (install g++, or set CXX)")
    version = _run([*cxx, "--version"], f"run the C++ compiler {shlex.join(cxx)}")
    compile_flags, link_flags = tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()
    features = machine.features()
    digest = hashlib.sha256()
    for part in [*(SOURCE_DIR / f for f in native_sources + tf_sources),
                 *sorted(SOURCE_DIR.glob("*.h"))]:
        digest.update(part.read_bytes() + b"\0")
    for part in [*compile_flags, *link_flags, *cxx, version, sys.platform, platform.machine(),
                 " ".join(sorted(features)) if features is not None else platform.processor()]:
        digest.update(part.encode() + b"\0")
    directory = cache_dir()
    target = directory / f"{name}-{digest.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    logging.warning("compiling the CPU kernels for this machine (once, about 15 s; cached in "
                    "%s)", directory, extra={"notice": True})
    try:
        directory.mkdir(parents=True, exist_ok=True)
        work = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=directory))
    except OSError as error:
        raise KernelBuildError(f"cannot write the kernel cache {directory} "
                               f"({error.strerror or error}); set {CACHE_ENV} to a "
                               "writable directory") from None
    try:
        objects = []
        for source in native_sources + tf_sources:
            obj = str(work / (pathlib.Path(source).stem + ".o"))
            objects.append(obj)
            what = f"compile {source}"
            if source in tf_sources:
                _run([*cxx, "-c", "-fPIC", "-O2", "-w", *compile_flags, str(SOURCE_DIR / source),
                      "-o", obj], what)
                continue
            base = [*cxx, "-c", "-fPIC", "-O3", "-fno-math-errno", "-std=c++17",
                    str(SOURCE_DIR / source), "-o", obj]
            try:
                _run([*base, "-march=native"], what)
            except KernelBuildError:
                _run(base, what)  # a compiler without -march=native
        _run([*cxx, "-shared", *objects, "-o", str(work / "lib.so"), *link_flags],
             f"link {name}")
        os.replace(work / "lib.so", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


_loaded: dict[str, object] = {}  # 'ops' or 'error': this process's one attempt
_loading = threading.Lock()


@tf.autograph.experimental.do_not_convert  # called as the ops' functions are traced
def load():
    """The compiled ops' module, built on first use; KernelBuildError where it cannot be."""
    with _loading:  # MirroredStrategy traces its replicas in threads of their own
        if not _loaded:
            path = None
            try:
                path = library(NAME, NATIVE_SOURCES, TF_SOURCES)
                _loaded["ops"] = tf.load_op_library(str(path))
            except KernelBuildError as error:
                _loaded["error"] = error
            except (tf.errors.OpError, OSError) as error:
                _loaded["error"] = KernelBuildError(
                    f"cannot load the compiled kernels {path} ({first_line(error)}); "
                    "delete the file to have it built again")
    if "error" in _loaded:
        raise _loaded["error"]
    return _loaded["ops"]
