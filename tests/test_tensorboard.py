"""The real TensorBoard server's JSON routes on two short training runs and one evaluation,
runs/a/train, runs/b/train and runs/a/eval; each check polls its route (the server loads
asynchronously)."""

from __future__ import annotations

import contextlib
import csv
import glob
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

from cifar10.model import STAGES
from cifar10.runs import cleanup
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

    def post(self, route: str, request: dict):
        return json.loads(self.raw(route, json.dumps(request).encode()))

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


def test_runs_under_one_logdir_in_tensorboard(tmp_path):
    """Two training runs and an evaluation of one: the first run's summaries, graph and
    settings; the HParams dashboard's sessions, ranked by the metrics of each run folder."""
    logdir, data_dir = tmp_path / "runs", tmp_path / "data"
    data = ("--synthetic_data", "--synthetic_records=50", f"--data_dir={data_dir}")
    for name, flags in (("a", ("--summary_steps=3", "--log_frequency=3",
                               "--checkpoint_steps=3", f"--max_steps={MAX_STEPS}",
                               "--eval_every_steps=3")),
                        ("b", ("--learning_rate=0.05", "--max_steps=2",
                               "--eval_every_steps=1"))):
        trained = call("cifar10-train", *data, f"--train_dir={logdir / name / 'train'}",
                       f"--batch_size={BATCH_SIZE}", *flags)
        assert trained.returncode == 0, trained.stderr
    evaluated = call("cifar10-eval", "--run_once", *data,
                     f"--checkpoint_dir={logdir / 'a' / 'train'}",
                     f"--eval_dir={logdir / 'a' / 'eval'}", "--batch_size=25")
    assert evaluated.returncode == 0, evaluated.stderr
    with open(logdir / "a" / "eval" / "results.jsonl") as f:
        result = json.loads(f.readline())
    # Both write an HParams session; --fresh_start still tells their event files apart.
    assert [cleanup.trainers_events(path) for name in ("train", "eval")
            for path in glob.glob(str(logdir / "a" / name / "events.*"))] == [True, False]
    with tensorboard(logdir, tmp_path / "tensorboard.log") as server:
        # Event files right in train_dir and eval_dir: each is one run of their parent.
        runs = server.wait_for("the runs", lambda: server.get("/data/runs"),
                               lambda runs: {"a/train", "a/eval", "b/train"} <= set(runs))
        assert sorted(runs) == ["a/eval", "a/train", "b/train"]

        # Scalars at the summary steps; examples_per_sec at the progress lines.
        assert SCALAR_TAGS <= set(server.tags("scalars", "a/train", SCALAR_TAGS))
        learning_rate = server.scalars("a/train", "learning_rate")
        assert sorted(learning_rate) == SUMMARY_AT
        assert all(math.isclose(v, 0.1, rel_tol=1e-6) for v in learning_rate.values())
        for tag in ("total_loss", "total_loss (raw)", "cross_entropy", "conv1/sparsity"):
            values = server.scalars("a/train", tag)
            assert sorted(values) == SUMMARY_AT and all(map(math.isfinite, values.values()))
        assert sorted(server.scalars("a/train", "examples_per_sec")) == [1, 3, 6]
        server.tags("scalars", "a/eval", {"Precision @ 1"})
        assert server.scalars("a/eval", "Precision @ 1") == {
            MAX_STEPS: pytest.approx(result["precision"], rel=1e-6)}

        # Histograms: conv1's activations count batch x 24 x 24 x 64 values.
        assert HISTOGRAM_TAGS <= set(server.tags("histograms", "a/train", HISTOGRAM_TAGS))
        for tag, count in (("conv1/activations", BATCH_SIZE * 24 * 24 * 64),
                           ("conv1/weights", 5 * 5 * 3 * 64)):
            histograms = server.get("/data/plugin/histograms/histograms", run="a/train",
                                    tag=tag)
            assert [step for _, step, _ in histograms] == SUMMARY_AT
            for _, _, buckets in histograms:
                assert all(left <= right for left, right, _ in buckets)
                assert sum(n for _, _, n in buckets) == count, tag

        # Images: 3 training images at each summary step; the evaluator's heat map.
        assert server.tags("images", "a/train", {"images"})["images"]["samples"] == 3
        images = server.get("/data/plugin/images/images", run="a/train", tag="images",
                            sample=0)
        assert [image["step"] for image in images] == SUMMARY_AT
        server.tags("images", "a/eval", {"confusion_matrix"})
        [image] = server.get("/data/plugin/images/images", run="a/eval",
                             tag="confusion_matrix", sample=0)
        png = server.raw("/data/plugin/images/individualImage?" + image["query"])
        assert image["step"] == MAX_STEPS and png.startswith(b"\x89PNG\r\n\x1a\n")

        # Graphs: the model's forward pass, its layers by name; not the training loop.
        server.wait_for("the graph of run a/train", lambda: server.get(
            "/data/plugin/graphs/info"), lambda info: info.get("a/train", {}).get("run_graph"))
        graph = server.raw("/data/plugin/graphs/graph", run="a/train",
                           conceptual="false").decode()
        assert all(f'name: "{stage}/' in graph for stage in STAGES)
        assert graph.count('op: "Conv2D"') == 2 and 'op: "While"' not in graph

        # The run's settings: the run_config text of the runs.
        server.wait_for("run_config texts", lambda: server.get("/data/plugin/text/tags"),
                        lambda tags: all("run_config" in tags.get(r, ()) for r in runs))
        [config] = server.get("/data/plugin/text/text", run="a/train", tag="run_config")
        assert config["step"] == 0
        assert "<td>max_steps</td>\n<td><code>6</code></td>" in config["text"]
        [eval_config] = server.get("/data/plugin/text/text", run="a/eval", tag="run_config")
        assert "<td>batch_size</td>\n<td><code>25</code></td>" in eval_config["text"]

        # HParams: the hyperparameters and the two metrics; a session of each run with
        # its values, scored by the metrics of its own folder (the frontend's requests).
        experiment = server.post("/data/plugin/hparams/experiment", {"experimentName": ""})
        hparams = {info["name"]: info.get("displayName") for info in experiment["hparamInfos"]}
        assert {"learning_rate", "weight_decay", "batch_size", "weights"} <= set(hparams)
        assert hparams["precision"] == "compute dtype"
        metrics = [info["name"] for info in experiment["metricInfos"]]
        assert [(m["name"]["tag"], m["name"].get("group"), m["displayName"])
                for m in experiment["metricInfos"]] == [
            ("Precision @ 1", "", "precision @ 1"), ("Test loss", "", "test loss")]
        request = {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                   "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS",
                                       "STATUS_FAILURE", "STATUS_RUNNING"],
                   "colParams": [{"hparam": name, "includeInResult": True} for name in hparams]
                   + [{"metric": name, "includeInResult": True} for name in metrics]}
        groups = server.wait_for(
            "the HParams sessions", lambda: server.post(
                "/data/plugin/hparams/session_groups", request)["sessionGroups"],
            lambda groups: len(groups) == 3 and all(g["metricValues"] for g in groups))
        sessions = {}
        for group in groups:
            [session] = group["sessions"]
            sessions[session["name"]] = (group["hparams"], {
                m["name"]["tag"]: (m["trainingStep"], m["value"]) for m in group["metricValues"]})
        trained_a = {"learning_rate": 0.1, "batch_size": BATCH_SIZE, "max_steps": MAX_STEPS,
                     "precision": "float32", "weight_decay": 0.004, "seed": 0}
        assert {name: sessions["a/train"][0][name] for name in trained_a} == pytest.approx(
            trained_a)
        assert sessions["b/train"][0]["learning_rate"] == pytest.approx(0.05)
        assert "max_epochs" not in sessions["a/train"][0]  # unset
        assert sessions["a/eval"][0] == pytest.approx(
            {**sessions["a/train"][0], "weights": "averages", "eval_data": "test"})
        assert sessions["a/eval"][1] == {
            "Precision @ 1": (MAX_STEPS, pytest.approx(result["precision"], rel=1e-6)),
            "Test loss": (MAX_STEPS, pytest.approx(result["loss"], rel=1e-6))}
        # A training run's: its last validation's, as metrics.csv has it (to 6 digits).
        for name, last in (("a", MAX_STEPS), ("b", 2)):
            with open(logdir / name / "train" / "metrics.csv") as f:
                [*_, row] = [row for row in csv.DictReader(f) if row["precision"]]
            assert sessions[f"{name}/train"][1] == {
                "Precision @ 1": (last, pytest.approx(float(row["precision"]), rel=1e-5)),
                "Test loss": (last, pytest.approx(float(row["test_loss"]), rel=1e-5))}
