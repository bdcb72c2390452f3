"""cifar10-train --profile_steps: a profiler trace of a window of steps, where
TensorBoard's Profile tab finds it, and training unchanged around it."""

import argparse
import glob
import importlib.metadata
import os
import re
import socket
import threading

import pytest
import tensorflow as tf
from absl import flags

import cli
from cifar10.cli import flagfiles
from cifar10.cli import flags as cifar10_flags
from cifar10.cli.flags import define_train_flags
from cifar10.core import config
from cifar10.training import profiling
from cifar10.core.config import TrainConfig
from cifar10.training import controller
from cifar10.training.run import TrainData
from conftest import TRAIN_LINE, mirrored


def small_config(train_dir, **overrides):
    settings = dict(train_dir=str(train_dir), batch_size=16, max_steps=6, log_frequency=1,
                    checkpoint_steps=3, summary_steps=1000, shuffle_buffer=100)
    return TrainConfig(**{**settings, **overrides})


def traces(train_dir):
    """The .xplane.pb files under <train_dir>/plugins/profile/<run>/."""
    return sorted(glob.glob(os.path.join(str(train_dir), "plugins", "profile", "*",
                                         "*.xplane.pb")))


@pytest.mark.parametrize("text, window", [("11,20", (11, 20)), (" 3 , 4 ", (3, 4)),
                                          ("7", (7, 7)), ("1,1", (1, 1)), ("none", None),
                                          ("None", None), ("", None), (" ", None)])
def test_profile_steps_are_parsed_as_a_window(text, window):
    assert config.parse_profile_steps(text) == window


@pytest.mark.parametrize("text, message", [
    ("x", r"^expected FIRST,LAST: two step numbers such as 11,20 \(or none, no trace\), "
          r"got 'x'$"),
    ("1,2,3", "expected FIRST,LAST: two step numbers such as 11,20 \\(or none, no trace\\), "
              "got '1,2,3'"),
    ("nothing", "got 'nothing'"),
    ("0,3", "the first step to profile must be at least 1, got 0"),
    ("5,3", "the last step to profile, 3, comes before the first, 5"),
])
def test_bad_profile_steps_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        config.parse_profile_steps(text)


@pytest.mark.parametrize("value, message", [
    ("5,x", "--profile_steps=5,x: expected FIRST,LAST: two step numbers such as 11,20"),
    ("4,2", "--profile_steps=4,2: the last step to profile, 2, comes before the first, 4"),
    ("3,50", "the last step to profile, 50, is beyond max_steps=10: profile earlier steps, "
             "raise --max_steps, or pass --profile_steps=none for no trace"),
])
def test_cifar10_train_refuses_a_bad_window_in_one_line(value, message, tmp_path):
    result = cli.call("cifar10-train", f"--profile_steps={value}", "--max_steps=10",
                      f"--train_dir={tmp_path / 'train'}", "--synthetic_data",
                      f"--data_dir={tmp_path / 'data'}")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1
    assert lines[-1].startswith("cifar10-train: error: ") and message in lines[-1]
    assert lines[-1].endswith("(see cifar10-train --help)")
    assert not (tmp_path / "train").exists()


@pytest.mark.parametrize("off", ["none", ""])
def test_a_replayed_window_is_turned_off_by_profile_steps_none(off, tmp_path, monkeypatch):
    """A run recorded with --profile_steps=900,950 replayed with a lower --max_steps was
    refused, and --profile_steps=none, the flag's default as the docs name it, too."""
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


def test_library_config_checks_the_window_against_max_steps(tmp_path):
    with pytest.raises(ValueError, match="the last step to profile, 7, is beyond max_steps=6"):
        small_config(tmp_path, profile_steps=(2, 7)).check()


@pytest.fixture(scope="module")
def profiled_run(learnable_files, tmp_path_factory):
    """Six steps on 2 replicas with steps 3 to 4 traced: (train_dir, lines, result)."""
    files, count = learnable_files
    train_dir = tmp_path_factory.mktemp("profiled") / "train"
    lines = []
    result = controller.train(small_config(train_dir, profile_steps=(3, 4)), mirrored(2),
                              TrainData(files, count), print_fn=lines.append)
    return train_dir, lines, result


def test_a_window_writes_one_trace_of_both_replicas_and_training_goes_on(profiled_run):
    train_dir, lines, result = profiled_run
    (trace,) = traces(train_dir)
    assert os.path.basename(trace) == f"{socket.gethostname()}.xplane.pb"
    with open(trace, "rb") as f:
        content = f.read()
    assert b"replica_1/" in content and b"device:CPU:1" in content  # the second replica's ops
    steps = [int(TRAIN_LINE.match(line)[1]) for line in lines if TRAIN_LINE.match(line)]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert (result.step, result.complete) == (6, True)
    assert os.path.exists(os.path.join(train_dir, "model.ckpt-6.index"))
    said = [line for line in lines if line.startswith("Profiled")]
    assert said == [f"Profiled steps 3 to 4: the trace is in "
                    f"{os.path.join(train_dir, 'plugins', 'profile')}, for TensorBoard's "
                    f"Profile tab."]
    # The line comes right after step 4 is run, before its progress line.
    assert lines.index(said[0]) == [i for i, line in enumerate(lines) if "step 4," in line][0] - 1


def varint(buf, i):
    value = shift = 0
    while True:
        byte, i = buf[i], i + 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(message):
    """The (field number, value) pairs of a protocol buffer message's bytes."""
    i = 0
    while i < len(message):
        key, i = varint(message, i)
        kind = key & 7
        if kind == 0:
            value, i = varint(message, i)
        elif kind == 2:
            size, i = varint(message, i)
            value, i = message[i:i + size], i + size
        else:  # fixed 64 or 32 bits
            size = 8 if kind == 1 else 4
            value, i = message[i:i + size], i + size
        yield key >> 3, value


