"""`pixelmill preprocess`: raw images + CSV labels -> a committed snapshot of sharded TFRecords.

Locally (default in-process runner, no download):

    pixelmill preprocess --data_root ./images --labels labels.csv --classes classes.txt \\
        --output_dir ./out [--boxes boxes.csv] [--config configs/base.yaml] \\
        [--set quality.blur_fine_min=0.1]

With two local worker processes:

    pixelmill preprocess ... --direct_running_mode=multi_processing --direct_num_workers=2

On Google Cloud Dataflow (same command, Beam's own flags):

    pixelmill preprocess --data_root gs://bucket/images --labels gs://bucket/labels.csv \\
        --output_dir gs://bucket/pixelmill --runner DataflowRunner --project my-project \\
        --region us-central1 --temp_location gs://bucket/tmp --setup_file ./setup.py

Any Beam pipeline option is accepted; pixelmill's own options are `PreprocessOptions`.
"""
from __future__ import annotations

import logging
import os
import sys

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from configs.schema import ConfigError, load_config
from pipelines.beam_files import BEAM_FILES, check_buckets, set_options
from pipelines.job import PreprocessJob
from runners.beam_runner import beam_options, decoders_here, prepare_job, runner_for
from runners.errors import UsageError
from runners.jobs.guard import check_max_shrink, guarded_publish
from runners.locking.locked_run import check_run_id, locked_run
from runners.options import PreprocessOptions, print_help, wants_help
from runners.progress_report import reporting
from runners.strict_flags import check_flags
from transforms import file_reads
from transforms import snapshot_layout as layout
from transforms.gc_policy import freeze_alive, long_lived_imports, thawed_after
from transforms.live_view import live_count, live_view, read_retirements
from transforms.offline import boxes, classes, labels
from transforms.offline.class_names import class_name_problem
from transforms.offline.join_labels import read_csv_header
from transforms.s3_storage import S3Error

__all__ = ["PreprocessOptions", "run", "main", "resolve_job", "translate_flags", "execute",
           "parse_options"]

_LOG = logging.getLogger(__name__)


def _require(value, flag: str):
    if not value:
        raise UsageError(f"{flag} is required. Run `pixelmill preprocess --help` for usage.")
    return value


def _check_exists(path: str, flag: str):
    if not file_reads.exists(path):
        raise UsageError(f"{flag} {path}: no such file.")


def _starting_class_table(output_dir: str, classes_file: str | None, config) -> tuple[list, bool]:
    for old, new in sorted(config.classes.renames.items()):
        problem = class_name_problem(new)
        if problem:
            raise UsageError(f"classes.renames maps {old!r} to {ascii(new)}, which is not a "
                             f"valid class name: {problem}")
    existing = classes.apply_renames(
        classes.read_class_table(FileSystems.join(output_dir, layout.CLASSES)),
        config.classes.renames)
    if not classes_file:
        return existing, config.classes.frozen
    _check_exists(classes_file, "--classes")
    given = classes.read_class_table(classes_file)
    if given[:len(existing)] != existing[:len(given)]:  # one must be a prefix of the other
        raise UsageError(
            f"--classes {classes_file} disagrees with {output_dir}/classes.txt: class ids never "
            f"change, so the file must list the existing classes first, in order. Existing: "
            f"{existing}; given: {given}")
    return existing + [name for name in given if name not in existing], True


def _check_output_dir(output_dir: str) -> None:
    """A local --output_dir must be (or be creatable as) a writable folder: said in one line
    here, not as a traceback from the lock or the first write. Object stores are checked by
    their first write."""
    if "://" in output_dir:
        return
    path = os.path.abspath(output_dir)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        what = "is a file" if path == os.path.abspath(output_dir) else f"is below a file, {path}"
        raise UsageError(f"--output_dir {output_dir} {what}; expected a folder.")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--output_dir {output_dir}: {path} is not writable.")


def _check_header(parse_header_only):
    """Parses just the header line: a missing column stops the job before any work."""
    try:
        list(parse_header_only())
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def resolve_job(job_options: PreprocessOptions, staging_dir: str):
    """Validates flags, config and inputs, and returns (PreprocessJob, inputs for the manifest).
    Everything here fails fast, before any data is read."""
    roots = _require(job_options.data_root, "--data_root")
    for root in roots:
        local_folder = "://" not in root and not any(c in root for c in "*?[")
        if local_folder and not os.path.isdir(root):
            raise UsageError(f"--data_root {root}: no such folder.")
    output_dir = _require(job_options.output_dir, "--output_dir")
    _check_output_dir(output_dir)
    check_max_shrink(job_options.max_shrink)
    try:
        config = load_config(job_options.config, job_options.config_overrides or ())
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    label_csvs = tuple(job_options.label_csv or ())
    box_csvs = tuple(job_options.boxes or ())
    cap = config.labels.max_cell_bytes
    for path in label_csvs:
        _check_exists(path, "--labels")
        _check_header(lambda path=path: labels.parse_label_csv(
            path, [read_csv_header(path, cap)], config.labels))
    for path in box_csvs:
        _check_exists(path, "--boxes")
        _check_header(lambda path=path: boxes.parse_box_csv(
            path, [read_csv_header(path, cap)], cap))
    table, frozen = _starting_class_table(output_dir, job_options.classes, config)
    forgotten = () if job_options.allow_forgotten else read_retirements(
        FileSystems.join(output_dir, layout.FORGOTTEN), BEAM_FILES)
    job = PreprocessJob(data_roots=tuple(roots), label_csvs=label_csvs, box_csvs=box_csvs,
                        class_table=tuple(table), frozen_classes=frozen,
                        staging_dir=staging_dir, config=config,
                        forgotten_paths=frozenset(line["path"] for line in forgotten),
                        forgotten_shas=frozenset(line["sha256"] for line in forgotten
                                                 if line.get("sha256")))
    inputs = {"data_roots": list(roots), "labels": list(label_csvs), "boxes": list(box_csvs),
              "classes": job_options.classes}
    return job, inputs


