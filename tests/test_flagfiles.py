"""--flagfile as the programs read it: a file that cannot be read, a line of one that
is wrong, another program's flags.txt, a flag given before a flagfile that sets it
again, and cifar10-predict's file names that start with a dash.  All of it is
answered while the flags are parsed, before TensorFlow loads."""

import errno
import os
import pathlib
import shutil
from unittest import mock

import pytest
from absl import flags

import cli
from cifar10.cli import flagfile_lines
from cifar10.cli import flagfiles
from cifar10.cli import flags_txt
from cifar10.cli import workers as launch
from cifar10.cli.flags import define_train_flags
from cifar10.runs import records

PROGRAMS = ("cifar10-train", "cifar10-eval", "cifar10-predict", "cifar10-export",
            "cifar10-prepare", "cifar10-launch")


def refused(program, *args, help_of=None):
    """The one line of a flag mistake of ``program`` run with ``args``, no worker started,
    without its '(see <help_of> --help)' (``program``'s unless given)."""
    with mock.patch.object(launch.subprocess, "Popen", side_effect=AssertionError("started")):
        result = cli.call(program, *args)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    suffix = f" (see {help_of or program} --help)"
    assert lines[0].startswith(f"{program}: error: ") and lines[0].endswith(suffix), lines[0]
    return lines[0][len(f"{program}: error: "):-len(suffix)]


def recorded_run(directory, program, *args):
    """``directory``'s flags.txt as ``program`` records it when started with ``args``."""
    values = flags.FlagValues()
    cli.ENTRY_POINTS[program].define_flags(values)
    values([program, *args])
    records.record_start(str(directory), {"program": program, "host": "h",
                                          "start_time": "2026-11-26T10:00:00+00:00"},
                         flags_txt.flagfile_text(values))
    return directory / records.FLAGS_FILE


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A training run's flags.txt (runs/a/train, --max_steps=20) and its evaluator's
    (runs/a/eval), as the programs write them; the current folder is tmp_path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "a" / "train").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "eval").mkdir()
    recorded_run(tmp_path / "runs" / "a" / "train", "cifar10-train",
                 "--train_dir=runs/a/train", "--max_steps=20", "--synthetic_data")
    recorded_run(tmp_path / "runs" / "a" / "eval", "cifar10-eval",
                 "--checkpoint_dir=runs/a/train", "--eval_dir=runs/a/eval", "--run_once")
    return os.getcwd() / pathlib.Path("runs", "a")  # as flags.txt writes it, absolute


# --- files that cannot be read ---------------------------------------------------

