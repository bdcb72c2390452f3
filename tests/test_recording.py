"""cifar10.evaluation.recording and plots: results.jsonl, TensorBoard's summaries, the
PNG files, the printed lines."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import tensorflow as tf
from conftest import EVAL_LINE
from evalruns import always_cat_run, cat_config, results_lines
from PIL import Image

from cifar10.data import pipeline as data
from cifar10.data import synthetic
from cifar10.evaluation import plots, polling, recording, scoring
from cifar10.evaluation.scoring import EvalResult

KEY3 = "model.ckpt-3|1003|averages|test|10|float32"


def result_of(step, **overrides):
    return EvalResult(**{"checkpoint": f"/runs/train/model.ckpt-{step}", "step": step,
                         "checkpoint_mtime_ns": 1_000 + step, "precision": 0.5, "correct": 5,
                         "examples": 10, "weights": "averages", "eval_data": "test",
                         "wall_time": time.time(), "seconds": 0.25, **overrides})


def record(eval_dir, *results):
    writer = tf.summary.create_file_writer(str(eval_dir))
    for result in results:
        recording.record(result, str(eval_dir), writer)
    writer.close()


def test_damaged_lines_are_passed_over_with_one_warning_and_a_line_cut_short_ends(
        tmp_path, caplog):
    whole = json.dumps(result_of(3).as_record()).encode()
    (tmp_path / recording.RESULTS_FILE).write_bytes(
        b'{"checkpoint": "\xff\xfe"}\n5\n[1, 2]\nnull\n{"checkpoint": 1}\n\n' + whole
        + b"\n\x80\x81\n" + whole[:40])  # the last cut short by a crash
    assert recording.scored_checkpoints(str(tmp_path)) == {KEY3}
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / recording.RESULTS_FILE}: skipped 7 damaged line(s); the checkpoints "
        f"they recorded, if any, are scored again."]
    record(tmp_path, result_of(6))
    assert recording.scored_checkpoints(str(tmp_path)) == {
        KEY3, "model.ckpt-6|1006|averages|test|10|float32"}
    assert recording.scored_checkpoints(str(tmp_path / "none")) == set()


# Another evaluator in the same --eval_dir, midway through appending its line.
OTHER_EVALUATOR = """
import fcntl, sys
with open(sys.argv[1], "ab") as f:
    fcntl.lockf(f, fcntl.LOCK_EX)
    f.write(b'{"step": '); f.flush()
    print("half", flush=True)
    sys.stdin.readline()
    f.write(b'1}\\n')
