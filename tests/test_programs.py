"""Tests of what the programs share (cifar10.cli.process, command_line): data preparation and
one-line errors of the programs."""

from __future__ import annotations

import os
import subprocess
import sys
from unittest import mock

import cli
import pytest
from absl import app
from absl import flags

from cifar10.data import fileformat as ff
from cifar10.cli import flags as cifar10_flags
from cifar10.data import getdata
from cifar10.cli import checkpoint_dir
from cifar10.cli import command_line, process
from cifar10.data import synthetic
from cifar10.core.errors import DataError, DivergedError, listed


def test_synthetic_data_is_generated_once_and_announced(tmp_path):
    lines = []
    batches_dir, counts = getdata.prepare(str(tmp_path), use_synthetic=True,
                                                synthetic_records=20, print_fn=lines.append)
    assert batches_dir == str(tmp_path / "synthetic" / ff.BATCHES_DIRNAME)
    assert counts == {"train": 100, "test": 20}
    assert synthetic.is_synthetic(batches_dir)
    assert "SYNTHETIC" in lines[0] and batches_dir in lines[0]
    stamp = os.stat(os.path.join(batches_dir, "test_batch.bin")).st_mtime_ns
    getdata.prepare(str(tmp_path), use_synthetic=True, synthetic_records=20,
                          print_fn=lines.append)
    assert os.stat(os.path.join(batches_dir, "test_batch.bin")).st_mtime_ns == stamp


def test_extracted_data_is_validated_and_counted(tmp_path):
    synthetic.write_dataset(str(tmp_path), records_per_file=30)
    os.remove(tmp_path / ff.BATCHES_DIRNAME / synthetic.SYNTHETIC_MARKER)  # looks real now
    lines = []
    _, counts = getdata.prepare(str(tmp_path), url="http://127.0.0.1:9/unused",
                                      print_fn=lines.append)
    assert counts == {"train": 150, "test": 30}
    assert lines == []  # real-looking data: no synthetic notice
    (tmp_path / ff.BATCHES_DIRNAME / "test_batch.bin").write_bytes(b"\x00" * 3000)
    with pytest.raises(DataError, match="test_batch.bin: 3,000 bytes"):
        getdata.prepare(str(tmp_path), print_fn=lines.append)


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
    return values


def test_parse_flags_gives_the_arguments_left_and_a_mistake_as_one_line(capsys):
    values = flag_values()
    assert command_line.parse_flags(["prog", "--batch_size=3", "a"], "prog", "doc", values) == [
        "prog", "a"]
    assert values.batch_size == 3
    for argv, message in [(["--batch_size=0"], "--batch_size=0: must be a whole number of "
                                               "at least 1"),
                          (["--bacth_size=3"], "unknown flag --bacth_size (did you mean "
                                               "--batch_size?)")]:
        with pytest.raises(SystemExit) as exit_info:
            command_line.parse_flags(["prog", *argv], "prog", "doc", flag_values())
        assert exit_info.value.code == 1
        assert capsys.readouterr() == ("", f"prog: error: {message} (see prog --help)\n")


