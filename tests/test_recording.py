"""Tests of cifar10.evaluation.recording (and plots): results.jsonl written and read back,
TensorBoard's scalars, PR curves and images, the PNG files and their titles."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from cli import scalar_values
from conftest import EVAL_LINE
from evalruns import RECORDS, always_cat_run, config_of, results_lines, run_of

from cifar10.core.config import EvalConfig
from cifar10.data import pipeline as data
from cifar10.data import folder as datafolder
from cifar10.data import synthetic
from cifar10.evaluation import polling, recording, scoring
from cifar10.evaluation.result import EvalResult

RESULT_KEYS = {"checkpoint", "step", "precision", "correct", "examples", "weights",
               "eval_data", "wall_time", "seconds", "checkpoint_mtime_ns", "confusion_matrix",
               "per_class", "synthetic", "num_examples", "compute_dtype"}


@pytest.fixture(scope="module")
def run(trained_run):
    return run_of(trained_run)


# --- results.jsonl -----------------------------------------------------------


def result_of(step, **overrides):
    fields = {"checkpoint": f"/runs/train/model.ckpt-{step}", "step": step,
              "checkpoint_mtime_ns": 1_000 + step,
              "precision": 0.5, "correct": 5, "examples": 10, "weights": "averages",
              "eval_data": "test", "wall_time": time.time(), "seconds": 0.25}
    fields.update(overrides)
    return EvalResult(**fields)


def test_record_appends_a_json_line_and_a_scalar_at_the_step(run, tmp_path):
    result = scoring.evaluate_checkpoint(run.ckpt6, config_of(run, tmp_path))
    writer = tf.summary.create_file_writer(str(tmp_path))
    recording.record(result, str(tmp_path), writer)
    recording.record(result_of(3, precision=0.25), str(tmp_path), writer)
    writer.close()
    lines = results_lines(tmp_path)
    assert [set(line) for line in lines] == [RESULT_KEYS, RESULT_KEYS]
    assert lines[0] == result.as_record()
    assert (lines[0]["step"], lines[0]["examples"], lines[0]["eval_data"]) == (6, RECORDS, "test")
    assert scalar_values(str(tmp_path), recording.PRECISION_TAG) == {
        6: pytest.approx(result.precision), 3: 0.25}


def test_scored_checkpoints_ignores_a_truncated_last_line(tmp_path):
    assert recording.scored_checkpoints(str(tmp_path)) == set()  # no results.jsonl yet
    whole = json.dumps(dataclasses.asdict(result_of(3)))
    cut = json.dumps(dataclasses.asdict(result_of(6)))[:40]
    (tmp_path / recording.RESULTS_FILE).write_text(whole + "\n" + cut)
    assert recording.scored_checkpoints(str(tmp_path)) == {"model.ckpt-3|1003|averages|test|10|float32"}


def test_scored_checkpoints_skips_lines_that_are_json_but_not_a_result(tmp_path):
    whole = json.dumps(dataclasses.asdict(result_of(3)))
    others = ["5", "[1, 2]", '"text"', "null", '{"checkpoint": 1}']
    (tmp_path / recording.RESULTS_FILE).write_text("\n".join([*others, whole]) + "\n")
    assert recording.scored_checkpoints(str(tmp_path)) == {"model.ckpt-3|1003|averages|test|10|float32"}


def test_scored_checkpoints_skips_bytes_that_are_not_utf8_with_one_warning(tmp_path, caplog):
    whole = json.dumps(dataclasses.asdict(result_of(3))).encode()
    (tmp_path / recording.RESULTS_FILE).write_bytes(b'{"checkpoint": "\xff\xfe"}\n' + whole
                                                    + b"\n\x80\x81\n")
    assert recording.scored_checkpoints(str(tmp_path)) == {"model.ckpt-3|1003|averages|test|10|float32"}
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / recording.RESULTS_FILE}: skipped 2 damaged line(s); the checkpoints "
        f"they recorded, if any, are scored again."]


def test_a_result_recorded_after_a_truncated_line_is_remembered(tmp_path):
    cut = json.dumps(dataclasses.asdict(result_of(3)))[:40]
    (tmp_path / recording.RESULTS_FILE).write_text(cut)  # a crash while writing step 3
    writer = tf.summary.create_file_writer(str(tmp_path))
    recording.record(result_of(6), str(tmp_path), writer)
    writer.close()
    assert recording.scored_checkpoints(str(tmp_path)) == {"model.ckpt-6|1006|averages|test|10|float32"}


# --- TensorBoard and the PNG files --------------------------------------------


def test_per_class_scalars_and_pr_curves_go_to_tensorboard(tmp_path):
    """Read back with TensorBoard's own event reader: a recall and a precision scalar
    per class under per_class/, and a PR curve per class for its PR-curve plugin."""
    from tensorboard.backend.event_processing import event_accumulator

    batches_dir, test_files, _ = always_cat_run(tmp_path)
    names = datafolder.class_names(batches_dir)
    polling.evaluate(EvalConfig(
        checkpoint_dir=str(tmp_path / "train"), eval_dir=str(tmp_path / "eval"),
        eval_files=test_files, num_examples=23, batch_size=8, run_once=True, class_names=names),
        print_fn=lambda line: None)

    events = event_accumulator.EventAccumulator(
        str(tmp_path / "eval"), size_guidance={event_accumulator.TENSORS: 0}).Reload()
    tags = set(events.Tags()["tensors"])
    assert {f"per_class/recall/{name}" for name in names} <= tags
    assert {f"per_class/precision/{name}" for name in names} & tags == {"per_class/precision/cat"}
    curves = set(events.PluginTagToContent("pr_curves"))
    assert curves == {f"pr_curve/{name}/pr_curves" for name in names}  # the plugin's suffix
    value = lambda tag: tf.make_ndarray(events.Tensors(tag)[0].tensor_proto)  # noqa: E731
    assert [e.step for e in events.Tensors("per_class/recall/cat")] == [9]
    assert float(value("per_class/recall/cat")) == 1.0
    assert float(value("per_class/recall/dog")) == 0.0
    assert float(value("per_class/precision/cat")) == pytest.approx(2 / 23)
    # Rows: true positives, false positives, true negatives, false negatives,
    # precision, recall, at the thresholds 0, 0.005, ..., 1.
    cat = value("pr_curve/cat/pr_curves")
    assert cat.shape == (6, scoring.PR_THRESHOLDS)
    assert cat[0, 0] == 2 and cat[1, 0] == 21  # every image is above threshold 0
    assert cat[5, 0] == 1.0 and cat[4, 0] == pytest.approx(2 / 23)
    assert cat[0, -1] == 0 and cat[3, -1] == 2  # none is certain: the cat probability < 1
    dog = value("pr_curve/dog/pr_curves")
    # Dog's probability is 1 / (e^5 + 9) = 0.0064 for every image: at or above 0.005,
    # below 0.01.
    assert dog[0, :3].tolist() == [2, 2, 0] and dog[1, :3].tolist() == [21, 21, 0]


def test_the_heat_map_and_the_misclassified_grid_go_to_tensorboard_and_png_files(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    batches_dir, test_files, _ = always_cat_run(tmp_path)  # 21 of the 23 are wrong
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "confusion_matrix-step9.png").write_bytes(b"the user's own file")
    config = EvalConfig(
        checkpoint_dir=str(tmp_path / "train"), eval_dir=str(eval_dir), eval_files=test_files,
        num_examples=23, batch_size=8, run_once=True, misclassified_images=5,
        class_names=datafolder.class_names(batches_dir))
    [result] = polling.evaluate(config, print_fn=lambda line: None)

    # Each class's first wrong one in file order, in class order, 5 in all: cats are
    # never wrong, so airplane, automobile, bird, deer, dog.
    assert result.misclassified.labels == [0, 1, 2, 4, 5]
    records = list(data.read_records(test_files).as_numpy_iterator())
    first = {}
    for image, label in records:
        first.setdefault(int(label), image)
    np.testing.assert_array_equal(result.misclassified.images,
                                  np.stack([first[k] for k in (0, 1, 2, 4, 5)]))
    assert result.misclassified.predicted == [3] * 5
    assert result.misclassified.images.shape == (5, 32, 32, 3)
    assert sorted(os.listdir(eval_dir)) == [
        "confusion_matrix-step9-2.png", "confusion_matrix-step9.png", "environment.jsonl",
        *sorted(n for n in os.listdir(eval_dir) if n.startswith("events.")),
        "misclassified-step9.png", "results.jsonl"]
    assert (eval_dir / "confusion_matrix-step9.png").read_bytes() == b"the user's own file"
    titles = recording.picture_titles(result)
    for name, tag in (("confusion_matrix-step9-2.png", "confusion_matrix"),
                      ("misclassified-step9.png", "misclassified")):
        image = tf.io.decode_png((eval_dir / name).read_bytes())
        assert image.shape[0] > 200 and image.shape[1] > 200 and image.shape[2] in (3, 4)
        # Generated data: the title's first line says so.
        assert png_title(eval_dir / name) == titles[tag]
        assert titles[tag].startswith("SYNTHETIC data (generated, not CIFAR-10)\n")
    assert titles["confusion_matrix"].endswith(
        "\nConfusion matrix, model.ckpt-9, averages weights: precision @ 1 = 0.087")
    events = event_accumulator.EventAccumulator(
        str(eval_dir), size_guidance={event_accumulator.TENSORS: 0}).Reload()
    assert {"confusion_matrix", "misclassified"} <= set(events.PluginTagToContent("images"))
    assert [e.step for e in events.Tensors("misclassified")] == [9]


def png_title(path) -> str:
    from PIL import Image

    with Image.open(path) as image:
        return image.text["Title"]


def test_a_run_with_nothing_wrong_says_why_it_has_no_grid_and_real_data_is_not_synthetic(
        tmp_path):
    """Test records of cats alone, scored by the model that always says cat, in a
    folder without the generated data's marker."""
    _, _, train_dir = always_cat_run(tmp_path)
    cats = tmp_path / "cats" / "test_batch.bin"
    cats.parent.mkdir()
    cats.write_bytes(synthetic.make_records(np.full(7, 3), separable=True))
    lines = []
    [result] = polling.evaluate(EvalConfig(
        checkpoint_dir=str(train_dir), eval_dir=str(tmp_path / "eval"), eval_files=[str(cats)],
        num_examples=7, run_once=True), print_fn=lines.append)

    assert (result.correct, result.examples, result.synthetic) == (7, 7, False)
    assert EVAL_LINE.match(lines[0]).groups()[1:] == ("9", "model.ckpt-9", "7", "averages")
    assert lines[0].endswith(" averages weights)")
    assert lines[1] == ("No misclassified images to show for model.ckpt-9: all 7 examples "
                        "were classified right.")
    assert lines[2] == "class        count  recall  precision"
    assert results_lines(tmp_path / "eval")[0]["synthetic"] is False
    pictures = sorted(n for n in os.listdir(tmp_path / "eval") if n.endswith(".png"))
    assert pictures == ["confusion_matrix-step9.png"]
    assert png_title(tmp_path / "eval" / pictures[0]) == (
        "Confusion matrix, model.ckpt-9, averages weights: precision @ 1 = 1.000")
    # None asked for: nothing to explain.
    lines = []
    polling.evaluate(EvalConfig(
        checkpoint_dir=str(train_dir), eval_dir=str(tmp_path / "eval0"), eval_files=[str(cats)],
        num_examples=7, run_once=True, misclassified_images=0), print_fn=lines.append)
    assert EVAL_LINE.match(lines[0]) and lines[1] == "class        count  recall  precision"


