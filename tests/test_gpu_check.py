"""scripts/gpu_check.sh: its quick mode prints one row per part, the GPU-only ones
skipped with the reason on a machine without a GPU; a part that fails is named and the
status is 1; its GPU branch, part by part, with nvidia-smi and the programs faked; stopped,
it prints the rows measured so far.  No timing is asserted."""

import json
import os
import subprocess
import sys

import pytest

import fakegpus

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
ROWS = ["GPU", "step alone, ex/s per GPU", "input alone, ex/s (host)",
        "end-to-end, ex/s per GPU", "evaluation, ex/s per GPU", "loss, mean of steps 3-4",
        "compiled CPU kernels", "GPU memory of a --num_gpus=0 run", "two replicas on one GPU",
        "cifar10-export", "cifar10-eval", "SIGTERM to exit"]
GPU_ROWS = ["GPU", "compiled CPU kernels", "GPU memory of a --num_gpus=0 run",
            "two replicas on one GPU"]


def table(out: str) -> dict[str, list[str]]:
    """{part: [its float32, TF32, float16, bfloat16 cells, status]} of the printed table."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in rows[1:]}


@pytest.mark.slow  # about a minute: six programs and the benchmark, each tested elsewhere
def test_quick_check_prints_every_part_and_skips_the_gpu_ones_without_a_gpu(tmp_path):
    result = subprocess.run(
        ["bash", os.path.join(SCRIPTS, "gpu_check.sh"), "--quick", f"--dir={tmp_path}/check"],
        env=dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES=""),  # no GPU
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = table(result.stdout)
    assert list(rows) == ROWS
    for part in ROWS[1:6]:  # a float32 figure; the other precisions left out
        assert float(rows[part][0].replace(",", "")) > 0
        assert rows[part][1:] == ["", "", "", "ok (TF32, float16, bfloat16 skipped: --quick)"]
    for part in GPU_ROWS:
        assert rows[part][-1].startswith("skipped: no GPU"), rows[part]
    for part in ("cifar10-export", "cifar10-eval", "SIGTERM to exit"):
        assert rows[part][-1].startswith("ok: "), rows[part]
    assert os.listdir(tmp_path) == ["check"]  # everything under its folder


def test_a_part_that_fails_is_named_and_the_status_is_1(tmp_path, monkeypatch, capsys):
    for name in ("cifar10-train", "cifar10-export", "cifar10-eval"):
        (tmp_path / name).write_text(f"#!/bin/sh\necho '{name}: error: boom'\nexit 1\n")
        (tmp_path / name).chmod(0o755)
    (tmp_path / "make_synthetic_data.py").write_text("")
    (tmp_path / "benchmark.py").write_text("import sys; sys.exit('benchmark.py: error: boom')")
    monkeypatch.syspath_prepend(SCRIPTS)
    gpu_check = __import__("gpu_check")
    monkeypatch.setattr(gpu_check, "BIN", str(tmp_path))  # these programs and scripts
    monkeypatch.setattr(gpu_check, "HERE", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_check.main(["--quick", f"--dir={tmp_path}/check"]) == 1
    out, err = capsys.readouterr()
    rows = table(out)
    assert rows["cifar10-eval"][-1].startswith("FAILED: exit status 1: cifar10-eval: error: boom")
    assert err.splitlines()[-1] == "gpu_check.py: FAILED: " + "; ".join(
        part for part in ROWS if part not in GPU_ROWS)


# The GPU branch, each part called directly on a Check of a machine with an H200
# (nvidia-smi faked) whose float32 run trained on it, the programs it starts faked.
GPU_RECORD = {"devices": [{"name": "/job:localhost/replica:0/task:0/device:GPU:0",
                           "kind": "NVIDIA H200"}],
              "kernels": {"kernel": "tensorflow", "reason": "on a GPU"},
              "tensorflow": "2.21.0"}
FAKE_TRAIN = """#!/bin/sh
echo "$@" >> "$0.args"
trap 'echo "Stopped at step 21; saved model.ckpt-21"; exit 0' TERM
echo "cifar10-train: step 20, loss = 2.30"
while :; do sleep 0.1; done
"""
# (a)-(d) of the benchmark, 1000-4000 examples/sec by precision; float16's ends after (c).
FAKE_BENCHMARK = """import sys
open(__file__ + ".args", "a").write(" ".join(sys.argv[1:]) + "\\n")
k = 1 + sum(i * (flag in sys.argv) for i, flag in
            enumerate(("--allow_tf32", "--use_fp16", "--use_bf16"), 1))
print("machine: a fake host")
for letter in "abc":
    print(f"({letter}) figure {letter}:   {1000 * k:9.1f} examples/sec  (a note)")
if "--use_fp16" in sys.argv:
    sys.exit("benchmark.py: error: out of memory")
