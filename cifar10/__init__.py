"""cifar10: a TensorFlow 2 port of the classic TensorFlow CIFAR-10 tutorial.

The package's folders are its parts, and depend on each other one way, from the
programs down to the core:

* ``cli``: the programs (cifar10-train, -eval, -predict, -export, -prepare,
  -launch): thin entry points, their flags, what they share;
* ``training``, ``evaluation``, ``serving``: the trainer, the evaluator, and using
  a trained model (classifying image files, exporting);
* ``runs`` (a run's directory: checkpoints, records, summaries), ``distribute``
  (devices, cluster, several workers, Slurm), ``kernels`` (C++ kernels built on
  the user's machine: LRN, conv1's bias and ReLU with pool1, conv2's with norm2),
  ``model`` (the tutorial's convnet and loss; ``lrn``: its LRN from TensorFlow's
  ops; ``precision``: the type each of its layers computes in) and ``data`` (the binary format, data folders, download, generated data, own
  images, the tf.data pipelines);
* ``core``: settings, errors, whole-file writes, the programs' output; no
  TensorFlow.

docs/development.md has the map, module by module.
"""

__version__ = "0.1.0"
