"""`pixelmill nightly`: the incremental rerun for cron or an orchestrator.

    pixelmill nightly --data_root DIR_OR_GS --labels CSV --output_dir OUT [--config ...] \\
        [--fail_on_drift] [any Beam option, e.g. --runner DataflowRunner ...]

Every night it processes only what is new since the last committed snapshot (new files,
changed content at a known path, images whose labels changed), rejects content already
accepted in an earlier snapshot as `duplicate` / `near_duplicate` (the memory is the committed
snapshots' `index.parquet`, read back with Beam's Parquet IO), writes a new snapshot with its
own shards, stats, report and manifest, and checks tonight's classes and quality against the
archive. Nothing new: nothing is published, exit 0.

Nothing new means no image accepted and no reject line that an earlier snapshot does not
already hold (same kind, path, reason and content): a file that is rejected again every night
(an unsafe name, a FIFO, a decoder crash) does not publish a snapshot every night.

Exit codes: 0 published or nothing new; 1 the run failed, or the lock turned away
`--lock_blocked_max` runs in a row (a stuck lock is an error, not a skip); 2 bad
flags/config; 3 drift with --fail_on_drift; 4 refused: the night would lose the last good data
(`runners.jobs.guard`; nothing published, --accept_shrink publishes it); 75 another run holds the
output folder's lock.
"""
from __future__ import annotations

import dataclasses
import logging
import sys

from apache_beam.io.filesystems import FileSystems

from pipelines.beam_files import BEAM_FILES
from runners.jobs.guard import guarded_publish
from runners.jobs.nightly_precheck import quick_look
from runners.jobs.preprocess import execute, parse_options, resolve_job
from runners.locking.locked_run import locked_run
from runners.locking.run_lock import LOCK_NAME, LockHeld, note_blocked
from runners.options import NightlyOptions, print_help, wants_help
from runners.progress_report import reporting
from transforms import snapshot_layout as layout
from transforms.live_view import live_count, live_view, read_manifest, removal_keys
from transforms.reporting.drift import check_drift, cumulative_stats
from transforms.reporting.history import fingerprint, read_history, reject_key
from transforms.snapshot_layout import Snapshot

__all__ = ["NightlyOptions", "NightlyResult", "run", "main", "EXIT_DRIFT", "EXIT_LOCKED",
           "EXIT_BLOCKED", "LockBlocked"]

_LOG = logging.getLogger(__name__)
EXIT_DRIFT = 3
EXIT_LOCKED = 75  # EX_TEMPFAIL: try again later
EXIT_BLOCKED = 1  # the lock turned away --lock_blocked_max runs in a row: an error, not a skip


class LockBlocked(RuntimeError):
    """The lock has turned away too many runs in a row: someone must look."""


@dataclasses.dataclass(frozen=True)
class NightlyResult:
    """What a night did: `snapshot` is None when nothing new was found (or the night was
    refused: `refused`, raised by `run`)."""
    run_id: str
    snapshot: Snapshot | None
    message: str
    drift: dict
    exit_code: int
    refused: Exception | None = None


def _committed_run_ids(output_dir: str) -> list[str]:
    """run_ids of the committed snapshots that nights wrote, oldest first (read through Beam's
    FileSystems): a compaction's snapshot repeats earlier ones, so it is no night of history."""
    return [s.run_id for s in layout.committed_snapshots(output_dir, BEAM_FILES)
            if read_manifest(s, BEAM_FILES).get("kind") != "compaction"]


def _live(output_dir: str) -> tuple[list[str], frozenset, int]:
    """(run_ids of the live snapshots, oldest first; their removed records as
    `live_view.removal_key`s; the live count): what tonight is planned against."""
    view = live_view(output_dir, BEAM_FILES)
    return ([s.run_id for s in view.snapshots], frozenset(removal_keys(view)),
            live_count(view, BEAM_FILES))


def _reject_keys(rejects) -> set:
    """What makes a reject line news (`reporting.history.reject_key`): the same input (kind,
    path, content) rejected for the same reason in an earlier snapshot is not (an unsafe name,
    a FIFO, a bad CSV row or a file the decoder crashed on is found again every night while it
    stays)."""
    return {reject_key(r) for r in rejects}


