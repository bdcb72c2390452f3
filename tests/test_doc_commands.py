"""Every command of README.md and docs/ runs as written, so the docs cannot rot.

For page writers: each ```bash block runs, each page's blocks in order in one fresh
folder that holds data/ (generated CIFAR-10, where it is downloaded to), cat.png,
photos/ (a few .png and .jpg), my_photos/{cat,dog,bird}/0001.jpg to 0006.jpg and
scripts/ (as a clone does); ```python blocks run alike. A block that cannot run here
says why on its fence line: ```bash network (or cluster, gpu, server, root). ```text
and plain blocks never run. A command prints no warning (but the machine's: --num_gpus
on a CPU, --use_bf16 without bfloat16 instructions). Name folders relative to the working
folder.

How the programs are made small: the folder's .venv/bin, first on PATH, holds stand-ins
for the cifar10-* programs and python (scripts/benchmark.py) that run the real ones
(``small``): a batch of 8, a checkpoint and a log line every step, and where a command
names none (and no --flagfile): --max_steps=20, --data_dir=data, and /tmp's default
folders mapped into <folder>/tmp (as is /tmp in a block). A step count in a block
(--max_steps=N, --profile_steps=N,M, model.ckpt-N, export/N) becomes round(log2(N)),
which keeps their order: 300 -> 8, 20,000 -> 14, 100,000 -> 17.
"""

import contextlib
import inspect
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from cifar10.data import fileformat as ff
from cifar10.data import synthetic
from cli import BIN_DIR, env
from test_docs import PAGES, ROOT

LANGUAGES = ("", "text", "bash", "python")  # a fence's first word; the last two run
WORDS = ("network", "cluster", "gpu", "server", "root")  # why a block is not run
HANG_GUARD_S = 600  # a block that runs longer is stuck (not a timing check)
STEPS = re.compile(r"(?:--max_steps=|--profile_steps=|model\.ckpt-|export/)\d+(?:,\d+)?")
TMP = re.compile(r"(?<![\w.~/-])/tmp(?=/|\b)")
# The warnings a page's command may print, the machine's: --num_gpus=4 on a machine without
# GPUs, --use_bf16 on a CPU without bfloat16 instructions.
WARNING = re.compile(r"^cifar10-\w+: warning: (?!--num_gpus=\d+ but this machine has|"
                     r"--use_bf16: this CPU has no bfloat16)", re.M)
ABSOLUTE = re.compile(r"(?:^|[\s=:'\"(])(/(?!tmp\b|dev/|proc/)[A-Za-z][\w.-]*)", re.M)


def blocks(page):
    """(line of the fence, language, its other words, text) of each fenced block."""
    fence, body = None, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if not line.lstrip().startswith("```"):
            body.append(line)
        elif fence is None:
            fence, body = (number, line.strip()[3:].split() or [""]), []
        else:
            (start, (language, *words)), fence = fence, None
            yield start, language, words, "\n".join(body)


def scaled(steps: int) -> int:
    return max(1, round(math.log2(steps)))


def small(args: list, program: str, folder: str) -> list:
    """``args`` of ``program`` made small and offline (the stand-ins run this source)."""
    if program == "python":  # scripts/benchmark.py: tests/test_benchmark.py's sizes
        return args + (["--windows=1", "--window_steps=2", "--warmup_steps=1",
                        "--records_per_file=16", "--batch_size=8", "--predict_images=4",
                        "--prepare_images=30", "--loop_window_steps=2", "--turns=1"]
                       if args[:1] and args[0].endswith("benchmark.py") else [])
    if program == "cifar10-launch":  # the workers' flags follow a bare --
        at = args.index("--") if "--" in args else len(args)
        return args[:at] + ["--"] + small(args[at + 1:], "cifar10-train", folder)

    def named(name):
        return any(a.lstrip("-").split("=")[0] in (name, "no" + name)
                   for a in args if a.startswith("-"))

    run = {"checkpoint_dir": "tmp/cifar10_train"}
    folders = {"cifar10-train": {"train_dir": "tmp/cifar10_train", "data_dir": "data"},
               "cifar10-eval": {**run, "eval_dir": "tmp/cifar10_eval"}, "cifar10-predict": run,
               "cifar10-export": {**run, "export_dir": "tmp/cifar10_export"}}
    defaults = [f"--{name}={folder}/{path}" for name, path in folders.get(program, {}).items()
                if not named(name) and not (name == "checkpoint_dir"
                                            and (named("checkpoint") or named("model")))]
    if program == "cifar10-train":
        defaults += [] if named("max_steps") else ["--max_steps=20"]
        always = ["--batch_size=8", "--checkpoint_steps=1", "--log_frequency=1",
                  "--synthetic_records=100"]
    else:
        always = ["--eval_interval_secs=1"] if program == "cifar10-eval" and not named(
            "model") else []
    return args + ([] if named("flagfile") else defaults) + always


