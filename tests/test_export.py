"""Tests of cifar10.serving.export and the cifar10-export command."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from cli import assert_refused, call, env, program, run
from test_predict import records_of, write_pngs

from cifar10.runs import checkpoints
from cifar10.serving import export
from cifar10.serving import predict
from cifar10.data import images as image_files
from cifar10.core.errors import Cifar10Error

# Run in a fresh process: loads the export with TensorFlow alone (no cifar10 code)
# and prints what each signature and the TFLite interpreter give.
SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
export_dir, paths = sys.argv[1], sys.argv[2:]
loaded = tf.saved_model.load(export_dir)
encoded = tf.constant([open(p, "rb").read() for p in paths])
by_bytes = loaded.signatures["serving_default"](images=encoded)
arrays = np.stack([tf.io.decode_png(open(p, "rb").read()).numpy() for p in paths])
by_array = loaded.signatures["predict_images"](images=tf.constant(arrays, tf.float32))
runner = tf.lite.Interpreter(model_path=export_dir + "/model.tflite").get_signature_runner(
    "predict_images")
by_tflite = runner(images=arrays.astype(np.float32))
as_list = lambda out: {k: [x.decode() if isinstance(x, bytes) else x
                           for x in np.asarray(v).tolist()] for k, v in dict(out).items()}
print(json.dumps({"bytes": as_list(by_bytes), "array": as_list(by_array),
                  "tflite": as_list(by_tflite)}))
"""


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    """(export_dir, the command's result, image paths): step 6 exported with --tflite."""
    train_dir, test_files = trained_run
    root = tmp_path_factory.mktemp("export")
    # In this process: the exporter's own process start is test_output.py's.
    result = call("cifar10-export", f"--checkpoint_dir={train_dir}",
                  f"--export_dir={root / 'export'}", "--tflite")
    paths = write_pngs(root / "images", records_of(test_files)[0][:5])
    return root / "export", result, paths


def test_the_command_writes_a_numbered_version_folder(exported, trained_run):
    export_dir, result, _ = exported
    train_dir, _ = trained_run
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        f"Exported {train_dir / 'model.ckpt-6'} (averages weights) to {export_dir / '6'}: "
        f"a SavedModel and model.tflite.")
    assert os.listdir(export_dir) == ["6"]  # nothing left of the temporary folder
    assert {"saved_model.pb", "variables", "model.tflite"} <= set(os.listdir(export_dir / "6"))
    # The run trained with the compiled LRN kernel; the export holds TensorFlow's ops
    # only, so that it loads where the kernel is not built.
    assert b"Cifar10Lrn" not in (export_dir / "6" / "saved_model.pb").read_bytes()
    assert b"LRN" not in (export_dir / "6" / "saved_model.pb").read_bytes()
    # Readable by a server running as another user: not a private temporary folder.
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(export_dir / "6").st_mode & 0o777 == 0o777 & ~mask


def test_the_export_serves_what_cifar10_predict_prints(exported, trained_run):
    export_dir, _, paths = exported
    train_dir, _ = trained_run
    served = subprocess.run([sys.executable, "-c", SERVE, str(export_dir / "6"), *paths],
                            capture_output=True, text=True, timeout=300, env=env())
    assert served.returncode == 0, served.stderr
    outputs = json.loads(served.stdout.strip().splitlines()[-1])
    model, _ = checkpoints.load_model(str(train_dir / "model.ckpt-6"))
    expected = list(predict.predict_files(model, paths, top_k=10))
    want = np.zeros((len(paths), 10))
    for i, prediction in enumerate(expected):
        want[i, list(prediction.labels)] = prediction.probabilities
    for name, tolerance in (("bytes", 1e-5), ("array", 1e-5), ("tflite", 1e-4)):
        out = outputs[name]
        np.testing.assert_allclose(out["probabilities"], want, atol=tolerance, err_msg=name)
        assert out["classes"] == [p.labels[0] for p in expected], name
        assert out["class_names"] == [predict.ff.CLASS_NAMES[p.labels[0]] for p in expected]


