"""What the programs print: their own lines only.

Five programs run as processes, as a user starts them (cifar10-launch runs as one in
test_multi_worker.py), with TF_CPP_MIN_LOG_LEVEL removed from their environment
(``cli.env``): none of TensorFlow's or absl's C++ lines may reach their output, the
completion line comes once, and warnings read ``<program>: warning: ...``.  A user who
sets TF_CPP_MIN_LOG_LEVEL or passes ``-v`` gets TensorFlow's lines back.
"""

import os
import re
import shlex
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from cli import BIN_DIR, env, program, run
from cifar10.core import machine

# A C++ log line of TensorFlow 2.17 on (absl), or of 2.16 (TensorFlow's own logger),
# absl's line before its logging starts, and what the CUDA probe of a CPU machine says.
NATIVE = re.compile(r"^[IWEF]\d{4} +\d+:\d+:\d+\.\d+ +\d+ [^ ]+:\d+\]"
                    r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [^ ]+:\d+\]"
                    r"|absl::InitializeLog|CUDA|cuInit|cudart", re.M)
CLASSES = ("cat", "dog", "ship")
NO_GPU = not tf.config.list_physical_devices("GPU")
# A new float32 run's one line on a CPU with AMX.
BF16_HINT = ["cifar10-train: notice: this CPU has bfloat16 instructions (AMX): --use_bf16 "
             "trains about 2.3x faster here, to the same precision"] if machine.has_amx() else []


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{program: its result}: prepare → train → eval → predict → export, each a process;
    the venv's bin/ not on PATH, as after the README's install."""
    root = tmp_path_factory.mktemp("output")
    rng = np.random.default_rng(3)
    images = []
    for label, name in enumerate(CLASSES):
        for i in range(8):
            path = root / "photos" / name / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            tf.io.write_file(str(path), tf.io.encode_png(pixels))
            images.append(str(path))
    data_dir, train_dir = root / "data", root / "train"
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if os.path.realpath(p) != os.path.realpath(BIN_DIR))
    results = {"cifar10-prepare": run("cifar10-prepare", f"--image_dir={root / 'photos'}",
                                      f"--data_dir={data_dir}")}
    results["cifar10-train"] = run("cifar10-train", f"--data_dir={data_dir}",
                                   f"--train_dir={train_dir}", "--max_steps=4", "--batch_size=8",
                                   "--summary_steps=1000", PATH=path)
    # The trainer's last line as pasted into a shell (no --data_dir: the evaluator
    # follows the run's own, in its flags.txt).
    evaluate = results["cifar10-train"].stdout.splitlines()[-1]
    assert evaluate.startswith(f"Evaluate it: {shlex.quote(program('cifar10-eval'))} "), evaluate
    results["cifar10-eval"] = subprocess.run(
        ["bash", "-c", evaluate.removeprefix("Evaluate it: ") + " --batch_size=8"],
        capture_output=True, text=True, timeout=300, env=env(PATH=path))
    results["cifar10-predict"] = run("cifar10-predict", f"--checkpoint_dir={train_dir}",
                                     "--top_k=1", *images[:3])
    results["cifar10-export"] = run("cifar10-export", f"--checkpoint_dir={train_dir}",
                                    f"--export_dir={root / 'export'}")
    return {"root": root, "images": images[:3], **results}


# Each program's line that says it is done.
COMPLETION = {
    "cifar10-prepare": r"^Wrote \d+ training and \d+ test records of 3 classes \(cat, dog, ship\)",
    "cifar10-train": r"^Training complete at step 4; saved .*/model\.ckpt-4\.$",
    "cifar10-eval": r"precision @ 1 = \d\.\d{3} \(step 4, model\.ckpt-4, \d+ examples, averages",
    "cifar10-predict": r"/photos/cat/0\.png: \w+ \d\.\d{3}$",
    "cifar10-export": r"^Exported .*/model\.ckpt-4 \(averages weights\) to .*/export/4: ",
}


@pytest.mark.parametrize("program", sorted(COMPLETION))
def test_a_normal_run_prints_only_its_own_lines_and_its_completion_once(runs, program):
    result = runs[program]
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert not NATIVE.findall(output), output
    assert "Traceback" not in output
    assert len(re.findall(COMPLETION[program], output, re.M)) == 1, output
    # Its own warnings, if any, in its own format (absl's would start "W1125 12:00:00").
    for line in result.stderr.splitlines():
        assert not re.match(r"[IWEF]\d{4} ", line), line


@pytest.mark.skipif(not NO_GPU, reason="a machine without a GPU")
@pytest.mark.parametrize("program", ["cifar10-train", "cifar10-eval"])
def test_a_plain_cpu_run_prints_no_warning(runs, program):
    """--num_gpus left at its default is one replica, on the CPU here; the evaluator's
    default number of examples is its data's whole test split (6 of 24 images here)."""
    assert runs[program].stderr.splitlines() == (BF16_HINT if program == "cifar10-train" else [])


