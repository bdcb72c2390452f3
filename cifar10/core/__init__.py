"""The core every part uses: settings, errors, whole-file writes, the programs' output. No TensorFlow."""
