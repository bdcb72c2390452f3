"""A trained model as a SavedModel for TensorFlow Serving, and for TFLite.

The export is a numbered version folder, ``<export_dir>/<step>/``, the layout
TensorFlow Serving polls.  Its preprocessing is in the graph and is
``cifar10.serving.predict``'s, so the served model classifies an image exactly as
``cifar10-predict`` does.  Signatures:

* ``serving_default``: ``images``, a batch of encoded images (tf.string: PNG,
  JPEG, GIF or BMP, any size) -> ``probabilities`` [N, C], ``classes`` [N]
  (int64) and ``class_names`` [N] (tf.string), where C is the number of
  classes the run was trained on (10 for CIFAR-10).  Decoded by
  ``data.images.decode_image``, in the graph: an 8-bit BMP gets its palette's
  colours, and a BMP cifar10-predict refuses, or an image whose header gives more
  than 50 megapixels, fails the call (before it is decoded), its message saying why;
* ``predict_images``: ``images``, decoded RGB images float32 [N, H, W, 3] with
  values 0-255 -> the same outputs.  ``model.tflite`` (``--tflite``) has this
  signature.

No images give empty outputs ([0, C], [0], [0]): ``predict.make_classifier`` does not
run the model on them.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Sequence

import tensorflow as tf

from cifar10.core import atomic
from cifar10.runs import checkpoints
from cifar10.data import fileformat as ff
from cifar10.data import images as image_files
from cifar10.serving import predict
from cifar10.core.errors import Cifar10Error, first_line, io_advice, io_error
from cifar10.model import Model

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

    The version folder is written under a temporary name and renamed when
    complete (``atomic.new_folder``), so that a server polling ``export_dir``
    never loads half of it; a failed or interrupted export removes the folders it
    made (``export_dir`` and its parents), never one that was there.  What an
    export killed before its rename left in ``export_dir`` is removed first, one
    line (``print_fn``) says so; only folders ``atomic.remove_leftovers`` proves to
    be such leftovers.

    Raises:
      Cifar10Error: the checkpoint cannot be read; the version folder exists and
        may not be replaced (``_refuse_to_replace``); ``export_dir`` cannot be written.
    """
    model, step = checkpoints.read_model(checkpoint, weights)
    removed = atomic.remove_leftovers(export_dir)
    if removed:
        print_fn(f"Removed what an interrupted export left in {export_dir}: "
                 f"{', '.join(removed)}.")
    target = os.path.join(export_dir, str(step))
    if os.path.lexists(target):
        _refuse_to_replace(target, step, overwrite, tflite)
    try:
        # A failure, or Ctrl-C / SIGTERM, leaves no folder made for the export.
        with atomic.made_folders_removed_on_failure(export_dir), \
                atomic.new_folder(target) as scratch:
            module = ServingModule(model, class_names)
            signatures = {"serving_default": module.predict_encoded,
                          "predict_images": module.predict_images}
            tf.saved_model.save(module, scratch, signatures=signatures)
            if tflite:
                _write_tflite(scratch)
            if os.path.lexists(target):  # an earlier export, replaced (--overwrite)
                shutil.rmtree(target)
    except OSError as e:
        raise io_error("cannot write the export folder", target, e,
                       io_advice(e) or "choose an --export_dir you can write") from e
    except tf.errors.OpError as e:
        raise Cifar10Error(f"cannot write the export {target}: {first_line(e)}") from e
    return target


def _refuse_to_replace(target: str, step: int, overwrite: bool, tflite: bool) -> None:
    """Raises Cifar10Error unless the existing version folder ``target`` may be replaced
    as a whole: ``overwrite`` given, a SavedModel (not a link to one) holding nothing
    but what an export writes, and no ``model.tflite`` that this export (without
    ``tflite``) would not write again: replacing would delete it unsaid."""
    if not overwrite:
        raise Cifar10Error(f"{target} exists (an export of step {step}): pass --overwrite "
                           f"to replace it, or choose another --export_dir")
    if os.path.islink(target) or not os.path.isfile(os.path.join(target, "saved_model.pb")):
        what = "a link" if os.path.islink(target) else "not a SavedModel"
        raise Cifar10Error(f"{target} exists and is {what}: it is not replaced; "
                           f"move it aside or choose another --export_dir")
    foreign = _not_an_exports(target)
    if foreign:
        raise Cifar10Error(
            f"{target} holds files cifar10-export does not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}): --overwrite would delete them; move "
            f"them out of it, or choose another --export_dir")
    tflite_file = os.path.join(target, TFLITE_FILE)
    if not tflite and os.path.lexists(tflite_file):
        raise Cifar10Error(
            f"{target} holds {TFLITE_FILE} (an export with --tflite): --overwrite without "
            f"--tflite would delete it; add --tflite to write it again, or remove "
            f"{tflite_file} first")


# What an export's version folder holds (tf.saved_model.save's files, and --tflite's).
_EXPORT_FILES = re.compile(r"saved_model\.pb|fingerprint\.pb|model\.tflite|"
                           r"variables/variables\.(index|data-\d+-of-\d+)")
_EXPORT_FOLDERS = ("variables", "assets")


def _not_an_exports(folder: str) -> list[str]:
    """The files and folders in ``folder`` (an earlier export's version folder) that an
    export does not write, by their paths in it, sorted: what --overwrite would delete
    of a user's."""
    found = []
    for parent, dirs, files in os.walk(folder):
        relative = os.path.relpath(parent, folder)
        for name in sorted(dirs + files):
            path = name if relative == "." else f"{relative}/{name}"
            if name in dirs and relative == "." and name in _EXPORT_FOLDERS:
                continue
            if name in files and _EXPORT_FILES.fullmatch(path):
                continue
            found.append(path + ("/" if name in dirs else ""))
        dirs[:] = [d for d in dirs if relative == "." and d in _EXPORT_FOLDERS]
    return sorted(found)


def _write_tflite(saved_model_dir: str) -> None:
    """``model.tflite`` from the ``predict_images`` signature, float32."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir, signature_keys=["predict_images"])
    with open(os.path.join(saved_model_dir, TFLITE_FILE), "wb") as f:
        f.write(converter.convert())
