"""cifar10.training.loops: loops that end where the host has work, the same run whatever
their length; divergence inside a loop; --profile_steps' trace."""

import argparse
import csv
import glob
import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import cli
from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli.flags import define_train_flags
from cifar10.core import config
from cifar10.core.config import TrainConfig
from cifar10.core.errors import DivergedError
from cifar10.evaluation.recording import LOSS_TAG, PRECISION_TAG
from cifar10.training.engine import Trainer
from cifar10.training.loops import StepWindow, loop_end
from cifar10.training.watchdog import Watchdog
from cifar10.training.step import ReplicatedStep
from conftest import TRAIN_LINE, mirrored
from test_train import train


def small_config(train_dir, **overrides):
    settings = dict(train_dir=str(train_dir), batch_size=16, max_steps=20, log_frequency=3,
                    checkpoint_steps=5, summary_steps=1000, shuffle_buffer=300)
    return TrainConfig(**{**settings, **overrides})


def loops(config, start=0):
    """The (first, last) steps of each loop of a run from ``start``."""
    done, spans = start, []
    while done < config.max_steps:
        end = loop_end(done, start, config)
        spans.append((done + 1, end))
        done = end
    return spans


def test_loops_end_at_every_step_where_the_host_has_work():
    # Not at log lines (step 10 here): their figures wait on the device for the loop's end.
    config = small_config("x", max_steps=30, steps_per_loop=7, log_frequency=10,
                          checkpoint_steps=12, summary_steps=8, profile_steps=(20, 21))
    assert loops(config) == [(1, 1), (2, 2), (3, 8), (9, 12), (13, 16), (17, 19), (20, 20),
                             (21, 21), (22, 24), (25, 30)]
    # A run's first two steps, also resumed: warm-up, then a step the watchdog times.
    assert loops(config, start=13)[:4] == [(14, 14), (15, 15), (16, 16), (17, 19)]
    assert loops(small_config("x", max_steps=5, steps_per_loop=1)) == [(s, s) for s in
                                                                       range(1, 6)]
    # Each step of a profile window is a loop of its own, which the trace marks.
    window = small_config("x", max_steps=30, steps_per_loop=7, log_frequency=10,
                          checkpoint_steps=30, summary_steps=30, profile_steps=(12, 15))
    assert loops(window) == [(1, 1), (2, 2), (3, 9), (10, 11), (12, 12), (13, 13), (14, 14),
                             (15, 15), (16, 22), (23, 29), (30, 30)]


def losses_of(lines):
    return [(int(m[1]), line.split("loss = ")[1].split(" ")[0])
            for line in lines if (m := TRAIN_LINE.match(line))]