# Run in a fresh process: what each function of the export gives for no images, and for
# a batch holding an 8000x8000 PNG (62 KB; 192 MB decoded), with the growth of the
# process's peak memory while it is sent.
SERVE_EDGES = """
import json, resource, sys
import tensorflow as tf
export_dir, small, huge = sys.argv[1], open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
loaded = tf.saved_model.load(export_dir)
empty = {"serving_default": loaded.signatures["serving_default"](images=tf.zeros([0], tf.string)),
         "predict_images": loaded.signatures["predict_images"](images=tf.zeros([0, 40, 50, 3])),
         "classify": {"": loaded.classify(tf.zeros([0, 32, 32, 3], tf.uint8))}}
shapes = {name: {k: [v.shape.as_list(), v.dtype.name] for k, v in out.items()}
          for name, out in empty.items()}
loaded.signatures["serving_default"](images=tf.constant([small]))  # its first call's memory
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    loaded.signatures["serving_default"](images=tf.constant([small, huge]))
    refusal = None
except tf.errors.InvalidArgumentError as e:
    refusal = e.message
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # MB
print(json.dumps({"empty": shapes, "refusal": refusal, "grown_mb": grown}))
"""


@pytest.fixture(scope="module")
def served_edges(exported, tmp_path_factory):
    """SERVE_EDGES's output on the export."""
    from test_images import grey_png

    export_dir, _, paths = exported
    huge = tmp_path_factory.mktemp("huge") / "huge.png"
    huge.write_bytes(grey_png(8000, 8000))
    served = subprocess.run([sys.executable, "-c", SERVE_EDGES, str(export_dir / "6"),
                             paths[0], str(huge)],
                            capture_output=True, text=True, timeout=300, env=env())
    assert served.returncode == 0, served.stderr
    return json.loads(served.stdout.strip().splitlines()[-1])


def test_every_function_of_the_export_answers_no_images_with_empty_outputs(served_edges):
    """Not TensorFlow's "input depth must be evenly divisible by filter depth: 3 vs 64"."""
    outputs = {"probabilities": [[0, 10], "float32"], "classes": [[0], "int64"],
               "class_names": [[0], "string"]}
    assert served_edges["empty"] == {"serving_default": outputs, "predict_images": outputs,
                                     "classify": {"": [[0, 10], "float32"]}}


def test_the_export_refuses_an_image_over_50_megapixels_before_decoding_it(served_edges):
    assert ("assertion failed: [an image of 8000x8000 pixels, more than the 50,000,000 an "
            "image may have here; scale it down first]") in served_edges["refusal"]
    # Decoded, its pixels alone would take 192 MB.
    assert served_edges["grown_mb"] < 50


def test_saved_model_cli_shows_both_signatures_and_runs_the_bytes_one(exported, tmp_path):
    export_dir, _, paths = exported
    cli = program("saved_model_cli")  # installed with tensorflow
    shown = subprocess.run([cli, "show", "--all", "--dir", str(export_dir / "6")],
                           capture_output=True, text=True, timeout=120, env=env())
    assert shown.returncode == 0, shown.stderr
    for text in ("signature_def['serving_default']", "signature_def['predict_images']",
                 "outputs['probabilities']", "outputs['classes']", "outputs['class_names']",
                 "dtype: DT_STRING", "shape: (-1, -1, -1, 3)"):
        assert text in shown.stdout, text
    batch = tmp_path / "images.npy"  # a batch of 2 encoded images
    np.save(batch, np.array([open(p, "rb").read() for p in paths[:2]], dtype=object))
    ran = subprocess.run([cli, "run", "--dir", str(export_dir / "6"), "--tag_set", "serve",
                          "--signature_def", "serving_default", "--inputs", f"images={batch}"],
                         capture_output=True, text=True, timeout=120, env=env())
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"Result for output key class_names:\s*\[b'\w+' b'\w+'\]", ran.stdout)
    assert "Result for output key probabilities:" in ran.stdout