@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("form", ["--flagfile=ff2.txt", "--flagfile ff2.txt"])
def test_a_flagfile_that_is_not_utf8_is_one_line_naming_it_and_its_line(program, form,
                                                                         tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ff2.txt").write_bytes(b"--max_steps=3\n--batch_size=\xff\n")
    assert refused(program, *form.split()) == (
        "--flagfile=ff2.txt is not a UTF-8 text file of flags: its line 2 holds the byte "
        "0xff; name a file of flags (UTF-8 text, one flag per line), or fix that line")


def test_the_launchers_workers_flagfile_that_is_not_utf8_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ff2.txt").write_bytes(b"# mine\r\n--max_steps=3\r\n\r\n--batch_size=\xff\n")
    assert refused("cifar10-launch", "--", "--flagfile=ff2.txt", help_of="cifar10-train") == (
        "cifar10-train's flags (after --): --flagfile=ff2.txt is not a UTF-8 text file of "
        "flags: its line 4 holds the byte 0xff; name a file of flags (UTF-8 text, one flag "
        "per line), or fix that line")


def test_a_binary_file_that_decodes_is_no_file_of_flags_either(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zeros.bin").write_bytes(b"\0" * 64)
    assert refused("cifar10-train", "--flagfile=zeros.bin") == (
        "--flagfile=zeros.bin is not a UTF-8 text file of flags: its line 1 holds a NUL byte; "
        "name a file of flags (UTF-8 text, one flag per line), or fix that line")


def test_a_folder_as_flagfile_is_one_line_naming_its_flags_txt_if_it_has_one(run):
    assert refused("cifar10-train", "--flagfile=runs/a") == (
        "--flagfile=runs/a is a folder: name a file of flags, one per line")
    assert refused("cifar10-train", "--flagfile", "runs/a/train") == (
        "--flagfile=runs/a/train is a folder: name a file of flags, one per line, such as its "
        "runs/a/train/flags.txt")


def test_a_flagfile_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "locked.txt").write_text("--max_steps=3\n")

    def denied(name, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", name)

    # The tests run as root too, whom a file's mode does not stop.
    monkeypatch.setattr(flagfile_lines, "open", denied, raising=False)
    assert refused("cifar10-eval", "--flagfile=locked.txt") == (
        "--flagfile=locked.txt cannot be read (Permission denied); make it readable (chmod "
        "u+r), or copy it to a file you can read")


def test_a_missing_nested_flagfile_names_the_line_that_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ff3.txt").write_text("--max_steps=3\n--flagfile=nope.txt\n")
    assert refused("cifar10-train", "--flagfile=ff3.txt") == (
        "--flagfile=nope.txt (line 2 of --flagfile=ff3.txt): No such file or directory; fix "
        "or delete that line")
    # A name beside the file that names it: absl takes it from the current folder.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.txt").write_text("--max_steps=3\n")
    (tmp_path / "sub" / "outer.txt").write_text("--flagfile=inner.txt\n")
    assert refused("cifar10-train", "--flagfile=sub/outer.txt") == (
        "--flagfile=inner.txt (line 1 of --flagfile=sub/outer.txt): No such file or "
        "directory; fix or delete that line (a name in a flagfile is taken from the current "
        "folder, not from the file's: write --flagfile=sub/inner.txt)")


@pytest.mark.parametrize("kept", [1, 4])
def test_a_runs_flags_txt_cut_short_after_a_start_header_is_refused(run, kept):
    """Cut inside its first start, every line left a comment, it set no flag: the
    trainer ran on its defaults (and went to download CIFAR-10 into /tmp/cifar10_data)."""
    recorded_run(run / "train", "cifar10-train", "--train_dir=runs/a/train", "--max_steps=40")
    lines = (run / "train" / "flags.txt").read_text().splitlines(keepends=True)
    assert lines[0].startswith("# cifar10-train, started ") and lines[1].startswith("# --")
    pathlib.Path("cut.txt").write_text("".join(lines[:kept]))
    assert refused("cifar10-train", "--flagfile=cut.txt", "--max_steps=2") == (
        "--flagfile=cut.txt: the start it records last (line 1) has no flag line under it, "
        "only comments (a record cut short, or its flags commented out), so it sets no "
        "flag and the program would run on its defaults: give the run's whole flags.txt, "
        "or the flags on the command line")
    # Flag lines under the last header (the latest start's, as the trainer writes them,
    # to the line that ends them).
    pathlib.Path("whole.txt").write_text("".join(lines[:kept]) + "--max_steps=3\n"
                                         + records.END_LINE + "\n")
    assert flagfile_lines.expand(["--flagfile=whole.txt"]) == [
        flagfile_lines.Arg("--max_steps=3", "whole.txt", kept + 1, "whole.txt", in_record=True)]


def test_an_evaluators_flags_txt_cut_short_inside_its_flags_is_refused(run):
    """Cut inside its flags (a copy interrupted), it replayed another evaluation: here
    one of the run's own --eval_dir, runs/a/eval, as runs/a."""
    text = (run / "eval" / "flags.txt").read_text()
    assert text.endswith(f"\n{records.END_LINE}\n")
    cut = text.index("--eval_dir=") + len(f"--eval_dir={run}")
    pathlib.Path("cut.txt").write_text(text[:cut])
    assert refused("cifar10-eval", "--flagfile=cut.txt") == (
        f"--flagfile=cut.txt: the start it records last (line 1) is cut short (a disk that "
        f"filled, a copy interrupted): its flags do not reach the line \"{records.END_LINE}\" "
        f"written after them, so it would replay another run: give the run's whole "
        f"flags.txt, or the flags on the command line")


def test_flagfiles_that_name_each_other_and_a_flagfile_without_its_file(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("--flagfile=b.txt\n")
    (tmp_path / "b.txt").write_text("--max_steps=3\n--flagfile=./a.txt\n")
    assert refused("cifar10-train", "--flagfile=a.txt") == (
        "--flagfile=./a.txt (line 2 of b.txt, read by --flagfile=a.txt) names a file that is "
        "being read (a.txt -> b.txt -> ./a.txt): delete that line")
    (tmp_path / "c.txt").write_text("--flagfile\nb.txt\n")
    assert refused("cifar10-train", "--flagfile=c.txt") == (
        "line 1 of --flagfile=c.txt: --flagfile without its file: write --flagfile=FILE on one "
        "line")
    assert refused("cifar10-train", "--max_steps=3", "--flagfile") == (
        "--flagfile needs a file name (--flagfile=FILE)")


# --- a flag given before a flagfile that sets it ---------------------------------------

@pytest.mark.parametrize("args, given, file_sets", [
    (["--max_steps=30", "--flagfile=runs/a/train/flags.txt"], "--max_steps=30",
     "--max_steps=20"),
    (["--max_steps", "30", "--flagfile", "runs/a/train/flags.txt"], "--max_steps 30",
     "--max_steps=20"),
    # flags.txt writes --nofresh_start whatever the start was given.
    (["--fresh_start", "--flagfile=runs/a/train/flags.txt"], "--fresh_start",
     "--nofresh_start"),
    (["--nosynthetic_data", "--flagfile=runs/a/train/flags.txt"], "--nosynthetic_data",
     "--synthetic_data"),
    (["--train_dir=runs/b/train", "--flagfile=runs/a/train/flags.txt"],
     "--train_dir=runs/b/train", "--train_dir={run}/train"),
    (["--lrn_kernel=tensorflow", "--flagfile=runs/a/train/flags.txt"],
     "--lrn_kernel=tensorflow", "--kernels=auto"),  # its former name
])
def test_a_flag_before_a_flagfile_that_sets_it_otherwise_is_refused(run, args, given,
                                                                    file_sets):
    before = sorted(os.listdir(run / "train")), (run / "train" / "flags.txt").read_text()
    assert refused("cifar10-train", *args) == (
        f"{given} comes before --flagfile=runs/a/train/flags.txt, which sets "
        f"{file_sets.format(run=run)} and wins; put {given} after --flagfile")
    assert (sorted(os.listdir(run / "train")),
            (run / "train" / "flags.txt").read_text()) == before


def test_a_flag_before_a_nested_flagfile_names_its_line(run):
    (run.parent.parent / "mine.txt").write_text("--seed=4\n--flagfile=runs/a/train/flags.txt\n")
    line = (run / "train" / "flags.txt").read_text().splitlines().index("--seed=0") + 1
    assert refused("cifar10-train", "--seed=5", "--flagfile=mine.txt") == (
        f"--seed=5 comes before --flagfile=mine.txt, which sets --seed=0 (line {line} of "
        f"runs/a/train/flags.txt, read by --flagfile=mine.txt) and wins; put --seed=5 after "
        f"--flagfile")


@pytest.mark.parametrize("args, max_steps, num_gpus", [
    (["--max_steps=20", "--flagfile=runs/a/train/flags.txt"], 20, None),  # the same value
    (["--flagfile=runs/a/train/flags.txt", "--max_steps=30"], 30, None),  # after: it wins
    (["--max_steps=30", "--flagfile=runs/a/train/flags.txt", "--max_steps=30"], 30, None),
    (["--max_steps=9", "--max_steps=20", "--flagfile=runs/a/train/flags.txt"], 20, None),
    # flags.txt's '# --num_gpus=1' (unset at that start) is a comment, not a setting.
    (["--num_gpus=2", "--flagfile=runs/a/train/flags.txt"], 20, 2),
    # A path given relative is the one flags.txt holds absolute.
    (["--train_dir=runs/a/train", "--flagfile", "runs/a/train/flags.txt"], 20, None),
])
def test_a_flag_before_a_flagfile_that_leaves_it_as_given_is_no_mistake(run, args, max_steps,
                                                                        num_gpus):
    values = flags.FlagValues()
    define_train_flags(values)
    assert flagfiles.parse(values, ["cifar10-train", *args], "cifar10-train") == [
        "cifar10-train"]
    assert values.max_steps == max_steps
    assert values.num_gpus == (num_gpus or 1) and values["num_gpus"].present == bool(num_gpus)
    assert values.train_dir == str(run / "train")  # the file's, the same folder


def test_the_launcher_refuses_a_workers_flag_lost_to_their_flagfile_before_they_start(run):
    assert refused("cifar10-launch", "--", "--max_steps=30",
                   "--flagfile=runs/a/train/flags.txt", help_of="cifar10-train") == (
        "cifar10-train's flags (after --): --max_steps=30 comes before "
        "--flagfile=runs/a/train/flags.txt, which sets --max_steps=20 and wins; put "
        "--max_steps=30 after --flagfile")


# --- a run's flags.txt copied or moved away from its run ---------------------------------

def parsed(program, *args):
    """The flag values of ``program``'s command line ``args``, parsed as it parses them."""
    values = flags.FlagValues()
    cli.ENTRY_POINTS[program].define_flags(values)
    assert flagfiles.parse(values, [program, *args], program) == [program]
    return values


def test_a_copied_runs_flags_txt_is_refused_with_both_folders_and_the_two_fixes(run):
    """Replayed, the copy's flags.txt trained (and pruned) the run it recorded, not the
    copy; with that run moved away, it started a new run there from step 0."""
    shutil.copytree(run / "train", "other/b")
    before = sorted(os.listdir(run / "train")), sorted(os.listdir("other/b"))
    assert refused("cifar10-train", "--flagfile=other/b/flags.txt", "--max_steps=30") == (
        f"--flagfile=other/b/flags.txt records --train_dir={run}/train, not the folder it "
        f"is in (other/b): pass --train_dir=other/b after it to go on with this copy, or "
        f"--train_dir={run}/train for the recorded run")
    assert (sorted(os.listdir(run / "train")), sorted(os.listdir("other/b"))) == before
    shutil.rmtree(run / "train")  # moved: the recorded folder is gone
    assert refused("cifar10-train", "--flagfile=other/b/flags.txt").endswith(
        f"or --train_dir={run}/train for the recorded run (not there now: a new run would "
        f"start there)")
    assert not (run / "train").exists()
    # Either folder given after the file is the user's choice.
    for folder in ("other/b", f"{run}/train"):
        values = parsed("cifar10-train", "--flagfile=other/b/flags.txt", f"--train_dir={folder}")
        assert values.train_dir == folder and values.max_steps == 20


def test_a_runs_flags_txt_in_its_own_folder_replays_from_anywhere(run, monkeypatch):
    monkeypatch.chdir(run / "train")
    assert parsed("cifar10-train", "--flagfile=flags.txt").train_dir == str(run / "train")
    # A link to the run's folder is the same folder.
    os.symlink(run / "train", run / "linked")
    assert parsed("cifar10-train", f"--flagfile={run}/linked/flags.txt").max_steps == 20


def test_a_copied_evaluators_flags_txt_is_refused_as_the_trainers_is(run):
    shutil.copytree(run / "eval", "other/e")
    assert refused("cifar10-eval", "--flagfile=other/e/flags.txt") == (
        f"--flagfile=other/e/flags.txt records --eval_dir={run}/eval, not the folder it is "
        f"in (other/e): pass --eval_dir=other/e after it to go on with this copy, or "
        f"--eval_dir={run}/eval for the recorded run")
    assert parsed("cifar10-eval", "--flagfile=other/e/flags.txt",
                  "--eval_dir=other/e").checkpoint_dir == f"{run}/train"


def test_the_folders_a_copied_record_names_are_quoted_to_be_pasted(run):
    shutil.copytree(run / "train", "sp ace/run copy")
    assert refused("cifar10-train", "--flagfile=sp ace/run copy/flags.txt").startswith(
        f"--flagfile=sp ace/run copy/flags.txt records --train_dir={run}/train, not the "
        f"folder it is in (sp ace/run copy): pass --train_dir='sp ace/run copy' after it")


def test_flags_that_are_no_runs_record_may_name_any_folder(run):
    """Only a run's own record, flags.txt with its start headers, names its folder: a
    file of flags kept elsewhere, or another name for a record's copy, names the run."""
    lines = [line for line in (run / "train" / "flags.txt").read_text().splitlines()
             if not line.startswith("#")]
    os.makedirs("mine")
    pathlib.Path("mine/flags.txt").write_text("\n".join(lines) + "\n")
    shutil.copy(run / "train" / "flags.txt", "a.flags")
    for name in ("mine/flags.txt", "a.flags"):
        assert parsed("cifar10-train", f"--flagfile={name}").train_dir == str(run / "train")


def test_a_copied_record_read_by_another_flagfile_names_both_files(run):
    shutil.copytree(run / "train", "other/b")
    pathlib.Path("mine.txt").write_text("--flagfile=other/b/flags.txt\n--seed=3\n")
    assert refused("cifar10-train", "--flagfile=mine.txt").startswith(
        f"other/b/flags.txt, read by --flagfile=mine.txt records --train_dir={run}/train, "
        f"not the folder it is in (other/b): pass --train_dir=other/b after it")


def test_the_launcher_refuses_a_copied_record_for_its_workers(run):
    shutil.copytree(run / "train", "other/b")
    assert refused("cifar10-launch", "--", "--flagfile=other/b/flags.txt",
                   help_of="cifar10-train").startswith(
        f"cifar10-train's flags (after --): --flagfile=other/b/flags.txt records "
        f"--train_dir={run}/train, not the folder it is in (other/b)")


# --- another program's flags.txt --------------------------------------------------------

@pytest.mark.parametrize("form", ["--flagfile=runs/a/eval/flags.txt",
                                  "--flagfile runs/a/eval/flags.txt"])
def test_the_trainer_given_an_evaluators_flags_is_pointed_at_the_runs_own(run, form):
    assert refused("cifar10-train", *form.split()) == (
        f"--flagfile=runs/a/eval/flags.txt holds cifar10-eval's flags, not cifar10-train's: "
        f"to replay the training run it scores, pass --flagfile={run}/train/flags.txt")
    os.remove(run / "train" / "flags.txt")
    assert refused("cifar10-train", *form.split()) == (
        f"--flagfile=runs/a/eval/flags.txt holds cifar10-eval's flags, not cifar10-train's: "
        f"give cifar10-train a training run's own flags.txt (runs/a/eval/flags.txt scores "
        f"--checkpoint_dir={run}/train, which holds none)")


@pytest.mark.parametrize("program, file, advice", [
    ("cifar10-eval", "train", "; cifar10-eval reads the data settings of the run it is given "
                              "by itself: pass --checkpoint_dir={run}/train instead"),
    ("cifar10-predict", "train", ": pass --checkpoint_dir={run}/train to classify with that "
                                 "run's model"),
    ("cifar10-export", "train", ": pass --checkpoint_dir={run}/train to export that run's "
                                "model"),
    ("cifar10-predict", "eval", ": pass --checkpoint_dir={run}/train, the run it scores"),
    ("cifar10-export", "eval", ": pass --checkpoint_dir={run}/train, the run it scores"),
    ("cifar10-prepare", "train", ": give cifar10-prepare its own flags"),
    ("cifar10-launch", "eval", ": give cifar10-launch its own flags"),
])
@pytest.mark.parametrize("space", [False, True])
def test_another_programs_flags_txt_gets_advice_for_the_pair(run, program, file, advice,
                                                             space):
    other = {"train": "cifar10-train", "eval": "cifar10-eval"}[file]
    path = f"runs/a/{file}/flags.txt"
    args = ["--flagfile", path] if space else [f"--flagfile={path}"]
    assert refused(program, *args) == (
        f"--flagfile={path} holds {other}'s flags, not {program}'s{advice.format(run=run)}")


def test_the_launcher_given_the_trainers_flags_is_shown_them_after_its_double_dash(run):
    assert refused("cifar10-launch", "--num_workers=3", "--flagfile", "runs/a/train/flags.txt",
                   "--", "--max_steps=40") == (
        "--flagfile=runs/a/train/flags.txt holds cifar10-train's flags, not "
        "cifar10-launch's: cifar10-train's flags go after --, as in cifar10-launch "
        "--num_workers=3 -- --flagfile=runs/a/train/flags.txt --max_steps=40")


# --- a wrong line of a flagfile ------------------------------------------------------------

def test_an_unknown_flag_of_a_flagfile_names_the_file_and_its_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.txt").write_text("# an old run's\n--max_steps=3\n\n--old_removed_flag=1\n")
    assert refused("cifar10-train", "--flagfile=old.txt") == (
        "line 4 of --flagfile=old.txt: unknown flag --old_removed_flag; delete or fix that "
        "line")
    (tmp_path / "outer.txt").write_text("--max_step=3\n--flagfile=old.txt\n")
    assert refused("cifar10-train", "--flagfile=outer.txt") == (
        "line 1 of --flagfile=outer.txt: unknown flag --max_step (did you mean --max_steps?); "
        "delete or fix that line")
    (tmp_path / "outer.txt").write_text("--max_steps=3\n--flagfile=old.txt\n")
    assert refused("cifar10-train", "--flagfile=outer.txt") == (
        "line 4 of old.txt, read by --flagfile=outer.txt: unknown flag --old_removed_flag; "
        "delete or fix that line")
    # On the command line it is the command line's, as before.
    assert refused("cifar10-train", "--old_removed_flag=1", "--flagfile=old.txt") == (
        "unknown flag --old_removed_flag")


def test_a_bad_value_in_a_flagfile_names_the_file_and_its_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.txt").write_text("--max_steps=3\n--batch_size=abc\n")
    assert refused("cifar10-eval", "--flagfile=bad.txt") == (
        "line 2 of --flagfile=bad.txt: --batch_size=abc: expected a whole number; fix or "
        "delete that line")
    assert refused("cifar10-eval", "--batch_size=abc", "--flagfile=bad.txt") == (
        "--batch_size=abc: expected a whole number")


@pytest.mark.parametrize("program", ["cifar10-train", "cifar10-eval", "cifar10-export"])
def test_a_flagfile_line_without_its_dashes_names_the_file_and_its_line(program, tmp_path,
                                                                      monkeypatch):
    """absl passed it on as an argument: 'unexpected arguments: max_steps=5'."""
    monkeypatch.chdir(tmp_path)
    pathlib.Path("f").write_text("# mine\nmax_steps=5\n")
    assert refused(program, "--flagfile=f") == (
        "line 2 of --flagfile=f: max_steps=5 is not a flag (flags start with --); fix or "
        "delete that line")


def test_a_flags_value_on_the_line_under_it_is_still_its_value(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pathlib.Path("f").write_text("--max_steps\n5\n")
    assert parsed("cifar10-train", "--flagfile=f").max_steps == 5


def test_a_byte_order_mark_before_the_first_line_is_dropped(run):
    """Some editors write one; absl kept it, and the first flag became an argument."""
    pathlib.Path("bom.txt").write_bytes(b"\xef\xbb\xbf--max_steps=5\n")
    assert parsed("cifar10-train", "--flagfile=bom.txt").max_steps == 5
    # A run's record with one is still the record it is.
    record = run / "eval" / "flags.txt"
    record.write_bytes(b"\xef\xbb\xbf" + record.read_bytes())
    assert refused("cifar10-train", f"--flagfile={record}").startswith(
        f"--flagfile={record} holds cifar10-eval's flags, not cifar10-train's")
    shutil.copytree(run / "train", "other/b")
    record = pathlib.Path("other/b/flags.txt")
    record.write_bytes(b"\xef\xbb\xbf" + record.read_bytes())
    assert refused("cifar10-train", "--flagfile=other/b/flags.txt").startswith(
        f"--flagfile=other/b/flags.txt records --train_dir={run}/train, not the folder")


@pytest.mark.parametrize("line, problem, write", [
    ("--max_steps = 5", "spaces around = are not allowed", "--max_steps=5"),
    ("--max_steps =5", "spaces around = are not allowed", "--max_steps=5"),
    ("-max_steps\t= 5", "spaces around = are not allowed", "-max_steps=5"),
    ("--max_steps 5", "a flag's value goes after =, not after a space", "--max_steps=5"),
    ("--nosynthetic_data =", "spaces around = are not allowed", "--nosynthetic_data"),
    ("--data_dir /x/a=b", "a flag's value goes after =, not after a space",
     "--data_dir=/x/a=b"),
])
def test_spaces_after_a_flags_name_in_a_flagfile_show_the_line_to_write(line, problem, write,
                                                                        tmp_path, monkeypatch):
    """absl read '--max_steps = 5' as a flag named 'max_steps ': 'unknown flag --max_steps
    (did you mean --max_steps?)'."""
    monkeypatch.chdir(tmp_path)
    pathlib.Path("f").write_text(f"--seed=1\n{line}\n")
    assert refused("cifar10-train", "--flagfile=f") == (
        f"line 2 of --flagfile=f: {line}: {problem} (absl reads the line as one argument): "
        f"write {write}")
    # A name that is no flag, with or without spaces, is absl's unknown flag.
    pathlib.Path("f").write_text("--max_stepz = 5\n")
    assert refused("cifar10-train", "--flagfile=f").startswith(
        "line 1 of --flagfile=f: unknown flag --max_stepz  (did you mean --max_steps?)")


# --- cifar10-predict's file names that start with a dash -------------------------------------

def test_a_file_name_with_a_dash_given_to_predict_is_told_how_to_name_it(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-y.jpg").write_bytes(b"")
    (tmp_path / "-notes").write_bytes(b"")
    for name in ("-y.jpg", "--z.PNG", "-notes"):  # a file, or an image's name
        assert refused("cifar10-predict", "--checkpoint_dir=runs/a/train", name, "cat.png") == (
            f"{name} is taken for a flag (unknown flag --{name.lstrip('-')}): name that file "
            f"./{name}, or put the file names after --, as in cifar10-predict "
            f"--checkpoint_dir=runs/a/train cat.png -- {name}")
    assert refused("cifar10-predict", "-zz") == "unknown flag --zz"  # neither
    assert refused("cifar10-train", "-y.jpg") == "unknown flag --y.jpg"  # takes no files


def test_a_file_name_with_a_dash_after_a_double_dash_is_a_file_to_predict(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli.call("cifar10-predict", f"--checkpoint_dir={tmp_path}", "--",
                      "-missing.jpg")
    assert result.returncode == 1
    assert result.stderr == "cifar10-predict: error: no such file or folder: -missing.jpg\n"


def test_a_negated_boolean_with_a_value_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    # absl refuses --noname=value with a ValueError, not one of its flag errors.
    monkeypatch.chdir(tmp_path)
    assert refused("cifar10-train", "--nofresh_start=1") == (
        "--nofresh_start=1: --nofresh_start takes no value; write --nofresh_start, or "
        "--fresh_start=VALUE")
    (tmp_path / "neg.txt").write_text("--nosynthetic_data=true\n")
    assert refused("cifar10-eval", "--flagfile=neg.txt") == (
        "line 1 of --flagfile=neg.txt: --nosynthetic_data=true: --nosynthetic_data takes no "
        "value; write --nosynthetic_data, or --synthetic_data=VALUE; fix or delete that line")


@pytest.mark.parametrize("program,flag", [("cifar10-train", "data_dir"),
                                          ("cifar10-eval", "eval_dir"),
                                          ("cifar10-export", "export_dir")])
def test_a_tilde_in_a_flagfile_is_refused_with_the_expanded_path_to_write(tmp_path, monkeypatch,
                                                                          program, flag):
    # No shell reads a flagfile: the command line's fix (--data_dir ~/data) would not
    # do there, where a line is one argument.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "outer.txt").write_text("--flagfile=flags.txt\n")
    (tmp_path / "flags.txt").write_text(f"# mine\n--{flag}=~/runs/a\n")
    for flagfile, place in [("flags.txt", "line 2 of --flagfile=flags.txt"),
                            ("outer.txt", "line 2 of flags.txt, read by --flagfile=outer.txt")]:
        assert refused(program, f"--flagfile={flagfile}") == (
            f"{place}: --{flag}=~/runs/a starts with a ~, which a flagfile does not expand "
            f"(no shell reads it): write --{flag}={tmp_path}/home/runs/a on that line; for a "
            f"folder named ~, --{flag}=./~/runs/a")
    assert sorted(os.listdir(tmp_path)) == ["flags.txt", "outer.txt"]


def test_a_tilde_in_a_flagfile_that_the_command_line_sets_again_is_no_mistake(tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flags.txt").write_text("--data_dir=~/data\n")
    values = flags.FlagValues()
    define_train_flags(values)
    flagfiles.parse(values, ["cifar10-train", "--flagfile=flags.txt",
                             f"--data_dir={tmp_path}"], "cifar10-train")
    assert values.data_dir == str(tmp_path)
    # Given on the command line after '=', it is the shell's fix that is told.
    assert refused("cifar10-train", "--flagfile=flags.txt", "--data_dir=~/data").startswith(
        "--data_dir=~/data starts with a ~ that was not expanded (the shell does not expand")