def metadata_names(plane, field):
    """{id: name} of an XPlane's event (field 4) or stat (field 5) metadata map."""
    names = {}
    for number, entry in plane:
        if number == field:
            entry = dict(fields(entry))
            names[entry.get(1, 0)] = dict(fields(entry.get(2, b""))).get(2, b"")
    return names


def step_marks(trace):
    """The step numbers of the host's 'train' events in an .xplane.pb file.

    Read by the field numbers of TensorFlow's xplane.proto, a saved format: XSpace
    planes=1; XPlane name=2, lines=3, event_metadata=4 and stat_metadata=5 (maps
    of id=1 to a message whose name=2); XLine events=4; XEvent metadata_id=1,
    stats=4; XStat metadata_id=1, int64_value=4.  (The generated module moves
    between TensorFlow versions.)
    """
    with open(trace, "rb") as f:
        space = f.read()
    steps = []
    for number, plane in fields(space):
        plane = list(fields(plane))
        if number != 1 or dict(plane).get(2) != b"/host:CPU":
            continue
        events, stats = metadata_names(plane, 4), metadata_names(plane, 5)
        for line in (value for n, value in plane if n == 3):
            for event in (list(fields(value)) for n, value in fields(line) if n == 4):
                if events.get(dict(event).get(1, 0)) == b"train":
                    values = {stats.get(dict(fields(s)).get(1, 0)): dict(fields(s)).get(4)
                              for n, s in event if n == 4}
                    steps.append(values[b"step_num"])
    return sorted(steps)


def test_the_trace_marks_each_step_of_the_window(profiled_run):
    train_dir, _, _ = profiled_run
    (trace,) = traces(train_dir)
    assert step_marks(trace) == [3, 4]


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
    run_dir = os.path.basename(os.path.dirname(traces(train_dir)[0]))
    assert run == f"train/{run_dir}"
    tools = plugin.run_tools_imp(run)
    assert any(tool.startswith("trace_viewer") for tool in tools)
    assert "op_profile" in tools and "overview_page" in tools
    assert plugin.host_impl(run, "trace_viewer") == [{"hostname": socket.gethostname()}]
    # The overview page, as the tab asks for it: the step times of the two steps.
    request = wrappers.Request(werkzeug_test.EnvironBuilder(query_string={
        "run": run, "tag": "overview_page", "host": socket.gethostname()}).get_environ())
    overview = plugin.data_impl(request)[0]
    overview = overview.decode() if isinstance(overview, bytes) else overview
    assert "No step marker observed" not in overview
    average = float(re.search(r'"steptime_ms_average":"([\d.]+)"', overview)[1])
    assert average > 0


def test_a_run_stopped_inside_the_window_keeps_the_trace_of_the_steps_it_ran(
        learnable_files, tmp_path):
    files, count = learnable_files
    stop, lines = threading.Event(), []

    def print_and_stop(line):
        lines.append(line)
        if "step 3," in line:
            stop.set()

    result = controller.train(small_config(tmp_path, max_steps=20, profile_steps=(2, 10)),
                              mirrored(1), TrainData(files, count), stop_event=stop,
                              print_fn=print_and_stop)
    assert (result.step, result.stopped) == (3, True)
    (trace,) = traces(tmp_path)
    assert step_marks(trace) == [2, 3]
    assert f"Profiled steps 2 to 3: the trace is in {tmp_path}/plugins/profile, for " \
           f"TensorBoard's Profile tab." in lines


def test_a_resumed_run_traces_what_is_left_of_its_window_or_warns_it_has_passed(
        learnable_files, tmp_path, caplog):
    files, count = learnable_files
    controller.train(small_config(tmp_path, max_steps=3), mirrored(1), TrainData(files, count),
                     print_fn=lambda line: None)
    lines = []
    controller.train(small_config(tmp_path, max_steps=5, profile_steps=(2, 4)), mirrored(1),
                     TrainData(files, count), print_fn=lines.append)
    assert [line for line in lines if line.startswith("Profiled")] == [
        f"Profiled step 4: the trace is in {tmp_path}/plugins/profile, for TensorBoard's "
        f"Profile tab."]
    assert len(traces(tmp_path)) == 1
    lines.clear()
    controller.train(small_config(tmp_path, max_steps=6, profile_steps=(2, 4)), mirrored(1),
                     TrainData(files, count), print_fn=lines.append)
    assert not [line for line in lines if line.startswith("Profiled")]
    assert len(traces(tmp_path)) == 1
    assert ("--profile_steps=2,4 lies before step 6, where this run resumes: no profile is "
            "taken. Pass a later window to profile this run.") in caplog.text


def test_a_profiler_that_cannot_start_costs_the_trace_not_the_run(learnable_files, tmp_path,
                                                                   caplog):
    files, count = learnable_files
    other = tmp_path / "other"
    tf.profiler.experimental.start(str(other))  # someone else's profiler in this process
    try:
        result = controller.train(small_config(tmp_path / "train", max_steps=3,
                                               profile_steps=(1, 2)),
                                  mirrored(1), TrainData(files, count), print_fn=lambda line: None)
    finally:
        tf.profiler.experimental.stop()
    assert (result.step, result.complete) == (3, True)
    assert traces(tmp_path / "train") == []
    assert "cannot start the profiler for --profile_steps" in caplog.text
    assert "training goes on without a profile" in caplog.text


def test_a_worker_that_writes_nothing_traces_nothing(tmp_path):
    window = profiling.StepWindow((1, 2), None, 0, print_fn=pytest.fail)
    assert not window.active()
    window.before(1)
    window.after(1)
    window.close()
    assert not window.running
