"""An exported model (cifar10-export's SavedModel version folder, or a ``.tflite`` file
in it) as a function the scorer runs: uint8 images [b, 32, 32, 3] -> the probabilities
of its ``predict_images`` signature, which crops and standardises the images itself.
``.tflite`` files run with LiteRT (``ai_edge_litert``), not the deprecated
``tf.lite.Interpreter``."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import tensorflow as tf

from cifar10.core.errors import Cifar10Error, first_line

SIGNATURE = "predict_images"  # cifar10-export's: float RGB 0-255 in, "probabilities" out
NEEDS_LITERT = "scoring/running a .tflite file needs LiteRT: pip install 'cifar10[litert]'"


def litert_interpreter(path: str):
    """LiteRT's interpreter of the .tflite file ``path``; Cifar10Error without LiteRT."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise Cifar10Error(NEEDS_LITERT) from None
    return Interpreter(model_path=path)


def load(path: str) -> tuple[Callable[[tf.Tensor], tf.Tensor], int, int]:
    """(the model's function, its number of classes, the export's step: its version
    folder's name, 0 where that is no number); Cifar10Error where it does not load."""
    folder = os.path.dirname(path) if path.endswith(".tflite") else path
    step = os.path.basename(os.path.normpath(folder))
    try:
        model, num_classes = (_tflite if path.endswith(".tflite") else _saved_model)(path)
    except (OSError, ValueError, KeyError, RuntimeError, tf.errors.OpError) as e:
        raise Cifar10Error(f"cannot load --model={path}: {first_line(e)}; pass a version "
                           f"folder of cifar10-export (<export_dir>/<step>) or a .tflite "
                           f"file in it") from e
    return model, num_classes, int(step) if step.isdigit() else 0


def _saved_model(path: str):
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise OSError("no saved_model.pb in it")
    loaded = tf.saved_model.load(path)
    signature = loaded.signatures[SIGNATURE]

    def model(images):  # ``loaded`` lives as long as this: it holds the weights
        return loaded.signatures[SIGNATURE](images=tf.cast(images, tf.float32))["probabilities"]

    return model, int(signature.structured_outputs["probabilities"].shape[-1])


def _tflite(path: str):
    if not os.path.isfile(path):
        raise OSError("no such file")
    runner = litert_interpreter(path).get_signature_runner(SIGNATURE)
    # Every file of cifar10-export takes float32 and gives float32 (int8 too, inside).
    batched = runner.get_input_details()["images"]["shape_signature"][0] == -1  # else 1 a time

    def run(images: np.ndarray) -> np.ndarray:
        parts = [images] if batched else np.split(images, len(images))
        return np.concatenate([runner(images=part.astype(np.float32))["probabilities"]
                               for part in parts])

    # The class count, known once run (on any image).
    num_classes = run(np.random.default_rng(0).integers(0, 256, [1, 32, 32, 3])).shape[-1]

    def model(images):
        probabilities = tf.numpy_function(run, [images], tf.float32, stateful=True)
        return tf.ensure_shape(probabilities, [None, num_classes])

    return model, num_classes

