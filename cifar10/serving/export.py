"""A trained model as a SavedModel (and TFLite) in ``<export_dir>/<step>/``, with
cifar10-predict's preprocessing.  ``serving_default`` takes encoded images (tf.string),
``predict_images`` RGB float32 [N, H, W, 3] (as each TFLite file, ``TFLITE_FILES``); all
give ``probabilities`` [N, C], ``classes`` and ``class_names`` [N]."""

from __future__ import annotations

import os
import re
import shutil
import uuid
import warnings
from typing import Sequence

import numpy as np
import tensorflow as tf

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, first_line, io_advice, io_error, listed
from cifar10.data import fileformat as ff
from cifar10.data import folder as datafolder
from cifar10.data import images as image_files
from cifar10.data import pipeline
from cifar10.model import Model
from cifar10.runs import checkpoints
from cifar10.serving import predict

# --tflite's choices and their files: float32 as trained; float16 weights; "dynamic"
# range, int8 weights; int8 weights and activations, calibrated on training images.
TFLITE_FILES = {"float32": "model.tflite", "float16": "model-float16.tflite",
                "dynamic": "model-dynamic.tflite", "int8": "model-int8.tflite"}


# int8's floor of the standardisation's divisor, in pixel levels: the float one,
# 1/sqrt(1728), is 0 in int8, and LiteRT's int8 division fails on a flat image.
INT8_MIN_STD = 1.0
IMAGES = tf.TensorSpec([None, None, None, 3], tf.float32, name="images")  # predict_images's input