def test_an_existing_version_is_kept_unless_overwrite_and_only_if_a_saved_model(trained_run,
                                                                                 tmp_path):
    train_dir, _ = trained_run
    first = str(train_dir / "model.ckpt-3")
    target = export.export(first, str(tmp_path), weights="raw")
    assert target == str(tmp_path / "3")
    with pytest.raises(Cifar10Error) as err:
        export.export(first, str(tmp_path))
    assert str(err.value) == (f"{target} exists (an export of step 3): pass --overwrite to "
                              f"replace it, or choose another --export_dir")
    stamp = os.stat(os.path.join(target, "saved_model.pb")).st_mtime_ns
    assert export.export(first, str(tmp_path), overwrite=True) == target
    assert os.stat(os.path.join(target, "saved_model.pb")).st_mtime_ns != stamp
    assert sorted(os.listdir(tmp_path)) == ["3"]

    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "notes.txt").write_text("mine")
    with pytest.raises(Cifar10Error, match="is not a SavedModel: it is not replaced"):
        export.export(str(train_dir / "model.ckpt-6"), str(tmp_path), overwrite=True)
    assert os.listdir(tmp_path / "6") == ["notes.txt"]

    # A user's files in an earlier export: kept, and --overwrite refused naming them.
    (tmp_path / "3" / "mynotes.txt").write_text("mine")
    (tmp_path / "3" / "assets" / "vocab.txt").write_text("mine too")
    with pytest.raises(Cifar10Error) as err:
        export.export(first, str(tmp_path), overwrite=True)
    assert str(err.value) == (
        f"{target} holds files cifar10-export does not write (assets/vocab.txt, mynotes.txt):"
        f" --overwrite would delete them; move them out of it, or choose another --export_dir")
    assert (tmp_path / "3" / "mynotes.txt").read_text() == "mine"
    # A link to a version folder elsewhere is not replaced through.
    (tmp_path / "3" / "mynotes.txt").unlink()
    (tmp_path / "3" / "assets" / "vocab.txt").unlink()
    os.rename(tmp_path / "3", tmp_path / "real3")
    os.symlink(tmp_path / "real3", tmp_path / "3")
    with pytest.raises(Cifar10Error, match=r"/3 exists and is a link: it is not replaced; "):
        export.export(first, str(tmp_path), overwrite=True)
    assert os.path.isfile(tmp_path / "real3" / "saved_model.pb")


def test_overwrite_without_tflite_keeps_an_earlier_model_tflite_and_says_so(trained_run,
                                                                          tmp_path):
    """--overwrite replaces the version folder as a whole: an earlier --tflite export's
    model.tflite, which this export would not write again, stops it (one line, nothing
    deleted); with --tflite it is written anew."""
    train_dir, _ = trained_run
    target = export.export(str(train_dir / "model.ckpt-3"), str(tmp_path / "export"))
    tflite = pathlib.Path(target) / export.TFLITE_FILE
    tflite.write_bytes(b"an earlier --tflite export's")
    stamp = os.stat(os.path.join(target, "saved_model.pb")).st_mtime_ns
    result = call("cifar10-export", f"--checkpoint={train_dir / 'model.ckpt-3'}",
                  f"--export_dir={tmp_path / 'export'}", "--overwrite")
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"cifar10-export: error: {target} holds model.tflite (an export with --tflite): "
        f"--overwrite without --tflite would delete it; add --tflite to write it again, or "
        f"remove {tflite} first")
    assert tflite.read_bytes() == b"an earlier --tflite export's"
    assert os.stat(os.path.join(target, "saved_model.pb")).st_mtime_ns == stamp
    export.export(str(train_dir / "model.ckpt-3"), str(tmp_path / "export"), overwrite=True,
                  tflite=True)
    assert tflite.read_bytes()[4:8] == b"TFL3"  # a TFLite model's file identifier


def test_a_missing_checkpoint_or_an_unwritable_export_dir_is_one_line(trained_run, tmp_path):
    train_dir, _ = trained_run
    with pytest.raises(Cifar10Error, match=r"^cannot read checkpoint .*model\.ckpt-99: "):
        export.export(str(train_dir / "model.ckpt-99"), str(tmp_path / "export"))
    in_the_way = tmp_path / "file"
    in_the_way.write_text("a file where the export folder should go")
    with pytest.raises(Cifar10Error) as err:
        export.export(str(train_dir / "model.ckpt-6"), str(in_the_way / "export"))
    assert str(err.value) == (f"cannot write the export folder {in_the_way / 'export' / '6'} "
                              f"(Not a directory); choose an --export_dir you can write")
    assert not (tmp_path / "export").exists()
    with pytest.raises(Cifar10Error) as err:  # a folder that cannot be made at all
        export.export(str(train_dir / "model.ckpt-6"), "/proc/cifar10-export-test")
    assert str(err.value) == ("cannot write the export folder /proc/cifar10-export-test/6 (No "
                              "such file or directory); choose an --export_dir you can write")


def test_an_export_stopped_by_ctrl_c_removes_the_folders_it_made_and_no_other(trained_run,
                                                                              tmp_path):
    from cli import start

    train_dir, _ = trained_run
    (tmp_path / "kept").mkdir()  # the user's: stays, empty as it was
    export_dir = tmp_path / "kept" / "new" / "export"
    stopped = start("cifar10-export", f"--checkpoint_dir={train_dir}",
                    f"--export_dir={export_dir}", "--tflite")
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(str(export_dir / ".6-incomplete-*")):
            assert stopped.poll() is None and time.monotonic() < deadline, "no export started"
            time.sleep(0.005)
        stopped.send_signal(signal.SIGINT)
        out, err = stopped.communicate(timeout=60)
    finally:
        stopped.kill()
    assert (stopped.returncode, out) == (130, "")
    assert err.splitlines()[-1] == "cifar10-export: interrupted"
    assert os.listdir(tmp_path / "kept") == []


