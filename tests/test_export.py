"""Tests of cifar10.serving.export and the cifar10-export command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from cli import call, env, run, start
from test_images import COLOURS, grey_png, palette_bmp
from test_predict import records_of, write_pngs

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error
from cifar10.data import images as image_files
from cifar10.runs import checkpoints
from cifar10.serving import export
from cifar10.serving import predict

# In a process without the cifar10 package: what each signature and TFLite file give for
# images, none, a palette BMP and its PNG; the refusals of an RLE BMP and of an 8000x8000
# PNG, with the growth of the peak memory while that one is sent.
SERVE = """
import glob, json, os, resource, sys
sys.modules["cifar10"] = None
import numpy as np
import tensorflow as tf
export_dir, palette, colours, rle, huge, *paths = sys.argv[1:]
read = lambda path: open(path, "rb").read()
loaded = tf.saved_model.load(export_dir)
serve, images = loaded.signatures["serving_default"], loaded.signatures["predict_images"]
arrays = np.stack([tf.io.decode_png(read(p)).numpy() for p in paths])
from ai_edge_litert.interpreter import Interpreter
runners = {os.path.basename(path): Interpreter(model_path=path).get_signature_runner(
    "predict_images") for path in glob.glob(export_dir + "/*.tflite")}
as_list = lambda out: {k: [x.decode() if isinstance(x, bytes) else x
                           for x in np.asarray(v).tolist()] for k, v in dict(out).items()}
empty = {"serving_default": serve(images=tf.zeros([0], tf.string)),
         "predict_images": images(images=tf.zeros([0, 40, 50, 3])),
         "classify": {"": loaded.classify(tf.zeros([0, 32, 32, 3], tf.uint8))}}
