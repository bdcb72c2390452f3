"""The benchmark script runs offline on generated data and prints every figure.

No timing is asserted here: the figures are for people to read (docs/performance.md);
this only checks that the command works and reports them all.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
import types

import pytest
import tensorflow as tf
from cli import env
from conftest import mirrored

from cifar10.distribute import devices
from cifar10.core import cpu
from cifar10.kernels.choice import choose
from cifar10.lrn import fast_lrn
from cifar10.training.engine import Trainer

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
SCRIPT = os.path.join(SCRIPTS, "benchmark.py")
FIGURE = r"\s+([0-9.]+) "


@pytest.fixture(scope="module")
def benchmark():
    """scripts/benchmark.py and its figures' package ``bench``, imported as running
    the script would (its folder first on sys.path)."""
    sys.path.insert(0, SCRIPTS)
    try:
        names = ("benchmark", "bench.measure", "bench.training", "bench.compute",
                 "bench.programs", "bench.kernels", "bench.report")
        yield types.SimpleNamespace(**{name.split(".")[-1]: importlib.import_module(name)
                                       for name in names})
    finally:
        sys.path.remove(SCRIPTS)


@pytest.mark.slow  # a developer's tool; its parts' own tests run on both
def test_benchmark_prints_every_figure_on_generated_data(benchmark, capsys):
    # In this process: (e) and (i) start cifar10-train and cifar10-predict in their own.
    assert benchmark.benchmark.main(["--windows=1", "--window_steps=2", "--warmup_steps=1",
                           "--records_per_file=64", "--batch_size=16", "--predict_images=12",
                           "--prepare_images=30", "--loop_window_steps=3", "--turns=1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^machine: .+; \d+ cores; \d+ GPU\(s\); TensorFlow \d", out, re.M)
    assert out.startswith(f"machine: {devices.cpu_model().removeprefix('CPU: ')}; ")
    assert ("1 replica(s) x batch 16 = global batch 16; float32; XLA off; "
            "kernels compiled (CPU replicas); ") in out
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
    layers = re.search(r"^\(k\) layers, forward\+backward: +([0-9.]+) ms a batch of 16, one "
                       r"layer at a time: (.+)$", out, re.M)
    assert layers, out
    shares = re.findall(r"(\w+) ([0-9.]+) ms \((\d+)%\)", layers[2])
    assert [name for name, _, _ in shares] == [
        "conv1", "pool1", "norm1", "conv2", "norm2", "pool2", "local3", "local4",
        "softmax_linear"]
    # Each of the 9 figures is rounded to 0.1 ms, and each share to 1%.
    assert sum(float(ms) for _, ms, _ in shares) == pytest.approx(float(layers[1]), abs=0.5)
    assert sum(int(share) for _, _, share in shares) == pytest.approx(100, abs=5)
    exact = re.search(r"^\(l\) --deterministic:" + FIGURE + r"examples/sec, ([0-9.]+)x normal "
                      r"training's ([0-9.]+) \(in turns\); a resume at step 1000 spends "
                      r"(-?[0-9.]+) s skipping the batches done$", out, re.M)
    assert exact, out
    assert float(exact[2]) == pytest.approx(float(exact[1]) / float(exact[3]), abs=0.01)
    loop = re.search(r"^\(m\) ms per step at batch 1 per replica, --steps_per_loop 1 and "
                     r"default: 1 replica\(s\) ([0-9.]+) ms with 1, ([0-9.]+) ms with 100 "
                     r"\(([0-9.]+)x\); 4 replica\(s\) ([0-9.]+) ms with 1, ([0-9.]+) ms with "
                     r"100 \(([0-9.]+)x\)$", out, re.M)
    assert loop, out
    for one, default, ratio in ((1, 2, 3), (4, 5, 6)):
        assert float(loop[ratio]) == pytest.approx(float(loop[default]) / float(loop[one]),
                                                   abs=0.01)
    lines = out.splitlines()
    start = lines.index("(n) the train step alone without each compiled kernel, in turns "
                        "(ms per step, and against all kernels):")
    rows = [re.fullmatch(r"    (.+?) +([0-9.]+) ms +([0-9.]+)x", line)
            for line in lines[start + 1:start + 6]]
    assert all(rows), lines[start:]
    assert [row[1] for row in rows] == ["all kernels", "without the LRN kernels",
                                        "without pool1's fusion", "without norm2's fusion",
                                        "TensorFlow's ops"]
    assert rows[0][3] == "1.00"
    every = float(rows[0][2])
    for row in rows:
        assert float(row[2]) > 0
        # The ratio of the times before they were rounded to 0.1 ms, shown to 0.01.
        assert float(row[3]) == pytest.approx(float(row[2]) / every, abs=0.005 + 0.1 / every)
    assert start + 6 == len(lines)  # (n) is the last figure


@pytest.mark.parametrize("arguments, message", [
    ("--windows=0", "--windows must be at least 1, got 0"),
    ("--predict_images=0", "--predict_images must be at least 1, got 0"),
    ("--turns=0", "--turns must be at least 1, got 0"),
    ("--num_gpus=-1", "--num_gpus must be at least 0, got -1"),  # it alone named
    ("--warmup_steps=-1", "--warmup_steps must be at least 0, got -1"),
    ("--use_fp16 --use_bf16", "--use_fp16 and --use_bf16 exclude each other: pass at most "
                              "one of them"),
    ("--data_dir=/nonexistent/data", "--data_dir=/nonexistent/data holds no "
                                     "cifar-10-batches-bin/: pass the folder that holds it "
                                     "(the benchmark downloads nothing), or leave --data_dir "
                                     "out to time generated data"),
])
def test_benchmark_rejects_bad_arguments(benchmark, arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        benchmark.benchmark.parse_args(arguments.split())
    # As the programs refuse a bad flag: one line, exit status 1 (argparse's is 2, after
    # its usage lines).
    assert exit_.value.code == 1
    assert capsys.readouterr().err == (f"benchmark.py: error: {message} "
                                       f"(see benchmark.py --help)\n")


def test_a_batch_beyond_memory_is_refused_as_the_trainer_refuses_it(benchmark, capsys):
    with pytest.raises(SystemExit) as exit_:
        benchmark.benchmark.parse_args(["--batch_size=10000000000000"])
    assert exit_.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"benchmark\.py: error: --batch_size=10000000000000 cannot fit: "
                        r"conv1's output alone would take at least .+ GB a replica, more "
                        r"than .+; give a smaller --batch_size \(the tutorial's is 128\) "
                        r"\(see benchmark\.py --help\)", line), line


def test_records_per_file_beyond_memory_is_refused(benchmark, capsys, tmp_path):
    # It was numpy's ArrayMemoryError, a traceback, once generating began.
    parse = benchmark.benchmark.parse_args
    with pytest.raises(SystemExit) as exit_:
        parse(["--records_per_file=99999999999"])
    assert exit_.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"benchmark\.py: error: --records_per_file=99999999999 cannot be "
                        r"generated: a file of that many records takes about 1\.2e\+07 GB of "
                        r"memory, more than this machine's [0-9.]+ GB; give at most \d+ "
                        r"\(CIFAR-10's files hold 10000\) \(see benchmark\.py --help\)", line)
    # Measured: 114 KB a record; on a machine of 1.2 GB, 10,000 records (the default) fit.
    p = benchmark.benchmark.ArgumentParser(prog="benchmark.py")
    benchmark.benchmark._refuse_data_beyond_memory(p, 10_000, total=1_200_000_000)
    with pytest.raises(SystemExit):
        benchmark.benchmark._refuse_data_beyond_memory(p, 10_001, total=1_200_000_000)
    assert "give at most 10000 " in capsys.readouterr().err
    # Data of one's own (--data_dir) is not generated: no bound.
    (tmp_path / "cifar-10-batches-bin").mkdir()
    assert parse(["--records_per_file=99999999999",
                  f"--data_dir={tmp_path}"]).records_per_file == 99999999999


@pytest.mark.parametrize("arguments, letters", [
    ("", "abcdefghijklmn"),
    ("--figures=k,n", "kn"),
    ("--figures=N,k,k", "kn"),  # either case, in the order they print, each once
    ("--skip_launch", "abcdghijklmn"),
    ("--figures=e,g --skip_launch", "g"),
])
def test_figures_chooses_which_figures_are_measured(benchmark, arguments, letters):
    assert benchmark.benchmark.parse_args(arguments.split()).figures == letters


def test_the_figure_letters_are_those_the_figure_functions_print(benchmark):
    printed = "".join(letters for letters, _ in benchmark.report.FIGURES)
    assert printed == benchmark.benchmark.FIGURE_LETTERS


def test_figures_that_skip_launch_leaves_empty_is_refused(benchmark, capsys):
    with pytest.raises(SystemExit) as exit_:
        benchmark.benchmark.parse_args(["--figures=e,f", "--skip_launch"])
    assert exit_.value.code == 1
    assert "--figures=e,f --skip_launch leaves no figure to measure" in capsys.readouterr().err


# An empty letter (a,,b, k,) was taken silently for no figure.
@pytest.mark.parametrize("figures", ["z", "k,10", ",", "a,,b", "k,", ""])
def test_figures_refuses_a_letter_with_no_figure(benchmark, figures, capsys):
    with pytest.raises(SystemExit) as exit_:
        benchmark.benchmark.parse_args([f"--figures={figures}"])
    assert exit_.value.code == 1
    assert ("--figures takes letters from a to n (abcdefghijklmn, either case) separated by "
            f"single commas, such as --figures=k,n; got {figures!r}") in capsys.readouterr().err


def test_each_figure_function_runs_for_its_letters_and_what_they_need(benchmark):
    report = benchmark.report
    names = lambda letters: [f.__name__ for f in report.figures_to_run(letters)]  # noqa: E731
    assert names("kn") == ["figure_layers", "figure_kernels"]
    assert names("c") == ["figure_training"]
    assert names("g") == ["figure_speed"]  # without (c): the ceiling alone
    # (h) and (i) serve and predict with (c)'s checkpoint.
    assert names("h") == ["figure_training", "figure_serving"]
    assert names("ik") == ["figure_training", "figure_predict", "figure_layers"]
    assert len(names("abcdefghijklmn")) == len(report.FIGURES) == 11


def test_kernel_gains_leave_out_one_kernel_at_a_time_timed_in_turns(benchmark, monkeypatch):
    kernels_module = benchmark.kernels
    compiled = choose("compiled", [], False)
    built, calls = [], []

    def fake_step_alone(args, strategy, train_dir, kernels=None):
        built.append((os.path.basename(train_dir), kernels))
        k = len(built)  # variant k runs at 1000 * k examples/sec
        return lambda: calls.append(k) or 1000.0 * k

    monkeypatch.setattr(kernels_module.training, "step_alone", fake_step_alone)
    args = benchmark.benchmark.parse_args(["--windows=3", "--batch_size=16"])
    times = kernels_module.step_times(args, mirrored(1), "/work", compiled)
    assert [name for name, _ in built] == [f"kernels-{i}" for i in range(5)]
    every, no_lrn, no_pool, no_norm2, tensorflow = (kernels for _, kernels in built)
    assert every == compiled
    assert no_lrn[:3] == (fast_lrn, compiled.relu_pool, None)
    assert no_pool[:3] == (compiled.lrn, None, compiled.relu_lrn)
    assert no_norm2[:3] == (compiled.lrn, compiled.relu_pool, None)
    assert tensorflow[:4] == (fast_lrn, None, None, "tensorflow")
    assert calls == [1, 2, 3, 4, 5] * 3  # a window of each in turns, 3 rounds
    # 16 examples a step at 1000 * k examples/sec: 16 / k ms.
    assert times == [("all kernels", 16.0), ("without the LRN kernels", 8.0),
                     ("without pool1's fusion", pytest.approx(16 / 3)),
                     ("without norm2's fusion", 4.0), ("TensorFlow's ops", pytest.approx(3.2))]


def test_kernel_gains_are_not_timed_where_the_runs_use_tensorflows_ops(benchmark):
    setting = types.SimpleNamespace(kernels=choose("tensorflow", [], False))
    assert benchmark.report.figure_kernels(setting) == [
        "(n) compiled kernels: not timed, the runs use TensorFlow's ops (--kernels=tensorflow)"]


def test_the_trainer_runs_the_layer_functions_it_is_given(benchmark, tmp_path):
    compiled = choose("compiled", [], False)
    without_pool = compiled._replace(relu_pool=None)
    args = benchmark.benchmark.parse_args(["--batch_size=8", "--window_steps=2",
                                           "--warmup_steps=1"])
    assert benchmark.training.step_alone(args, mirrored(1), str(tmp_path), without_pool)() > 0
    trainer = Trainer(benchmark.measure.train_config(args, str(tmp_path / "t")), mirrored(1),
                      kernels=without_pool)
    assert trainer.kernels == without_pool
    model = trainer.state.model
    assert (model._lrn, model._relu_pool, model._relu_lrn) == (
        compiled.lrn, None, compiled.relu_lrn)


def test_kernels_is_the_trainers_choice_and_its_former_name_is_still_read(benchmark):
    parse = benchmark.benchmark.parse_args
    assert parse([]).kernels == "auto"
    assert parse(["--kernels=tensorflow"]).kernels == "tensorflow"
    assert parse(["--lrn_kernel=compiled"]).kernels == "compiled"


def test_use_bf16_times_the_bfloat16_step_evaluation_and_matmul(benchmark, trained_run,
                                                                tmp_path):
    # The figures (a)-(g) in bfloat16, in-process: the full command is tested in float32.
    args = benchmark.benchmark.parse_args(["--use_bf16", "--batch_size=8", "--window_steps=2",
                                 "--warmup_steps=1", "--windows=1"])
    assert benchmark.measure.compute_dtype(args) == tf.bfloat16
    time_step = benchmark.training.step_alone(args, mirrored(1), str(tmp_path))
    assert time_step() > 0
    _, test_files = trained_run
    rate, seconds = benchmark.programs.evaluation(args, test_files)
    assert rate > 0 and seconds > 0
    assert benchmark.compute.matmul_gflops(1, size=128, per_window=2, dtype=tf.bfloat16) > 0
    times = benchmark.compute.layer_times(args, choose("compiled", [], False), reps=1)
    assert [name for name, _ in times][::3] == ["conv1", "conv2", "local3"]
    assert len(times) == 9 and all(ms > 0 for _, ms in times)


def test_use_bf16_prints_each_layers_precision_and_time_beside_float32s(benchmark,
                                                                        monkeypatch):
    monkeypatch.setattr(cpu, "has_amx", lambda: True)  # conv1 in bfloat16
    args = benchmark.benchmark.parse_args(["--use_bf16", "--batch_size=4"])
    calls = []

    def fake_stage_ms(forward_backward, x, reps):  # float32 2 ms a stage, bfloat16 1 ms
        calls.append(x.dtype)
        return forward_backward(x)[0], 2.0 if len(calls) % 2 else 1.0

    monkeypatch.setattr(benchmark.compute, "_stage_ms", fake_stage_ms)
    setting = types.SimpleNamespace(args=args, kernels=choose("compiled", [], False))
    lines = benchmark.report.figure_layers_bf16(setting)
    assert len(calls) == 18  # the two types in turns, stage by stage
    f32, bf16 = tf.float32, tf.bfloat16
    assert calls[0::2] == [f32] * 9
    # Each stage's input under --use_bf16: the output of the stage before it (LRN's in
    # the type of the stage after it; conv1's bfloat16 as the compiled pool1 reads it,
    # with AMX).
    assert calls[1::2] == [bf16, bf16, f32, bf16, bf16, f32, f32, bf16, bf16]
    assert lines[0] == ("(k) layers, forward+backward, a batch of 4, one layer at a time, "
                        "float32 against --use_bf16 (the precision each layer runs in):")
    rows = [line.split() for line in lines[1:]]
    assert [row[0] for row in rows] == ["conv1", "pool1", "norm1", "conv2", "norm2",
                                        "pool2", "local3", "local4", "softmax_linear",
                                        "total"]
    assert rows[0] == ["conv1", "2.0", "ms", "1.0", "ms", "bfloat16", "2.00x"]
    assert [row[5] for row in rows[:9]] == ["bfloat16", "float32", "float32", "bfloat16",
                                           "float32", "float32", "bfloat16", "bfloat16",
                                           "bfloat16"]
    assert rows[9] == ["total", "18.0", "ms", "9.0", "ms", "2.00x"]



def test_medians_are_taken_over_windows_timed_by_the_one_clock(benchmark, monkeypatch):
    measure = benchmark.measure
    # The clock read before and after each call: windows of 1, 4 and 2 s, twice,
    # then one call of 3 s.
    ticks = iter([0, 1, 10, 14, 20, 22, 30, 31, 40, 44, 50, 52, 60, 63])
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(ticks))
    calls = []
    # 8 examples a window: 8, 2 and 4 examples/sec.
    assert measure.median_rate(lambda: calls.append(1), 3, 8) == 4
    assert measure.median_seconds(lambda: calls.append(1), 3) == 2
    assert len(calls) == 6
    assert measure.timed(divmod, 7, 2) == ((3, 1), 3)


def test_bad_arguments_are_refused_before_tensorflow_loads(tmp_path):
    # Run from another folder, as the script is run as a file; the error is the last line.
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


def test_damaged_data_in_data_dir_is_one_line(benchmark, tmp_path, capsys):
    batches = tmp_path / "cifar-10-batches-bin"
    batches.mkdir()  # a folder of the right name without its files
    assert benchmark.benchmark.main([f"--data_dir={tmp_path}", "--figures=a",
                                     "--skip_launch"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"benchmark.py: error: missing data file {batches}/")


# The script's own lines are Python; what TensorFlow does in them (the trainer's warning
# of a machine without a GPU, cifar10-prepare's conversion, TensorFlow's C++ lines kept
# off stderr by core/logs) test_output.py and test_prepare.py check on both versions.
@pytest.mark.slow
def test_the_script_prints_its_warnings_as_its_own_lines(tmp_path):
    # --num_gpus=1 given on a machine without a GPU: the trainer's warning, in the
    # script's own form; left at its default, nothing is said.
    # Too few images for (j) to split is the script's one-line error, not a traceback.
    common = [sys.executable, SCRIPT, "--figures=j", "--records_per_file=64"]
    asked = subprocess.run([*common, "--num_gpus=1", "--prepare_images=5"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, check=False,
                           env=env())
    assert asked.returncode == 1, asked.stderr
    lines = asked.stderr.splitlines()
    if not tf.config.list_physical_devices("GPU"):
        assert lines[0] == ("benchmark.py: warning: --num_gpus=1 but this machine has no "
                            "GPU: training on the CPU.")
    assert len(lines) == 2 and lines[1].startswith(
        "benchmark.py: error: (j) cannot convert 5 images: ")
    assert lines[1].endswith("; a larger --prepare_images converts")
    default = subprocess.run([*common, "--prepare_images=30"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=False,
                             env=env())
    assert default.returncode == 0, default.stderr
    assert default.stderr == ""
    assert re.search(r"^\(j\) cifar10-prepare: +[0-9.]+ images/sec \(30 PNG images",
                     default.stdout, re.M), default.stdout


def _stand_in(tmp_path, body: str) -> list[str]:
    """A program that writes its PID to ``tmp_path``/pid, then runs ``body`` (Python)."""
    return [sys.executable, "-c",
            f"import os, signal, sys, time\n"
            f"open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n{body}"]


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` is left, not even one that was not waited for."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _interrupt_once_there(path) -> None:
    """Ctrl-C in the main thread once ``path`` exists: a real SIGINT, which breaks into
    a blocking read as the user's does."""
    import signal
    import threading

    main = threading.main_thread().ident

    def interrupt() -> None:
        deadline = time.time() + 60
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()


