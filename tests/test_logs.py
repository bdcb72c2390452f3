"""TensorFlow's C++ log lines filtered off stderr, and the programs' warning format."""

import logging
import subprocess
import sys
import textwrap

import pytest

from cifar10.core import logs

# Lines as TensorFlow 2.21 (absl) and 2.16 (its own logger) write them on a CPU machine.
PREINIT = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ABSL_INFO = (b"I0000 00:00:1795575350.066973    1850 cudart_stub.cc:31] Could not find cuda "
             b"drivers on your machine, GPU will not be used.\n")
ABSL_ERROR = (b"E0000 00:00:1795575351.065488    1850 cuda_platform.cc:52] failed call to "
              b"cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
ABSL_WARNING = (b"W1125 02:57:31.347302    2476 cache_dataset_ops.cc:912] The calling iterator "
                b"did not fully read the dataset being cached.\n")
TWO_LINES = (b"I0000 00:00:1795575482.953814    2311 cpu_feature_guard.cc:227] This TensorFlow "
             b"binary is optimized to use available CPU instructions.\nTo enable the following "
             b"instructions: AVX2 FMA, in other operations, rebuild TensorFlow.\n")
TSL_INFO = (b"2026-11-25 02:59:20.839188: I tensorflow/core/util/port.cc:113] oneDNN custom "
            b"operations are on.\n")
TSL_ERROR = (b"2026-11-25 02:59:20.934900: E external/local_xla/xla/stream_executor/cuda/"
             b"cuda_fft.cc:479] Unable to register cuFFT factory\n")
FATAL = b"F0000 00:00:1795575351.065488    1850 tensor.cc:12] Check failed: 1 == 2\n"
NOISE = PREINIT + ABSL_INFO + ABSL_ERROR + ABSL_WARNING + TWO_LINES + TSL_INFO + TSL_ERROR


def filtered(stream: bytes, chunk: int = 1 << 16, keep_from: int = 3) -> bytes:
    line_filter = logs.NativeLineFilter(keep_from)
    kept = b"".join(line_filter.feed(stream[i:i + chunk]) for i in range(0, len(stream), chunk))
    return kept + line_filter.close()


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16], ids=["bytewise", "7-bytes", "whole"])
def test_log_lines_and_their_continuations_are_dropped_the_rest_kept(chunk):
    own = (b"cifar10-train: warning: --num_gpus=1 but this machine has no GPU.\n2026-11-22 "
           b"02:00:00.000000: step 1000, loss = 1.02 (1950.3 examples/sec; 0.066 sec/batch)\n")
    stream = (own + NOISE + b"terminate called after throwing an instance of 'std::bad_alloc'\n"
              + ABSL_INFO + FATAL + b"*** Check failure stack trace: ***\n" + TSL_INFO
              + b"Fatal Python error: Aborted\n" + b"a last line without its newline")
    assert filtered(stream, chunk) == (
        own + b"terminate called after throwing an instance of 'std::bad_alloc'\n" + FATAL
        + b"*** Check failure stack trace: ***\n" + b"Fatal Python error: Aborted\n"
        + b"a last line without its newline")


@pytest.mark.parametrize("level, keep_from, asked, wanted", [
    (None, 3, False, False), ("1", 1, False, False), ("2", 2, False, False),
    (" 3", 3, False, False), ("4", 3, False, False), ("0", None, False, True),
    ("-1", None, False, True), ("all", None, False, True), (None, 3, True, True)])
def test_tf_cpp_min_log_level_1_to_3_is_the_lowest_level_shown_and_0_shows_all(
        level, keep_from, asked, wanted):
    environ = {} if level is None else {"TF_CPP_MIN_LOG_LEVEL": level}
    assert logs.min_level(environ) == keep_from  # (4 and more: quieter still, as 3)
    assert logs.python_level(environ) == ("WARNING" if keep_from == 1 else "ERROR")
    assert logs.tensorflow_lines_wanted(environ, asked) is wanted


def test_the_filter_at_a_level_keeps_that_level_and_above():
    assert filtered(NOISE + FATAL, keep_from=3) == FATAL
    assert filtered(NOISE + FATAL, keep_from=2) == ABSL_ERROR + TSL_ERROR + FATAL
    assert filtered(NOISE + FATAL, keep_from=1) == PREINIT + ABSL_ERROR + ABSL_WARNING + TSL_ERROR + FATAL


def test_the_filter_keeps_python_lines_and_outlives_a_killed_process():
    """Native writes to descriptor 2 pass the filter; Python's sys.stderr writes go
    straight out; a fatal line written just before the process is killed still
    comes out (the filtering process drains the pipe after its writer is gone)."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from cifar10.core import logs
        logs.hide_native_lines()
        os.write(2, {NOISE!r})
        print("a Python line", file=sys.stderr)
        os.write(2, {ABSL_INFO + FATAL!r})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == -9
    assert result.stderr == b"a Python line\n" + FATAL


def test_absl_warnings_go_to_the_new_stderr_in_the_program_format():
    script = textwrap.dedent("""
        import logging as std_logging, sys
        from absl import flags, logging
        from cifar10.core import logs
        flags.FLAGS(["cifar10-x"])
        logging.use_absl_handler()
        logs.hide_native_lines()
        handler = logging.get_absl_handler()
        handler.setFormatter(logs.ProgramFormatter("cifar10-x", handler.python_handler.formatter))
        std_logging.getLogger("absl").warning("disk %s is slow", "/tmp")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "cifar10-x: warning: disk /tmp is slow\n"


@pytest.mark.parametrize("level, line", [
    (logging.WARNING, "cifar10-eval: warning: Skipping model.ckpt-3: gone"),
    (logging.ERROR, "cifar10-eval: error: Skipping model.ckpt-3: gone"),
    (logging.INFO, "INFO Skipping model.ckpt-3: gone"),
])
def test_program_formatter(level, line):
    record = logging.LogRecord("absl", level, __file__, 1, "Skipping %s: %s",
                               ("model.ckpt-3", "gone"), None)
    fallback = logging.Formatter("%(levelname)s %(message)s")
    assert logs.ProgramFormatter("cifar10-eval", fallback).format(record) == line


def test_a_suggested_program_is_named_as_the_users_shell_finds_it(tmp_path, monkeypatch):
    """By name where PATH finds the one beside this program; else by its path, relative
    as this program's was (the trainer's `Evaluate it:` line: test_output.py)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cifar10-eval").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "cifar10-eval").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert logs.runnable("cifar10-eval", "bin/cifar10-train") == "bin/cifar10-eval"
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert logs.runnable("cifar10-eval", "bin/cifar10-train") == "cifar10-eval"
    assert logs.runnable("cifar10-eval", "-c") == "cifar10-eval"  # not a console script


def test_a_suggested_program_is_found_beside_the_file_a_link_to_this_one_names(
        tmp_path, monkeypatch):
    """A program linked alone into a folder on PATH (``~/bin/cifar10-train``): the other
    one is beside the file the link names; one started by a bare name, beside it here."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    for name in ("cifar10-train", "cifar10-eval"):
        (tmp_path / "venv" / "bin" / name).write_text("#!/bin/sh\n")
        (tmp_path / "venv" / "bin" / name).chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cifar10-train").symlink_to(tmp_path / "venv" / "bin" / "cifar10-train")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert logs.runnable("cifar10-eval", str(tmp_path / "bin" / "cifar10-train")) == str(
        tmp_path / "venv" / "bin" / "cifar10-eval")
    monkeypatch.chdir(tmp_path / "venv" / "bin")
    assert logs.runnable("cifar10-eval", "cifar10-train") == "./cifar10-eval"
