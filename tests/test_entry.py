"""Tests of cifar10.cli.entry: the console scripts' start, a Ctrl-C at any moment of it
ended with one line and status 130, never a traceback.  Each test starts a Python
process (no TensorFlow: a few tenths of a second) that sends itself the signal at a
chosen point, not after a delay, so that where it lands does not depend on timing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from unittest import mock

import cli
import pytest

from cifar10.cli import entry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Sends SIGINT to the process itself when the module named SIGINT_AT starts to be
# imported (a meta path finder that finds nothing: the import goes on as usual).
_INTERRUPT_AT_IMPORT = textwrap.dedent("""\
    import os, signal, sys
    class Interrupt:
        def find_spec(self, name, path=None, target=None):
            if name == os.environ["SIGINT_AT"]:
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, Interrupt())
    """)


def start(code: str, *, sigint_at: str = "", modules_dir: str = "") -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [modules_dir, REPO, os.environ.get("PYTHONPATH")]))
    env = cli.env(PYTHONPATH=path, SIGINT_AT=sigint_at)
    return subprocess.run([sys.executable, "-c", _INTERRUPT_AT_IMPORT + code],
                          capture_output=True, text=True, timeout=60, env=env)


def test_setup_starts_each_program_through_its_entry_function():
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        scripts = dict(re.findall(r'"(cifar10-[a-z]+)=cifar10\.cli\.entry:([a-z]+)"', f.read()))
    assert sorted(scripts) == sorted(cli.ENTRY_POINTS)
    for program, function in scripts.items():
        with mock.patch.object(entry, "start") as start_program:
            getattr(entry, function)()
        ((name, module_name), _), = start_program.call_args_list
        assert name == program
        assert module_name == cli.ENTRY_POINTS[program].__name__


def test_ctrl_c_while_the_program_is_imported_is_one_line_and_status_130():
    # absl.flags is among the first imports of every program's module.
    result = start("from cifar10.cli import entry; entry.train()", sigint_at="absl.flags")
    assert (result.returncode, result.stdout, result.stderr) == (
        130, "", "cifar10-train: interrupted\n")


# A program's module (``entry.start``'s to import and run) and what its start ends with.
FAKE_MAINS = {
    "an import swallows it": ("""\
        import os, signal
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except:  # a library's bare except
            pass
        def run():
            print("ran")
        """, (130, "", "cifar10-x: interrupted\n")),
    "before the program handles it": ("""\
        import os, signal
        def run():  # as one while the flags are read, before process.guarded
            os.kill(os.getpid(), signal.SIGINT)
            print("not reached")
        """, (130, "", "cifar10-x: interrupted\n")),
    "the program runs with Python's own handler": ("""\
        import signal, sys
        def run():
            print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
            sys.exit(3)
        """, (3, "True\n", "")),
}


@pytest.mark.parametrize("case", sorted(FAKE_MAINS))
def test_ctrl_c_at_any_moment_of_the_start_ends_it_with_one_line(tmp_path, case):
    body, expected = FAKE_MAINS[case]
    (tmp_path / "fake_main.py").write_text(textwrap.dedent(body))
    result = start("from cifar10.cli import entry; entry.start('cifar10-x', 'fake_main')",
                   modules_dir=str(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == expected


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_in_the_block_is_raised_at_once_and_again_if_swallowed(signal_name):
    # SIGTERM is handled where the program takes it as a Ctrl-C (process.run's handler).
    result = start(textwrap.dedent(f"""\
        import signal
        from cifar10.cli import entry
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        def own():
            return signal.getsignal(signal.{signal_name}) is signal.default_int_handler
        try:
            with entry.interrupts_kept():
                try:
                    signal.raise_signal(signal.{signal_name})
                    print("not reached")
                except:  # a library's bare except
                    print("swallowed")
                print("went on")
        except KeyboardInterrupt:
            print("raised", own())
        try:
            with entry.interrupts_kept():
                try:
                    signal.raise_signal(signal.{signal_name})
                except KeyboardInterrupt as e:  # a native module's initialisation
                    raise ImportError("initialization failed") from e
        except KeyboardInterrupt:
            print("raised for the import error", own())
        with entry.interrupts_kept():
            print("none", own())
        signal.signal(signal.{signal_name}, signal.SIG_IGN)
        with entry.interrupts_kept():  # ignored by whoever started it: it stays ignored
            signal.raise_signal(signal.{signal_name})
        print("ignored", signal.getsignal(signal.{signal_name}) is signal.SIG_IGN)
        """))
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "swallowed\nwent on\nraised True\nraised for the import error True\n"
           "none False\nignored True\n", "")


def test_an_interrupt_in_a_native_modules_initialisation_waits_for_the_next_import():
    # Raised in the Python code a native module's initialisation runs (pybind11's enums),
    # it left matplotlib's ft2font half made, and Python's finalisation then aborted.
    result = start(textwrap.dedent("""\
        import importlib.machinery, signal, sys, types
        from cifar10.cli import entry
        class Native(importlib.machinery.ExtensionFileLoader):
            def create_module(self, spec):
                signal.raise_signal(signal.SIGINT)
                print("initialised")
                return types.ModuleType(spec.name)
            def exec_module(self, module):
                pass
        class Finder:
            def find_spec(self, name, path=None, target=None):
                if name == "native":
                    return importlib.machinery.ModuleSpec(name, Native(name, "native.so"))
        sys.meta_path.append(Finder())
        try:
            with entry.interrupts_kept():
                import native
                print("imported")
                import colorsys  # the next import: raised as it starts
                print("not reached")
        except KeyboardInterrupt:
            print("raised", "colorsys" in sys.modules,
                  any(isinstance(finder, entry._InterruptAtNextImport) for finder in sys.meta_path))
        """))
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "initialised\nimported\nraised False False\n", "")


def write_tensorflow(tmp_path, swallow: str) -> str:
    """A tensorflow package whose import takes the signal named by $SIGNAL and swallows
    it (``swallow``: "import error", as from a native module's initialisation, or
    "bare except"), as TensorFlow's own imports can."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "native.py").write_text(textwrap.dedent("""\
        import os, signal
        try:
            signal.raise_signal(getattr(signal, os.environ["SIGNAL"]))
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e
        """))
    guarded = "except ImportError:" if swallow == "import error" else "except:"
    (package / "__init__.py").write_text(textwrap.dedent(f"""\
        import logging
        try:
            from tensorflow import native
        {guarded}
            pass
        def get_logger():
            return logging.getLogger("tensorflow")
        class config:
            class experimental:
                enable_tensor_float_32_execution = staticmethod(lambda allowed: None)
        print("tensorflow loaded", flush=True)
        """))
    return str(tmp_path)


@pytest.mark.parametrize("swallow, signal_name", [("import error", "SIGTERM"),
                                                  ("bare except", "SIGINT")])
def test_a_program_interrupted_as_tensorflow_loads_ends_interrupted(tmp_path, swallow,
                                                                    signal_name):
    # cifar10-prepare, the cheapest to bring to TensorFlow's import: two class folders
    # of 6 images (enough for 5 training files and a test file; not read before it).
    for name in ("ant", "bee"):
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(6):
            (tmp_path / "photos" / name / f"{i}.png").write_bytes(b"")
    path = os.pathsep.join([write_tensorflow(tmp_path, swallow), REPO])
    result = subprocess.run(
        [sys.executable, "-c", "from cifar10.cli import entry; entry.prepare()",
         f"--image_dir={tmp_path / 'photos'}", f"--data_dir={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=60,
        env=cli.env(PYTHONPATH=path, SIGNAL=signal_name))
    assert (result.returncode, result.stdout.splitlines()[-1], result.stderr) == (
        130, "tensorflow loaded", "cifar10-prepare: interrupted\n")
    assert not (tmp_path / "data").exists()


def test_the_benchmark_interrupted_as_tensorflow_loads_ends_interrupted(tmp_path):
    # scripts/benchmark.py loads TensorFlow (its bench modules) once its arguments are read.
    path = os.pathsep.join([write_tensorflow(tmp_path, "import error"), REPO])
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "benchmark.py"), "--figures=g"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env=cli.env(PYTHONPATH=path, SIGNAL="SIGTERM"))
    assert (result.returncode, result.stdout, result.stderr) == (
        130, "tensorflow loaded\n", "benchmark.py: interrupted\n")
