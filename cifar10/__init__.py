"""cifar10: a TensorFlow 2 port of the classic TensorFlow CIFAR-10 tutorial.

Its folders depend one way, from the programs (``cli``) through ``training``,
``evaluation``, ``serving``, ``runs``, ``distribute``, ``kernels``, ``model`` and ``data``
down to ``core`` (no TensorFlow).  docs/development.md has the map, module by module.
"""

__version__ = "0.1.0"
