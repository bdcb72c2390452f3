"""The trainer: the replicated step, the engine that runs it in loops, and the
controller that runs the engine in a run directory.

  controller.py  ``train()``: the run directory, resume, the start's checks, the loops
  loops.py       ``loop_end``, ``LoopController``: the loops of steps and what acts
                 where each ends (progress, saving, profiling, stop, divergence)
  determinism.py ``op_determinism``: TensorFlow's op determinism for a run's time
  engine.py      ``Trainer``: the state, the replicated step and the input under a
                 strategy; the loop functions (steps_per_loop steps per call)
  step.py        ``ReplicatedStep``: one synchronous update (gradients per replica,
                 summed; SGD; moving averages; loss averages; summaries)
  state.py       ``TrainState`` (what a checkpoint holds), ``DynamicLossScale`` (fp16)
  schedule.py    the learning rate and the moving averages' decay (pure helpers)
  meter.py       ``ProgressMeter``: the clock of the progress lines and the run's figures
  progress.py    the wording of the progress lines and of a run's end (no TensorFlow)
  run.py         ``TrainData``, ``Invocation``; what a start says and records
  profiling.py   ``--profile_steps``: the profiler's window of steps
"""
