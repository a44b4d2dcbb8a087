"""The default Beam runner: the in-process FnApiRunner, which needs no download.

Beam 2.77's plain `DirectRunner` first tries to fetch the Prism runner binary from the internet
and only then falls back; offline that costs time and log noise. Without `--runner`, pixelmill
runs the FnApiRunner directly (it honours `--direct_running_mode=multi_processing` and
`--direct_num_workers=N`). Any other runner is chosen the Beam way: `--runner PrismRunner`,
`DataflowRunner`, `FlinkRunner`, `SparkRunner`. Whatever the runner, the job's options come
from `beam_options`.
"""
from __future__ import annotations

import dataclasses
import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

__all__ = ["JobOptions", "beam_options", "runner_for", "decode_processes", "local_cores",
           "with_decode_processes", "with_shuffle_lanes", "LOCAL_SHUFFLE_LANES", "prepare_job",
           "needs_forkserver", "decoders_here"]

LOCAL_SHUFFLE_LANES = 64
"""The lanes of the job's shuffles (`transforms.offline.gather.GroupByKeyInLanes`) on Beam's
local runner. The grouped step takes a lane at a time, so this bounds its parallelism: plenty
for one machine's workers, while a bundle of a few thousand elements still travels in lists of
dozens."""


def local_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def decode_processes(options: PipelineOptions, configured: int) -> int:
    """Isolating decode processes per worker for `decode.processes` = `configured`.

    A positive value is used as given. 0 (auto): with the default in-process runner every core
    of this machine is shared among its workers (`--direct_num_workers` in multi_processing or
    multi_threading mode; one in the default in_memory mode), so the default local run decodes
    in one process per core. A named runner
    (Dataflow, Flink, Spark, Prism, ...) already runs one worker per core: one process each,
    so its workers are never oversubscribed.
    """
    if configured > 0:
        return configured
    if options.view_as(StandardOptions).runner:
        return 1
    direct = options.view_as(DirectOptions)
    workers = 1 if direct.direct_running_mode == "in_memory" else direct.direct_num_workers
    cores = local_cores()
    return max(1, cores // (workers if workers > 0 else cores))  # 0 workers: one per core


class JobOptions(PipelineOptions):
    """Beam's options, with one view per options class, made when first asked for.

    Beam asks the pipeline's options for a view (`view_as(TypeOptions)`) twice for every
    transform it applies, and `PipelineOptions.view_as` builds a parser of that class's flags
    and parses the command line again each time: ~1 ms a view, ~0.2 s of every run. A view
    keeps no values of its own (all views read and write the options' one `_all_options`,
    as Beam documents), so the first view of a class serves every later request; the views
    are left out of the pickled state (workers make their own)."""

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views", {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]

    def __getstate__(self):
        state = super().__getstate__()
        return {key: value for key, value in state.items() if key != "_views"}


def beam_options(argv) -> PipelineOptions:
    """Beam's options for the job's command line `argv` (`JobOptions`), with Beam's
    construction-time type inference and checks (`pipeline_type_check`) off: pixelmill's
    graph is its own and typed by its tests, and no output depends on them (only the generic
    coders Beam then picks between steps; the shards, ledgers and index are the same bytes,
    tests/test_beam_options.py), while they cost ~0.2 s of a small run's ~1.2 s of graph
    building and submission, on every run. Beam has no flag to turn them back on."""
    return JobOptions(argv, pipeline_type_check=False)


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


def with_decode_processes(job, options: PipelineOptions):
    """`job` (a PreprocessJob) with `decode.processes` resolved for `options`."""
    decode = job.config.decode
    resolved = decode_processes(options, decode.processes)
    config = dataclasses.replace(job.config, decode=dataclasses.replace(decode,
                                                                        processes=resolved))
    return dataclasses.replace(job, config=config)


def with_shuffle_lanes(job, options: PipelineOptions):
    """`job` (a PreprocessJob) with its shuffles in `LOCAL_SHUFFLE_LANES` lanes on Beam's local
    runner, where each shuffled element costs the launcher's one process; by key on a named
    runner, which spreads the grouped steps over its workers key by key."""
    lanes = None if options.view_as(StandardOptions).runner else LOCAL_SHUFFLE_LANES
    return dataclasses.replace(job, shuffle_lanes=lanes)


def _runs_in_this_process(options: PipelineOptions) -> bool:
    direct = options.view_as(DirectOptions)
    return (not options.view_as(StandardOptions).runner
            and direct.direct_running_mode in ("in_memory", "multi_threading"))


def prepare_job(job, options: PipelineOptions):
    """What the launcher does before building `job`'s graph: resolves `decode.processes`,
    registers the exit hook that keeps a script that ran the job from crashing at interpreter
    exit (`exit_safety`), and starts the forkserver of the isolated children now when this
    process will need one: the decoders' (isolated decoding, graph run in this process) or the
    report's thumbnails' (drawn in an isolated child at publish, whatever the runner, when
    `report.thumbnails_per_reason` > 0), so that its TensorFlow import overlaps the launcher's
    imports and graph build (`pixelmill preprocess` has started it already: `runners/cli.py`).
    Call it before importing the graph's modules; it imports no TensorFlow itself, nor does
    the launcher of a run whose decoders are isolated (docs/architecture.md). Nothing here,
    nor anywhere in pixelmill, patches Beam or TensorFlow (tests/test_structure.py)."""
    from runners import exit_safety
    exit_safety.install()
    job = with_shuffle_lanes(with_decode_processes(job, options), options)
    if needs_forkserver(job, options):
        from transforms.offline import isolation
        isolation.start_forkserver(isolation.DECODER_PRELOAD)
    return job


def decoders_here(job, options: PipelineOptions) -> bool:
    """Whether the graph runs in this process and decodes in isolated children: then this
    process needs no TensorFlow of its own (the transform is written in a child too)."""
    return job.config.decode.isolation == "subprocess" and _runs_in_this_process(options)


def needs_forkserver(job, options: PipelineOptions) -> bool:
    """Whether the launcher will start isolated children: decoders, or report thumbnails."""
    return decoders_here(job, options) or job.config.report.thumbnails_per_reason > 0
