"""The trainer: ``controller.train()`` (the run directory, the start), ``loops`` (the loops
of steps and what acts where each ends), ``engine.Trainer`` (the replicated step under a
strategy), ``step`` (one SGD update, ``TrainState``) and ``progress`` (its lines, its end)."""
