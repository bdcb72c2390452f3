"""Kernels of this package written in C++, compiled on the user's machine on first
use (``build``), and the Python functions around them (``lrn``)."""
