"""cifar10-eval --model: an exported model (SavedModel, .tflite run by LiteRT) scored as
its checkpoint is."""

from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest
from cli import call, event_tags
from conftest import EVAL_LINE

pytestmark = pytest.mark.usefixtures("pictures_stubbed")  # the pictures are not tested here

RECORDS = 50  # conftest's trained_run: its test split
# The checkpoint's precision line, naming the model file and its 'exported' weights.
MODEL_LINE = re.compile(EVAL_LINE.pattern.replace(r"(model\.ckpt-\d+)", r"(\S+)"))


@pytest.fixture(scope="module")
def trained(trained_run):
    """(data_dir, train_dir) of conftest's run, its data where --synthetic_data reads it."""
    train_dir, test_files = trained_run
    return pathlib.Path(test_files[0]).parents[2], train_dir


@pytest.fixture(scope="module")
def export(trained, tmp_path_factory):
    """The version folder of step 6 exported with each TFLite file."""
    root = tmp_path_factory.mktemp("exported")
    result = call("cifar10-export", f"--checkpoint_dir={trained[1]}",
                  f"--export_dir={root / 'export'}", "--tflite=float32,float16,dynamic,int8",
                  "--calibration_images=50", "--synthetic_data",
                  f"--synthetic_records={RECORDS}", f"--data_dir={trained[0]}")
    assert result.returncode == 0, result.stderr
    return root / "export" / "6"


def scored(data_dir, eval_dir, *flags):
    """(the precision line's groups, the result recorded) of one cifar10-eval."""
    result = call("cifar10-eval", "--synthetic_data", f"--synthetic_records={RECORDS}",
                  f"--data_dir={data_dir}", f"--eval_dir={eval_dir}", *flags)
    assert result.returncode == 0, result.stderr
    assert "deprecated" not in result.stderr, result.stderr
    [line] = filter(None, map(MODEL_LINE.match, result.stdout.splitlines()))
    assert "confusion matrix" in result.stdout, result.stdout
    [record] = [json.loads(text) for text in open(eval_dir / "results.jsonl")]
    return line.groups(), record


def test_an_exported_model_scores_as_its_checkpoint(trained, export, tmp_path):
    """The SavedModel exactly (float32, the same crop and standardisation inside); the
    float32 and float16 .tflite files (LiteRT's kernels) within one example of the 50, to a
    test loss within 1e-3; the dynamic range and int8 ones within 5 and 0.05."""
    data_dir, train_dir = trained
    _, checkpoint = scored(data_dir, tmp_path / "checkpoint", f"--checkpoint_dir={train_dir}",
                           "--run_once")
    for name, within, loss in (("6", 0, 1e-4), ("model.tflite", 1, 1e-3),
                               ("model-float16.tflite", 1, 1e-3),
                               ("model-dynamic.tflite", 5, 0.05), ("model-int8.tflite", 5, 0.05)):
        model = export / name if name.endswith(".tflite") else export
        line, record = scored(data_dir, tmp_path / name, f"--model={model}")
        assert line[1:] == ("6", name, str(RECORDS), "exported"), line
        assert record["checkpoint"] == str(model) and record["step"] == 6
        assert abs(record["correct"] - checkpoint["correct"]) <= within, (record, checkpoint)
        assert record["loss"] == pytest.approx(checkpoint["loss"], abs=loss)
        if not within:
            assert record["confusion_matrix"] == checkpoint["confusion_matrix"]
        assert event_tags(str(tmp_path / name))["Precision @ 1"] == [6]


def test_a_model_is_scored_alone_and_a_tflite_file_needs_litert(trained, export, tmp_path,
                                                                monkeypatch):
    data_dir, _ = trained
    refused = call("cifar10-eval", f"--model={export}", "--checkpoint_dir=runs/a/train",
                   "--weights=raw", f"--eval_dir={tmp_path / 'eval'}")
    assert refused.returncode != 0
    assert "drop --checkpoint_dir, --weights" in refused.stderr, refused.stderr
    for name in ("ai_edge_litert", "ai_edge_litert.interpreter"):
        monkeypatch.setitem(sys.modules, name, None)  # not installed
    result = call("cifar10-eval", "--synthetic_data", f"--synthetic_records={RECORDS}",
                  f"--data_dir={data_dir}", f"--eval_dir={tmp_path / 'eval'}",
                  f"--model={export / 'model.tflite'}")
    assert result.returncode == 1 and result.stderr == (
        "cifar10-eval: error: scoring/running a .tflite file needs LiteRT: "
        "pip install 'cifar10[litert]'\n"), result.stderr
    assert not (tmp_path / "eval").exists()
