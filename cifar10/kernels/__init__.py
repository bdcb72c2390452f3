"""Kernels of this package written in C++, compiled on the user's machine on first
use (``build``, ``ops``), the Python functions around them (``lrn``, ``pool``), and
the choice of a training run between them and TensorFlow's ops (``choice``)."""