class ServingModule(tf.Module):
    """The model's weights and the two serving functions."""

    def __init__(self, model: Model, class_names: Sequence[str]):
        super().__init__(name="cifar10_serving")
        self.model = model
        self.class_names = tf.constant(list(class_names))
        self.classify = predict.make_classifier(model, len(class_names))

    def _outputs(self, images: tf.Tensor, classify=None) -> dict[str, tf.Tensor]:
        probabilities = (classify or self.classify)(images)
        classes = tf.argmax(probabilities, axis=1)
        return {"probabilities": probabilities, "classes": classes,
                "class_names": tf.gather(self.class_names, classes)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
    def predict_encoded(self, images):
        decoded = tf.map_fn(image_files.decode_image, images,
                            fn_output_signature=tf.TensorSpec([ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3],
                                                              tf.uint8))
        return self._outputs(decoded)

    @tf.function(input_signature=[IMAGES])
    def predict_images(self, images):
        return self._outputs(image_files.resize_to_cifar(images))

    def save_for_tflite(self, folder: str, min_std: float | None = None) -> None:
        """Saves ``predict_images`` to ``folder`` for TFLite's converter, without the guard
        for no images (a tf.cond, on which TensorFlow 2.16's int8 converter crashes);
        ``min_std``: the standardisation's floor of the divisor (``eval_batch``)."""
        num_classes = self.class_names.shape[0]

        def classify(images):  # as predict.make_classifier's, unguarded
            logits = tf.cast(self.model(pipeline.eval_batch(images, min_std)), tf.float32)
            return tf.nn.softmax(logits[:, :num_classes])

        unguarded = tf.function(lambda images: self._outputs(
            image_files.resize_to_cifar(images), classify), input_signature=[IMAGES])
        tf.saved_model.save(self, folder, signatures={"predict_images": unguarded})


def export(checkpoint: str, export_dir: str, weights: str = "averages",
           class_names: Sequence[str] = ff.CLASS_NAMES, overwrite: bool = False,
           tflite: Sequence[str] = (), calibration: np.ndarray | None = None,
           print_fn=print) -> str:
    """Writes ``checkpoint``'s model to ``<export_dir>/<step>/``; returns that folder.
    ``tflite``: the ``TFLITE_FILES`` choices also written; int8 is calibrated on
    ``calibration`` (uint8 images [N, 32, 32, 3], ``calibration_images``).

    Written under a scratch name and renamed when complete; an export replaced
    (``overwrite``) moves aside until the new one is in.  A failure removes what this
    made; a killed export's scratch folders are removed by the next.
    """
    if "int8" in tflite and calibration is None:
        raise ValueError("tflite=int8 needs calibration images")
    model, step = checkpoints.read_model(checkpoint, weights)
    removed = atomic.remove_leftovers(export_dir)
    if removed:
        print_fn(f"Removed what an interrupted export left in {export_dir}: "
                 f"{', '.join(removed)}.")
    target = os.path.join(export_dir, str(step))
    if os.path.lexists(target):
        _refuse_to_replace(target, step, overwrite, tflite)
    aside = None
    try:
        with atomic.made_folders_removed_on_failure(export_dir):
            try:
                with atomic.new_folder(target) as scratch:
                    module = ServingModule(model, class_names)
                    tf.saved_model.save(module, scratch, signatures={
                        "serving_default": module.predict_encoded,
                        "predict_images": module.predict_images})
                    for choice in tflite:
                        source = os.path.join(scratch, ".tflite-source")
                        module.save_for_tflite(source, INT8_MIN_STD if choice == "int8" else None)
                        _write_tflite(source, os.path.join(scratch, TFLITE_FILES[choice]),
                                      choice, calibration)
                        shutil.rmtree(source)
                    if os.path.lexists(target):
                        aside = os.path.join(export_dir, f".{step}-replaced-{uuid.uuid4().hex}")
                        os.rename(target, aside)
            except BaseException:
                if aside and not os.path.lexists(target):
                    os.rename(aside, target)  # the earlier export back in its place
                raise
        if aside:
            shutil.rmtree(aside)
    except OSError as e:
        raise io_error("cannot write the export folder", target, e,
                       io_advice(e) or "choose an --export_dir you can write") from e
    except tf.errors.OpError as e:
        raise Cifar10Error(f"cannot write the export {target}: {first_line(e)}") from e
    return target


def _refuse_to_replace(target: str, step: int, overwrite: bool, tflite: Sequence[str]) -> None:
    """Raises Cifar10Error unless ``target`` may be replaced as a whole: ``overwrite``
    given, and a SavedModel (not a link) holding only what this export writes again."""
    if not overwrite:
        raise Cifar10Error(f"{target} exists (an export of step {step}): pass --overwrite "
                           f"to replace it, or choose another --export_dir")
    why = ("it is a link" if os.path.islink(target) else
           "it is not a SavedModel" if not os.path.isfile(os.path.join(target, "saved_model.pb"))
           else f"--overwrite would delete {listed(others)}"
           if (others := _not_written(target, tflite)) else "")
    if why:
        raise Cifar10Error(f"{target} is not replaced ({why}): move it aside, or choose "
                           f"another --export_dir")


# What an export's version folder holds (tf.saved_model.save's files).
_EXPORT_FILES = (r"saved_model\.pb|fingerprint\.pb|assets/|variables/|"
                 r"variables/variables\.(index|data-\d+-of-\d+)")


def _not_written(folder: str, tflite: Sequence[str]) -> list[str]:
    """The paths in ``folder`` that an export (with the ``tflite`` choices) does not write."""
    written = re.compile("|".join([_EXPORT_FILES, *(re.escape(TFLITE_FILES[c])
                                                      for c in tflite)]))
    found = []
    for parent, dirs, files in os.walk(folder):
        relative = os.path.relpath(parent, folder)
        prefix = "" if relative == "." else relative + "/"
        found += [path for path in [prefix + f for f in files] + [prefix + d + "/" for d in dirs]
                  if not written.fullmatch(path)]
    return sorted(found)


def calibration_images(batches_dir: str, count: int) -> np.ndarray:
    """The first ``count`` training images of the data in ``batches_dir``: uint8 [N, 32, 32, 3]."""
    records = pipeline.read_records(datafolder.split_files(batches_dir, "train"))
    return np.stack([image.numpy() for image, _ in records.take(count)])


def _write_tflite(saved_model_dir: str, path: str, choice: str,
                  calibration: np.ndarray | None) -> None:
    """``path``: the ``choice`` of TFLite model of ``predict_images``.  int8 keeps float
    input and outputs (the signature's: images of any size, probabilities) with int8
    inside, calibrated at 32x32 on ``calibration``."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir, signature_keys=["predict_images"])
    if choice != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if choice == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if choice == "int8":
        converter.representative_dataset = lambda: (
            {"images": image[None].astype(np.float32)} for image in calibration)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    with warnings.catch_warnings():  # calibration runs the deprecated tf.lite.Interpreter
        warnings.filterwarnings("ignore", "(?s).*tf.lite.Interpreter is deprecated")
        model = converter.convert()
    with open(path, "wb") as f:
        f.write(model)