@pytest.fixture(scope="session")
def provided(tmp_path_factory):
    """The files a page's folder starts with (the module docstring's)."""
    folder = tmp_path_factory.mktemp("provided")
    rng = np.random.default_rng(0)

    def image(path, size=(48, 64)):
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = tf.constant(rng.integers(0, 256, (*size, 3), np.uint8))
        encode = tf.io.encode_png if path.suffix == ".png" else tf.io.encode_jpeg
        path.write_bytes(encode(pixels).numpy())

    image(folder / "cat.png")
    for name in ("cat.png", "dog.jpg", "ship.jpg"):
        image(folder / "photos" / name, (32, 32))
    for name in ("cat", "dog", "bird"):
        for i in range(1, 7):
            image(folder / "my_photos" / name / f"{i:04d}.jpg")
    (folder / "scripts").symlink_to(ROOT / "scripts")
    synthetic.write_dataset(str(folder / "data"), records_per_file=100)
    return folder


def problems(page) -> list[str]:
    """What keeps a page's blocks from running as the module docstring says."""
    found = []
    for number, language, words, text in blocks(page):
        if language not in LANGUAGES or words and (
                language not in ("bash", "python") or len(words) > 1 or words[0] not in WORDS):
            found.append(f"{number}: ```{' '.join([language, *words])}: a fence is ```bash, ```bash"
                         f" <{'|'.join(WORDS)}>, ```python (the same words), ```text or ```")
        elif language in ("bash", "python") and not words and ABSOLUTE.search(text):
            found.append(f"{number}: {ABSOLUTE.search(text)[1]}: name folders relative to the "
                         f"working folder (or give the block a word)")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_says_whether_its_block_runs(page):
    assert not problems(page), f"{page.name}: " + "; ".join(problems(page))


@pytest.mark.parametrize("args, program, added", [
    (["--data_dir=data/mine", "--train_dir=runs/a/train"], "cifar10-train", ["--max_steps=20"]),
    (["--flagfile=runs/a/train/flags.txt", "--seed=1"], "cifar10-train", []),
    (["--checkpoint=runs/a/train/model.ckpt-8"], "cifar10-eval", ["--eval_dir=F/tmp/cifar10_eval"]),
    (["--num_workers=2", "--", "--synthetic_data"], "cifar10-launch",
     ["--train_dir=F/tmp/cifar10_train", "--data_dir=F/data", "--max_steps=20"]),
])
def test_the_stand_ins_keep_what_a_command_names(args, program, added):
    always = (["--eval_interval_secs=1"] if program == "cifar10-eval" else
              ["--batch_size=8", "--checkpoint_steps=1", "--log_frequency=1",
               "--synthetic_records=100"])
    assert small(args, program, "F")[len(args):] == added + always


def stand_ins(bin_dir, folder) -> None:
    """The programs of the module docstring, in ``bin_dir``."""
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text("# the test's stand-in: PATH is set already\n")
    for program in (*(f"cifar10-{name}" for name in
                      ("train", "eval", "predict", "export", "prepare", "launch")), "python"):
        real = sys.executable if program == "python" else os.path.join(BIN_DIR, program)
        (bin_dir / program).write_text(
            f"#!{sys.executable}\nimport os\nimport sys\n\n\n{inspect.getsource(small)}\n\n"
            f"os.execv({real!r}, [{real!r}] + small(sys.argv[1:], {program!r}, {str(folder)!r}))\n")
        (bin_dir / program).chmod(0o755)


def run_block(argv, folder, environment, log) -> int | str:
    """``argv``'s exit status in ``folder`` (output to ``log``); what it left running ends."""
    with open(log, "w") as out:
        process = subprocess.Popen(argv, cwd=folder, env=environment, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return process.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            return (f"still running after {HANG_GUARD_S} s (one that runs until stopped is "
                    f"```bash server)")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.slow  # each page starts the programs several times
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_page_runs(page, provided, tmp_path):
    runnable = [(number, language, text) for number, language, words, text in blocks(page)
                if language in ("bash", "python") and not words]
    if not runnable:
        pytest.skip("no block to run")
    assert not problems(page), f"{page.name}: " + "; ".join(problems(page))
    folder = tmp_path / "folder"
    shutil.copytree(provided, folder, symlinks=True)
    stand_ins(folder / ".venv" / "bin", folder)
    environment = env(PATH=os.pathsep.join([str(folder / ".venv" / "bin"), BIN_DIR,
                                            os.environ["PATH"]]),
                      CIFAR10_DATA_URL=f"file://{tmp_path}/no-network/{ff.TARBALL_NAME}")
    for number, language, original in runnable:
        text = STEPS.sub(lambda m: re.sub(r"\d+", lambda n: str(scaled(int(n[0]))), m[0]),
                         TMP.sub(str(folder / "tmp"), original))
        lines = "\n" * number  # so that a failure's line numbers are the page's
        if language == "python":
            argv = [sys.executable, "-c", lines + textwrap.dedent(text)]
        else:
            trap = f"trap 'echo \"{page.name}:$LINENO: exit $?: $BASH_COMMAND\" >&2' ERR"
            argv = ["bash", "-e", "-o", "pipefail", "-c", trap + lines + text]
        status = run_block(argv, folder, environment, tmp_path / f"output-{number}.txt")
        tail = "\n".join((tmp_path / f"output-{number}.txt").read_text().splitlines()[-40:])
        assert status == 0, (f"{page.name}:{number}: the ```{language} block ended with "
                             f"{'exit ' * isinstance(status, int)}{status}:\n{original}\n"
                             f"--- the end of its output:\n{tail}")
        warned = WARNING.findall((tmp_path / f"output-{number}.txt").read_text())
        assert not warned, f"{page.name}:{number}: a command warned:\n{original}\n{tail}"