"""


def waits_for_a_lock(path) -> bool:
    """Whether a process waits for a lock on the file ``path`` (Linux's /proc/locks)."""
    with open("/proc/locks") as f:
        return re.search(rf"->.*:{os.stat(path).st_ino} ", f.read()) is not None


def test_two_evaluators_appending_at_once_lose_no_line(tmp_path):
    path = tmp_path / recording.RESULTS_FILE
    other = subprocess.Popen([sys.executable, "-c", OTHER_EVALUATOR, str(path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline() == "half\n"
        this = threading.Thread(target=record, args=(tmp_path, result_of(3)))
        this.start()
        deadline = time.monotonic() + 120  # (a guard: either comes at once)
        while this.is_alive() and not waits_for_a_lock(path):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        other.communicate("go\n", timeout=60)
        this.join(timeout=60)
    finally:
        other.kill()
    assert [line["step"] for line in results_lines(tmp_path)] == [1, 3]


def test_other_settings_are_another_score_and_their_mix_is_warned_of(tmp_path, caplog):
    # A line recorded before num_examples and compute_dtype were: its examples, float32.
    old = {k: v for k, v in result_of(3).as_record().items()
           if k not in ("num_examples", "compute_dtype")}
    (tmp_path / recording.RESULTS_FILE).write_text(json.dumps(old) + "\n")
    assert recording.scored_checkpoints(str(tmp_path)) == {KEY3}
    recording.warn_of_other_settings(str(tmp_path), ("averages", "test", 10, "float32"))
    assert caplog.records == []
    record(tmp_path, result_of(3, num_examples=10, compute_dtype="bfloat16"),
           result_of(3, num_examples=10, weights="raw"))
    assert recording.scored_checkpoints(str(tmp_path)) == {
        KEY3, "model.ckpt-3|1003|averages|test|10|bfloat16", "model.ckpt-3|1003|raw|test|10|float32"}
    recording.warn_of_other_settings(str(tmp_path), ("averages", "test", 10, "float32"))
    assert [r.getMessage() for r in caplog.records] == [
        f"--eval_dir={tmp_path} holds results scored with other settings (weights=averages, "
        f"eval_data=test, num_examples=10, compute_dtype=bfloat16; weights=raw, "
        f"eval_data=test, num_examples=10, compute_dtype=float32) than these "
        f"(weights=averages, eval_data=test, num_examples=10, compute_dtype=float32): they go "
        f"on the same TensorBoard curves; pass another --eval_dir to keep them apart"]


def test_the_line_says_training_examples_and_wide_class_names_keep_the_table_in_line():
    confusion = np.array([[3, 1, 0], [0, 12, 0], [2, 0, 105]])
    # A CJK name (6 columns), a fullwidth one (4), one with a combining accent (4).
    result = result_of(5, precision=0.9, examples=123, confusion_matrix=confusion.tolist(),
                       per_class=scoring.per_class(confusion, ["自動車", "ＣＡＴ", "cafe\u0301"]))
    result.eval_data = "train_eval"
    [line, *table] = recording.lines(result, table=True)
    assert line.endswith("(step 5, model.ckpt-5, 123 training examples, averages weights)")
    assert table == ["class    count  recall  precision",
                     "自動車       4   0.750      0.600",
                     "ＣＡＴ      12   1.000      0.923",
                     "cafe\u0301       107   0.981      1.000",
                     "confusion matrix (rows: true class; columns: predicted class, as numbered):",
                     "               0     1     2",
                     " 0  自動車     3     1     0",
                     " 1  ＣＡＴ     0    12     0",
                     " 2  cafe\u0301       2     0   105"]


def png_title(path) -> str:
    with Image.open(path) as image:
        return image.text["Title"]


def test_the_figures_go_to_tensorboard_and_the_pictures_to_new_png_files(tmp_path):
    """Read back with TensorBoard's own reader; a user's PNG file of that name kept."""
    from tensorboard.backend.event_processing import event_accumulator

    test_files = always_cat_run(tmp_path)  # 21 of the 23 are wrong
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "confusion_matrix-step9.png").write_bytes(b"the user's own file")
    config = cat_config(tmp_path, test_files, misclassified_images=5)
    [result] = polling.evaluate(config, print_fn=lambda line: None)
    events = event_accumulator.EventAccumulator(
        str(eval_dir), size_guidance={event_accumulator.TENSORS: 0}).Reload()
    names = config.class_names
    tags = set(events.Tags()["tensors"])
    assert {f"per_class/recall/{name}" for name in names} <= tags
    assert {f"per_class/precision/{name}" for name in names} & tags == {"per_class/precision/cat"}
    assert set(events.PluginTagToContent("pr_curves")) == {
        f"pr_curve/{name}/pr_curves" for name in names}  # the plugin's suffix
    value = lambda tag: tf.make_ndarray(events.Tensors(tag)[0].tensor_proto)  # noqa: E731
    assert [e.step for e in events.Tensors("per_class/recall/cat")] == [9]
    assert (float(value("per_class/recall/cat")), float(value("per_class/recall/dog"))) == (1, 0)
    assert float(value("per_class/precision/cat")) == pytest.approx(2 / 23)
    # Rows: TP, FP, TN, FN, precision, recall at the thresholds 0, 0.005, ..., 1.
    cat = value("pr_curve/cat/pr_curves")
    assert cat.shape == (6, scoring.PR_THRESHOLDS)
    assert cat[0, 0] == 2 and cat[1, 0] == 21  # every image is above threshold 0
    assert cat[5, 0] == 1.0 and cat[4, 0] == pytest.approx(2 / 23)
    assert cat[0, -1] == 0 and cat[3, -1] == 2  # none is certain
    # Dog's probability is 1 / (e^5 + 9) = 0.0064 for every image.
    dog = value("pr_curve/dog/pr_curves")
    assert dog[0, :3].tolist() == [2, 2, 0] and dog[1, :3].tolist() == [21, 21, 0]
    assert {"confusion_matrix", "misclassified"} <= set(events.PluginTagToContent("images"))
    assert [e.step for e in events.Tensors("misclassified")] == [9]

    # Each class's first wrong one in file order, in class order: cats are never wrong.
    assert (result.misclassified.labels, result.misclassified.predicted) == (
        [0, 1, 2, 4, 5], [3] * 5)
    first = {}
    for image, label in data.read_records(test_files).as_numpy_iterator():
        first.setdefault(int(label), image)
    np.testing.assert_array_equal(result.misclassified.images,
                                  np.stack([first[k] for k in (0, 1, 2, 4, 5)]))
    assert sorted(n for n in os.listdir(eval_dir) if n.endswith(".png")) == [
        "confusion_matrix-step9-2.png", "confusion_matrix-step9.png", "misclassified-step9.png"]
    assert (eval_dir / "confusion_matrix-step9.png").read_bytes() == b"the user's own file"
    titles = recording.picture_titles(result)
    for name, tag in (("confusion_matrix-step9-2.png", "confusion_matrix"),
                      ("misclassified-step9.png", "misclassified")):
        assert min(Image.open(eval_dir / name).size) > 200
        assert png_title(eval_dir / name) == titles[tag]
    assert titles["confusion_matrix"] == (
        "SYNTHETIC data (generated, not CIFAR-10)\n"
        "Confusion matrix, model.ckpt-9, averages weights: precision @ 1 = 0.087")


def test_a_run_with_nothing_wrong_says_why_it_has_no_grid_and_real_data_is_not_synthetic(
        tmp_path):
    """Cats alone scored by the model that always says cat, not in generated data."""
    always_cat_run(tmp_path)
    cats = tmp_path / "cats" / "test_batch.bin"
    cats.parent.mkdir()
    cats.write_bytes(synthetic.make_records(np.full(7, 3), separable=True))
    lines = []
    [result] = polling.evaluate(cat_config(tmp_path, [str(cats)], num_examples=7),
                                print_fn=lines.append)
    assert (result.correct, result.examples, result.synthetic) == (7, 7, False)
    assert EVAL_LINE.match(lines[0]).groups()[1:] == ("9", "model.ckpt-9", "7", "averages")
    assert lines[0].endswith(" averages weights)")
    assert lines[1:3] == ["No misclassified images to show for model.ckpt-9: all 7 examples "
                          "were classified right.", "class        count  recall  precision"]
    pictures = sorted(n for n in os.listdir(tmp_path / "eval") if n.endswith(".png"))
    assert pictures == ["confusion_matrix-step9.png"]
    assert png_title(tmp_path / "eval" / pictures[0]) == (
        "Confusion matrix, model.ckpt-9, averages weights: precision @ 1 = 1.000")


def test_only_the_evaluator_lets_tensorflow_load_matplotlib():
    """The programs that do not draw keep Keras from importing matplotlib.pyplot."""
    script = ("import sys; from cifar10.cli import process; "
              "tf = process.load_tensorflow(plots=False); "
              "loaded = 'matplotlib.pyplot' in sys.modules; "
              "__import__('cifar10.evaluation.plots'); "
              "print(loaded, int(tf.reduce_sum([1, 2])))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["False", "3"], out.stderr


def test_characters_the_font_lacks_are_one_warning_and_others_pass(caplog, recwarn,
                                                                   monkeypatch):
    monkeypatch.setattr(plots, "_glyphs_said", set())
    # matplotlib's own font alone, which has no Chinese
    monkeypatch.setitem(plots.matplotlib.rcParams, "font.family", ["DejaVu Sans"])
    monkeypatch.setitem(plots.matplotlib.rcParams, "font.sans-serif", ["DejaVu Sans"])
    for _ in range(2):  # the second evaluation names nothing new
        png = plots.confusion_png([[1, 0, 0], [0, 2, 0], [1, 0, 3]], ["a", "狗", "猫"], "狗")
        assert png.startswith(b"\x89PNG")
        plots.misclassified_png(np.zeros([1, 32, 32, 3], np.uint8), ["狗"], ["猫"], "grid")
    assert [str(w.message) for w in recwarn] == []
    assert [r.getMessage() for r in caplog.records] == [
        "the pictures' font has no characters for 狗 猫 (in class names): they show as boxes "
        "in the pictures only; a font that has them, named in matplotlib's font.family "
        "setting (matplotlibrc), draws them"]

    def savefig_warns(self, *args, **kwargs):
        warnings.warn("something else", UserWarning)

    monkeypatch.setattr(plots.figure.Figure, "savefig", savefig_warns)
    with pytest.warns(UserWarning, match="something else"):
        plots.confusion_png([[1]], ["a"], "t")


def test_the_pictures_show_their_whole_title_long_names_and_whole_counts(monkeypatch):
    """A title is not cut at the sides; long class names in the grid are broken into
    lines, the grid drawn taller; the colour bar has whole counts."""
    title = "Confusion_matrix,_model.ckpt-123456,_averages_weights:_precision_@_1_=_0.333"
    for png in (plots.confusion_png(np.eye(2, dtype=int), ["a", "b"], title),
                plots.misclassified_png(np.zeros([1, 32, 32, 3], np.uint8), ["a"], ["b"], title)):
        pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
        dark = np.flatnonzero(pixels[:25].min(axis=0) < 128)  # the title's band
        assert dark.size and dark.min() > 2 and dark.max() < pixels.shape[1] - 3
    assert plots.grid_label("cat", "dog") == "cat →\ndog"
    label = plots.grid_label("a very long class name of many words", "x" * 30)
    assert label == "a very long class name\nof many words →\n" + "x" * 24 + "\n" + "x" * 6
    heights = [Image.open(io.BytesIO(plots.misclassified_png(
        np.zeros([2, 32, 32, 3], np.uint8), [name] * 2, ["b", "a"], "grid"))).size[1]
        for name in ("a", "a very long class name of many words")]
    assert heights[1] > heights[0], heights
    drawn = []
    real_png = plots._png
    monkeypatch.setattr(plots, "_png", lambda fig, *args: drawn.append(fig) or real_png(
        fig, *args))
    for top in (2, 900):
        plots.confusion_png([[top, 0], [1, 0]], ["a", "b"], "t")
        ticks = [t for t in drawn[-1].axes[1].get_yticks() if 0 <= t <= top]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