@pytest.mark.parametrize("program, flag, message", [
    ("cifar10-train", "--train_dir=", "--train_dir is empty: name a folder (default: "
                                      "/tmp/cifar10_train)"),
    ("cifar10-export", "--export_dir=", "--export_dir is empty: name a folder (default: "
                                        "/tmp/cifar10_export)"),
    ("cifar10-eval", "--checkpoint_dir=", "--checkpoint_dir is empty: name a folder (default: "
                                          "/tmp/cifar10_train)"),
    ("cifar10-train", "--train_dir={file}", "--train_dir={file} is a file, not a folder: name "
                                            "a folder for its output"),
    ("cifar10-eval", "--eval_dir={file}", "--eval_dir={file} is a file, not a folder: name a "
                                          "folder for its output"),
])
def test_a_folder_flag_that_is_empty_or_a_file_is_one_line(program, flag, message, tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    result = cli.call(program, flag.format(file=file))
    assert result.returncode == 1
    assert result.stderr == (f"{program}: error: {message.format(file=file)} (see {program} "
                             f"--help)\n")
    assert file.read_text() == "mine"


@pytest.mark.parametrize("option", ["--help", "-h", "--helpshort"])
def test_help_shows_the_doc_and_the_programs_own_flags(option, capsys):
    values = flag_values()
    cifar10_flags.define_tf32_flag(values)  # a flag of cifar10.cli.flags, which help lists
    with pytest.raises(SystemExit) as exit_info:
        command_line.parse_flags(["prog", option], "prog", "Does things.", values)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("USAGE: prog [flags]\n\nDoes things.\n")
    assert "--[no]allow_tf32" in out and "--batch_size" not in out  # the test's own flag
    assert out.endswith("Try --helpfull to see absl's own flags too. TensorFlow's own log "
                        "lines are hidden;\n-v 0 (absl's --verbosity) or "
                        "TF_CPP_MIN_LOG_LEVEL=0 shows them (1 to 3: those of\nlevel W, E or "
                        "F and above).\n")


def test_generated_data_of_the_earlier_easy_kind_is_used_with_a_note(tmp_path):
    synthetic.write_dataset(str(tmp_path / getdata.SYNTHETIC_SUBDIR), records_per_file=20,
                            separable=True)
    lines = []
    batches_dir, _ = getdata.prepare(str(tmp_path), use_synthetic=True, synthetic_records=20,
                                     print_fn=lines.append)
    assert lines[0] == (f"NOTE: {batches_dir} holds generated data of an earlier, easier kind "
                        f"(no look-alike classes: a model scores 1.000 on it); delete the "
                        f"folder to have the current kind generated.")
    lines.clear()
    getdata.prepare(str(tmp_path / "new"), use_synthetic=True, synthetic_records=20,
                    print_fn=lines.append)
    assert not any("earlier, easier kind" in line for line in lines)


def test_synthetic_data_of_another_size_is_reused_with_a_note(tmp_path):
    getdata.prepare(str(tmp_path), use_synthetic=True, synthetic_records=20,
                          print_fn=lambda line: None)
    lines = []
    with mock.patch.object(getdata.logging, "warning") as warned:
        _, counts = getdata.prepare(str(tmp_path), use_synthetic=True, synthetic_records=30,
                                    print_fn=lines.append)
    assert counts == {"train": 100, "test": 20}
    # A flag's value not taken is a warning (stderr), not one of the notes.
    [[said], _] = warned.call_args
    assert said == (f"{tmp_path}/synthetic/cifar-10-batches-bin already holds generated data "
                    f"of another size (20 records a file); it is used as it is: "
                    f"--synthetic_records=30 applies only when it is generated (delete the "
                    f"folder to regenerate)")
    assert not any("synthetic_records" in line for line in lines)


def test_generated_data_in_a_directory_that_cannot_be_made_is_a_data_error(tmp_path):
    (tmp_path / "a_file").write_text("not a directory")
    with pytest.raises(DataError) as err:
        getdata.prepare(str(tmp_path / "a_file" / "data"), use_synthetic=True,
                              synthetic_records=5, print_fn=lambda line: None)
    assert str(err.value) == (f"--data_dir={tmp_path}/a_file/data is under a file, "
                              f"{tmp_path}/a_file, not a folder: --synthetic_data generates its "
                              f"data in a folder under --data_dir (<data_dir>/synthetic); pass a "
                              f"folder (made if missing), such as --data_dir={tmp_path}")


def test_float32_is_float32_unless_tf32_is_allowed():
    tf = process.load_tensorflow()
    try:
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        process.load_tensorflow(allow_tf32=True)
        assert tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        process.load_tensorflow()
    assert not tf.config.experimental.tensor_float_32_execution_enabled()


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


# cifar10-train run as a process, writing at its exit TensorFlow's TensorFloat-32
# setting (which nothing changes after training starts) into the file $TF32_REPORT.
_TF32_PROBE = """
import atexit, os, sys
def report():
    tf = sys.modules["tensorflow"]
    with open(os.environ["TF32_REPORT"], "w") as f:
        f.write(str(tf.config.experimental.tensor_float_32_execution_enabled()))
atexit.register(report)
sys.argv = sys.argv[1:]
from cifar10.cli import train_main
train_main.run()
"""


@pytest.mark.parametrize("allow", [True, False])
def test_allow_tf32_holds_during_the_run(tmp_path, allow):
    result = subprocess.run(
        [sys.executable, "-c", _TF32_PROBE, "cifar10-train", f"--allow_tf32={allow}",
         "--synthetic_data", "--synthetic_records=10", f"--data_dir={tmp_path / 'data'}",
         f"--train_dir={tmp_path / 'train'}", "--max_steps=1", "--batch_size=4"],
        capture_output=True, text=True, timeout=300,
        env=cli.env(TF32_REPORT=str(tmp_path / "tf32")))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tf32").read_text() == str(allow)


@pytest.mark.parametrize("program, flag", [("cifar10-train", "train_dir"),
                                           ("cifar10-eval", "eval_dir")])
def test_a_directory_name_that_is_not_utf8_is_one_line_and_nothing_is_written(
        tmp_path, program, flag):
    name = os.fsdecode(bytes(tmp_path) + b"/r\xff")  # bytes the file system allows
    result = cli.run(program, f"--{flag}={name}", "--synthetic_data",
                     f"--data_dir={tmp_path / 'data'}", timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{program}: error: --{flag}={os.fsencode(name)!r} is not UTF-8: choose a name in "
        f"UTF-8 (the run's records, flags.txt and environment.jsonl, are UTF-8 text) (see "
        f"{program} --help)"]
    assert os.listdir(tmp_path) == []


def test_a_checkpoint_dir_without_checkpoints_is_told_where_they_are(tmp_path):
    def checkpoint_in(folder):
        folder.mkdir(parents=True)
        for name in ("model.ckpt-5.index", "model.ckpt-5.data-00000-of-00001"):
            (folder / name).write_bytes(b"")

    checkpoint_in(tmp_path / "runs" / "a" / "train")
    assert str(checkpoint_dir.no_checkpoint(str(tmp_path / "runs" / "a"))) == (
        f"No checkpoint found in {tmp_path / 'runs' / 'a'}; {tmp_path / 'runs' / 'a' / 'train'} "
        f"holds checkpoints: pass --checkpoint_dir={tmp_path / 'runs' / 'a' / 'train'}")
    checkpoint_in(tmp_path / "runs" / "a" / "again")
    (tmp_path / "runs" / "a" / "empty").mkdir()
    assert str(checkpoint_dir.no_checkpoint(str(tmp_path / "runs" / "a"), "No checkpoint file found")) \
        == (f"No checkpoint file found in {tmp_path / 'runs' / 'a'}; its subfolders again, "
            f"train hold checkpoints: pass one of them as --checkpoint_dir, such as "
            f"--checkpoint_dir={tmp_path / 'runs' / 'a' / 'again'}")
    # Data folders: CIFAR-10's, its parent, generated data's --data_dir, CIFAR-100's.
    synthetic.write_dataset(str(tmp_path / "data" / "synthetic"), records_per_file=2)
    (tmp_path / "c100" / ff.CIFAR100.folder).mkdir(parents=True)
    for folder in (tmp_path / "data" / "synthetic" / ff.BATCHES_DIRNAME,
                   tmp_path / "data" / "synthetic", tmp_path / "data", tmp_path / "c100"):
        assert str(checkpoint_dir.no_checkpoint(str(folder))) == (
            f"No checkpoint found in {folder}, a data folder, not a training run: pass the "
            f"run's --train_dir as --checkpoint_dir (its data goes in --data_dir)")
    (tmp_path / "runs" / "b").mkdir()
    assert str(checkpoint_dir.no_checkpoint(str(tmp_path / "runs" / "b"))) == (
        f"No checkpoint found in {tmp_path / 'runs' / 'b'}: train first (cifar10-train "
        f"--train_dir={tmp_path / 'runs' / 'b'}) or point --checkpoint_dir at a training run")


def test_a_subfolder_that_cannot_be_read_is_no_hint_and_no_error(tmp_path, monkeypatch):
    (tmp_path / "private").mkdir()
    listdir = os.listdir

    def refused(path="."):
        if str(path).endswith("private"):
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", refused)
    assert str(checkpoint_dir.no_checkpoint(str(tmp_path))) == (
        f"No checkpoint found in {tmp_path}: train first (cifar10-train --train_dir={tmp_path}) "
        f"or point --checkpoint_dir at a training run")


def test_the_paths_in_flags_to_paste_are_quoted_for_the_shell(tmp_path, monkeypatch):
    # After `cp -r t1 "sp ace/run copy"`, `pass --train_dir=/tmp/sp ace/run copy` could
    # not be pasted. (A path in the prose of a line stays as it is.)
    import shlex

    from cifar10.cli import kind_of_data, outdirs, path_flags
    from cifar10.core.errors import Cifar10Error

    space = tmp_path / "sp ace"
    run = space / "run copy"
    run.mkdir(parents=True)
    for name in ("model.ckpt-5.index", "model.ckpt-5.data-00000-of-00001"):
        (run / name).write_bytes(b"")
    q = shlex.quote
    # A run's parent folder (cifar10-train, cifar10-eval).
    with pytest.raises(Cifar10Error) as err:
        outdirs.refuse_foreign_train_dir(str(space))
    assert f": pass --train_dir={q(str(run))} to resume it," in str(err.value)
    assert str(checkpoint_dir.no_checkpoint(str(space))).endswith(
        f"holds checkpoints: pass --checkpoint_dir={q(str(run))}")
    (space / "b c").mkdir()
    for name in ("model.ckpt-1.index", "model.ckpt-1.data-00000-of-00001"):
        (space / "b c" / name).write_bytes(b"")
    assert str(checkpoint_dir.no_checkpoint(str(space))).endswith(
        f"such as --checkpoint_dir={q(str(space / 'b c'))}")
    # The run's data not given: its --data_dir, its flags.txt, or the default's.
    (run / "flags.txt").write_text("# cifar10-train, started 2026-11-26T10:00:00+00:00 on h "
                                   f"at step 0\n--data_dir={space / 'my data'}\n")
    values = flags.FlagValues()
    cifar10_flags.define_train_flags(values)
    values.set_default("data_dir", str(space / "default data"))
    values(["cifar10-train"])
    assert kind_of_data.download_refusal(values, str(run)).endswith(
        f"pass --data_dir={q(str(space / 'my data'))} (or --flagfile="
        f"{q(str(run / 'flags.txt'))}) to go on with the run's data, or "
        f"--data_dir={q(str(space / 'default data'))} to download CIFAR-10 there")
    # The run's kind of data, from its environment.jsonl.
    (run / "flags.txt").unlink()
    (run / "environment.jsonl").write_text(
        '{"settings": {"data_dir": "%s"}}\n' % (space / "d 10" / "cifar-10-batches-bin"))
    values(["cifar10-train", "--synthetic_data"])
    with pytest.raises(Cifar10Error) as err:
        kind_of_data.refuse_other_kind_of_data(values, str(run))
    assert f"pass --data_dir={q(str(space / 'd 10'))} (no --synthetic_data" in str(err.value)
    # A ~ the shell left, in a home with a space.
    monkeypatch.setenv("HOME", str(space))
    values(["cifar10-train", "--data_dir=~/d"])
    with pytest.raises(flags.Error) as err:
        path_flags.refuse_unexpanded_tilde(values)
    assert f"or --data_dir={q(str(space / 'd'))};" in str(err.value)
    # A checkpoint that does not read: its folder.
    with pytest.raises(Cifar10Error) as err:
        checkpoint_dir.checkpoint_that_reads(str(run / "model.ckpt-5"), str(run))
    assert f", or --checkpoint_dir={q(str(run))} for its newest" in str(err.value)


def test_the_commands_a_flag_mistake_suggests_are_quoted_for_the_shell(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-my cat.jpg").write_bytes(b"")
    result = cli.call("cifar10-predict", "--checkpoint_dir=runs/a b", "-my cat.jpg")
    assert result.stderr.splitlines()[-1].endswith(
        "name that file './-my cat.jpg', or put the file names after --, as in "
        "cifar10-predict '--checkpoint_dir=runs/a b' -- '-my cat.jpg' (see cifar10-predict "
        "--help)")
    result = cli.call("cifar10-launch", "--train_dir=/tmp/sp ace", "--num_workers=2")
    assert result.stderr.splitlines()[-1] == (
        "cifar10-launch: error: --train_dir=/tmp/sp ace is cifar10-train's flag: put it "
        "after --, as in cifar10-launch --num_workers=2 -- '--train_dir=/tmp/sp ace' (see "
        "cifar10-launch --help)")


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
