"""Using a trained model: classifying image files, exporting a SavedModel and TFLite."""
