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
    given = runner.get_input_details()["images"]
    out = runner.get_output_details()["probabilities"]
    batched = given["shape_signature"][0] == -1  # else one image at a time

    def run(images: np.ndarray) -> np.ndarray:
        parts = [images] if batched else np.split(images, len(images))
        return np.concatenate([_from(runner(images=_to(part.astype(np.float32), given))
                                     ["probabilities"], out) for part in parts])

    num_classes = run(np.zeros([1, 32, 32, 3], np.uint8)).shape[-1]  # known once run

    def model(images):
        probabilities = tf.numpy_function(run, [images], tf.float32, stateful=True)
        return tf.ensure_shape(probabilities, [None, num_classes])

    return model, num_classes


def _to(values: np.ndarray, detail: dict) -> np.ndarray:
    """``values`` as the tensor's type: quantized by its scale and zero point if integer."""
    kind = detail["dtype"]
    if not np.issubdtype(kind, np.integer):
        return values.astype(kind)
    scale, zero = detail["quantization"]
    limits = np.iinfo(kind)
    return np.clip(np.round(values / scale + zero), limits.min, limits.max).astype(kind)


def _from(values: np.ndarray, detail: dict) -> np.ndarray:
    """A tensor's ``values`` as float32: dequantized if integer."""
    if not np.issubdtype(values.dtype, np.integer):
        return values.astype(np.float32)
    scale, zero = detail["quantization"]
    return ((values.astype(np.float32) - zero) * scale).astype(np.float32)