def refusal(batch):
    try:
        serve(images=tf.constant(batch))
    except tf.errors.InvalidArgumentError as e:
        return e.message
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({
    "bytes": as_list(serve(images=tf.constant([read(p) for p in paths]))),
    "array": as_list(images(images=tf.constant(arrays, tf.float32))),
    **{name: as_list(runner(images=arrays.astype(np.float32))) for name, runner in runners.items()},
    "empty": {name: {k: [v.shape.as_list(), v.dtype.name] for k, v in out.items()}
              for name, out in empty.items()},
    "palette": [as_list(serve(images=tf.constant([read(path)])))["probabilities"][0]
                for path in (palette, colours)],  # (alone: rows of a batch may differ in bits)
    "rle": refusal([read(colours), read(rle)]),
    "huge": refusal([read(colours), read(huge)]),
    "grown_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
"""


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    """(export_dir, the command's result, image paths): step 6 exported with --tflite."""
    train_dir, test_files = trained_run
    root = tmp_path_factory.mktemp("export")
    result = run("cifar10-export", f"--checkpoint_dir={train_dir}",
                 f"--export_dir={root / 'export'}", "--tflite=int8,float16,float32,dynamic",
                 f"--data_dir={train_dir.parent / 'data'}", "--synthetic_data",
                 "--synthetic_records=50", "--calibration_images=40")
    images = records_of(test_files)[0][:5]  # and an all-black and an all-white image, on which
    flat = [np.full_like(images[0], level) for level in (0, 255)]  # int8 must not divide by 0
    paths = write_pngs(root / "images", np.concatenate([images, flat]))
    return root / "export", result, paths


@pytest.fixture(scope="module")
def served(exported, tmp_path_factory):
    export_dir, _, paths = exported
    folder = tmp_path_factory.mktemp("served")
    indices = np.random.default_rng(4).integers(0, 256, (45, 30))
    (folder / "p.bmp").write_bytes(palette_bmp(indices, COLOURS))
    tf.io.write_file(str(folder / "p.png"), tf.io.encode_png(COLOURS[indices]))
    runs = bytes([3, 5, 0, 0, 3, 9, 0, 1])  # (count, index) runs, end of line, of image
    (folder / "r.bmp").write_bytes(palette_bmp(np.zeros((2, 3)), COLOURS, compression=1,
                                               pixels=runs))
    (folder / "huge.png").write_bytes(grey_png(8000, 8000))
    out = subprocess.run([sys.executable, "-c", SERVE, str(export_dir / "6"),
                          *(str(folder / n) for n in ("p.bmp", "p.png", "r.bmp", "huge.png")),
                          *paths], capture_output=True, text=True, timeout=300, env=env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_command_writes_a_numbered_version_folder(exported, trained_run):
    export_dir, result, _ = exported
    train_dir, _ = trained_run
    assert (result.returncode, result.stderr) == (0, "")  # no TensorFlow or converter lines
    sizes = [f"  {name}: {os.path.getsize(export_dir / '6' / name) / 1e6:.2f} MB ({choice}"
             for choice, name in export.TFLITE_FILES.items()]
    assert result.stdout.splitlines()[1:] == [
        f"Exported {train_dir / 'model.ckpt-6'} (averages weights) to {export_dir / '6'}: "
        f"a SavedModel, and TFLite models:", *[line + ")" for line in sizes[:3]],
        sizes[3] + ", calibrated on 40 training images)"]
    assert sorted(os.listdir(export_dir)) == [".cifar10-folder", "6"]  # no scratch folder
    assert {"saved_model.pb", "variables", *export.TFLITE_FILES.values()} <= set(
        os.listdir(export_dir / "6"))
    # TensorFlow's ops only (not the compiled LRN kernel): it loads where that is not built.
    assert b"Cifar10Lrn" not in (export_dir / "6" / "saved_model.pb").read_bytes()
    # Readable by a server running as another user: not a private temporary folder.
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(export_dir / "6").st_mode & 0o777 == 0o777 & ~mask


def test_the_export_serves_what_cifar10_predict_prints(served, exported, trained_run):
    _, _, paths = exported
    model, _ = checkpoints.load_model(str(trained_run[0] / "model.ckpt-6"))
    expected = list(predict.predict_files(model, paths, top_k=10))
    want = np.zeros((len(paths), 10))
    for i, prediction in enumerate(expected):
        want[i, list(prediction.labels)] = prediction.probabilities
    # Each TFLite file's probabilities within its tolerance of TensorFlow's (the quantized
    # ones' classes may differ where this barely trained model's are near ties).
    for name, tolerance in (("bytes", 1e-5), ("array", 1e-5), ("model.tflite", 1e-4),
                            ("model-float16.tflite", 1e-3), ("model-dynamic.tflite", 0.01),
                            ("model-int8.tflite", 0.03)):
        out = served[name]
        np.testing.assert_allclose(out["probabilities"], want, atol=tolerance, err_msg=name)
        assert out["class_names"] == [predict.ff.CLASS_NAMES[c] for c in out["classes"]]
        if tolerance < 1e-3:
            assert out["classes"] == [p.labels[0] for p in expected], name


def test_the_export_answers_no_images_palettes_and_images_it_refuses(served):
    """Empty outputs; a palette BMP in its colours; an RLE BMP and an image over 50
    megapixels refused, the latter before it is decoded."""
    outputs = {"probabilities": [[0, 10], "float32"], "classes": [[0], "int64"],
               "class_names": [[0], "string"]}
    assert served["empty"] == {"serving_default": outputs, "predict_images": outputs,
                               "classify": {"": [[0, 10], "float32"]}}
    bmp, png = served["palette"]
    assert bmp == png
    assert image_files.BMP_REFUSED in served["rle"]
    assert ("an image of 8000x8000 pixels, more than the 50,000,000 an image may have here; "
            "scale it down first") in served["huge"]
    assert served["grown_mb"] < 50  # decoded, its pixels alone would take 192 MB


def test_a_run_of_fewer_classes_is_served_among_its_own_classes(trained_run, tmp_path):
    train_dir, test_files = trained_run
    images = records_of(test_files)[0][:4]
    model, _ = checkpoints.load_model(str(train_dir / "model.ckpt-6"))
    module = export.ServingModule(model, ("ant", "bee", "cow"))
    out = module.predict_images(tf.constant(images, tf.float32))
    # The softmax of the first three logits, as cifar10-predict gives them.
    expected = list(predict.predict_files(model, write_pngs(tmp_path, images), top_k=5,
                                          num_classes=3))
    assert [len(p.labels) for p in expected] == [3] * 4
    assert out["classes"].numpy().tolist() == [p.labels[0] for p in expected]
    assert [n.decode() for n in out["class_names"].numpy()] == [
        ("ant", "bee", "cow")[p.labels[0]] for p in expected]
    for row, prediction in zip(out["probabilities"].numpy(), expected):
        np.testing.assert_allclose(row[list(prediction.labels)], prediction.probabilities,
                                   atol=1e-6)


def test_an_existing_version_is_replaced_only_with_overwrite_and_only_if_an_export(
        trained_run, tmp_path):
    first = str(trained_run[0] / "model.ckpt-3")
    target = export.export(first, str(tmp_path), weights="raw")
    assert target == str(tmp_path / "3")
    with pytest.raises(Cifar10Error) as err:
        export.export(first, str(tmp_path))
    assert str(err.value) == (f"{target} exists (an export of step 3): pass --overwrite to "
                              f"replace it, or choose another --export_dir")
    stamp = os.stat(os.path.join(target, "saved_model.pb")).st_mtime_ns
    assert export.export(first, str(tmp_path), overwrite=True) == target
    assert os.stat(os.path.join(target, "saved_model.pb")).st_mtime_ns != stamp
    assert os.listdir(tmp_path) == ["3"]  # the earlier one gone, nothing left beside

    # What an export does not write again stays, and --overwrite is refused naming it.
    (tmp_path / "3" / "assets" / "vocab.txt").write_text("mine")
    for name in ("model.tflite", "model-float16.tflite"):
        (tmp_path / "3" / name).write_text("an earlier --tflite export's")
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "notes.txt").write_text("mine")
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    for checkpoint, folder, why in (
            (first, "3", "--overwrite would delete assets/vocab.txt, model-float16.tflite, "
                           "model.tflite"),
            ("model.ckpt-6", "6", "it is not a SavedModel")):
        with pytest.raises(Cifar10Error) as err:
            export.export(str(trained_run[0] / checkpoint), str(tmp_path), overwrite=True)
        assert str(err.value) == (f"{tmp_path / folder} is not replaced ({why}): move it "
                                  f"aside, or choose another --export_dir")
    with pytest.raises(Cifar10Error, match=r"/link is not replaced \(it is a link\)"):
        export._refuse_to_replace(str(tmp_path / "link"), 3, True, ())
    assert (tmp_path / "3" / "assets" / "vocab.txt").read_text() == "mine"
    assert os.listdir(tmp_path / "6") == ["notes.txt"]
    # With --tflite=float32,float16, its files are written again.
    (tmp_path / "3" / "assets" / "vocab.txt").unlink()
    export.export(first, str(tmp_path), overwrite=True, tflite=["float32", "float16"])
    for name in ("model.tflite", "model-float16.tflite"):
        assert (tmp_path / "3" / name).read_bytes()[4:8] == b"TFL3"


def test_a_wrong_tflite_choice_is_one_line():
    result = call("cifar10-export", "--tflite=float32,int4")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("cifar10-export: error: --tflite=float32,int4: choose among "
                             "float32,float16,dynamic,int8, comma-separated (see "
                             "cifar10-export --help)\n")


def test_an_overwrite_interrupted_as_it_swaps_keeps_the_earlier_export_whole(
        trained_run, tmp_path, monkeypatch):
    """A Ctrl-C as the new version goes in: the earlier one is back in its place."""
    first = str(trained_run[0] / "model.ckpt-3")
    target = export.export(first, str(tmp_path))
    before = sorted(os.listdir(target))
    rename = os.rename

    def interrupted(source, dest):
        if dest == target and "-incomplete-" in source:
            raise KeyboardInterrupt
        rename(source, dest)

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export(first, str(tmp_path), overwrite=True)
    assert os.listdir(tmp_path) == ["3"]
    assert sorted(os.listdir(target)) == before
    assert tf.saved_model.load(target).signatures["serving_default"] is not None


def test_an_unreadable_checkpoint_or_an_unwritable_export_dir_is_one_line(trained_run,
                                                                          tmp_path):
    train_dir, _ = trained_run
    with pytest.raises(Cifar10Error, match=r"^cannot read checkpoint .*model\.ckpt-99: [^\n]*$"):
        export.export(str(train_dir / "model.ckpt-99"), str(tmp_path / "export"))
    in_the_way = tmp_path / "file"
    in_the_way.write_text("a file where the export folder should go")
    with pytest.raises(Cifar10Error) as err:
        export.export(str(train_dir / "model.ckpt-6"), str(in_the_way / "export"))
    assert str(err.value) == (f"cannot write the export folder {in_the_way / 'export' / '6'} "
                              f"(Not a directory); choose an --export_dir you can write")
    assert not (tmp_path / "export").exists()


def test_an_export_stopped_by_ctrl_c_removes_the_folders_it_made_and_no_other(trained_run,
                                                                              tmp_path):
    (tmp_path / "kept").mkdir()  # the user's: stays, empty as it was
    export_dir = tmp_path / "kept" / "new" / "export"
    stopped = start("cifar10-export", f"--checkpoint_dir={trained_run[0]}",
                    f"--export_dir={export_dir}", "--tflite")
    try:
        deadline = time.monotonic() + 120  # (a guard)
        while not list(export_dir.glob(".6-incomplete-*")):
            assert stopped.poll() is None and time.monotonic() < deadline, "no export started"
            time.sleep(0.005)
        stopped.send_signal(signal.SIGINT)
        out, err = stopped.communicate(timeout=60)
    finally:
        stopped.kill()
    assert (stopped.returncode, out) == (130, "")
    assert err.splitlines()[-1] == "cifar10-export: interrupted"
    assert os.listdir(tmp_path / "kept") == []


def test_what_a_killed_export_left_is_removed_by_the_next_and_nothing_else(trained_run,
                                                                         tmp_path):
    export_dir = tmp_path / "export"
    killed = ("import os, sys; from cifar10.core import atomic\n"
              "with atomic.new_folder(sys.argv[1]):\n"
              "    print('in', flush=True); os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", killed, str(export_dir / "6")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -9 and out.stdout == "in\n"
    (leftover,) = os.listdir(export_dir)
    assert re.fullmatch(r"\.6-incomplete-\w+", leftover)
    # What the export cannot prove it wrote stays.
    (export_dir / ".6-incomplete-notmine").mkdir()
    (export_dir / ".6-incomplete-notmine" / "data").write_text("a user's")
    (export_dir / ".7-incomplete-abc").mkdir()
    (export_dir / ".7-incomplete-abc" / atomic.MARKER).write_text(json.dumps({"for": "8"}))
    (export_dir / ".6-incomplete-file").write_text("a user's")
    with atomic.new_folder(str(export_dir / "9")) as at_work:
        result = call("cifar10-export", f"--checkpoint_dir={trained_run[0]}",
                      f"--export_dir={export_dir}")
        assert os.path.isdir(at_work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"Removed what an interrupted export left in {export_dir}: {leftover}.")
    assert sorted(os.listdir(export_dir)) == [
        ".6-incomplete-file", ".6-incomplete-notmine", ".7-incomplete-abc", ".cifar10-folder",
        "6", "9"]
    assert os.listdir(export_dir / "9") == []  # the marker goes before the rename
