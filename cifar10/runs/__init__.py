"""A training run's directory (``--train_dir``) and what is in it.

Read side (evaluation, serving): ``checkpoints``.  The trainer's side: ``rundir``
(``RunDirectory``: open, restore, save, markers), ``lock`` (one trainer per
directory), ``resume`` (which checkpoint to go on from), ``statefile``
(TensorFlow's ``checkpoint`` file), ``cleanup`` (leftovers, ``--fresh_start``).
Both sides: ``records`` (flags.txt, environment.jsonl), ``summaries``.
"""
