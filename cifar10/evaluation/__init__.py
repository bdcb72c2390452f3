"""The evaluator: precision @ 1 of a run's checkpoints, each scored once as it appears
(polling), scored (scoring), recorded and printed (recording), drawn (plots)."""
