"""Tests of cifar10.cli.entry: the console scripts' start, a Ctrl-C at any moment of it
ended with one line and status 130, never a traceback.

Each test starts a Python process (no TensorFlow is loaded: a few tenths of a second)
and sends SIGINT at a chosen point of the start, not after a delay, so that where it
lands does not depend on the machine's speed.
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


def console_scripts() -> dict[str, str]:
    """setup.py's console scripts: program name -> function of cifar10.cli.entry."""
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        text = f.read()
    return dict(re.findall(r'"(cifar10-[a-z]+)=cifar10\.cli\.entry:([a-z]+)"', text))


def test_setup_starts_each_program_through_its_entry_function():
    scripts = console_scripts()
    assert sorted(scripts) == sorted(cli.ENTRY_POINTS)
    for program, function in scripts.items():
        with mock.patch.object(entry, "start") as start_program:
            getattr(entry, function)()
        ((name, module_name), _), = start_program.call_args_list
        assert name == program
        assert module_name == cli.ENTRY_POINTS[program].__name__


@pytest.mark.parametrize("program", sorted(cli.ENTRY_POINTS))
def test_ctrl_c_while_the_program_is_imported_is_one_line_and_status_130(program):
    # absl.flags is among the first imports of every program's module.
    function = console_scripts()[program]
    result = start(f"from cifar10.cli import entry; entry.{function}()", sigint_at="absl.flags")
    assert (result.returncode, result.stdout, result.stderr) == (
        130, "", f"{program}: interrupted\n")


def write_module(tmp_path, body: str) -> str:
    (tmp_path / "fake_main.py").write_text(textwrap.dedent(body))
    return str(tmp_path)


def test_ctrl_c_that_an_import_swallows_still_ends_the_start(tmp_path):
    modules_dir = write_module(tmp_path, """\
        import os, signal
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except:  # a library's bare except
            pass
        def run():
            print("ran")
        """)
    result = start("from cifar10.cli import entry; entry.start('cifar10-x', 'fake_main')",
                   modules_dir=modules_dir)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "cifar10-x: interrupted\n")


def test_ctrl_c_before_the_program_handles_it_is_one_line_and_status_130(tmp_path):
    # As one while the flags are read: in run, before process.guarded.
    modules_dir = write_module(tmp_path, """\
        import os, signal
        def run():
            os.kill(os.getpid(), signal.SIGINT)
            print("not reached")
        """)
    result = start("from cifar10.cli import entry; entry.start('cifar10-x', 'fake_main')",
                   modules_dir=modules_dir)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "cifar10-x: interrupted\n")


def test_the_program_runs_with_pythons_own_sigint_handler(tmp_path):
    modules_dir = write_module(tmp_path, """\
        import signal, sys
        def run():
            print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
            sys.exit(3)
        """)
    result = start("from cifar10.cli import entry; entry.start('cifar10-x', 'fake_main')",
                   modules_dir=modules_dir)
    assert (result.returncode, result.stdout, result.stderr) == (3, "True\n", "")


def test_a_sigint_ignored_by_whoever_started_the_program_stays_ignored(tmp_path):
    # A job a script starts in the background (or nohup) has SIGINT ignored.
    modules_dir = write_module(tmp_path, """\
        import os, signal
        os.kill(os.getpid(), signal.SIGINT)
        def run():
            os.kill(os.getpid(), signal.SIGINT)
            print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
        """)
    result = start("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                   "from cifar10.cli import entry; entry.start('cifar10-x', 'fake_main')",
                   modules_dir=modules_dir)
    assert (result.returncode, result.stdout, result.stderr) == (0, "True\n", "")


def test_ctrl_c_that_a_native_import_makes_an_import_error_still_ends_the_start(tmp_path):
    # A KeyboardInterrupt raised in a native module's initialisation (pybind11's) comes
    # out of the import as "ImportError: initialization failed".
    modules_dir = write_module(tmp_path, """\
        import os, signal
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e
        def run():
            print("ran")
        """)
    result = start("from cifar10.cli import entry; entry.start('cifar10-x', 'fake_main')",
                   modules_dir=modules_dir)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "cifar10-x: interrupted\n")


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_held_back_is_raised_as_the_block_ends(signal_name):
    # SIGTERM is held where the program takes it as a Ctrl-C (programs.run's handler).
    result = start(textwrap.dedent(f"""\
        import os, signal
        from cifar10.cli import entry
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            with entry.interrupts_held():
                os.kill(os.getpid(), signal.{signal_name})
                print("held")
        except KeyboardInterrupt:
            print("raised", signal.getsignal(signal.{signal_name}) is signal.default_int_handler)
        with entry.interrupts_held():
            print("none held")
        signal.signal(signal.{signal_name}, signal.SIG_IGN)
        with entry.interrupts_held():  # ignored by whoever started it: it stays ignored
            os.kill(os.getpid(), signal.{signal_name})
        print("ignored", signal.getsignal(signal.{signal_name}) is signal.SIG_IGN)
        """))
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "held\nraised True\nnone held\nignored True\n", "")
