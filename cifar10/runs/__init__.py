"""A run's directory: checkpoints (found, read, written), its records and its TensorBoard summaries."""
