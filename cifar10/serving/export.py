"""A trained model as a SavedModel (and TFLite) in ``<export_dir>/<step>/``, with
cifar10-predict's preprocessing.  ``serving_default`` takes encoded images (tf.string),
``predict_images`` RGB float32 [N, H, W, 3] (as ``model.tflite``); both give
``probabilities`` [N, C], ``classes`` and ``class_names`` [N]."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from typing import Sequence

import tensorflow as tf

from cifar10.core import atomic
from cifar10.core.errors import Cifar10Error, first_line, io_advice, io_error, listed
from cifar10.data import fileformat as ff
from cifar10.data import images as image_files
from cifar10.model import Model
from cifar10.runs import checkpoints
from cifar10.serving import predict

TFLITE_FILE = "model.tflite"


class ServingModule(tf.Module):
    """The model's weights and the two serving functions."""

    def __init__(self, model: Model, class_names: Sequence[str]):
        super().__init__(name="cifar10_serving")
        self.model = model
        self.class_names = tf.constant(list(class_names))
        self.classify = predict.make_classifier(model, len(class_names))

    def _outputs(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        probabilities = self.classify(images)
        classes = tf.argmax(probabilities, axis=1)
        return {"probabilities": probabilities, "classes": classes,
                "class_names": tf.gather(self.class_names, classes)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
    def predict_encoded(self, images):
        decoded = tf.map_fn(image_files.decode_image, images,
                            fn_output_signature=tf.TensorSpec([ff.IMAGE_SIZE, ff.IMAGE_SIZE, 3],
                                                              tf.uint8))
        return self._outputs(decoded)

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32,
                                                 name="images")])
    def predict_images(self, images):
        return self._outputs(image_files.resize_to_cifar(images))


def export(checkpoint: str, export_dir: str, weights: str = "averages",
           class_names: Sequence[str] = ff.CLASS_NAMES, overwrite: bool = False,
           tflite: bool = False, print_fn=print) -> str:
    """Writes ``checkpoint``'s model to ``<export_dir>/<step>/``; returns that folder.

    Written under a scratch name and renamed when complete; an export replaced
    (``overwrite``) moves aside until the new one is in.  A failure removes what this
    made; a killed export's scratch folders are removed by the next.
    """
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
                    if tflite:
                        _write_tflite(scratch)
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


def _refuse_to_replace(target: str, step: int, overwrite: bool, tflite: bool) -> None:
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


def _not_written(folder: str, tflite: bool) -> list[str]:
    """The paths in ``folder`` that an export (with ``tflite`` or not) does not write."""
    written = re.compile(_EXPORT_FILES + (r"|model\.tflite" if tflite else ""))
    found = []
    for parent, dirs, files in os.walk(folder):
        relative = os.path.relpath(parent, folder)
        prefix = "" if relative == "." else relative + "/"
        found += [path for path in [prefix + f for f in files] + [prefix + d + "/" for d in dirs]
                  if not written.fullmatch(path)]
    return sorted(found)


def _write_tflite(saved_model_dir: str) -> None:
    """``model.tflite`` from the ``predict_images`` signature, float32."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir, signature_keys=["predict_images"])
    with open(os.path.join(saved_model_dir, TFLITE_FILE), "wb") as f:
        f.write(converter.convert())
