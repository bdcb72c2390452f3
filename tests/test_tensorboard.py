"""Monitoring with the real TensorBoard server, through its HTTP data API.

A few training steps and one evaluation on generated data are written with the
recommended layout (``--train_dir=RUN/train --eval_dir=RUN/eval``); then the
installed ``tensorboard`` is started on 127.0.0.1 and a free port, and what its
dashboards would draw is read from the JSON routes the frontend uses:

  /data/runs                                        ["train", "eval"]
  /data/plugins_listing                             {plugin: {"enabled": bool, ...}}
  /data/plugin/scalars/tags                         {run: {tag: {...}}}
  /data/plugin/scalars/scalars?run=&tag=            [[wall_time, step, value], ...]
  /data/plugin/histograms/tags, .../histograms?run=&tag=
                                                    [[wall_time, step, [[left, right, count], ...]], ...]
  /data/plugin/images/tags                          {run: {tag: {"samples": n, ...}}}
  /data/plugin/images/images?run=&tag=&sample=      [{"step", "wall_time", "query"}, ...]
  /data/plugin/images/individualImage?<query>       the PNG
  /data/plugin/graphs/info                          {run: {"tags": {tag: {"op_graph": true}}}}
  /data/plugin/graphs/graph?run=&tag=               GraphDef as text proto
  /data/plugin/text/tags, .../text?run=&tag=        {run: [tags]}, [{"step", "text"(HTML)}, ...]
  POST /data/plugin/hparams/session_groups          JSON ListSessionGroupsRequest
                                                    (Content-Type: application/json)

The server runs with its default (fast, ``tensorboard-data-server``) loader,
which works offline; it loads event files asynchronously, so every check polls
its route until the expected data is there (bounded), instead of sleeping.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from cli import call, env
from conftest import LAYERS

BATCH_SIZE = 16
MAX_STEPS = 6
SUMMARY_STEPS = 3
LOG_FREQUENCY = 3
SUMMARY_AT = [3, 6]  # steps of the summaries: every --summary_steps
SERVER_START_SECS = 60
DATA_WAIT_SECS = 30
PRECISION_TAG = "Precision @ 1"
SCALAR_TAGS = {"learning_rate", "total_loss", "total_loss (raw)", "cross_entropy",
               "cross_entropy (raw)", "examples_per_sec", "local3/weight_loss",
               "local3/weight_loss (raw)", "local4/weight_loss", "local4/weight_loss (raw)",
               *(f"{layer}/sparsity" for layer in LAYERS)}
HISTOGRAM_TAGS = {"conv1/activations", "conv1/weights", "conv1/weights/gradients",
                  "conv1/biases", "local3/weights", "local3/activations",
                  "softmax_linear/weights/gradients"}
# conv1's output: batch x 24 x 24 (cropped images) x 64 filters.
CONV1_ACTIVATIONS = BATCH_SIZE * 24 * 24 * 64
# Loopback only: never through a proxy that the environment may name.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """RUN with RUN/train (6 steps, summaries at 3 and 6) and RUN/eval (step 6 scored)."""
    root = tmp_path_factory.mktemp("tensorboard")
    run_path, data_dir = root / "RUN", root / "data"
    trained = call("cifar10-train", "--synthetic_data", "--synthetic_records=50",
                   f"--data_dir={data_dir}", f"--train_dir={run_path / 'train'}",
                   f"--batch_size={BATCH_SIZE}", f"--max_steps={MAX_STEPS}",
                   f"--summary_steps={SUMMARY_STEPS}", f"--log_frequency={LOG_FREQUENCY}",
                   "--checkpoint_steps=3")
    assert trained.returncode == 0, trained.stderr
    evaluated = call("cifar10-eval", "--run_once", "--synthetic_data", "--synthetic_records=50",
                     f"--data_dir={data_dir}", f"--checkpoint_dir={run_path / 'train'}",
                     f"--eval_dir={run_path / 'eval'}", "--batch_size=25")
    assert evaluated.returncode == 0, evaluated.stderr
    return run_path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running TensorBoard: GET/POST its routes."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: str):
        self.proc, self.port, self.log_path = proc, port, log_path
        self.base = f"http://127.0.0.1:{port}"

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-3000:]

    def raw(self, route: str, body: bytes | None = None, **params) -> bytes:
        url = self.base + route + ("?" + urllib.parse.urlencode(params) if params else "")
        request = urllib.request.Request(url, data=body)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        with OPENER.open(request, timeout=2) as response:
            return response.read()

    def get(self, route: str, **params):
        return json.loads(self.raw(route, **params))

    def post(self, route: str, payload):
        return json.loads(self.raw(route, json.dumps(payload).encode()))

    def wait_for(self, what: str, fetch, ready, timeout: float = DATA_WAIT_SECS):
        """Polls ``fetch()`` until ``ready(answer)``; returns that answer."""
        deadline, answer = time.monotonic() + timeout, None
        while True:
            assert self.proc.poll() is None, f"tensorboard exited:\n{self.log()}"
            with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
                answer = fetch()
                if ready(answer):
                    return answer
            if time.monotonic() > deadline:
                pytest.fail(f"TensorBoard did not show {what} within {timeout} s; "
                            f"last answer: {str(answer)[:1500]}\n{self.log()}")
            time.sleep(0.25)

    def tags(self, plugin: str, run_name: str, expected) -> dict:
        """The tags of ``run_name`` in ``plugin`` once they include ``expected``."""
        answer = self.wait_for(
            f"{plugin} tags {sorted(expected)} of run {run_name!r}",
            lambda: self.get(f"/data/plugin/{plugin}/tags"),
            lambda tags: set(expected) <= set(tags.get(run_name, ())))
        return answer[run_name]


@contextlib.contextmanager
def tensorboard(logdir, log_path):
    """The installed TensorBoard serving ``logdir`` on 127.0.0.1; stopped on exit."""
    port = free_port()
    command = [os.path.join(os.path.dirname(sys.executable), "tensorboard"),
               "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port),
               "--reload_interval", "1"]
    with open(log_path, "w") as log:
        # Its own session (process group): the data server it starts goes with it.
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env(), start_new_session=True)
    server = Server(proc, port, str(log_path))
    try:
        server.wait_for("/data/runs", lambda: server.get("/data/runs"),
                        lambda runs: isinstance(runs, list), timeout=SERVER_START_SECS)
        yield server
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group (the data server)


def scalars(server: Server, run_name: str, tag: str) -> dict[int, float]:
    return {step: value for _, step, value
            in server.get("/data/plugin/scalars/scalars", run=run_name, tag=tag)}


def png_title_and_pixels(png: bytes) -> tuple[str | None, bytes]:
    """The Title text of a PNG (None if it has none) and its RGB pixels."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.text.get("Title"), image.convert("RGB").tobytes()


