"""The real TensorBoard server's JSON routes on a few training steps and one evaluation in
RUN/train and RUN/eval; each check polls its route (the server loads asynchronously)."""

from __future__ import annotations

import contextlib
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

BATCH_SIZE, MAX_STEPS = 16, 6
SUMMARY_AT = [3, 6]  # --summary_steps=3
SCALAR_TAGS = {"learning_rate", "total_loss", "total_loss (raw)", "cross_entropy",
               "cross_entropy (raw)", "examples_per_sec", "local3/weight_loss",
               "local3/weight_loss (raw)", "local4/weight_loss", "local4/weight_loss (raw)",
               *(f"{layer}/sparsity" for layer in LAYERS)}
HISTOGRAM_TAGS = {"conv1/activations", "conv1/weights", "conv1/weights/gradients",
                  "conv1/biases", "local3/weights", "local3/activations",
                  "softmax_linear/weights/gradients"}
# Loopback only: never through a proxy that the environment may name.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Server:
    """A running TensorBoard: GET/POST its routes."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: str):
        self.proc, self.base, self.log_path = proc, f"http://127.0.0.1:{port}", log_path

    def raw(self, route: str, body: bytes | None = None, **params) -> bytes:
        url = self.base + route + ("?" + urllib.parse.urlencode(params) if params else "")
        request = urllib.request.Request(url, data=body)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        with OPENER.open(request, timeout=2) as response:
            return response.read()

    def get(self, route: str, **params):
        return json.loads(self.raw(route, **params))

    def wait_for(self, what: str, fetch, ready, timeout: float = 30):
        """Polls ``fetch()`` until ``ready(answer)``; returns that answer."""
        deadline, answer = time.monotonic() + timeout, None
        while True:
            assert self.proc.poll() is None, "tensorboard exited"
            with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
                answer = fetch()
                if ready(answer):
                    return answer
            if time.monotonic() > deadline:
                with open(self.log_path, errors="replace") as f:
                    log = f.read()[-3000:]
                pytest.fail(f"TensorBoard did not show {what} within {timeout} s; "
                            f"last answer: {str(answer)[:1500]}\n{log}")
            time.sleep(0.25)

    def tags(self, plugin: str, run_name: str, expected) -> dict:
        """The tags of ``run_name`` in ``plugin`` once they include ``expected``."""
        return self.wait_for(f"{plugin} tags {sorted(expected)} of run {run_name!r}",
                             lambda: self.get(f"/data/plugin/{plugin}/tags"),
                             lambda tags: set(expected) <= set(tags.get(run_name, ()))
                             )[run_name]

    def scalars(self, run_name: str, tag: str) -> dict[int, float]:
        return {step: value for _, step, value
                in self.get("/data/plugin/scalars/scalars", run=run_name, tag=tag)}


@contextlib.contextmanager
def tensorboard(logdir, log_path):
    """The installed TensorBoard serving ``logdir`` on 127.0.0.1; stopped on exit."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
                        lambda runs: isinstance(runs, list), timeout=60)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group (the data server)


