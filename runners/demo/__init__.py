"""`pixelmill demo`: the demo dataset (every kind of bad input the job must catch) and the
command that runs the job on it."""
