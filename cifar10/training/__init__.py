"""The trainer: the replicated step, the loop that runs it, progress lines, profiling."""
