"""The evaluator: scoring checkpoints, recording the results, pictures, polling a run."""
