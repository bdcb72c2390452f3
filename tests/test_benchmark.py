"""scripts/benchmark.py runs offline on generated data and prints every figure.

No timing is asserted: the figures are for people to read (docs/performance.md).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import types

import fakegpus
import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
SCRIPT = os.path.join(SCRIPTS, "benchmark.py")
NUMBER = r"\s+[0-9.]+"
STAGES = ["conv1", "pool1", "norm1", "conv2", "norm2", "pool2", "local3", "local4",
          "softmax_linear"]


@pytest.fixture(scope="module")
def benchmark():
    """scripts/benchmark.py and its figures' package ``bench``, imported as running the
    script would (its folder first on sys.path)."""
    sys.path.insert(0, SCRIPTS)
    try:
        yield types.SimpleNamespace(**{name.split(".")[-1]: importlib.import_module(name)
                                       for name in ("benchmark", "bench.report",
                                                    "bench.programs", "bench.training")})
    finally:
        sys.path.remove(SCRIPTS)


@pytest.mark.slow  # a developer's tool; the programs and the trainer it times are tested
def test_benchmark_prints_every_figure_on_generated_data(benchmark, capsys):
    # In this process: (e), (i) and (m) start programs of their own.
    assert benchmark.benchmark.main([
        "--windows=1", "--window_steps=2", "--warmup_steps=0", "--records_per_file=16",
        "--batch_size=8", "--predict_images=4", "--prepare_images=30",
        "--loop_window_steps=2", "--turns=1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^machine: .+; \d+ cores; \d+ GPU\(s\); TensorFlow \d", out, re.M)
    assert ("1 replica(s) x batch 8 = global batch 8; float32; XLA off; "
            "kernels compiled (CPU replicas); ") in out
    for figure in (r"\(a\) train step alone:" + NUMBER + " examples/sec",
                   r"\(b\) input pipeline alone:" + NUMBER + r" examples/sec .*; \d+ per host core "
                                                    r"\(\d+ core\(s\)\); feeds [0-9.]+ replicas at "
                                                    r"\(a\)'s \d+ each$",
                   r"\(c\) end-to-end training:" + NUMBER + " examples/sec",
                   r"\(d\) evaluation:" + NUMBER + r" examples/sec  \(16 examples",
                   r"\(e\) launch to first step:" + NUMBER + " s",
                   r"\(f\) peak resident memory:" + NUMBER + " MB",
                   # FLOPs of an example's step: multiply-adds x 2, for the forward pass,
                   # the weight gradient and (all but conv1) the input gradient:
                   # 24*24 * 5*5*3*64 * 2 * 2 + 12*12 * 5*5*64*64 * 2 * 3
                   # + (2304*384 + 384*192 + 192*10) * 2 * 3 = 105,295,104.
                   r"\(g\) machine speed:" + NUMBER + r" GFLOP/s float32 matmul; at 105\.3 "
                                                      r"MFLOP per example",
                   r"\(h\) serving \(SavedModel\):" + NUMBER + " images/sec at batch 1",
                   *(rf"    {name} +[0-9.]+ MB +[0-9.]+ ms per image$" for name in (
                       "model.tflite", "model-float16.tflite", "model-dynamic.tflite",
                       "model-int8.tflite")),
                   r"\(i\) cifar10-predict:" + NUMBER + " s for a folder of 4 PNG images",
                   r"\(j\) cifar10-prepare:" + NUMBER + r" images/sec \(30 PNG images",
                   r"\(l\) --deterministic:" + NUMBER + " examples/sec",
                   r"\(m\) ms per step at batch 1 per replica, .* 1 replica\(s\) .* 4 "
                   r"replica\(s\) "):
        assert re.search("^" + figure, out, re.M), (figure, out)
    layers = re.search(r"^\(k\) layers, forward\+backward: +[0-9.]+ ms a batch of 8, one "
                       r"layer at a time: (.+)$", out, re.M)
    assert layers and re.findall(r"(\w+) [0-9.]+ ms \(\d+%\)", layers[1]) == STAGES
    lines = out.splitlines()
    start = lines.index("(n) the train step alone without each compiled kernel, in turns "
                        "(ms per step, and against all kernels):")
    rows = [re.fullmatch(r"    (.+?) +[0-9.]+ ms +[0-9.]+x", line) for line in lines[start + 1:]]
    assert [row[1] for row in rows] == ["all kernels", "without the LRN kernels",
                                        "without pool1's fusion", "without norm2's fusion",
                                        "TensorFlow's ops"]


def test_use_bf16_prints_each_layers_time_and_precision_beside_float32s(benchmark, capsys):
    assert benchmark.benchmark.main(["--use_bf16", "--figures=k", "--batch_size=2",
                                     "--records_per_file=8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("(k) layers, forward+backward, a batch of 2, one layer at a time, "
                        "float32 against --use_bf16 (the precision each layer runs in):")
    rows = [line.split() for line in lines[start + 1:]]
    assert [row[0] for row in rows] == [*STAGES, "total"]
    assert [row[5] for row in rows[1:9]] == ["float32", "float32", "bfloat16", "float32",
                                            "float32", "bfloat16", "bfloat16", "bfloat16"]


@pytest.mark.parametrize("arguments, message", [
    ("--windows=0", "--windows must be at least 1, got 0"),
    ("--num_gpus=-1", "--num_gpus must be at least 0, got -1"),
    ("--replicas_per_gpu=0", "--replicas_per_gpu must be at least 1, got 0"),
    ("--use_fp16 --use_bf16", "--use_fp16 and --use_bf16 exclude each other: pass at most "
                              "one of them"),
    ("--data_dir=/nonexistent/data", "--data_dir=/nonexistent/data holds no "
                                     "cifar-10-batches-bin/: pass the folder that holds it "
                                     "(the benchmark downloads nothing), or leave --data_dir "
                                     "out to time generated data"),
    ("--figures=e,f --skip_launch", "--figures=e,f --skip_launch leaves no figure to measure"),
    *((f"--figures={figures}", "--figures takes letters from a to n (abcdefghijklmn, either "
                               "case) separated by single commas, such as --figures=k,n; got "
                               f"{figures!r}") for figures in ("z", "k,10", "a,,b", "")),
])
def test_benchmark_rejects_bad_arguments(benchmark, arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        benchmark.benchmark.parse_args(arguments.split())
    assert exit_.value.code == 1  # as the programs refuse a bad flag
    assert capsys.readouterr().err == f"benchmark.py: error: {message} (see benchmark.py --help)\n"


@pytest.mark.parametrize("arguments, letters, functions", [
    ("", "abcdefghijklmn", 11),
    ("--figures=N,k,k", "kn", ["figure_layers", "figure_kernels"]),  # in print order, once
    ("--skip_launch --figures=e,g", "g", ["figure_speed"]),
    # (h) and (i) serve and predict with (c)'s checkpoint.
    ("--figures=i,k", "ik", ["figure_training", "figure_predict", "figure_layers"]),
])
def test_figures_chooses_which_figures_are_measured(benchmark, arguments, letters, functions):
    assert benchmark.benchmark.parse_args(arguments.split()).figures == letters
    names = [f.__name__ for f in benchmark.report.figures_to_run(letters)]
    assert names == functions if isinstance(functions, list) else len(names) == functions
    printed = "".join(letters for letters, _ in benchmark.report.FIGURES)
    assert printed == benchmark.benchmark.FIGURE_LETTERS


def test_m_runs_its_four_replicas_on_fewer_gpus_as_slices_of_them(benchmark, monkeypatch,
                                                                  tmp_path):
    training, commands = benchmark.training, []
    monkeypatch.setattr(training.tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0", "GPU:1", "GPU:2"])
    monkeypatch.setattr(training.programs, "run", lambda command, **_: commands.append(
        command) or types.SimpleNamespace(returncode=0, stdout='{"1": 2.0, "%d": 1.0}\n'
                                          % training.STEPS_PER_LOOP))
    args = benchmark.benchmark.parse_args(["--all_reduce=hierarchical_copy"])
    assert training.loop_times_in_process(args, 4, str(tmp_path)) == (2.0, 1.0)
    assert {"--num_gpus=4", "--replicas_per_gpu=2",
            "--all_reduce=hierarchical_copy"} <= set(commands[0])


def test_ctrl_c_is_one_line_status_130_and_the_temporary_folder_removed(benchmark,
                                                                        monkeypatch,
                                                                        tmp_path, capsys):
    report = benchmark.report
    monkeypatch.setattr(report.tempfile, "tempdir", str(tmp_path))

    def interrupted(args, strategy, work):
        (tmp_path / os.path.basename(work) / "data.bin").write_bytes(b"\0" * 100)
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "prepare_setting", interrupted)
    assert benchmark.benchmark.main(["--figures=g"]) == 130
    assert capsys.readouterr().err == "benchmark.py: interrupted\n"
    assert os.listdir(tmp_path) == []


def test_num_gpus_0_hides_every_gpu(benchmark, monkeypatch):
    """As the programs that do not train on GPUs: none of their memory mapped."""
    gpus = fakegpus.FakeGPUs(monkeypatch, fakegpus.H200, fakegpus.H200)
    assert benchmark.benchmark.main(["--num_gpus=0", "--figures=g", "--windows=1",
                                     "--records_per_file=16"]) == 0
    assert gpus.state() == ([], [], {})


def test_a_program_that_does_not_stop_on_sigterm_is_killed(benchmark, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c",
                             "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)"
                             "\nprint('ready', flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    benchmark.programs.stop(proc, seconds=0.5)
    assert proc.returncode == -9


def test_bad_arguments_are_refused_before_tensorflow_loads(tmp_path):
    show = ("import runpy, sys\n"
            "sys.argv = sys.argv[1:]\n"
            "try:\n"
            "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "finally:\n"
            "    print('tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", show, SCRIPT, "--batch_size=0"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "benchmark.py: error: --batch_size must be at least 1, got 0 (see benchmark.py --help)"]
    assert result.stdout == "False\n"
