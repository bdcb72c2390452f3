"""C++ kernels compiled on the user's machine on first use (``build``), and the layer
functions around them (``layers``)."""
