"""The evaluator: precision @ 1 of a training run's checkpoints, as they appear.

  polling.py    ``evaluate()``: one checkpoint (``--run_once``) or the loop that scores
                each new checkpoint once, until the run is complete
  scoring.py    one checkpoint scored: averaged weights restored, the confusion matrix,
                per-class figures, PR histograms, the misclassified images
  result.py     ``EvalResult``: the precision line, the class table, the results.jsonl record
  recording.py  TensorBoard scalars, PR curves and images, PNG files, results.jsonl
  plots.py      the pictures drawn (matplotlib): the heat map, the misclassified grid
"""
