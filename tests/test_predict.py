"""Tests of cifar10.serving.predict and the cifar10-predict command."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf
from cli import assert_refused, call, run
from rundirs import keep_best
from specialfiles import watched_fifos
from test_images import COLOURS, palette_bmp

from cifar10.data import fileformat as ff
from cifar10.data import images as image_files
from cifar10.data import pipeline as data
from cifar10.runs import checkpoints
from cifar10.serving import predict


def records_of(test_files):
    images, labels = zip(*((x.numpy(), int(y)) for x, y in data.read_records(test_files)))
    return np.stack(images), labels


def write_pngs(folder, images):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, image in enumerate(images):
        paths.append(str(folder / f"record_{i:03d}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    return paths


def test_lossless_test_records_are_classified_exactly_as_the_evaluator_does(trained_run, tmp_path):
    train_dir, test_files = trained_run
    images, _ = records_of(test_files)
    paths = write_pngs(tmp_path, images)
    model, _ = checkpoints.load_model(str(train_dir / "model.ckpt-6"))
    # A batch size that leaves a partial batch at the end.
    results = list(predict.predict_files(model, paths, batch_size=8, top_k=10))
    assert [r.path for r in results] == paths
    # The softmax of the logits the evaluator computes.
    expected = tf.nn.softmax(tf.concat([model(images) for images, _ in data.eval_dataset(
        test_files, 7)], 0)).numpy()
    for result, want in zip(results, expected):
        assert len(result.labels) == 10 and sorted(result.labels) == list(range(10))
        got = np.zeros(10)
        got[list(result.labels)] = result.probabilities
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert list(result.probabilities) == sorted(result.probabilities, reverse=True)
        assert sum(result.probabilities) == pytest.approx(1.0, abs=1e-5)


def test_a_file_name_that_is_not_utf8_is_classified_and_shown_by_its_bytes(trained_run,
                                                                         tmp_path):
    """As a process (text: how it is printed) and in this process (jsonl)."""
    train_dir, test_files = trained_run
    images, _ = records_of(test_files)
    write_pngs(tmp_path / "photos", images[:2])
    odd = os.path.join(os.fsencode(tmp_path / "photos"), b"r\xff.png")
    with open(odd, "wb") as f:
        f.write(tf.io.encode_png(images[2]).numpy())
    for output, start in (("text", run), ("jsonl", call)):
        result = start("cifar10-predict", f"--checkpoint_dir={train_dir}", "--top_k=1",
                       f"--output={output}", str(tmp_path / "photos"))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        shown = [line for line in result.stdout.splitlines() if "photos/" in line]
        assert len(shown) == 3, result.stdout
        if output == "jsonl":
            shown = [json.loads(line)["path"] for line in shown]
        assert any("photos/r\\xff.png" in line for line in shown), shown


@pytest.mark.parametrize("path, text, jsonl, csv_row", [
    ("photos/a cat, maybe.png", "photos/a cat, maybe.png: cat 0.912, dog 0.050",
     "photos/a cat, maybe.png", '"photos/a cat, maybe.png",cat,0.912500,dog,0.050000'),
    # A name with a line break keeps each line and row whole.
    ("weird/new\nline\t.png", "weird/new\\nline\\t.png: cat 0.912, dog 0.050",
     "weird/new\nline\t.png", '"weird/new\nline\t.png",cat,0.912500,dog,0.050000'),
])
def test_text_jsonl_and_csv_lines(path, text, jsonl, csv_row):
    prediction = predict.Prediction(path, (3, 5), (0.9125, 0.05))
    assert predict.format_text(prediction, ff.CLASS_NAMES) == text
    assert json.loads(predict.format_jsonl(prediction, ff.CLASS_NAMES)) == {
        "path": jsonl, "top_k": [{"label": 3, "class": "cat", "probability": 0.9125},
                                 {"label": 5, "class": "dog", "probability": 0.05}]}
    assert predict.csv_header(2) == "path,class_1,probability_1,class_2,probability_2"
    row = predict.format_csv(prediction, ff.CLASS_NAMES)
    assert row == csv_row
    assert list(csv.reader(io.StringIO(row + "\n"))) == [[path, "cat", "0.912500", "dog",
                                                          "0.050000"]]
    assert predict.csv_header(12).count("class_") == 10


def test_the_docs_jsonl_line_is_what_the_program_writes():
    """docs/using-a-trained-model.md's example lines, float32 probabilities in full."""
    page = os.path.join(os.path.dirname(__file__), "..", "docs", "using-a-trained-model.md")
    with open(page, encoding="utf-8") as f:
        examples = [line.strip() for line in f if line.startswith('{"path"')]
    assert examples
    for example in examples:
        shown = json.loads(example)
        ranked = shown["top_k"]
        probabilities = tuple(c["probability"] for c in ranked)
        assert [float(np.float32(p)) for p in probabilities] == list(probabilities)
        assert [c["class"] for c in ranked] == [ff.CLASS_NAMES[c["label"]] for c in ranked]
        prediction = predict.Prediction(shown["path"], tuple(c["label"] for c in ranked),
                                        probabilities)
        assert predict.format_jsonl(prediction, ff.CLASS_NAMES) == example


