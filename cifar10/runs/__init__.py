"""A training run's directory (``--train_dir``): ``layout`` (its files by name, the
state file, the lock; no TensorFlow), ``checkpoints`` (read, resume), ``rundir`` (the
trainer's side), ``cleanup``, ``records`` (flags.txt, environment.jsonl), ``summaries``."""
