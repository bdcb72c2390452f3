"""scripts/gpu_check.sh: its quick mode prints one row per part, the GPU-only ones
skipped with the reason on a machine without a GPU; a part that fails is named and the
status is 1.  No timing is asserted."""

import os
import subprocess
import sys

import pytest

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
