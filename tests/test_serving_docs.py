"""The serving examples of docs/using-a-trained-model.md (each block after ``MARK``) run
as written, in a folder holding what they name (the export, ``cat.png``, ``dog.jpg``)."""

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
DATA_DIR = "/tmp/cifar10_data"
VERSION = "runs/a/export/100000"


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each block that follows the mark, in page order."""
    return re.findall(re.escape(MARK) + r"\n```(\w+)\n(.*?)\n```", text, re.S)


def output_after(text: str, code: str) -> str:
    """The plain block (the output shown) right after the block holding ``code``."""
    rest = text[text.index(code) + len(code):]
    rest = rest[rest.index("\n```") + len("\n```"):]  # past the block's own end
    return re.match(r"\s*```\n(.*?)\n```", rest, re.S)[1]


@pytest.fixture(scope="module")
def folder(trained_run, tmp_path_factory):
    """(the examples' folder, the run's data folder, {image: its served class name})."""
    train_dir, test_files = trained_run
    root = tmp_path_factory.mktemp("serving_docs")
    result = call("cifar10-export", f"--checkpoint_dir={train_dir}",
                  f"--export_dir={root / 'runs/a/export'}", "--tflite")
    assert result.returncode == 0, result.stderr
    os.rename(root / "runs/a/export/6", root / VERSION)
    images, _ = records_of(test_files)
    (root / "cat.png").write_bytes(tf.io.encode_png(images[0]).numpy())
    (root / "dog.jpg").write_bytes(tf.io.encode_jpeg(images[1], quality=95).numpy())
    served = tf.saved_model.load(str(root / VERSION)).signatures["serving_default"](
        images=tf.constant([(root / name).read_bytes() for name in ("cat.png", "dog.jpg")]))
    names = [n.decode() for n in served["class_names"].numpy()]
    data_dir = pathlib.Path(test_files[0]).parents[1]  # it holds cifar-10-batches-bin/
    return root, data_dir, dict(zip(("cat.png", "dog.jpg"), names))


def run_block(language: str, code: str, cwd: pathlib.Path, data_dir: pathlib.Path,
              monkeypatch) -> str:
    """Runs one block in ``cwd``; returns what it printed (stdout)."""
    code = code.replace(DATA_DIR, str(data_dir))
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


def test_the_python_example_calls_every_function(folder, monkeypatch):
    root, data_dir, names = folder
    assert [language for language, _ in blocks(PAGE.read_text())] == ["python", "bash", "python"]
    _, code = blocks(PAGE.read_text())[0]
    for call_ in ('signatures["serving_default"]', "predict_images(", "classify("):
        assert call_ in code
    printed = run_block("python", code, root, data_dir, monkeypatch)
    # The two images' names and their [2, 10] probabilities (numpy wraps the rows).
    assert printed.startswith(f"[b'{names['cat.png']}' b'{names['dog.jpg']}'] [[")
    assert len(re.findall(r"\d\.\d+", printed.split("]]")[0])) == 2 * 10
    lines = printed.split("]]\n")[1].splitlines()
    assert re.fullmatch(rf"\[b'{names['cat.png']}'\] \[\d+\]", lines[0]), lines
    assert re.fullmatch(r"true class \d+ predicted \[\d+\]", lines[1]), lines


def test_the_saved_model_cli_example_prints_what_the_page_shows(folder, monkeypatch):
    root, data_dir, names = folder
    text = PAGE.read_text()
    _, code = blocks(text)[1]
    assert "saved_model_cli run " in code
    printed = run_block("bash", code, root, data_dir, monkeypatch)
    heads = re.findall(r"^Result for output key \w+:$", printed, re.M)
    assert heads == re.findall(r"^Result for output key \w+:$", output_after(text, code), re.M)
    assert heads == [f"Result for output key {key}:" for key in
                     ("class_names", "classes", "probabilities")]
    assert f"[b'{names['cat.png']}' b'{names['dog.jpg']}']" in printed


def test_the_tflite_example_gives_the_saved_models_answer(folder, monkeypatch):
    root, data_dir, names = folder
    _, code = blocks(PAGE.read_text())[2]
    assert "tf.lite.Interpreter(" in code
    printed = run_block("python", code, root, data_dir, monkeypatch)
    assert printed.startswith(f"[b'{names['cat.png']}'] [")