def test_train_and_eval_are_two_runs_of_one_tensorboard_on_their_parent(run_dir, tmp_path):
    with tensorboard(run_dir, tmp_path / "tensorboard.log") as server:
        runs = server.wait_for("runs train and eval", lambda: server.get("/data/runs"),
                               lambda runs: {"train", "eval"} <= set(runs))
        assert sorted(runs) == ["eval", "train"]
        listing = server.get("/data/plugins_listing")
        for plugin in ("scalars", "histograms", "images", "graphs", "text", "hparams"):
            assert listing[plugin]["enabled"], plugin

        # Scalars: losses, learning rate, sparsity at the summary steps.
        train_tags = server.tags("scalars", "train", SCALAR_TAGS)
        assert SCALAR_TAGS <= set(train_tags)
        assert [t for t in train_tags if t.endswith("/sparsity")]
        learning_rate = scalars(server, "train", "learning_rate")
        assert sorted(learning_rate) == SUMMARY_AT
        assert all(math.isclose(v, 0.1, rel_tol=1e-6) for v in learning_rate.values())
        for tag in ("total_loss", "total_loss (raw)", "cross_entropy", "conv1/sparsity"):
            values = scalars(server, "train", tag)
            assert sorted(values) == SUMMARY_AT, tag
            assert all(math.isfinite(v) for v in values.values()), tag
        assert all(0 <= v <= 1 for v in scalars(server, "train", "conv1/sparsity").values())
        # At the progress lines: the first step, every --log_frequency and the last.
        assert sorted(scalars(server, "train", "examples_per_sec")) == [1, 3, 6]

        # Precision @ 1 of the evaluated checkpoint, as results.jsonl has it.
        server.tags("scalars", "eval", {PRECISION_TAG})
        precision = scalars(server, "eval", PRECISION_TAG)
        with open(run_dir / "eval" / "results.jsonl") as f:
            result = json.loads(f.readline())
        assert result["step"] == MAX_STEPS
        assert list(precision) == [MAX_STEPS]
        assert 0 <= precision[MAX_STEPS] <= 1
        assert math.isclose(precision[MAX_STEPS], result["precision"], rel_tol=1e-6)

        # Histograms of activations, weights and gradients.
        assert HISTOGRAM_TAGS <= set(server.tags("histograms", "train", HISTOGRAM_TAGS))
        histograms = server.get("/data/plugin/histograms/histograms", run="train",
                                tag="conv1/activations")
        assert [step for _, step, _ in histograms] == SUMMARY_AT
        for _, step, buckets in histograms:
            assert buckets and all(left <= right for left, right, _ in buckets)
            assert sum(count for _, _, count in buckets) == CONV1_ACTIVATIONS, step
        weights = server.get("/data/plugin/histograms/histograms", run="train",
                             tag="conv1/weights")
        assert [sum(c for _, _, c in b) for _, _, b in weights] == [5 * 5 * 3 * 64] * 2

        # The images summary: 3 images at each summary step, served as PNG.
        image_tags = server.tags("images", "train", {"images"})
        assert image_tags["images"]["samples"] == 3
        images = server.get("/data/plugin/images/images", run="train", tag="images", sample=0)
        assert [image["step"] for image in images] == SUMMARY_AT
        png = server.raw("/data/plugin/images/individualImage?" + images[0]["query"])
        assert png.startswith(b"\x89PNG\r\n\x1a\n")

        # The evaluator's pictures are the PNG files in eval_dir, whose title says the
        # data was generated: the heat map always, the grid when any image was wrong.
        files = {tag: run_dir / "eval" / f"{tag}-step{MAX_STEPS}.png"
                 for tag in ("confusion_matrix", "misclassified")}
        drawn = {tag for tag, path in files.items() if path.exists()}
        assert "confusion_matrix" in drawn
        assert set(server.tags("images", "eval", drawn)) == drawn
        for tag in drawn:
            [image] = server.get("/data/plugin/images/images", run="eval", tag=tag, sample=0)
            assert image["step"] == MAX_STEPS
            served = server.raw("/data/plugin/images/individualImage?" + image["query"])
            title, pixels = png_title_and_pixels(files[tag].read_bytes())
            assert title.startswith("SYNTHETIC data (generated, not CIFAR-10)\n"), tag
            assert png_title_and_pixels(served)[1] == pixels, tag

        # Graphs dashboard: the op graph of the train step.
        info = server.wait_for(
            "the graph of run train", lambda: server.get("/data/plugin/graphs/info"),
            lambda info: "train" in info and info["train"]["tags"])
        assert info["train"]["tags"]["train_step"]["op_graph"]
        graph = server.raw("/data/plugin/graphs/graph", run="train", tag="train_step",
                           conceptual="false").decode()
        assert graph.count('op: "Conv2D"') >= 2  # conv1 and conv2
        assert 'op: "MatMul"' in graph

        # The run's flags: the run_config text (both runs) and the HParams dashboard.
        text_tags = server.wait_for(
            "run_config texts", lambda: server.get("/data/plugin/text/tags"),
            lambda tags: all("run_config" in tags.get(r, ()) for r in ("train", "eval")))
        assert "run_config" in text_tags["train"]
        [config] = server.get("/data/plugin/text/text", run="train", tag="run_config")
        assert config["step"] == 0
        assert "<td>batch_size</td>\n<td><code>16</code></td>" in config["text"]
        assert "<td>max_steps</td>\n<td><code>6</code></td>" in config["text"]
        [eval_config] = server.get("/data/plugin/text/text", run="eval", tag="run_config")
        assert "<td>batch_size</td>\n<td><code>25</code></td>" in eval_config["text"]

        request = {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                   "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS",
                                       "STATUS_FAILURE", "STATUS_RUNNING"]}
        groups = server.wait_for(
            "the HParams session of run train",
            lambda: server.post("/data/plugin/hparams/session_groups", request),
            lambda answer: answer.get("sessionGroups"))["sessionGroups"]
        [group] = groups
        assert [session["name"] for session in group["sessions"]] == ["train"]
        assert group["hparams"]["batch_size"] == BATCH_SIZE
        assert group["hparams"]["max_steps"] == MAX_STEPS
        assert group["hparams"]["summary_steps"] == SUMMARY_STEPS
        assert "--synthetic_data" in group["hparams"]["command"]
        metrics = {m["name"]["tag"]: m for m in group["metricValues"]}
        assert math.isclose(metrics["learning_rate"]["value"], 0.1, rel_tol=1e-6)
        assert metrics["learning_rate"]["trainingStep"] == MAX_STEPS
    assert server.proc.poll() is not None  # stopped on leaving the block


@pytest.mark.parametrize("subdir, plugin, tag, steps", [
    ("train", "scalars", "learning_rate", SUMMARY_AT),
    ("eval", "scalars", PRECISION_TAG, [MAX_STEPS]),
])
def test_each_directory_alone_is_the_single_run_dot(run_dir, tmp_path, subdir, plugin, tag,
                                                     steps):
    """As in the original tutorial: ``tensorboard --logdir=<train_dir or eval_dir>``."""
    with tensorboard(run_dir / subdir, tmp_path / "tensorboard.log") as server:
        runs = server.wait_for("run '.'", lambda: server.get("/data/runs"),
                               lambda runs: "." in runs)
        assert runs == ["."]
        tags = server.tags(plugin, ".", {tag})
        assert tag in tags
        assert sorted(scalars(server, ".", tag)) == steps
        assert "run_config" in server.tags("text", ".", {"run_config"})
        if subdir == "train":
            assert "conv1/activations" in server.tags("histograms", ".", {"conv1/activations"})
            assert "images" in server.tags("images", ".", {"images"})
    assert server.proc.poll() is not None

