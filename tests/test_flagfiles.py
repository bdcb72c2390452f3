"""--flagfile as the programs read it: absl's own parsing (a run's flags.txt replays, a
later flag wins), one line for a file or line absl cannot use, and the one check of a
run's record: another program's, or one cut short, is refused.  All of it is answered
while the flags are parsed, before TensorFlow loads."""

import os
import pathlib
import shutil
from unittest import mock

import pytest
from absl import flags

import cli
from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import launch as workers
from cifar10.runs import records


def refused(program, *args, help_of=None):
    """The one line of a flag mistake of ``program`` run with ``args``, no worker started,
    without its '(see <help_of> --help)' (``program``'s unless given)."""
    with mock.patch.object(workers.subprocess, "Popen", side_effect=AssertionError("started")):
        result = cli.call(program, *args)
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    [line] = result.stderr.splitlines()
    suffix = f" (see {help_of or program} --help)"
    assert line.startswith(f"{program}: error: ") and line.endswith(suffix), line
    return line[len(f"{program}: error: "):-len(suffix)]


def parsed(program, *args):
    """The flag values of ``program``'s command line ``args``, parsed as it parses them."""
    values = flags.FlagValues()
    cli.ENTRY_POINTS[program].define_flags(values)
    assert flagfiles.parse(values, [program, *args], program) == [program]
    return values


def recorded_run(directory, program, *args):
    """``directory``'s flags.txt as ``program`` records it when started with ``args``."""
    directory.mkdir(parents=True, exist_ok=True)
    records.record_start(str(directory), {"program": program, "host": "h",
                                          "start_time": "2026-11-26T10:00:00+00:00"},
                         cifar10_flags.flagfile_text(parsed(program, *args)))
    return directory / records.FLAGS_FILE


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A training run's flags.txt (runs/a/train, --max_steps=20) and its evaluator's
    (runs/a/eval); the current folder is tmp_path.  Returns runs/a, absolute."""
    monkeypatch.chdir(tmp_path)
    recorded_run(tmp_path / "runs" / "a" / "train", "cifar10-train",
                 "--train_dir=runs/a/train", "--max_steps=20", "--synthetic_data",
                 "--fresh_start")
    recorded_run(tmp_path / "runs" / "a" / "eval", "cifar10-eval",
                 "--checkpoint_dir=runs/a/train", "--eval_dir=runs/a/eval", "--run_once")
    return tmp_path / "runs" / "a"


def test_a_runs_flags_txt_replays_from_anywhere_never_deleting_and_a_later_flag_wins(
        run, monkeypatch):
    monkeypatch.chdir(run / "eval")
    values = parsed("cifar10-train", "--max_steps=20", "--flagfile=../train/flags.txt",
                    "--seed=4")
    assert (values.train_dir, values.max_steps, values.seed) == (str(run / "train"), 20, 4)
    assert values.synthetic_data and not values.fresh_start  # flags.txt: --nofresh_start
    assert parsed("cifar10-eval", "--flagfile", "flags.txt").checkpoint_dir == str(run / "train")


@pytest.mark.parametrize("before, line", [
    (["--fresh_start"], "--fresh_start=true comes before --flagfile=../train/flags.txt, which "
                        "sets --fresh_start=false and wins; put --fresh_start=true after "
                        "--flagfile"),
    (["--train_dir", "../b"], "--train_dir=../b comes before --flagfile=../train/flags.txt, "
                              "which sets --train_dir={run}/train and wins; put "
                              "--train_dir=../b after --flagfile"),
])
def test_a_flag_before_a_flagfile_that_sets_it_otherwise_is_refused_not_lost(
        run, monkeypatch, before, line):
    """absl takes the file's value: the run in the file would train (or start over)."""
    monkeypatch.chdir(run / "eval")
    assert refused("cifar10-train", *before, "--flagfile=../train/flags.txt") == line.format(
        run=run)


@pytest.mark.parametrize("program, folder, flag", [
    ("cifar10-train", "train", "train_dir"), ("cifar10-eval", "eval", "eval_dir")])
def test_a_copied_runs_flags_txt_is_refused_unless_its_folder_flag_follows(
        run, program, folder, flag):
    """Replayed, a copy's flags.txt would go on with (and prune) the run it records."""
    shutil.copytree(run / folder, "copy")
    assert refused(program, "--flagfile=copy/flags.txt") == (
        f"--flagfile=copy/flags.txt records --{flag}={run}/{folder}, not the folder it is in "
        f"(copy): pass --{flag}=copy after it to go on with this copy, or "
        f"--{flag}={run}/{folder} for the recorded run")
    for chosen in ("copy", f"{run}/{folder}"):  # either folder, given after it
        assert getattr(parsed(program, "--flagfile=copy/flags.txt", f"--{flag}={chosen}"),
                       flag) == chosen
    # Read through another flagfile, it is refused as well.
    pathlib.Path("wrap.txt").write_text("--flagfile=copy/flags.txt\n")
    assert refused(program, "--flagfile=wrap.txt").startswith(
        f"--flagfile=copy/flags.txt records --{flag}={run}/{folder}, not the folder")


