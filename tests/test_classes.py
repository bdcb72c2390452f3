"""Any number of classes: the model's outputs follow the data's class names, from
cifar10-prepare through training, evaluation and prediction to the SavedModel."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from cli import call
from cifar10.runs import checkpoints
from cifar10.training.step import TrainState
from cifar10.data import fileformat as ff
from cifar10.evaluation.exported import litert_interpreter
from conftest import EVAL_LINE


def write_classes(root, num_classes: int, per_class: int = 3) -> list[str]:
    """``num_classes`` class folders of ``per_class`` PNG images; returns one image path."""
    rng = np.random.default_rng(num_classes)
    for label in range(num_classes):
        for i in range(per_class):
            path = root / f"class{label:03d}" / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            tf.io.write_file(str(path), tf.io.encode_png(
                rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)))
    return [str(root / "class000" / "0.png")]


def write_data(data_dir, num_classes: int) -> None:
    """A data folder of ``num_classes`` classes, as cifar10-prepare writes one."""
    batches_dir = data_dir / ff.BATCHES_DIRNAME
    batches_dir.mkdir(parents=True)
    rng = np.random.default_rng(num_classes)
    for name in ff.TRAIN_FILES + ff.TEST_FILES:
        records = rng.integers(0, 256, (4, ff.RECORD_BYTES), dtype=np.uint8)
        records[:, 0] = np.arange(4) % num_classes
        (batches_dir / name).write_bytes(records.tobytes())
    (batches_dir / ff.META_FILE).write_text("".join(f"class{i:03d}\n" for i in range(num_classes)))


# 100 classes change only this package's shapes, tables and class lists (and leave
# the confusion matrix out), not which TensorFlow calls run.
@pytest.mark.parametrize("num_classes", [3, pytest.param(100, marks=pytest.mark.slow)])
def test_prepare_train_eval_predict_export_follow_the_class_count(tmp_path, num_classes):
    image = write_classes(tmp_path / "photos", num_classes)
    data_dir, train_dir = tmp_path / "data", tmp_path / "train"
    prepared = call("cifar10-prepare", f"--image_dir={tmp_path / 'photos'}",
                    f"--data_dir={data_dir}", "--test_fraction=0.34")
    assert prepared.returncode == 0, prepared.stderr
    assert f"Found {3 * num_classes} images of {num_classes} classes in " in prepared.stdout
    assert f"records of {num_classes} classes (class000, class001" in prepared.stdout

    trained = call("cifar10-train", f"--data_dir={data_dir}", f"--train_dir={train_dir}",
                   "--max_steps=2", "--batch_size=8", "--summary_steps=1000")
    assert trained.returncode == 0, trained.stderr
    names = checkpoints.trained_class_names(str(train_dir))
    assert names == tuple(f"class{i:03d}" for i in range(num_classes))
    ckpt = str(train_dir / "model.ckpt-2")
    assert checkpoints.num_outputs(ckpt) == num_classes
    reader = tf.train.load_checkpoint(ckpt)
    for copy in ("model", "averages"):
        key = f"{copy}/softmax_linear/weights/.ATTRIBUTES/VARIABLE_VALUE"
        assert reader.get_variable_to_shape_map()[key] == [192, num_classes]

    evaluated = call("cifar10-eval", f"--data_dir={data_dir}", f"--checkpoint_dir={train_dir}",
                     f"--eval_dir={tmp_path / 'eval'}", "--run_once", "--batch_size=8")
    assert evaluated.returncode == 0, evaluated.stderr
    out = evaluated.stdout.splitlines()
    assert EVAL_LINE.match(out[0])
    # Then a row per class, and the confusion matrix up to 20 classes (wider would not read).
    assert out[1].split() == ["class", "count", "recall", "precision"]
    assert [row.split()[0] for row in out[2:2 + num_classes]] == list(names)
    assert ("confusion matrix (rows: true class; columns: predicted class, as numbered):"
            in out) == (num_classes <= 20)
    assert len(out) == 2 + num_classes + (2 + num_classes if num_classes <= 20 else 0)

    predicted = call("cifar10-predict", f"--checkpoint_dir={train_dir}", "--output=jsonl",
                     f"--top_k={num_classes}", *image)
    assert predicted.returncode == 0, predicted.stderr
    ranked = json.loads(predicted.stdout)["top_k"]
    assert sorted(c["label"] for c in ranked) == list(range(num_classes))
    assert {c["class"] for c in ranked} == set(names)
    assert sum(c["probability"] for c in ranked) == pytest.approx(1.0, abs=1e-4)

    tflite = ["--tflite"] if num_classes == 3 else []  # the TFLite model follows too
    exported = call("cifar10-export", f"--checkpoint_dir={train_dir}",
                    f"--export_dir={tmp_path / 'export'}", *tflite)
    assert exported.returncode == 0, exported.stderr
    loaded = tf.saved_model.load(str(tmp_path / "export" / "2"))
    for name in ("serving_default", "predict_images"):
        outputs = loaded.signatures[name].structured_outputs
        assert outputs["probabilities"].shape.as_list() == [None, num_classes]
    out = loaded.signatures["serving_default"](images=tf.constant([open(image[0], "rb").read()]))
    assert out["probabilities"].shape == (1, num_classes)
    assert out["class_names"].numpy()[0].decode() in names
    if tflite:
        runner = litert_interpreter(
            str(tmp_path / "export" / "2" / "model.tflite")).get_signature_runner(
                "predict_images")
        pixels = tf.io.decode_png(open(image[0], "rb").read()).numpy()[None].astype(np.float32)
        by_tflite = runner(images=pixels)
        assert by_tflite["probabilities"].shape == (1, num_classes)
        np.testing.assert_allclose(by_tflite["probabilities"],
                                   loaded.signatures["predict_images"](
                                       images=tf.constant(pixels))["probabilities"].numpy(),
                                   atol=1e-4)


@pytest.fixture
def old_three_class_run(tmp_path):
    """A run on 3 classes as the trainer wrote it when the model always had 10 outputs."""
    image = write_classes(tmp_path / "photos", 3)
    data_dir, train_dir = tmp_path / "data", tmp_path / "train"
    write_data(data_dir, 3)
    state = TrainState(seed=0, compute_dtype=tf.float32, num_classes=10)
    os.makedirs(train_dir)
    state.checkpoint().write(str(train_dir / "model.ckpt-5"))
    (train_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    (train_dir / "class_names.txt").write_text("class000\nclass001\nclass002\n")
    return data_dir, train_dir, image


def test_a_run_of_before_still_evaluates_predicts_and_exports(old_three_class_run, tmp_path):
    data_dir, train_dir, image = old_three_class_run
    evaluated = call("cifar10-eval", f"--data_dir={data_dir}", f"--checkpoint_dir={train_dir}",
                     f"--eval_dir={tmp_path / 'eval'}", "--run_once", "--batch_size=8")
    assert evaluated.returncode == 0, evaluated.stderr
    predicted = call("cifar10-predict", f"--checkpoint_dir={train_dir}", "--output=jsonl",
                     "--top_k=10", *image)
    assert predicted.returncode == 0, predicted.stderr
    assert len(json.loads(predicted.stdout)["top_k"]) == 3  # its own classes only


def test_resuming_with_another_class_count_is_refused(old_three_class_run, tmp_path):
    data_dir, train_dir, _ = old_three_class_run
    resumed = call("cifar10-train", f"--data_dir={data_dir}", f"--train_dir={train_dir}",
                   "--max_steps=7", "--batch_size=8")
    assert resumed.returncode == 1
    assert resumed.stderr.strip().splitlines()[-1] == (
        f"cifar10-train: error: the run in {train_dir} has a model of 10 classes "
        f"(model.ckpt-5) and --data_dir holds 3 (class000, class001, class002): train it on "
        f"the data it started with, or choose another --train_dir")
    assert sorted(os.listdir(train_dir)) == ["checkpoint", "cifar10-train.lock",
                                             "class_names.txt", "model.ckpt-5.data-00000-of-00001",
                                             "model.ckpt-5.index"]


def test_another_class_list_is_refused_by_the_evaluator(tmp_path):
    write_data(tmp_path / "data_a", 3)
    write_data(tmp_path / "data_b", 4)
    train_dir = tmp_path / "train"
    assert call("cifar10-train", f"--data_dir={tmp_path / 'data_a'}", f"--train_dir={train_dir}",
                "--max_steps=1", "--batch_size=8").returncode == 0
    refused = (f"cifar10-eval: error: the run in {train_dir} was trained on 3 classes "
               f"(class000, class001, class002) and --data_dir holds 4 (class000, class001, "
               f"class002, class003): ")
    # The fix names the run's data (its flags.txt records it).
    evaluated = call("cifar10-eval", f"--data_dir={tmp_path / 'data_b'}",
                     f"--checkpoint_dir={train_dir}", f"--eval_dir={tmp_path / 'eval'}")
    assert evaluated.returncode == 1
    assert evaluated.stderr.strip().splitlines()[-1] == refused + (
        f"leave out --data_dir to use the run's (--data_dir={tmp_path / 'data_a'}, in "
        f"{train_dir / 'flags.txt'}), or pass a --data_dir with those 3 classes")
    # The run's own data, followed, holds other classes now: no data flag to leave out.
    shutil.rmtree(tmp_path / "data_a")
    shutil.copytree(tmp_path / "data_b", tmp_path / "data_a")
    evaluated = call("cifar10-eval", f"--checkpoint_dir={train_dir}",
                     f"--eval_dir={tmp_path / 'eval'}", "--run_once")
    assert evaluated.stderr.strip().splitlines()[-1] == (
        refused + "pass a --data_dir with those 3 classes")
    assert not (tmp_path / "eval").exists()