def run(argv=None) -> NightlyResult:
    """One night (see the module docstring); raises `guard.ShrinkRefused` when tonight would
    lose the last good data (its ledger and report are then in `candidates/<run_id>/`)."""
    options, job_options, run_id, output_dir = parse_options(argv, "nightly")
    nightly = options.view_as(NightlyOptions)
    job, inputs = resolve_job(job_options, layout.staging_dir(output_dir, run_id))
    try:
        with locked_run(output_dir, run_id, nightly.lock_stale_hours * 3600) as lock:
            result = _night(job, options, nightly, inputs, output_dir, run_id, lock,
                            job_options)
        if result.refused is not None:  # raised outside the lock: not a failed run
            raise result.refused
        return result
    except LockHeld as exc:
        blocked = note_blocked(output_dir, str(exc))
        if blocked >= nightly.lock_blocked_max:
            raise LockBlocked(
                f"{exc}. The lock has turned away {blocked} runs in a row "
                f"(--lock_blocked_max {nightly.lock_blocked_max}): if no run is alive, remove "
                f"{FileSystems.join(output_dir, LOCK_NAME)}") from exc
        raise


def _night(job, options, nightly, inputs, output_dir: str, run_id: str, lock,
           job_options) -> NightlyResult:
    """The night itself, under the lock (see `run`): a quick look first (`nightly_precheck`),
    the whole job only when the look cannot rule out news."""
    history_ids = _committed_run_ids(output_dir)
    live_ids, removed, live_before = _live(output_dir)
    # One summary.json per earlier snapshot, never their ledgers or stats.json.
    history, reported, _old = read_history(
        [layout.snapshot_dir(output_dir, rid) for rid in history_ids], BEAM_FILES)
    if not nightly.always_run_job and nightly.quick_look_max_files > 0:
        message = quick_look(job, output_dir, live_ids, reported,
                             nightly.quick_look_max_files, removed)
        if message:
            return NightlyResult(run_id, None, message, {}, 0)
    from pipelines.snapshot import (  # TensorFlow: only for a night that works
        discard_staging,
        staged_rejects,
        staged_stats,
    )
    job = dataclasses.replace(job, removed=removed, archive=tuple(
        (rid, FileSystems.join(layout.snapshot_dir(output_dir, rid), layout.INDEX))
        for rid in live_ids))
    execute(job, options)
    accounting, stats = staged_stats(job)
    images = accounting["images"]
    new_rejects = {key for key in _reject_keys(staged_rejects(job))
                   if fingerprint(key) not in reported}
    if images["accepted"] == 0 and not new_rejects and not accounting["live"]["retired"]:
        discard_staging(job)
        message = (f"nothing new since snapshot {history_ids[-1] if history_ids else '-'}: "
                   f"{images['skipped']} images unchanged, {images['rejected']} rejected "
                   f"again as before; nothing published")
        return NightlyResult(run_id, None, message, {}, 0)
    drift = check_drift(stats, history, job.config.drift)
    cumulative = cumulative_stats(history + [stats])
    lock.check()
    snapshot, refused = guarded_publish(
        job, output_dir, run_id, inputs, live_before, job_options.max_shrink,
        job_options.accept_shrink, extra_stats={"drift": drift, "cumulative": cumulative},
        reject_keys=new_rejects)
    if refused is not None:
        return NightlyResult(run_id, None, str(refused), drift, refused.exit_code, refused)
    exit_code = EXIT_DRIFT if drift["drifted"] and nightly.fail_on_drift else 0
    message = "drift detected" if drift["drifted"] else "no drift"
    return NightlyResult(run_id, snapshot, message, drift, exit_code)


def main(argv=None) -> int:
    """Command-line entry: prints the summary and the drift verdict; returns the exit code."""
    from runners.jobs.summary import format_summary
    if wants_help(argv):
        print_help("nightly")
        return 0
    try:
        with reporting():
            result = run(argv)
    except LockHeld as exc:
        print(f"pixelmill nightly: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    except LockBlocked as exc:
        print(f"pixelmill nightly: error: {exc}", file=sys.stderr)
        return EXIT_BLOCKED
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