@pytest.mark.parametrize("program, file, fix", [
    ("cifar10-eval", "train", "pass --checkpoint_dir={run}/train instead"),
    ("cifar10-launch", "train", "cifar10-train's flags go after --"),
    ("cifar10-train", "eval", "give cifar10-train its own flags"),
    ("cifar10-prepare", "train", "give cifar10-prepare its own flags"),
])
def test_another_programs_flags_txt_is_refused_with_the_fix(run, program, file, fix):
    other = {"train": "cifar10-train", "eval": "cifar10-eval"}[file]
    for args in ([f"--flagfile=runs/a/{file}/flags.txt"], ["--flagfile", f"runs/a/{file}/flags.txt"]):
        assert refused(program, *args) == (
            f"--flagfile=runs/a/{file}/flags.txt holds {other}'s flags, not {program}'s: "
            f"{fix.format(run=run)}")
    # The workers' flags, after the launcher's --, are cifar10-train's.
    if program == "cifar10-train":
        assert refused("cifar10-launch", "--", "--flagfile=runs/a/eval/flags.txt",
                       help_of="cifar10-train") == (
            "cifar10-train's flags (after --): --flagfile=runs/a/eval/flags.txt holds "
            "cifar10-eval's flags, not cifar10-train's: give cifar10-train its own flags")


def test_a_record_cut_short_is_refused_wherever_the_cut_and_an_old_one_replays(run):
    """Cut short (a disk that filled, a copy interrupted), a record replayed another run
    (--max_steps=100000 as --max_steps=10), or none: every line left a comment, the
    program ran on its defaults."""
    text = (run / "train" / "flags.txt").read_text()
    header, end = text.splitlines()[0], f"{records.END_LINE}\n"
    assert header.endswith(records.ENDS_AT) and text.endswith(f"\n{end}")
    cut_file = pathlib.Path("cut.txt")
    start = "--flagfile=cut.txt is a record cut short: its last start (line 1)"
    problems = set()
    for cut in range(len(header) + 1, len(text) - 1):  # from no flag to "# end of this star"
        cut_file.write_text(text[:cut])
        with pytest.raises(flags.Error) as err:
            flagfiles.check_flagfile(str(cut_file), "cifar10-train")
        problems.add(str(err.value).split("; ")[0])
    assert problems == {f"{start} sets no flag",
                        f"{start} lacks its end line \"{records.END_LINE}\""}
    assert refused("cifar10-train", "--flagfile=cut.txt") == (
        f"{start} lacks its end line \"{records.END_LINE}\"; give the run's whole flags.txt, "
        f"or the flags on the command line")
    cut_file.write_text(text[:-1])  # the last line break alone: every flag is there
    assert parsed("cifar10-train", "--flagfile=cut.txt").max_steps == 20
    # A record written before the end line (its header without it) replays as it did.
    cut_file.write_text(text.replace(records.ENDS_AT, "").replace(end, ""))
    assert parsed("cifar10-train", "--flagfile=cut.txt").max_steps == 20
    # A start recorded after a cut one (whose lines it comments out) is whole.
    pathlib.Path("again").mkdir()
    pathlib.Path("again/flags.txt").write_text(text[:len(text) // 2])
    recorded_run(pathlib.Path("again"), "cifar10-train", "--train_dir=again", "--max_steps=7")
    assert parsed("cifar10-train", "--flagfile=again/flags.txt").max_steps == 7


@pytest.mark.parametrize("files, args, line", [
    ({}, ["--flagfile=nope.txt"],
     "--flagfile=nope.txt: No such file or directory; name a file of flags, one per line"),
    ({}, ["--flagfile", "."], "--flagfile=.: Is a directory; name a file of flags, one per line"),
    ({}, ["--max_steps=3", "--flagfile"], "--flagfile with no argument"),
    ({"f": b"--max_steps=3\n--batch_size=\xff\n"}, ["--flagfile=f"],
     "--flagfile=f is not UTF-8 text: name a file of flags, one per line"),
    ({"f": b"--flagfile=g\n", "g": b"\xff\n"}, ["--flagfile=f"],
     "--flagfile=g is not UTF-8 text: name a file of flags, one per line"),
    ({"f": b"# old\n--old_removed_flag=1\n"}, ["--flagfile=f"], "unknown flag --old_removed_flag"),
    ({"f": b"--batch_size=abc\n"}, ["--flagfile=f"], "--batch_size=abc: expected a whole number"),
    ({"f": b"--nosynthetic_data=true\n"}, ["--flagfile=f"],
     "--nosynthetic_data=true does not take an argument"),
    ({"f": b"--train_dir=./~/t\n--data_dir=~/d\n"}, ["--flagfile=f"],  # ./~/t: a folder ~
     "--data_dir=~/d starts with a ~ that was not expanded (the shell does not expand a ~ "
     "after '='): write --data_dir ~/d or --data_dir='{home}/d'; for a folder named ~, write "
     "./~/d"),
])
def test_a_flagfile_absl_cannot_use_is_one_line(tmp_path, monkeypatch, files, args, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "my home"))
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    assert refused("cifar10-train", *args) == line.format(home=tmp_path / "my home")
    assert sorted(os.listdir(tmp_path)) == sorted(files)  # nothing made


def test_a_file_to_predict_whose_name_starts_with_a_dash_goes_after_a_double_dash(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert refused("cifar10-predict", "-y.jpg") == (
        "unknown flag --y.jpg (a file whose name starts with - goes after --)")
    result = cli.call("cifar10-predict", f"--checkpoint_dir={tmp_path}", "--", "-y.jpg")
    assert (result.returncode, result.stderr) == (
        1, "cifar10-predict: error: no such file or folder: -y.jpg\n")