def test_train_and_eval_are_two_runs_of_one_tensorboard_on_their_parent(tmp_path):
    run_dir, data_dir = tmp_path / "RUN", tmp_path / "data"
    data = ("--synthetic_data", "--synthetic_records=50", f"--data_dir={data_dir}")
    trained = call("cifar10-train", *data, f"--train_dir={run_dir / 'train'}",
                   f"--batch_size={BATCH_SIZE}", f"--max_steps={MAX_STEPS}",
                   "--summary_steps=3", "--log_frequency=3", "--checkpoint_steps=3")
    assert trained.returncode == 0, trained.stderr
    evaluated = call("cifar10-eval", "--run_once", *data, f"--checkpoint_dir={run_dir / 'train'}",
                     f"--eval_dir={run_dir / 'eval'}", "--batch_size=25")
    assert evaluated.returncode == 0, evaluated.stderr
    with tensorboard(run_dir, tmp_path / "tensorboard.log") as server:
        # Event files right in train_dir and eval_dir: each is one run of their parent.
        runs = server.wait_for("runs train and eval", lambda: server.get("/data/runs"),
                               lambda runs: {"train", "eval"} <= set(runs))
        assert sorted(runs) == ["eval", "train"]

        # Scalars at the summary steps; examples_per_sec at the progress lines.
        assert SCALAR_TAGS <= set(server.tags("scalars", "train", SCALAR_TAGS))
        learning_rate = server.scalars("train", "learning_rate")
        assert sorted(learning_rate) == SUMMARY_AT
        assert all(math.isclose(v, 0.1, rel_tol=1e-6) for v in learning_rate.values())
        for tag in ("total_loss", "total_loss (raw)", "cross_entropy", "conv1/sparsity"):
            values = server.scalars("train", tag)
            assert sorted(values) == SUMMARY_AT and all(map(math.isfinite, values.values()))
        assert sorted(server.scalars("train", "examples_per_sec")) == [1, 3, 6]
        server.tags("scalars", "eval", {"Precision @ 1"})
        with open(run_dir / "eval" / "results.jsonl") as f:
            result = json.loads(f.readline())
        assert server.scalars("eval", "Precision @ 1") == {
            MAX_STEPS: pytest.approx(result["precision"], rel=1e-6)}

        # Histograms: conv1's activations count batch x 24 x 24 x 64 values.
        assert HISTOGRAM_TAGS <= set(server.tags("histograms", "train", HISTOGRAM_TAGS))
        for tag, count in (("conv1/activations", BATCH_SIZE * 24 * 24 * 64),
                           ("conv1/weights", 5 * 5 * 3 * 64)):
            histograms = server.get("/data/plugin/histograms/histograms", run="train", tag=tag)
            assert [step for _, step, _ in histograms] == SUMMARY_AT
            for _, _, buckets in histograms:
                assert all(left <= right for left, right, _ in buckets)
                assert sum(n for _, _, n in buckets) == count, tag

        # Images: 3 training images at each summary step; the evaluator's heat map.
        assert server.tags("images", "train", {"images"})["images"]["samples"] == 3
        images = server.get("/data/plugin/images/images", run="train", tag="images", sample=0)
        assert [image["step"] for image in images] == SUMMARY_AT
        server.tags("images", "eval", {"confusion_matrix"})
        [image] = server.get("/data/plugin/images/images", run="eval", tag="confusion_matrix",
                             sample=0)
        png = server.raw("/data/plugin/images/individualImage?" + image["query"])
        assert image["step"] == MAX_STEPS and png.startswith(b"\x89PNG\r\n\x1a\n")

        # Graphs: the op graph of the train step.
        info = server.wait_for(
            "the graph of run train", lambda: server.get("/data/plugin/graphs/info"),
            lambda info: "train" in info and info["train"]["tags"])
        assert info["train"]["tags"]["train_step"]["op_graph"]
        graph = server.raw("/data/plugin/graphs/graph", run="train", tag="train_step",
                           conceptual="false").decode()
        assert graph.count('op: "Conv2D"') >= 2 and 'op: "MatMul"' in graph

        # The run's settings: the run_config text of both runs, and the HParams dashboard.
        server.wait_for("run_config texts", lambda: server.get("/data/plugin/text/tags"),
                        lambda tags: all("run_config" in tags.get(r, ()) for r in runs))
        [config] = server.get("/data/plugin/text/text", run="train", tag="run_config")
        assert config["step"] == 0
        assert "<td>max_steps</td>\n<td><code>6</code></td>" in config["text"]
        [eval_config] = server.get("/data/plugin/text/text", run="eval", tag="run_config")
        assert "<td>batch_size</td>\n<td><code>25</code></td>" in eval_config["text"]
        request = {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                   "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS",
                                       "STATUS_FAILURE", "STATUS_RUNNING"]}
        [group] = server.wait_for(
            "the HParams session of run train",
            lambda: json.loads(server.raw("/data/plugin/hparams/session_groups",
                                          json.dumps(request).encode())),
            lambda answer: answer.get("sessionGroups"))["sessionGroups"]
        assert [session["name"] for session in group["sessions"]] == ["train"]
        assert (group["hparams"]["batch_size"], group["hparams"]["max_steps"]) == (
            BATCH_SIZE, MAX_STEPS)
        assert "--synthetic_data" in group["hparams"]["command"]
        metrics = {m["name"]["tag"]: m for m in group["metricValues"]}
        assert math.isclose(metrics["learning_rate"]["value"], 0.1, rel_tol=1e-6)
        assert metrics["learning_rate"]["trainingStep"] == MAX_STEPS