def test_a_run_of_fewer_classes_is_served_among_its_own_classes(trained_run, tmp_path):
    train_dir, test_files = trained_run
    images = records_of(test_files)[0][:4]
    paths = write_pngs(tmp_path, images)
    model, _ = checkpoints.load_model(str(train_dir / "model.ckpt-6"))
    module = export.ServingModule(model, ("ant", "bee", "cow"))
    out = module.predict_images(tf.constant(images, tf.float32))
    probabilities = out["probabilities"].numpy()
    assert probabilities.shape == (4, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)
    # The softmax of the first three logits, as cifar10-predict gives them.
    expected = list(predict.predict_files(model, paths, top_k=5, num_classes=3))
    assert [len(p.labels) for p in expected] == [3] * 4
    assert out["classes"].numpy().tolist() == [p.labels[0] for p in expected]
    assert [n.decode() for n in out["class_names"].numpy()] == [
        ("ant", "bee", "cow")[p.labels[0]] for p in expected]
    for row, prediction in zip(probabilities, expected):
        np.testing.assert_allclose(row[list(prediction.labels)], prediction.probabilities,
                                   atol=1e-6)


def test_an_export_killed_midway_is_cleaned_up_by_the_next_and_nothing_else_is(trained_run,
                                                                               tmp_path):
    from cli import call, start

    from cifar10.core import atomic

    train_dir, _ = trained_run
    export_dir = tmp_path / "export"
    killed = start("cifar10-export", f"--checkpoint_dir={train_dir}",
                   f"--export_dir={export_dir}", "--tflite")
    try:
        deadline = time.monotonic() + 120
        # Killed once its marker is written whole: one killed between the marker's
        # opening and its line could not be told from a user's folder, and stays.
        while not any(marker.read_text().endswith("}\n") for marker in map(
                pathlib.Path, glob.glob(str(export_dir / ".6-incomplete-*" / atomic.MARKER)))):
            assert killed.poll() is None and time.monotonic() < deadline, "no export started"
            time.sleep(0.005)
    finally:
        killed.kill()
        killed.communicate()
    (leftover,) = [name for name in os.listdir(export_dir) if name.startswith(".6-incomplete-")]
    # What the export cannot prove it wrote stays: a folder without its marker, a
    # marker for another name, a file, and the scratch folder of an export at work.
    (export_dir / ".6-incomplete-notmine").mkdir()
    (export_dir / ".6-incomplete-notmine" / "data").write_text("a user's")
    other = export_dir / ".7-incomplete-abc"
    other.mkdir()
    (other / atomic.MARKER).write_text(json.dumps({"for": "8"}) + "\n")
    (export_dir / ".6-incomplete-file").write_text("a user's")
    with atomic.new_folder(str(export_dir / "9")) as at_work:
        result = call("cifar10-export", f"--checkpoint_dir={train_dir}",
                      f"--export_dir={export_dir}")
        assert os.path.isdir(at_work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"Removed what an interrupted export left in {export_dir}: {leftover}.")
    assert sorted(os.listdir(export_dir)) == [
        ".6-incomplete-file", ".6-incomplete-notmine", ".7-incomplete-abc", "6", "9"]
    assert (export_dir / ".6-incomplete-notmine" / "data").read_text() == "a user's"
    assert "saved_model.pb" in os.listdir(export_dir / "6")
    assert os.listdir(export_dir / "9") == []  # the marker goes before the rename


