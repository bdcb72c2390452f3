"""What the programs share (cifar10.cli.process): a command line parsed or refused in one
line, --help, errors as one line and an exit status, TensorFlow's loading and lines."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata

import cli
import fakegpus
import pytest
import tensorflow as tf
from absl import app
from absl import flags

import cifar10
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import helptext
from cifar10.cli import process
from cifar10.core.errors import DataError, DivergedError, listed


@pytest.mark.parametrize("error, code, stderr", [
    (DataError("bad file x"), 1, "prog: error: bad file x\n"),
    (DivergedError("Model diverged with loss = NaN at step 7"), 1,
     "prog: error: Model diverged with loss = NaN at step 7\n"),
    (app.UsageError("unexpected arguments: x"), 1,
     "prog: error: unexpected arguments: x (see prog --help)\n"),
    (KeyboardInterrupt(), 130, "prog: interrupted\n"),  # Ctrl-C outside training
])
def test_guarded_turns_errors_into_one_line_and_an_exit_status(error, code, stderr, capsys):
    def main(argv):
        print("started", argv)
        raise error

    assert process.guarded("prog", main, ["prog", "x"]) == code
    assert capsys.readouterr() == ("started ['prog', 'x']\n", stderr)
    assert process.guarded("prog", lambda argv: None, ["prog"]) == 0
    assert capsys.readouterr() == ("", "")


def flag_values():
    values = flags.FlagValues()
    flags.DEFINE_integer("batch_size", 128, "Images per batch.", lower_bound=1,
                         flag_values=values)
    cifar10_flags.define_tf32_flag(values)  # a flag of cifar10.cli.flags, which help lists
    return values


def test_parse_flags_gives_the_arguments_left_and_a_mistake_as_one_line(capsys):
    values = flag_values()
    assert process.parse_flags(["prog", "--batch_size=3", "a"], "prog", "doc", values) == [
        "prog", "a"]
    assert values.batch_size == 3
    for argv, message in [(["--batch_size=0"], "--batch_size=0: must be a whole number of "
                                               "at least 1"),
                          (["--bacth_size=3"], "unknown flag --bacth_size (did you mean "
                                               "--batch_size?)")]:
        with pytest.raises(SystemExit) as exit_info:
            process.parse_flags(["prog", *argv], "prog", "doc", flag_values())
        assert exit_info.value.code == 1
        assert capsys.readouterr() == ("", f"prog: error: {message} (see prog --help)\n")


@pytest.mark.parametrize("program, option",
                         list(zip(cli.ENTRY_POINTS, ["--help", "-h", "--helpshort"] * 2)))
def test_help_is_the_usage_and_the_flags_by_topic(program, option):
    result = cli.call(program, "--max_steps=oops", option)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    _, page, topics = helptext.HELP_TOPICS[program]
    assert lines[0].startswith(f"Usage: {program} ") and lines[2:4] == ["", f"{topics[0][0]}:"]
    assert lines[-1] == f"Every flag in full, absl's own too: --helpfull. Guide: {page}"
    assert max(map(len, lines)) <= helptext.HELP_WIDTH
    if program == "cifar10-train":
        assert lines[1:6] == [
            "Train the CIFAR-10 tutorial model, one replica per GPU.", "", "Data:",
            "  --data_dir=/tmp/cifar10_data  Path to the data directory; the data is downloaded "
            "and", "      extracted there when missing."]


def test_helpfull_is_absls_whole_list_and_no_error():
    # A process: absl's own flags (--helpfull) are not in tests/cli.py's fresh flags.
    result = subprocess.run([os.path.join(cli.BIN_DIR, "cifar10-eval"), "--helpfull"],
                            capture_output=True, text=True, env=cli.env())
    assert result.returncode == 0, result.stderr
    assert "--verbosity" in result.stdout and "--eval_dir" in result.stdout


@pytest.mark.parametrize("program", cli.ENTRY_POINTS)
def test_version_is_one_line(program):
    result = cli.call(program, "--version", "--max_steps=oops")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (f"{program} {cifar10.__version__} (TensorFlow {tf.__version__}, "
                             f"Python {platform.python_version()})\n")


def test_version_says_unknown_for_a_tensorflow_not_installed(monkeypatch):
    installed = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: installed(f"{name}-not-installed"))
    assert process.version_line("prog") == (f"prog {cifar10.__version__} (TensorFlow unknown, "
                                            f"Python {platform.python_version()})")


@pytest.mark.parametrize("program, args, message", [
    ("cifar10-export", ["--export_dir="], "--export_dir is empty: name a folder (default: "
                                          "/tmp/cifar10_export)"),
    ("cifar10-train", ["--train_dir={file}"], "--train_dir={file} is a file, not a folder: "
                                              "name a folder for its output"),
    ("cifar10-eval", ["--eval_dir={r}"], "--eval_dir={r!r} is not UTF-8: choose a name in UTF-8 "
                                         "(the run's records, flags.txt and environment.jsonl, "
                                         "are UTF-8 text)"),
    ("cifar10-launch", ["--train_dir=/tmp/sp ace", "--num_workers=2"],
     "--train_dir=/tmp/sp ace is cifar10-train's flag: put it after --, as in cifar10-launch "
     "--num_workers=2 -- '--train_dir=/tmp/sp ace'"),
])
def test_a_value_refused_once_parsed_is_one_line_and_nothing_is_written(program, args, message,
                                                                        tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    r = os.fsdecode(bytes(tmp_path) + b"/r\xff")  # bytes the file system allows
    result = cli.call(program, *(arg.format(file=file, r=r) for arg in args))
    cli.assert_refused(result, f"{program}: error: "
                               f"{message.format(file=file, r=os.fsencode(r))} (see {program} "
                               f"--help)")
    assert os.listdir(tmp_path) == ["notes.txt"] and file.read_text() == "mine"


def test_float32_is_float32_unless_tf32_is_allowed_and_training_keeps_it(tmp_path):
    tf = process.load_tensorflow()
    try:
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        result = cli.call("cifar10-train", "--allow_tf32", "--synthetic_data",
                          "--synthetic_records=10", f"--data_dir={tmp_path / 'data'}",
                          f"--train_dir={tmp_path / 'train'}", "--max_steps=1",
                          "--batch_size=4")
        assert result.returncode == 0, result.stderr
        assert tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        process.load_tensorflow()
    assert not tf.config.experimental.tensor_float_32_execution_enabled()


@pytest.mark.parametrize("program, args, kept", [
    ("cifar10-train", ["--num_gpus=0", "--synthetic_data", "--synthetic_records=10",
                       "--data_dir={tmp}/data", "--train_dir={tmp}/train", "--max_steps=1",
                       "--batch_size=4"], []),
    ("cifar10-eval", ["--eval_on_cpu", "--run_once", "--checkpoint_dir={run}",
                      "--eval_dir={tmp}/eval", "--data_dir={data}"], []),
    ("cifar10-eval", ["--run_once", "--checkpoint_dir={run}", "--eval_dir={tmp}/eval",
                      "--data_dir={data}"], [0]),  # the first GPU, with memory growth
    ("cifar10-predict", ["--checkpoint_dir={run}", "{tmp}/photos/cat/0.png"], []),
    ("cifar10-export", ["--checkpoint_dir={run}", "--export_dir={tmp}/export"], []),
    ("cifar10-prepare", ["--image_dir={tmp}/photos", "--data_dir={tmp}/prepared",
                         "--test_fraction=0.5"], []),
])
def test_programs_leave_alone_the_gpus_they_do_not_use(program, args, kept, trained_run,
                                                       tmp_path, monkeypatch):
    """Hidden (or with memory growth) as TensorFlow loads, so that a program started
    beside a trainer maps none of its GPUs' memory."""
    for label, name in enumerate(("cat", "dog")):
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(6):
            (tmp_path / "photos" / name / f"{i}.png").write_bytes(tf.io.encode_png(
                tf.fill([32, 32, 3], tf.constant(label * 120 + i * 20, tf.uint8))).numpy())
    gpus = fakegpus.FakeGPUs(monkeypatch, fakegpus.H200, fakegpus.H200)
    run, test_files = trained_run
    result = cli.call(program, *(arg.format(tmp=tmp_path, run=run, data=os.path.dirname(
        os.path.dirname(test_files[0]))) for arg in args))
    assert result.returncode == 0, result.stderr
    assert gpus.state() == (kept, kept, {})