def test_each_image_is_printed_once_and_one_that_does_not_read_fails_the_command_at_the_end(
        trained_run, tmp_path):
    """A folder given twice and its images again; a damaged image, FIFOs (never opened),
    a format it does not read, a file that is no image."""
    train_dir, test_files = trained_run
    photos = tmp_path / "photos"
    good = write_pngs(photos / "sub", records_of(test_files)[0][:3])
    (photos / "broken.png").write_bytes(b"\x89PNG broken")
    (photos / "scan.webp").write_bytes(b"RIFF")
    (photos / "notes.txt").write_text("not an image: passed over unsaid")
    named, inside = tmp_path / "fifo.png", photos / "z.png"
    with watched_fifos(named, inside) as opened:
        result = call("cifar10-predict", f"--checkpoint_dir={train_dir}", "--output=jsonl",
                      "--top_k=2", "--batch_size=2", str(photos), f"{photos}/", good[0],
                      f"{photos}/sub/./{os.path.basename(good[0])}", str(named))
    assert opened == []
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["path"] for line in lines] == good
    model, _ = checkpoints.load_model(str(train_dir / "model.ckpt-6"))
    for line, want in zip(lines, predict.predict_files(model, good, top_k=2)):
        assert [c["label"] for c in line["top_k"]] == list(want.labels)
        assert [c["class"] for c in line["top_k"]] == [ff.CLASS_NAMES[i] for i in want.labels]
        np.testing.assert_allclose([c["probability"] for c in line["top_k"]],
                                   want.probabilities, atol=1e-6)
    assert result.stderr.splitlines() == [
        f"cifar10-predict: warning: left out 1 file of a format it does not read "
        f"({photos}/scan.webp): it reads PNG, JPEG, GIF and BMP; convert it to one of those "
        f"to take it",
        f"cifar10-predict: warning: cannot read {photos}/broken.png: not an image TensorFlow "
        f"decodes (PNG, JPEG, GIF or BMP), or a damaged one",
        f"cifar10-predict: warning: cannot read {inside}: not a regular file",
        f"cifar10-predict: warning: cannot read {named}: not a regular file",
        "cifar10-predict: error: 3 of 6 images could not be read (see above)"]


@pytest.mark.parametrize("best", [False, True])
def test_predict_and_export_of_a_run_on_generated_data_say_so(trained_run, tmp_path, best):
    """Its best/ (its best checkpoint) is read with the run's own files: flags.txt, the
    class names."""
    train_dir, test_files = trained_run
    run_dir = tmp_path / "train"
    shutil.copytree(train_dir, run_dir)
    (run_dir / "flags.txt").write_text("# cifar10-train, started 2026-11-26T10:00:00+00:00 on h "
                                       "at step 0\n--synthetic_data\n")
    (run_dir / "class_names.txt").write_text("".join(f"thing{i}\n" for i in range(10)))
    folder = keep_best(run_dir, 3) if best else run_dir
    images, _ = records_of(test_files)
    [image] = write_pngs(tmp_path / "photos", images[:1])
    warning = (f"warning: the model of {run_dir} was trained on SYNTHETIC data "
               f"(--synthetic_data in {run_dir / 'flags.txt'}): its classes say nothing about "
               f"real images")
    predicted = call("cifar10-predict", f"--checkpoint_dir={folder}", image)
    assert predicted.returncode == 0, predicted.stderr
    assert predicted.stderr.splitlines() == [f"cifar10-predict: {warning}"]
    assert predicted.stdout.startswith(f"{image}: thing")  # the output itself as it was
    exported = call("cifar10-export", f"--checkpoint={folder / 'model.ckpt-3'}",
                    f"--export_dir={tmp_path / 'export'}")
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.splitlines() == [f"cifar10-export: {warning}"]
    # A run on real data, or one without records, says nothing of the kind.
    (run_dir / "flags.txt").write_text("# cifar10-train, started 2026-11-26T10:00:00+00:00 on h "
                                       "at step 0\n--nosynthetic_data\n")
    assert call("cifar10-predict", f"--checkpoint_dir={folder}", image).stderr == ""


