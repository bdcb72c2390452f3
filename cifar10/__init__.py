"""cifar10: a TensorFlow 2 port of the classic TensorFlow CIFAR-10 tutorial.

The data flows one way: ``data`` (download, records, tf.data pipelines) ->
``model`` (the tutorial's convnet and loss) -> ``train`` (MirroredStrategy
trainer, checkpoints, summaries) -> ``evaluate`` (precision of the averaged
weights).  The command-line programs live in ``train_main`` and ``eval_main``.
"""

__version__ = "0.1.0"