@pytest.mark.slow  # no TensorFlow: a stand-in program
def test_a_program_the_benchmark_started_is_stopped_and_waited_for_on_ctrl_c(benchmark,
                                                                            tmp_path):
    # Ctrl-C during (e) left cifar10-train running, writing in the temporary folder
    # as it was removed: the folder stayed.
    programs = benchmark.programs
    command = _stand_in(tmp_path, "time.sleep(60)")
    _interrupt_once_there(tmp_path / "pid")
    with pytest.raises(KeyboardInterrupt):
        programs._start_training(command)  # reading its lines, up to a first step
    pid = int((tmp_path / "pid").read_text())
    assert _gone(pid)  # stopped (SIGTERM) and waited for


def test_a_program_that_does_not_stop_on_sigterm_is_killed(benchmark, tmp_path):
    programs = benchmark.programs
    command = _stand_in(tmp_path, "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                  "print('ready', flush=True)\ntime.sleep(60)")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    programs.stop(proc, seconds=0.5)
    assert proc.returncode == -9 and _gone(proc.pid)
    ended = subprocess.Popen(_stand_in(tmp_path, "pass"))
    ended.wait()
    programs.stop(ended)  # ended already: nothing to do
    assert ended.returncode == 0


def test_ctrl_c_is_one_line_status_130_and_the_temporary_folder_removed(benchmark,
                                                                        monkeypatch,
                                                                        tmp_path, capsys):
    # It was a 20-line KeyboardInterrupt traceback.
    report = benchmark.report
    monkeypatch.setattr(report.tempfile, "tempdir", str(tmp_path))
    made = []

    def interrupted(args, strategy, work):
        made.append(work)
        (tmp_path / os.path.basename(work) / "data.bin").write_bytes(b"\0" * 100)
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "prepare_setting", interrupted)
    try:
        status = benchmark.benchmark.main(["--figures=g"])
    except KeyboardInterrupt:  # (not left to end the test session)
        pytest.fail("the KeyboardInterrupt came out of main")
    assert status == 130
    assert capsys.readouterr().err == "benchmark.py: interrupted\n"
    assert made and os.path.dirname(made[0]) == str(tmp_path)
    assert os.listdir(tmp_path) == []


