"""The default Beam runner: the in-process FnApiRunner, which needs no download.

Beam 2.77's plain `DirectRunner` first tries to fetch the Prism runner binary from the internet
and only then falls back; offline that costs time and log noise. Without `--runner`, pixelmill
runs the FnApiRunner directly (it honours `--direct_running_mode=multi_processing` and
`--direct_num_workers=N`). Any other runner is chosen the Beam way: `--runner PrismRunner`,
`DataflowRunner`, `FlinkRunner`, `SparkRunner`.
"""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

__all__ = ["runner_for"]


def runner_for(options: PipelineOptions):
    """The runner object for `options`: the named one, or the FnApiRunner when none is named."""
    if options.view_as(StandardOptions).runner:
        return None  # beam.Pipeline resolves the name itself
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(provision_info=provision)
