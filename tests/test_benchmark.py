"""The benchmark script runs offline on generated data and prints every figure.

No timing is asserted here: the figures are for people to read (README,
"Performance"); this only checks that the command works and reports them all.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "benchmark.py")
FIGURE = r"\s+([0-9.]+) "


def test_benchmark_prints_every_figure_on_generated_data():
    result = subprocess.run(
        [sys.executable, SCRIPT, "--windows=1", "--window_steps=2", "--warmup_steps=1",
         "--records_per_file=64", "--batch_size=16", "--predict_images=12",
         "--prepare_images=30"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^machine: .+; \d+ cores; \d+ GPU\(s\); TensorFlow \d", out, re.M)
    assert "1 replica(s) x batch 16 = global batch 16; float32; XLA off" in out
    assert "(320 train, 64 test records)" in out
    for label in ("(a) train step alone:", "(b) input pipeline alone:",
                  "(c) end-to-end training:", "(d) evaluation:"):
        match = re.search(re.escape(label) + FIGURE + "examples/sec", out)
        assert match and float(match[1]) > 0, label
    assert re.search(r"\(64 examples in [0-9.]+ s\)", out)
    assert "examples/sec  (timed in turns with (c))" in out
    assert re.search(r"\(b\) input pipeline alone:.*\([0-9.]+x \(c\)\)", out)
    first_step = re.search(r"\(e\) launch to first step:" + FIGURE + "s", out)
    assert first_step and float(first_step[1]) > 0
    memory = re.search(r"\(f\) peak resident memory:" + FIGURE + "MB", out)
    assert memory and float(memory[1]) > 100  # TensorFlow alone takes more than that
    # FLOPs of one example's step, by hand: multiply-adds x 2, for the forward pass,
    # the weight gradient and (all but conv1) the input gradient:
    # conv1 24*24 * 5*5*3*64 * 2 * 2 + conv2 12*12 * 5*5*64*64 * 2 * 3
    # + (2304*384 + 384*192 + 192*10) * 2 * 3 = 105,295,104.
    speed = re.search(r"\(g\) machine speed:" + FIGURE + r"GFLOP/s float32 matmul; at "
                      r"105\.3 MFLOP per example the compute ceiling is (\d+) examples/sec "
                      r"\(\(c\) is \d+% of it\)", out)
    assert speed and round(float(speed[1]) * 1e9 / 105_295_104) == pytest.approx(
        int(speed[2]), abs=1)
    serving = re.search(r"\(h\) serving \(SavedModel\):" + FIGURE + r"images/sec at batch 1, "
                        r"([0-9.]+) at batch 128 \(PNG bytes in\)", out)
    assert serving and float(serving[1]) > 0 and float(serving[2]) > 0
    predicted = re.search(r"\(i\) cifar10-predict:" + FIGURE + r"s for a folder of 12 PNG "
                          r"images, launch to last line \((\d+) images/sec\)", out)
    assert predicted and float(predicted[1]) > 0
    assert int(predicted[2]) == pytest.approx(12 / float(predicted[1]), abs=1)
    converted = re.search(r"\(j\) cifar10-prepare:" + FIGURE + r"images/sec \(30 PNG images, "
                          r"32x32, into CIFAR-10 files\)", out)
    assert converted and float(converted[1]) > 0


@pytest.mark.parametrize("argument, message", [
    ("--windows=0", "--windows must be at least 1, got 0"),
    ("--predict_images=0", "--predict_images must be at least 1, got 0"),
    ("--num_gpus=-1", "--num_gpus and --warmup_steps must be >= 0"),
])
def test_benchmark_rejects_bad_arguments(argument, message, capsys):
    spec = importlib.util.spec_from_file_location("benchmark", SCRIPT)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    with pytest.raises(SystemExit) as exit_:
        benchmark.parse_args([argument])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
