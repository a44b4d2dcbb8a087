"""`pixelmill nightly`: the incremental rerun for cron or an orchestrator.

    pixelmill nightly --data_root DIR_OR_GS --labels CSV --output_dir OUT [--config ...] \\
        [--fail_on_drift] [any Beam option, e.g. --runner DataflowRunner ...]

Every night it processes only what is new since the last committed snapshot (new files,
changed content at a known path, images whose labels changed), rejects content already
accepted in an earlier snapshot as `duplicate` / `near_duplicate` (the memory is the committed
snapshots' `index.parquet`, read back with Beam's Parquet IO), writes a new snapshot with its
own shards, stats, report and manifest, and checks tonight's classes and quality against the
archive. Nothing new: nothing is published, exit 0.

Exit codes: 0 published or nothing new; 2 bad flags/config; 3 drift with --fail_on_drift;
75 another run holds the output folder's lock.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys

from apache_beam.io.filesystems import FileSystems

from pipelines.snapshot import (BEAM_FILES, discard_staging, publish_snapshot, read_json,
                                remove_tree, staged_rejects, staged_stats)
from runners.options import NightlyOptions, PreprocessOptions, print_help, wants_help
from runners.preprocess import execute, parse_options, resolve_job
from transforms.reporting.drift import check_drift, cumulative_stats
from transforms.offline.rejects import IMAGE
from runners.run_lock import RunLock
from transforms import snapshot_layout as layout
from transforms.snapshot_layout import Snapshot

__all__ = ["NightlyOptions", "NightlyResult", "run", "main", "EXIT_DRIFT", "EXIT_LOCKED"]

_LOG = logging.getLogger(__name__)
EXIT_DRIFT = 3
EXIT_LOCKED = 75  # EX_TEMPFAIL: try again later


@dataclasses.dataclass(frozen=True)
class NightlyResult:
    """What a night did: `snapshot` is None when nothing new was found."""
    run_id: str
    snapshot: Snapshot | None
    message: str
    drift: dict
    exit_code: int


def _committed_run_ids(output_dir: str) -> list[str]:
    """run_ids of the committed snapshots, oldest first (read through Beam's FileSystems)."""
    return [s.run_id for s in layout.committed_snapshots(output_dir, BEAM_FILES)]


def _clean_unfinished(output_dir: str) -> None:
    """Under the lock, whatever a killed run left is garbage: staged folders, and snapshot
    folders without a manifest (never committed, so no reader or memory ever saw them)."""
    committed = set(_committed_run_ids(output_dir))
    found = FileSystems.match([FileSystems.join(output_dir, layout.SNAPSHOTS, "*", "**")])[0]
    unfinished = sorted({m.path[len(output_dir.rstrip("/")) + 1:].split("/")[1]
                         for m in found.metadata_list} - committed)
    for run_id in unfinished:
        _LOG.warning("removing snapshot %s: its run never committed it", run_id)
        remove_tree(layout.snapshot_dir(output_dir, run_id))
    remove_tree(layout.staging_root(output_dir))


def _row_reject_keys(rejects) -> set:
    return {(r["kind"], r["path"], r["reason"]) for r in rejects if r["kind"] != IMAGE}


def _archived_row_rejects(output_dir: str, run_ids) -> set:
    keys = set()
    for run_id in run_ids:
        path = FileSystems.join(layout.snapshot_dir(output_dir, run_id), layout.REJECTS)
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            keys |= _row_reject_keys(json.loads(line) for line in
                                     handle.read().decode("utf-8").splitlines() if line)
    return keys


def run(argv=None) -> NightlyResult:
    options, job_options, run_id, output_dir = parse_options(argv)
    nightly = options.view_as(NightlyOptions)
    job, inputs = resolve_job(job_options, layout.staging_dir(output_dir, run_id))
    with RunLock(output_dir, run_id, stale_after_s=nightly.lock_stale_hours * 3600):
        _clean_unfinished(output_dir)
        history_ids = _committed_run_ids(output_dir)
        job = dataclasses.replace(job, archive=tuple(
            (rid, FileSystems.join(layout.snapshot_dir(output_dir, rid), layout.INDEX))
            for rid in history_ids))
        execute(job, options)
        accounting, stats = staged_stats(job)
        images = accounting["images"]
        new_row_rejects = _row_reject_keys(staged_rejects(job)) - _archived_row_rejects(
            output_dir, history_ids)
        if images["accepted"] + images["rejected"] == 0 and not new_row_rejects:
            discard_staging(job)
            message = (f"nothing new since snapshot {history_ids[-1] if history_ids else '-'}: "
                       f"{images['skipped']} images unchanged; nothing published")
            return NightlyResult(run_id, None, message, {}, 0)
        history = [read_json(FileSystems.join(layout.snapshot_dir(output_dir, rid), layout.STATS))
                   for rid in history_ids]
        drift = check_drift(stats, history, job.config.drift)
        cumulative = cumulative_stats(history + [stats])
        snapshot = publish_snapshot(job, output_dir, run_id, inputs,
                                    extra_stats={"drift": drift, "cumulative": cumulative})
    exit_code = EXIT_DRIFT if drift["drifted"] and nightly.fail_on_drift else 0
    message = "drift detected" if drift["drifted"] else "no drift"
    return NightlyResult(run_id, snapshot, message, drift, exit_code)


def main(argv=None) -> int:
    """Command-line entry: prints the summary and the drift verdict; returns the exit code."""
    from runners.summary import format_summary
    from runners.run_lock import LockHeld
    if wants_help(argv):
        print_help("pixelmill nightly", __doc__, [PreprocessOptions, NightlyOptions])
        return 0
    try:
        result = run(argv)
    except LockHeld as exc:
        print(f"pixelmill nightly: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    if result.snapshot is None:
        print(f"pixelmill nightly: {result.message}")
        return result.exit_code
    print(format_summary(result.snapshot))
    for check in result.drift.get("checks", []):
        flag = "DRIFT" if check["drifted"] else "ok"
        print(f"  drift {check['name']:<30} {check['statistic']:<15} {check['value']:.4f} "
              f"(max {check['threshold']})  {flag}")
    for alarm in result.drift.get("alarms", []):
        print(f"  alarm {alarm['name']}: {alarm['detail']}")
    print(f"pixelmill nightly: {result.message}")
    return result.exit_code


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["nightly", *sys.argv[1:]])