def _benchmark_process(tmp_path, *args: str, **popen_args) -> subprocess.Popen:
    """scripts/benchmark.py in a process of its own, its temporary folder in ``tmp_path``."""
    return subprocess.Popen([sys.executable, SCRIPT, "--records_per_file=100", "--windows=1",
                             "--window_steps=2", "--warmup_steps=1", *args], cwd=tmp_path,
                            env=env(TMPDIR=str(tmp_path)), text=True, **popen_args)


def _work_folders(tmp_path) -> list[str]:
    return [name for name in os.listdir(tmp_path) if name.startswith("cifar10-benchmark-")]


@pytest.mark.slow  # the script's own process; its parts are tested above
def test_sigterm_stops_the_benchmark_as_ctrl_c_does(tmp_path):
    # `timeout 60 python scripts/benchmark.py` left its 177 MB of generated data in /tmp.
    proc = _benchmark_process(tmp_path, "--figures=g", stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 240
        while not _work_folders(tmp_path) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert _work_folders(tmp_path), "no temporary folder was made"
        proc.terminate()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "benchmark.py: interrupted"
    assert _work_folders(tmp_path) == []


@pytest.mark.slow
def test_a_closed_standard_output_stops_the_benchmark_quietly(tmp_path):
    # `benchmark.py ... | head -1` ended in a BrokenPipeError traceback, exit status 1.
    proc = _benchmark_process(tmp_path, "--figures=g", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    try:
        err = proc.stderr.read()
        proc.wait(timeout=240)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (141, "")  # 128 + SIGPIPE, as the programs
    assert _work_folders(tmp_path) == []


def test_the_programs_started_keep_their_temporary_files_in_the_benchmarks_folder(
        benchmark, tmp_path):
    # A cifar10-train stopped by SIGKILL (after STOP_SECONDS) left TensorFlow's
    # autograph modules in /tmp; under the benchmark's folder they go with it.
    child_env = benchmark.programs.child_env(str(tmp_path), PYTHONUNBUFFERED="1")
    assert child_env["TMPDIR"] == str(tmp_path / "tmp") and os.path.isdir(child_env["TMPDIR"])
    assert child_env["PYTHONUNBUFFERED"] == "1" and child_env["PATH"] == os.environ["PATH"]