@pytest.mark.skipif(not NO_GPU, reason="the warning of a machine without a GPU")
@pytest.mark.slow  # on 2.16: a trainer's silent stderr, test_a_plain_cpu_run...
def test_asking_for_a_gpu_on_a_cpu_machine_is_a_plain_warning(tmp_path):
    result = run("cifar10-train", "--num_gpus=1", "--synthetic_data", "--synthetic_records=20",
                 f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
                 "--max_steps=1", "--batch_size=8")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "cifar10-train: warning: --num_gpus=1 but this machine has no GPU: training on the CPU.",
        *BF16_HINT]


def test_the_evaluator_draws_its_pictures_as_png_files(runs):
    names = sorted(p.name for p in (runs["root"] / "eval").glob("*.png"))
    assert names[0] == "confusion_matrix-step4.png"
    assert names[1:] in ([], ["misclassified-step4.png"])  # if it got any wrong
    for name in names:
        assert tf.io.decode_png((runs["root"] / "eval" / name).read_bytes()).shape[2] in (3, 4)


def test_nothing_about_training_comes_before_the_run_is_known_to_go_ahead(runs):
    lines = runs["cifar10-train"].stdout.splitlines()
    assert lines[0].startswith("Training on ") and lines[0].endswith(
        f"with 1 replica(s), global batch 8; checkpoints and summaries in {runs['root']}/train.")


def test_tf_cpp_min_log_level_3_silences_absls_lines_too(runs):
    """TensorFlow's own setting, honoured for the lines its absl logging writes, which
    do not read it (the levels between: test_logs.py)."""
    result = run("cifar10-predict", f"--checkpoint_dir={runs['root'] / 'train'}", "--top_k=1",
                 runs["images"][0], TF_CPP_MIN_LOG_LEVEL="3")
    assert result.returncode == 0, result.stderr
    assert not NATIVE.search(result.stderr) and "absl::InitializeLog" not in result.stderr


def test_verbosity_brings_tensorflows_lines_back_but_no_cache_warning(tmp_path):
    """TensorFlow's lines asked for (-v 0): they are there, but not tf.data's warning
    about a cache not read to its end, which training used to end with when it stopped
    before an epoch was through (more records than the 20,000 of the shuffle buffer)."""
    result = run("cifar10-train", "-v", "0", "--synthetic_data", "--synthetic_records=5000",
                 f"--data_dir={tmp_path / 'data'}", f"--train_dir={tmp_path / 'train'}",
                 "--max_steps=2", "--batch_size=8", "--summary_steps=1000")
    assert result.returncode == 0, result.stderr
    assert "Training on 25000 examples" in result.stdout
    assert NATIVE.search(result.stderr), result.stderr
    assert "being cached" not in result.stderr and "cache_dataset_ops" not in result.stderr
    assert result.stdout.count("Training complete at step 2") == 1