def translate_flags(argv) -> list[str]:
    """`--labels CSV` is pixelmill's label file, but Beam already owns `--labels` (Dataflow job
    labels). The command line keeps the friendly name: `--labels` becomes `--label_csv`, and
    Dataflow job labels are passed as `--dataflow_labels key=value`."""
    renamed = {"--labels": "--label_csv", "--dataflow_labels": "--labels"}
    result = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        result.append(renamed[name] + eq + value if name in renamed else arg)
    return result


def execute(job: PreprocessJob, options: PipelineOptions) -> None:
    """Builds and runs the graph; everything lands in `job.staging_dir`. Raises on failure."""
    job = prepare_job(job, options)  # first: the decoders' forkserver imports alongside us
    from transforms.offline.tft_analysis import writer_started_ahead
    # The transform's writing child starts now when the decoders are children of this process.
    ahead = job.config.transform.enabled and decoders_here(job, options)
    # What exists before the run (Beam, the graph) lives through it: frozen, the full
    # collections during the run do not walk it again (launcher GC 2.1 -> 1.4 s CPU on
    # 5,000 thumbnails); unfrozen after, so a process that runs jobs one after another leaks
    # nothing (`transforms.gc_policy`).
    with thawed_after(), writer_started_ahead(ahead, job.config.online.image_size,
                                              job.config.decode.exif_orientation):
        with long_lived_imports():  # only for a run that works
            from pipelines.preprocess_graph import build_preprocess
        pipeline = beam.Pipeline(runner=runner_for(options), options=options)
        build_preprocess(pipeline, job)
        freeze_alive()
        state = pipeline.run().wait_until_finish()
    if state is not None and str(state).rsplit(".", 1)[-1] != "DONE":
        raise RuntimeError(f"The pipeline ended in state {state}; nothing was published.")


def parse_options(argv, command: str = "preprocess"
                  ) -> tuple[PipelineOptions, PreprocessOptions, str, str]:
    """(Beam options, pixelmill options, run_id, output_dir) from `command`'s command line;
    UsageError for an argument that is neither its flag nor a Beam option
    (`runners.strict_flags`)."""
    argv = translate_flags(sys.argv[1:] if argv is None else list(argv))
    check_flags(argv, command)
    options = beam_options(argv)
    job_options = options.view_as(PreprocessOptions)
    output_dir = _require(job_options.output_dir, "--output_dir")
    set_options(options)  # --s3_* reach the lock, the checks and the publisher too
    try:
        check_buckets([*(job_options.data_root or ()), *(job_options.label_csv or ()),
                       *(job_options.boxes or ()), job_options.classes, output_dir])
    except S3Error as exc:
        raise UsageError(str(exc)) from exc
    run_id = check_run_id(job_options.run_id or layout.new_run_id(), output_dir)
    return options, job_options, run_id, output_dir


def run(argv=None) -> layout.Snapshot:
    """Runs the job over every input and commits the snapshot; raises on any failure
    (nothing published, its own staging removed), and `guard.ShrinkRefused` when the new
    base would lose the last good data (`runners.jobs.guard`). Holds the output folder's lock
    while it runs, and first removes what killed runs left (`runners.locking.locked_run`)."""
    options, job_options, run_id, output_dir = parse_options(argv)
    job, inputs = resolve_job(job_options, layout.staging_dir(output_dir, run_id))
    with locked_run(output_dir, run_id) as lock:
        execute(job, options)
        lock.check()
        before = live_count(live_view(output_dir, BEAM_FILES), BEAM_FILES)
        snapshot, refused = guarded_publish(job, output_dir, run_id, inputs, before,
                                            job_options.max_shrink, job_options.accept_shrink)
    if refused is not None:
        raise refused
    return snapshot


def main(argv=None) -> int:
    """Command-line entry: runs the job and prints the summary; exit code 0 on success."""
    from runners.jobs.summary import format_summary
    if wants_help(argv):
        print_help("preprocess")
        return 0
    with reporting():
        snapshot = run(argv)
    print(format_summary(snapshot))
    return 0


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["preprocess", *sys.argv[1:]])