@pytest.mark.parametrize("plots", [False, True])
def test_only_the_evaluator_lets_tensorflow_load_matplotlib(plots):
    """Keras imports matplotlib.pyplot when it is installed (0.65 s of each start):
    the programs that do not draw keep it out while TensorFlow loads, TensorFlow works
    without it, and matplotlib can still be imported after (a library user's)."""
    script = ("import sys; from cifar10.cli import process; "
              f"tf = process.load_tensorflow(plots={plots}); "
              "loaded = 'matplotlib.pyplot' in sys.modules; "
              "__import__('cifar10.evaluation.plots'); "  # the evaluator's drawing: importable
              "print(loaded, int(tf.reduce_sum([1, 2])), sys.modules['matplotlib'] is not None)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == [str(plots), "3", "True"], out.stderr


def test_characters_the_font_lacks_are_one_warning_of_the_programs_own(caplog, recwarn,
                                                                         monkeypatch):
    from cifar10.evaluation import plots

    monkeypatch.setattr(plots, "_glyphs_said", set())
    # matplotlib's own font alone, which has no Chinese, whatever else the machine has
    monkeypatch.setitem(plots.matplotlib.rcParams, "font.family", ["DejaVu Sans"])
    monkeypatch.setitem(plots.matplotlib.rcParams, "font.sans-serif", ["DejaVu Sans"])
    names = ["chat noir", "狗", "猫"]
    for _ in range(2):  # the second evaluation of the run names nothing new
        png = plots.confusion_png([[1, 0, 0], [0, 2, 0], [1, 0, 3]], names, "狗 matrix")
        assert png.startswith(b"\x89PNG")
        plots.misclassified_png(np.zeros([1, 32, 32, 3], np.uint8), ["狗"], ["猫"], "grid")
    assert [str(w.message) for w in recwarn] == []  # matplotlib's own: none let through
    assert [r.getMessage() for r in caplog.records] == [
        "the pictures' font has no characters for 狗 猫 (in class names): they show as boxes "
        "in the pictures only; a font that has them, named in matplotlib's font.family "
        "setting (matplotlibrc), draws them"]


def test_other_warnings_while_drawing_pass_as_they_are(monkeypatch):
    import warnings

    from cifar10.evaluation import plots

    def savefig_warns(self, *args, **kwargs):
        warnings.warn("something else", UserWarning)
        kwargs.pop("metadata", None)

    monkeypatch.setattr(plots.figure.Figure, "savefig", savefig_warns)
    with pytest.warns(UserWarning, match="something else"):
        plots.confusion_png([[1]], ["a"], "t")


@pytest.mark.parametrize("picture, classes", [("heat map", 2), ("heat map", 3),
                                              ("heat map", 5), ("grid", 1), ("grid", 3)])
def test_the_pictures_of_a_few_classes_or_images_show_their_whole_title(picture, classes):
    """The title of a few classes' matrix (own images), or of a grid of a few images, is
    not cut at the picture's sides: its pixels (a title without spaces, so that a cut
    one ends in a letter) stop short of the first and last columns."""
    from PIL import Image

    from cifar10.evaluation import plots

    title = "Confusion_matrix,_model.ckpt-123456,_averages_weights:_precision_@_1_=_0.333"
    names = [f"c{i}" for i in range(classes)]
    if picture == "heat map":
        png = plots.confusion_png(np.eye(classes, dtype=int), names, title)
    else:
        png = plots.misclassified_png(np.zeros([classes, 32, 32, 3], np.uint8), names,
                                      names[::-1], title)
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    top = pixels[:25]  # the title's band, above the matrix or the images
    dark = np.flatnonzero(top.min(axis=0) < 128)
    assert dark.size and dark.min() > 2 and dark.max() < pixels.shape[1] - 3, (
        dark.min(), dark.max(), pixels.shape)


def test_long_class_names_in_the_grid_are_broken_into_lines_of_their_own_column():
    from cifar10.evaluation import plots

    assert plots.grid_label("cat", "dog") == "cat →\ndog"
    label = plots.grid_label("a very long class name of many words", "x" * 30)
    assert label == "a very long class name\nof many words →\n" + "x" * 24 + "\n" + "x" * 6
    assert all(len(line) <= plots.GRID_LABEL_WIDTH + 2 for line in label.splitlines())
    # The grid is drawn taller for them, its labels clear of the title above.
    short = plots.misclassified_png(np.zeros([2, 32, 32, 3], np.uint8), ["a", "b"], ["b", "a"],
                                    "grid")
    long = plots.misclassified_png(np.zeros([2, 32, 32, 3], np.uint8),
                                   ["a very long class name of many words"] * 2, ["b", "a"],
                                   "grid")
    from PIL import Image

    heights = [Image.open(io.BytesIO(png)).size[1] for png in (short, long)]
    assert heights[1] > heights[0], heights


@pytest.mark.parametrize("top", [1, 2, 7, 900])
def test_the_heat_maps_colour_bar_has_whole_counts(monkeypatch, top):
    from cifar10.evaluation import plots

    drawn = []
    real_png = plots._png

    def capture(fig, title, heading):
        png = real_png(fig, title, heading)  # (laid out and drawn: its ticks are final)
        drawn.append(fig)
        return png

    monkeypatch.setattr(plots, "_png", capture)
    plots.confusion_png([[top, 0], [1, 0]], ["a", "b"], "t")
    [fig] = drawn
    bar = fig.axes[1]
    ticks = [t for t in bar.get_yticks() if 0 <= t <= top]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


def test_a_result_is_told_from_one_of_other_settings_and_their_mix_warned_of(
        tmp_path, caplog):
    # A line recorded before num_examples and compute_dtype were: its examples, float32.
    old = {k: v for k, v in result_of(3).as_record().items()
           if k not in ("num_examples", "compute_dtype")}
    (tmp_path / recording.RESULTS_FILE).write_text(json.dumps(old) + "\n")
    assert recording.scored_checkpoints(str(tmp_path)) == {
        "model.ckpt-3|1003|averages|test|10|float32"}
    recording.warn_of_other_settings(str(tmp_path), ("averages", "test", 10, "float32"))
    assert caplog.records == []
    writer = tf.summary.create_file_writer(str(tmp_path))
    recording.record(result_of(3, num_examples=10, compute_dtype="bfloat16"), str(tmp_path),
                     writer)
    recording.record(result_of(3, num_examples=10, weights="raw"), str(tmp_path), writer)
    writer.close()
    assert recording.scored_checkpoints(str(tmp_path)) == {
        "model.ckpt-3|1003|averages|test|10|float32",
        "model.ckpt-3|1003|averages|test|10|bfloat16", "model.ckpt-3|1003|raw|test|10|float32"}
    recording.warn_of_other_settings(str(tmp_path), ("averages", "test", 10, "float32"))
    assert [r.getMessage() for r in caplog.records] == [
        f"--eval_dir={tmp_path} holds results scored with other settings (weights=averages, "
        f"eval_data=test, num_examples=10, compute_dtype=bfloat16; weights=raw, "
        f"eval_data=test, num_examples=10, compute_dtype=float32) than these "
        f"(weights=averages, eval_data=test, num_examples=10, compute_dtype=float32): they go "
        f"on the same TensorBoard curves; pass another --eval_dir to keep them apart"]
