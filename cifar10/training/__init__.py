"""The trainer, in the order a step is called:

  controller.py  ``train()``: the run directory, resume, the start's checks and records
  loops.py       the loops of steps and what acts where each ends (progress, saving,
                 the profiler's window, a stop, divergence)
  engine.py      ``Trainer``: the state, the replicated step and its input under a
                 strategy; the loop functions (steps_per_loop steps per call)
  step.py        ``ReplicatedStep``: one synchronous SGD update; ``TrainState``; schedules
  progress.py    the progress lines, their clock, and the summary of a run's end
"""