def test_one_step_per_loop_and_seven_train_the_same_run_across_a_stop(learnable_files,
                                                                      tmp_path):
    """Stopped at 11 and resumed to 20: the same lines, checkpoints, summaries and weights;
    the same too with validation every 4 steps (and at each run's last), which the run
    of 7 does: its tags and metrics rows at those steps."""
    runs = {}
    for steps_per_loop in (1, 7):
        train_dir, out = tmp_path / str(steps_per_loop), []
        for max_steps in (11, 20):
            train(learnable_files, small_config(
                train_dir, max_steps=max_steps, summary_steps=4, steps_per_loop=steps_per_loop,
                deterministic=True,  # batches in order
                eval_every_steps=4 if steps_per_loop == 7 else 0), print_fn=out.append)
        reader = tf.train.load_checkpoint(str(train_dir / "model.ckpt-20"))
        runs[steps_per_loop] = (losses_of(out), cli.event_tags(str(train_dir)),
                                {k: reader.get_tensor(k)
                                 for k in reader.get_variable_to_shape_map()
                                 if not k.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")},
                                {s: (train_dir / f"model.ckpt-{s}.data-00000-of-00001")
                                 .read_bytes() for s in (5, 10, 11, 15, 20)})
        assert {n for n in os.listdir(train_dir) if n.endswith(".index")} == {
            f"model.ckpt-{s}.index" for s in (5, 10, 11, 15, 20)}
    (lines, tags, weights, data), (lines7, tags7, weights7, data7) = runs[1], runs[7]
    assert [s for s, _ in lines] == [1, 3, 6, 9, 11, 12, 15, 18, 20] and lines7 == lines
    assert data7 == data  # validation changes nothing trained
    steps = [4, 8, 11, 12, 16, 20]
    assert tags7.pop(PRECISION_TAG) == tags7.pop(LOSS_TAG) == steps
    with open(train_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == sorted({*steps, 1, 3, 6, 9, 11, 12, 15, 18, 20})
    assert [r["step"] for r in rows if r["precision"] and r["test_loss"]] == list(
        map(str, steps)) and rows[1]["loss"] and not rows[2]["loss"]  # 3 logged, 4 not
    assert tags7 == tags and tags["learning_rate"] == [4, 8, 12, 16, 20]
    assert tags["examples_per_sec"] == [1, 3, 6, 9, 11, 12, 15, 18, 20]
    assert sorted(weights7) == sorted(weights)
    for key, value in weights.items():
        np.testing.assert_array_equal(weights7[key], value, err_msg=key)


def poison(monkeypatch, step, what):
    """From ``step`` on, the losses are ``what`` ('nan', 'inf'), or ('weights') NaN biases."""
    original = ReplicatedStep.__call__

    def poisoned(self, iterator, with_summaries=False):
        losses = original(self, iterator, with_summaries)
        bad = tf.equal(self.state.step, step)
        if what == "weights":
            biases = self.variables[1]
            biases.assign(tf.where(bad, tf.fill(biases.shape, np.nan), biases))
            return losses
        return {k: tf.where(bad, tf.constant(float(what)), v) for k, v in losses.items()}

    monkeypatch.setattr(ReplicatedStep, "__call__", poisoned)


@pytest.mark.parametrize("what, replicas, said", [
    ("nan", 2, "Model diverged with loss = NaN at step 13"),
    ("inf", 1, "Model diverged with an infinite loss (inf) at step 13"),
    ("weights", 1, "Model diverged: weights are not finite (NaN or infinite) at step 15"),
])
def test_divergence_inside_a_loop_names_its_step_and_keeps_the_last_good_checkpoint(
        learnable_files, tmp_path, monkeypatch, what, replicas, said):
    """Steps 11 to 15 run as one loop, whose end reads a loss that diverged (13) and says
    the lines before it, its summary step writing none; weights are checked at saves."""
    poison(monkeypatch, 15 if what == "weights" else 13, what)
    config = small_config(tmp_path, max_steps=30, steps_per_loop=7, log_frequency=6,
                          summary_steps=5)
    assert loops(config)[4] == (11, 15)
    lines = []
    with pytest.raises(DivergedError) as err:
        train(learnable_files, config, mirrored(replicas), print_fn=lines.append)
    assert str(err.value) == (f"{said}; the last good checkpoint is "
                              f"{tmp_path / 'model.ckpt-10'}")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-10")
    assert [s for s, _ in losses_of(lines)] == [1, 6, 12]
    assert cli.event_tags(str(tmp_path))["learning_rate"] == [5, 10, 15][:3 if
                                                                      what == "weights" else 2]


def test_a_call_of_steps_that_hangs_ends_the_run_with_one_line_keeping_the_last_checkpoint(
        tmp_path):
    train_dir = tmp_path / "train"
    args = [f"--data_dir={tmp_path / 'data'}", f"--train_dir={train_dir}", "--synthetic_data",
            "--synthetic_records=50", "--batch_size=16", "--deterministic"]
    assert cli.call("cifar10-train", *args, "--max_steps=2").returncode == 0
    # Resumed, its first step (which replays 2 batches) waits in TensorFlow for what never
    # comes, as a collective waits for a replica that hangs: only the end of the process
    # ends it.
    hang = ("import sys\nfrom cifar10.cli import process, train_main\n"
            "def load_tensorflow(load=process.load_tensorflow, **kwargs):\n"
            "    tf = load(**kwargs)\n"
            "    from cifar10.training.engine import Trainer\n"
            "    queue = tf.queue.FIFOQueue(1, tf.float32)\n"
            "    Trainer.prepare = lambda *args, **kwargs: None\n"
            "    Trainer.run_steps = lambda *args, **kwargs: tf.function(queue.dequeue)()\n"
            "    return tf\n"
            "process.load_tensorflow = load_tensorflow\n"
            f"sys.argv = ['cifar10-train', *{args!r}, '--max_steps=4', "
            f"'--step_timeout_secs=1']\ntrain_main.run()\n")
    hung = subprocess.run([sys.executable, "-c", hang], capture_output=True, text=True,
                          timeout=300, env=cli.env())
    assert hung.returncode == 1, hung.stderr
    line = ("cifar10-train: error: training hung: step 3 did not finish within 1 s "
            "(--step_timeout_secs=1, plus 1 ms for each of the 2 batches a --deterministic "
            "resume replays); on GPUs most often in NCCL's all-reduce: try "
            "--all_reduce=one_device, or NCCL_P2P_DISABLE=1 where the GPUs' "
            f"peer-to-peer copies hang; the last checkpoint is {train_dir}/model.ckpt-2")
    assert [x for x in hung.stderr.splitlines() if "error" in x] == [line]
    assert hung.stderr.splitlines()[-1] == line
    # The lock died with the process: the same command resumes.
    resumed = cli.call("cifar10-train", *args, "--max_steps=3")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resuming from {train_dir}/model.ckpt-2 at step 2." in resumed.stdout


def test_the_step_watchdog_allows_for_a_deterministic_resumes_replay_and_not_for_warm_up(
        learnable_files, tmp_path):
    """The first call (one step) may also replay the batches a --deterministic resume
    skips, 1 ms each (0.1 ms measured); then 10 times the slowest step after the first."""
    trainer = Trainer(small_config(tmp_path, deterministic=True), mirrored(2))
    trainer.dataset(learnable_files[0], start_step=350_000)
    watchdog = Watchdog(300, pytest.fail, trainer.replay_batches)
    assert watchdog.limit(1) == pytest.approx(300 + 700_000 * 0.001)
    watchdog.timed(1, 10.0)  # building, cuDNN's and NCCL's warm-up
    assert watchdog.limit(1) == 300
    watchdog.timed(1, 0.1)
    watchdog.timed(98, 98 * 0.05)
    assert watchdog.limit(98) == pytest.approx(300 + 98 * 10 * 0.1)


def traces(train_dir):
    """The .xplane.pb files under <train_dir>/plugins/profile/<run>/."""
    return sorted(glob.glob(os.path.join(str(train_dir), "plugins", "profile", "*",
                                         "*.xplane.pb")))


@pytest.mark.parametrize("text, window", [
    ("11,20", (11, 20)), (" 3 , 4 ", (3, 4)), ("7", (7, 7)), ("none", None), ("", None),
    ("x", r"^expected FIRST,LAST: two step numbers such as 11,20 \(or none, no trace\), "
          r"got 'x'$"),
    ("1,2,3", "got '1,2,3'"),
    ("0,3", "the first step to profile must be at least 1, got 0"),
    ("5,3", "the last step to profile, 3, comes before the first, 5"),
])
def test_profile_steps_are_parsed_as_a_window_or_refused(text, window):
    if isinstance(window, str):
        with pytest.raises(ValueError, match=window):
            config.parse_profile_steps(text)
    else:
        assert config.parse_profile_steps(text) == window


def test_cifar10_train_refuses_a_window_beyond_max_steps_in_one_line(tmp_path):
    result = cli.call("cifar10-train", "--profile_steps=3,50", "--max_steps=10",
                      f"--train_dir={tmp_path / 'train'}", "--synthetic_data",
                      f"--data_dir={tmp_path / 'data'}")
    message = ("the last step to profile, 50, is beyond max_steps=10: profile earlier steps, "
               "raise --max_steps, or pass --profile_steps=none for no trace")
    assert result.returncode == 1 and message in result.stderr.splitlines()[-1]
    assert result.stderr.startswith("cifar10-train: error: ")
    assert not (tmp_path / "train").exists()
    with pytest.raises(ValueError, match=re.escape(message)):  # the library's own check
        small_config(tmp_path, max_steps=10, profile_steps=(3, 50)).check()


@pytest.mark.parametrize("off", ["none", ""])
def test_a_replayed_window_is_turned_off_by_profile_steps_none(off, tmp_path, monkeypatch):
    """A run recorded with --profile_steps=900,950, replayed with a lower --max_steps."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "flags.txt").write_text(
        "# cifar10-train, started 2026-11-26T10:00:00+00:00 on h at step 0\n"
        f"--train_dir={tmp_path / 'r'}\n--max_steps=1000\n--profile_steps=900,950\n")
    replay = ["cifar10-train", "--flagfile=r/flags.txt", "--max_steps=500"]
    values = flags.FlagValues()
    define_train_flags(values)
    with pytest.raises(flags.Error, match="or pass --profile_steps=none for no trace"):
        flagfiles.parse(values, replay, "cifar10-train")
    values = flags.FlagValues()
    define_train_flags(values)
    flagfiles.parse(values, [*replay, f"--profile_steps={off}"], "cifar10-train")
    assert values.profile_steps is None and values.max_steps == 500
    # The start records no window: its own replay traces nothing.
    assert "profile_steps" not in cifar10_flags.flagfile_text(values)


@pytest.fixture(scope="module")
def profiled_run(learnable_files, tmp_path_factory):
    """Six steps on 2 replicas with steps 3 to 4 traced: (train_dir, lines, result)."""
    train_dir = tmp_path_factory.mktemp("profiled") / "train"
    lines = []
    result = train(learnable_files, small_config(train_dir, max_steps=6, log_frequency=1,
                                                 checkpoint_steps=3, profile_steps=(3, 4)),
                   mirrored(2), print_fn=lines.append)
    return train_dir, lines, result


def test_a_window_writes_one_trace_of_both_replicas_and_says_where(profiled_run):
    train_dir, lines, result = profiled_run
    (trace,) = traces(train_dir)
    assert os.path.basename(trace) == f"{socket.gethostname()}.xplane.pb"
    with open(trace, "rb") as f:
        content = f.read()
    assert b"replica_1/" in content and b"device:CPU:1" in content  # the second replica's ops
    assert [int(m[1]) for m in map(TRAIN_LINE.match, lines) if m] == [1, 2, 3, 4, 5, 6]
    assert (result.step, result.complete) == (6, True)
    said = f"Profiled steps 3 to 4: the trace is in {train_dir}/plugins/profile, for " \
           f"TensorBoard's Profile tab."
    # Right after step 4 is run, before its progress line.
    assert lines.index(said) == [i for i, line in enumerate(lines) if "step 4," in line][0] - 1


def test_tensorboards_profile_plugin_lists_the_trace_and_its_step_times(profiled_run):
    # Found as TensorBoard finds it: the "profile" entry point of its plugin group.
    (loader,) = [entry.load() for entry in importlib.metadata.entry_points(
        group="tensorboard_plugins") if entry.name == "profile"] or [None]
    if loader is None:
        pytest.skip("the profile extra (pip install '.[profile]') is not installed")
    from tensorboard.plugins import base_plugin
    from werkzeug import test as werkzeug_test
    from werkzeug import wrappers

    train_dir, _, _ = profiled_run
    context = base_plugin.TBContext(logdir=str(train_dir.parent), data_provider=None,
                                    flags=argparse.Namespace(master_tpu_unsecure_channel=""))
    plugin = loader().load(context)
    (run,) = plugin.runs_imp()
    assert run == f"train/{os.path.basename(os.path.dirname(traces(train_dir)[0]))}"
    tools = plugin.run_tools_imp(run)
    assert any(tool.startswith("trace_viewer") for tool in tools)
    assert "op_profile" in tools and "overview_page" in tools
    # The overview page, as the tab asks for it: each step's time, by its number.
    request = wrappers.Request(werkzeug_test.EnvironBuilder(query_string={
        "run": run, "tag": "overview_page", "host": socket.gethostname()}).get_environ())
    overview = plugin.data_impl(request)[0]
    overview = overview.decode() if isinstance(overview, bytes) else overview
    assert re.findall(r'\{"v":"train (\d+)"\}', overview) == ["3", "4"]
    assert float(re.search(r'"steptime_ms_average":"([\d.]+)"', overview)[1]) > 0


def test_a_run_stopped_inside_the_window_keeps_its_trace_and_its_resume_traces_the_rest(
        learnable_files, tmp_path):
    stop, lines = threading.Event(), []

    def print_and_stop(line):
        lines.append(line)
        if "step 3," in line:
            stop.set()

    config = dict(max_steps=20, log_frequency=1, profile_steps=(2, 4))
    result = train(learnable_files, small_config(tmp_path, **config), stop_event=stop,
                   print_fn=print_and_stop)
    assert (result.step, result.complete) == (3, False)
    assert len(traces(tmp_path)) == 1
    said = "Profiled {}: the trace is in {}/plugins/profile, for TensorBoard's Profile tab."
    assert said.format("steps 2 to 3", tmp_path) in lines
    lines.clear()
    train(learnable_files, small_config(tmp_path, **{**config, "max_steps": 5}),
          print_fn=lines.append)
    assert [line for line in lines if line.startswith("Profiled")] == [
        said.format("step 4", tmp_path)]


def test_a_profiler_that_cannot_start_costs_the_trace_not_the_run(learnable_files, tmp_path,
                                                                   caplog):
    tf.profiler.experimental.start(str(tmp_path / "other"))  # another profiler in the process
    try:
        result = train(learnable_files, small_config(tmp_path / "train", max_steps=3,
                                                     profile_steps=(1, 2)))
    finally:
        tf.profiler.experimental.stop()
    assert (result.step, result.complete) == (3, True)
    assert traces(tmp_path / "train") == []
    assert "cannot start the profiler for --profile_steps" in caplog.text
    assert "training goes on without a profile" in caplog.text


def test_a_window_that_a_run_resumes_past_or_a_worker_that_writes_nothing_traces_nothing(
        tmp_path, caplog):
    for window in (StepWindow((2, 4), str(tmp_path), 5, print_fn=pytest.fail),
                   StepWindow((1, 2), None, 0, print_fn=pytest.fail)):
        for step in (1, 2, 3, 4, 5, 6):
            window.before(step)
            assert not window.running
            window.after(step)
        window.close()
    assert ("--profile_steps=2,4 lies before step 6, where this run resumes: no profile is "
            "taken. Pass a later window to profile this run.") in caplog.text
    assert traces(tmp_path) == []
