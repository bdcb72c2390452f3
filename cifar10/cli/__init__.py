"""The command-line programs: thin entry points, their flags and what they share. No TensorFlow before the flags are parsed."""