@pytest.mark.parametrize("args, environ, asked", [
    ([], {}, False),
    (["-v", "0"], {}, True),
    (["--verbosity=1"], {}, True),
    (["-v", "-1"], {}, False),  # absl's default level (warnings), given: not a request
    (["--log_device_placement"], {}, True),  # TensorFlow's placement log is its lines
    ([], {"TF_CPP_MIN_LOG_LEVEL": "0"}, True),
    ([], {"TF_CPP_MIN_LOG_LEVEL": "1"}, False),  # filtered by level: logs.min_level
])
def test_tensorflow_lines_are_asked_for_by_flag_or_environment(args, environ, asked,
                                                                monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    values = flags.FlagValues()
    cifar10_flags.define_train_flags(values)
    flags.DEFINE_integer("verbosity", -1, "absl's, as in every program", short_name="v",
                         flag_values=values)
    values(["cifar10-train", *args])
    assert process.tensorflow_lines_asked(values) is asked


def test_long_class_lists_are_shortened_in_one_line_messages():
    assert listed(["cat", "dog"]) == "cat, dog"
    names = [f"c{i}" for i in range(100)]
    assert listed(names) == "c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, ..., c98, c99"


def test_a_program_started_with_no_standard_output_runs_and_ends_with_status_0():
    """`cifar10-eval ... >&-` (a daemon with no stdout): Python's sys.stdout is None,
    where print writes nothing; the program's lines go nowhere, and its end is 0."""
    code = ("import sys\nfrom cifar10.cli import process\n"
            "sys.exit(process.run('cifar10-prepare', lambda argv: print('nobody reads this'), "
            "'doc', lambda values: None))")
    result = subprocess.run(["bash", "-c", '"$0" -c "$1" >&-', sys.executable, code],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (result.returncode, result.stderr) == (0, "")
