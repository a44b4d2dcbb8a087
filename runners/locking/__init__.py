"""The output folder's run lock (local, gs:// and s3:// compare-and-set) and the locked run
around a job: cleanup of what dead runs left, and the run id rules."""