def test_a_new_folder_left_by_a_dead_process_is_removed_only_once_its_lock_is_free(tmp_path):
    from cifar10.core import atomic

    script = ("import os, sys; from cifar10.core import atomic\n"
              "with atomic.new_folder(sys.argv[1]):\n"
              "    print('in', flush=True); os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -9 and out.stdout == "in\n"
    (scratch,) = os.listdir(tmp_path)
    assert re.fullmatch(r"\.data-incomplete-\w+", scratch)
    assert atomic.remove_leftovers(str(tmp_path)) == [scratch]
    assert os.listdir(tmp_path) == []
    assert atomic.remove_leftovers(str(tmp_path / "missing")) == []


def test_an_export_dir_whose_name_is_not_utf8_is_one_line_and_nothing_is_written(trained_run,
                                                                                 tmp_path):
    name = os.fsdecode(bytes(tmp_path) + b"/export\xff")  # bytes the file system allows
    result = run("cifar10-export", f"--checkpoint_dir={trained_run[0]}", f"--export_dir={name}",
                 timeout=60)
    assert_refused(result,
        f"cifar10-export: error: --export_dir={os.fsencode(name)!r} is not UTF-8: choose a name "
        f"in UTF-8 (TensorFlow reads and writes checkpoints and SavedModels by UTF-8 names) "
        f"(see cifar10-export --help)")
    assert os.listdir(tmp_path) == []


def test_export_passes_over_a_damaged_newest_checkpoint_and_names_a_folder_given_as_one(
        trained_run, tmp_path):
    train_dir, _ = trained_run
    copy = tmp_path / "train"
    shutil.copytree(train_dir, copy)
    (copy / "model.ckpt-6.data-00000-of-00001").write_bytes(b"\0" * 1000)
    result = call("cifar10-export", f"--checkpoint_dir={copy}", f"--export_dir={tmp_path / 'e'}")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"cifar10-export: warning: Using {copy}/model.ckpt-3, the "
                                    f"newest checkpoint in {copy} that reads: model.ckpt-6 "
                                    f"cannot be read (")
    assert os.listdir(tmp_path / "e") == ["3"]
    result = call("cifar10-export", f"--checkpoint={copy}", f"--export_dir={tmp_path / 'f'}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"cifar10-export: error: --checkpoint {copy} is a folder: pass --checkpoint_dir={copy} "
        f"for its newest checkpoint, or --checkpoint={copy}/model.ckpt-6"]
    assert not (tmp_path / "f").exists()


# Run in a fresh process, where the cifar10 package cannot be imported: the export's
# serving_default given a palette BMP and the PNG of its colours, then an
# RLE-compressed BMP.
SERVE_BMP = """
import json, sys
sys.modules["cifar10"] = None  # (an import of it fails)
import tensorflow as tf
export_dir, palette, png, rle = sys.argv[1:]
serve = tf.saved_model.load(export_dir).signatures["serving_default"]
read = lambda path: open(path, "rb").read()
out = serve(images=tf.constant([read(palette), read(png)]))
try:
    serve(images=tf.constant([read(png), read(rle)]))
    refusal = None
except tf.errors.InvalidArgumentError as e:
    refusal = e.message
print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                  "classes": out["classes"].numpy().tolist(), "refusal": refusal}))
"""


def test_the_export_serves_a_palette_bmp_in_its_colours_and_refuses_an_rle_one(
        exported, trained_run, tmp_path):
    """TensorFlow's decoder alone takes an 8-bit BMP's palette indices for grey levels
    and reads an RLE-compressed one's codes as pixels."""
    from test_images import COLOURS, palette_bmp

    export_dir, _, _ = exported
    train_dir, _ = trained_run
    indices = np.random.default_rng(4).integers(0, 256, (45, 30))
    (tmp_path / "p.bmp").write_bytes(palette_bmp(indices, COLOURS))
    tf.io.write_file(str(tmp_path / "p.png"), tf.io.encode_png(COLOURS[indices]))
    (tmp_path / "grey.png").write_bytes(tf.io.encode_png(indices[..., None].astype(np.uint8)
                                                         ).numpy())
    runs = bytes([3, 5, 0, 0, 3, 9, 0, 1])  # (count, index) runs, end of line, end of image
    (tmp_path / "r.bmp").write_bytes(palette_bmp(np.zeros((2, 3)), COLOURS, compression=1,
                                                 pixels=runs))
    served = subprocess.run([sys.executable, "-c", SERVE_BMP, str(export_dir / "6"),
                             *(str(tmp_path / name) for name in ("p.bmp", "p.png", "r.bmp"))],
                            capture_output=True, text=True, timeout=300, env=env())
    assert served.returncode == 0, served.stderr
    out = json.loads(served.stdout.strip().splitlines()[-1])
    bmp, png = out["probabilities"]
    assert bmp == png and out["classes"][0] == out["classes"][1]
    model, _ = checkpoints.load_model(str(train_dir / "model.ckpt-6"))
    predicted, grey = predict.predict_files(
        model, [str(tmp_path / "p.bmp"), str(tmp_path / "grey.png")], top_k=10)
    np.testing.assert_allclose(np.array(bmp)[list(predicted.labels)],
                               predicted.probabilities, atol=1e-5)
    assert not np.allclose(np.array(bmp)[list(grey.labels)], grey.probabilities, atol=1e-5)
    assert f"assertion failed: [{image_files.BMP_REFUSED}]" in out["refusal"]