def test_an_image_piped_in_is_named_by_a_dash_and_classified_as_its_file(trained_run, tmp_path,
                                                                         monkeypatch):
    train_dir, test_files = trained_run
    images, _ = records_of(test_files)
    [path] = write_pngs(tmp_path, images[:1])
    bmp = palette_bmp(np.array([[0, 1], [2, 3]]), COLOURS[:4], compression=1)  # RLE: refused
    for piped, status in ((open(path, "rb").read(), 0), (bmp, 1)):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(piped)))
        result = call("cifar10-predict", f"--checkpoint_dir={train_dir}", "--output=jsonl", "-",
                      path)
        assert result.returncode == status, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        if status == 0:
            assert [line["path"] for line in lines] == ["-", path]
            # Two rows of one batch: equal to about 1e-7 (AVX2's kernels), not bit for bit.
            piped_in, from_file = (line["top_k"] for line in lines)
            assert [k["label"] for k in piped_in] == [k["label"] for k in from_file]
            assert [k["probability"] for k in piped_in] == pytest.approx(
                [k["probability"] for k in from_file], abs=1e-6)
        else:
            assert [line["path"] for line in lines] == [path]
            assert result.stderr.splitlines() == [
                f"cifar10-predict: warning: cannot read -: {image_files.BMP_REFUSED}",
                "cifar10-predict: error: 1 of 2 images could not be read (see above)"]


class Endless(io.RawIOBase):
    """A pipe that ends only after ``cap`` bytes; ``given`` counts those read."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap, self.given = cap, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        count = min(len(buffer), self.cap - self.given)
        buffer[:count] = b"\7" * count
        self.given += count
        return count


def test_standard_input_past_its_limit_is_one_line_and_read_no_further(trained_run,
                                                                       monkeypatch):
    """Not read to its end; the limit takes any image of the most pixels (a 32-bit BMP)."""
    from cifar10.cli import predict_main

    assert predict_main.STDIN_LIMIT == 256 * 2 ** 20 > 138 + 4 * image_files.MAX_PIXELS
    monkeypatch.setattr(predict_main, "STDIN_LIMIT", 3 * 2 ** 20)  # 3 MiB, read by MiB
    endless = Endless(cap=50 * 2 ** 20)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(endless)))
    result = call("cifar10-predict", f"--checkpoint_dir={trained_run[0]}", "-")
    assert_refused(result, "cifar10-predict: error: - names an image read from standard "
                   "input, which holds more than 3,145,728 bytes (3 MiB), the most an image "
                   "piped in may have: save the image to a file and name the file")
    assert endless.given <= 3 * 2 ** 20 + io.DEFAULT_BUFFER_SIZE
    image = tf.io.encode_png(records_of(trained_run[1])[0][0]).numpy()
    for limit, status in ((len(image), 0), (len(image) - 1, 1)):
        monkeypatch.setattr(predict_main, "STDIN_LIMIT", limit)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(image)))
        result = call("cifar10-predict", f"--checkpoint_dir={trained_run[0]}", "--top_k=1", "-")
        assert (result.returncode, result.stdout.startswith("-: ")) == (status, status == 0)


def test_a_dash_with_a_terminal_for_standard_input_is_one_line_before_tensorflow(tmp_path,
                                                                                monkeypatch):
    class Terminal(io.TextIOWrapper):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal(io.BytesIO(b"")))
    result = call("cifar10-predict", f"--checkpoint_dir={tmp_path / 'nowhere'}", "-")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "cifar10-predict: error: - names an image read from standard input, which is a "
        "terminal: pipe the image in, as in cifar10-predict - < cat.png (a file named - is ./-)"]
