"""The serving examples of docs/using-a-trained-model.md (each block after ``MARK``) run
as written, in a folder holding what the page's earlier blocks leave there (the export
in ``runs/a/export``, ``cat.png``, ``photos/``), and print what the page shows."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import subprocess

import pytest
import tensorflow as tf

from cli import BIN_DIR, call, env
from test_predict import records_of

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "using-a-trained-model.md"
MARK = "<!-- run by tests/test_serving_docs.py -->"
IMAGES = ("cat.png", "photos/a.png", "photos/b.jpg")


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each block that follows the mark, in page order."""
    return re.findall(re.escape(MARK) + r"\n```(\w+)\n(.*?)\n```", text, re.S)


def output_after(text: str, code: str) -> str:
    """The ```text block (the output shown) right after the block holding ``code``."""
    rest = text[text.index(code) + len(code):]
    rest = rest[rest.index("\n```") + len("\n```"):]  # past the block's own end
    return re.match(r"\s*```text\n(.*?)\n```", rest, re.S)[1]


@pytest.fixture(scope="module")
def folder(trained_run, tmp_path_factory):
    """(the examples' folder, {image: its served class name})."""
    train_dir, test_files = trained_run
    root = tmp_path_factory.mktemp("serving_docs")
    result = call("cifar10-export", f"--checkpoint_dir={train_dir}",
                  f"--export_dir={root / 'runs/a/export'}", "--tflite")
    assert result.returncode == 0, result.stderr
    (root / "photos").mkdir()
    images, _ = records_of(test_files)
    for name, image in zip(IMAGES, images):
        encode = tf.io.encode_jpeg if name.endswith(".jpg") else tf.io.encode_png
        (root / name).write_bytes(encode(image).numpy())
    served = tf.saved_model.load(str(root / "runs/a/export/6")).signatures["serving_default"](
        images=tf.constant([(root / name).read_bytes() for name in IMAGES]))
    return root, dict(zip(IMAGES, (n.decode() for n in served["class_names"].numpy())))


def run_block(language: str, code: str, cwd: pathlib.Path, monkeypatch) -> str:
    """Runs one block in ``cwd``; returns what it printed (stdout)."""
    if language == "bash":
        result = subprocess.run(["bash", "-e", "-c", code], cwd=cwd, capture_output=True,
                                text=True, timeout=300,
                                env=env(PATH=BIN_DIR + os.pathsep + os.environ["PATH"]))
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout
    assert language == "python", language
    monkeypatch.chdir(cwd)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), {"__name__": "__main__"})
    return out.getvalue()


def test_the_python_example_calls_every_function_and_tflite_agrees(folder, monkeypatch):
    root, names = folder
    text = PAGE.read_text()
    assert [language for language, _ in blocks(text)] == ["python", "bash"]
    _, code = blocks(text)[0]
    for call_ in ('signatures["serving_default"]', "predict_images(", "classify(",
                  "ai_edge_litert.interpreter import Interpreter"):
        assert call_ in code
    printed = run_block("python", code, root, monkeypatch).splitlines()
    cat = names["cat.png"]
    # The name and [1, 10] probabilities; predict_images, then TFLite's; classify's class.
    assert printed[0].startswith(f"[b'{cat}'] [["), printed
    assert len(re.findall(r"\d\.\d+", printed[0])) == 10, printed
    assert printed[1:3] == [f"[b'{cat}']"] * 2, printed
    assert re.fullmatch(r"\[\d\]", printed[3]), printed
    shown = output_after(text, code).splitlines()
    assert len(shown) == len(printed) and shown[1] == shown[2], shown


def test_the_saved_model_cli_example_prints_what_the_page_shows(folder, monkeypatch):
    root, names = folder
    text = PAGE.read_text()
    _, code = blocks(text)[1]
    assert "saved_model_cli run " in code
    printed = run_block("bash", code, root, monkeypatch)
    heads = re.findall(r"^Result for output key \w+:$", printed, re.M)
    assert heads == re.findall(r"^Result for output key \w+:$", output_after(text, code), re.M)
    assert heads == [f"Result for output key {key}:" for key in
                     ("class_names", "classes", "probabilities")]
    assert "[" + " ".join(f"b'{names[name]}'" for name in IMAGES) + "]" in printed