print(f"(d) evaluation:   {1000 * k:9.1f} examples/sec")
"""


@pytest.fixture
def gpu_check(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(SCRIPTS)
    module = __import__("gpu_check")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cifar10-train").write_text(FAKE_TRAIN)
    (bin_dir / "cifar10-train").chmod(0o755)
    (bin_dir / "benchmark.py").write_text(FAKE_BENCHMARK)
    monkeypatch.setattr(module, "BIN", str(bin_dir))
    monkeypatch.setattr(module, "HERE", str(bin_dir))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return module


def on_h200(gpu_check, tmp_path, monkeypatch, memory=("1000",), quick=False):
    """A Check (full mode unless ``quick``) whose float32 run trained on the H200 that
    nvidia-smi names, its memory.used ``memory`` one call after another."""
    fakegpus.nvidia_smi_queries(tmp_path, monkeypatch, name=["NVIDIA H200"],
                                memory_used=list(memory))
    c = gpu_check.Check(gpu_check.parse_args([f"--dir={tmp_path}/check", *["--quick"] * quick]))
    c.trained, c.on_gpu = GPU_RECORD, True
    return c


def args(path) -> list[list[str]]:
    """The arguments of each start of a fake program (``path``.args)."""
    return [line.split() for line in path.read_text().splitlines()]


def test_on_a_gpu_the_speeds_fill_four_precisions_and_a_failure_keeps_the_figures_before_it(
        gpu_check, tmp_path, monkeypatch):
    c = on_h200(gpu_check, tmp_path, monkeypatch)
    gpu_check.speeds(c, list(gpu_check.PRECISIONS), "")
    rows = table("\n".join(gpu_check.table(list(c.rows.values()))))
    for part in ("step alone, ex/s per GPU", "input alone, ex/s (host)",
                 "end-to-end, ex/s per GPU"):
        assert rows[part] == ["1,000", "2,000", "3,000", "4,000", "ok"]
    assert rows["evaluation, ex/s per GPU"] == [
        "1,000", "2,000", "FAILED", "4,000",
        f"FAILED: float16: exit status 1: benchmark.py: error: out of memory "
        f"(see {c.path('logs', 'speed-float16.log')})"]
    assert c.machine == "a fake host"
    started = args(tmp_path / "bin" / "benchmark.py.args")
    assert [flags[-1] for flags in started] == [
        "--num_gpus=1", "--allow_tf32", "--use_fp16", "--use_bf16"]
    assert all({"--num_gpus=1", "--window_steps=50"} <= set(flags) for flags in started)


def test_off_the_gpu_the_full_check_times_the_quick_windows(gpu_check, tmp_path, monkeypatch):
    c = on_h200(gpu_check, tmp_path, monkeypatch)
    c.trained, c.on_gpu = {}, False  # TensorFlow trained on the CPU
    gpu_check.speeds(c, ["float32"], "TF32, float16, bfloat16 skipped: no GPU")
    assert args(tmp_path / "bin" / "benchmark.py.args") == [[
        "--figures=a,b,c,d", f"--data_dir={c.path('data')}", "--windows=1",
        "--window_steps=2", "--warmup_steps=1"]]
    assert c.rows["step alone, ex/s per GPU"][1:] == (
        {"float32": "1,000"}, "ok (TF32, float16, bfloat16 skipped: no GPU)")


@pytest.mark.parametrize("precision, loss, reference, expected", [
    ("float32", 2.3, 2.3, "2.300"),
    ("bfloat16", 2.45, 2.3, "2.450 (+0.150)"),
    ("float16", 2.05, 2.3, "FAILED: 2.050, more than 0.2 from float32's"),
    ("TF32", float("nan"), 2.3, "FAILED: nan, more than 0.2 from float32's"),
    ("TF32", 2.3, None, "FAILED: no float32 loss to compare with")])  # (float32's failed)
def test_each_precisions_loss_is_within_0_2_of_float32s(gpu_check, precision, loss, reference,
                                                         expected):
    reference = gpu_check.Failed("boom") if reference is None else reference
    cell = gpu_check.loss_cell(precision, loss, reference)
    assert (f"FAILED: {cell}" if isinstance(cell, gpu_check.Failed) else cell) == expected


@pytest.mark.parametrize("kernel, expected", [
    ("tensorflow", "not used, TensorFlow's ops (on a GPU)"),
    ("compiled", "FAILED: the GPU run used {'kernel': 'compiled', 'reason': 'on a GPU'}")])
def test_the_gpu_run_must_not_use_the_compiled_cpu_kernels(gpu_check, tmp_path, monkeypatch,
                                                           kernel, expected):
    c = on_h200(gpu_check, tmp_path, monkeypatch)
    c.trained = dict(GPU_RECORD, kernels={"kernel": kernel, "reason": "on a GPU"})
    assert gpu_check.single("compiled CPU kernels", gpu_check.kernels, c)[-1] in (
        f"ok: {expected}", expected)


@pytest.mark.parametrize("memory, expected", [
    (["1000", "1064"], "ok: 64 MiB more in use while it trained (nvidia-smi)"),
    (["1000", "900"], "ok: 0 MiB more in use while it trained (nvidia-smi)"),
    (["1000", "1065"], "FAILED: 65 MiB more in use while it trained: it holds GPU memory"),
    (["[N/A]"], "FAILED: nvidia-smi gives GPU 0's memory.used as [N/A]"),  # MIG, vGPU
    (["1000", "[N/A]"], "FAILED: nvidia-smi gives GPU 0's memory.used as [N/A]")])
def test_a_cpu_runs_gpu_memory_is_nvidia_smis_difference(gpu_check, tmp_path, monkeypatch,
                                                          memory, expected):
    c = on_h200(gpu_check, tmp_path, monkeypatch, memory)
    label = "GPU memory of a --num_gpus=0 run"
    assert gpu_check.single(label, gpu_check.cpu_run_memory, c) == (label, {}, expected)
    if len(memory) > 1:  # the trainer started on the CPU
        assert "--num_gpus=0" in args(tmp_path / "bin" / "cifar10-train.args")[0]


SLICE = {"name": "/job:localhost/replica:0/task:0/device:GPU:{}",
         "kind": "NVIDIA H200, slice of GPU 0"}


@pytest.mark.parametrize("devices, expected", [
    ([SLICE, SLICE], "ok: 2 replicas trained past step 20, each on NVIDIA H200, slice of GPU 0"),
    ([dict(SLICE, kind="NVIDIA H200")] * 2, "FAILED: its run record shows ['NVIDIA H200', "
                                            "'NVIDIA H200'], not 2 slices of one GPU"),
    ([SLICE, dict(SLICE, kind="NVIDIA H200, slice of GPU 1")], "FAILED: its run record"),
    ([], "FAILED: its run record shows no GPU, not 2 slices of one GPU")])
def test_the_split_row_takes_two_slices_of_the_gpu_from_the_runs_record(
        gpu_check, tmp_path, monkeypatch, devices, expected):
    c = on_h200(gpu_check, tmp_path, monkeypatch)
    os.makedirs(c.path("runs", "split"))
    with open(c.path("runs", "split", "environment.jsonl"), "w") as f:
        f.write(json.dumps({"devices": [dict(d, name=d["name"].format(i))
                                        for i, d in enumerate(devices)]}) + "\n")
    (_, _, split), (_, _, sigterm) = gpu_check.split_and_sigterm(c)
    assert split.startswith(expected), split
    assert sigterm.startswith("ok: ") and sigterm.endswith(" s, checkpoint of step 21 saved")
    flags = args(tmp_path / "bin" / "cifar10-train.args")[0]
    assert {"--num_gpus=2", "--replicas_per_gpu=2"} <= set(flags)


def test_a_program_neither_beside_python_nor_on_path_fails_its_part(
        gpu_check, tmp_path, monkeypatch):
    c = on_h200(gpu_check, tmp_path, monkeypatch)
    assert gpu_check.installed("nvidia-smi") == str(tmp_path / "bin" / "nvidia-smi")  # PATH's
    with pytest.raises(gpu_check.Failed, match="^cannot start .*/cifar10-nowhere: No such file"):
        c.run("export", "export", [gpu_check.installed("cifar10-nowhere")])


def test_interrupted_it_prints_the_rows_measured_the_others_not_run_and_exits_130(
        gpu_check, tmp_path, monkeypatch, capsys):
    (tmp_path / "bin" / "make_synthetic_data.py").write_text("")
    fakegpus.nvidia_smi_queries(tmp_path, monkeypatch)  # (no GPU)

    def checks(c):
        c.trained = {"tensorflow": "2.21.0"}
        c.done(("GPU", {}, "ok: measured"))
        raise KeyboardInterrupt  # (SIGTERM too)

    monkeypatch.setattr(gpu_check, "checks", checks)
    assert gpu_check.main([f"--dir={tmp_path}/check"]) == 130
    out, err = capsys.readouterr()
    assert "; TensorFlow 2.21.0; interrupted after " in out.splitlines()[0]
    rows = table(out)
    assert list(rows) == [part.replace("3-4", "101-200") for part in ROWS]
    assert rows.pop("GPU")[-1] == "ok: measured"
    assert all(cells == ["", "", "", "", "not run"] for cells in rows.values())
    assert err.splitlines()[-1].startswith("gpu_check.py: interrupted; what it wrote is in ")

