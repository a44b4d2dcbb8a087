"""A run's life under the output folder's lock, shared by `preprocess` and `nightly`.

    with locked_run(output_dir, run_id, job) as lock:
        execute(job, options)
        lock.check()                   # still ours (heartbeat): else LockLost, nothing published
        publish_snapshot(job, ...)

Under the lock no other run is alive, so whatever is in `OUTPUT/.staging/` and every snapshot
folder without a manifest was left by a killed run and is removed first. A run whose body
fails (an exception, Ctrl-C) removes its own staging folder and its uncommitted snapshot
folder before the error goes on; a committed snapshot is never touched.

Run ids are names of folders in the output: `check_run_id` allows 1-128 letters, digits, `.`,
`_` and `-`, starting with a letter or digit (no `/`, no `..`), and refuses the id of a
committed snapshot, which is never overwritten.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re

from apache_beam.io.filesystems import FileSystems

from pipelines.beam_files import TEMPORARY_GLOB, remove_tree
from runners.errors import UsageError
from runners.locking.run_lock import RunLock, clear_blocked
from transforms import file_reads
from transforms import snapshot_layout as layout

__all__ = ["locked_run", "locked_maintenance", "check_run_id", "clean_unfinished",
           "RUN_ID_PATTERN"]

_LOG = logging.getLogger(__name__)
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _committed(output_dir: str, run_id: str) -> bool:
    return file_reads.exists(FileSystems.join(layout.snapshot_dir(output_dir, run_id),
                                              layout.MANIFEST))


def check_run_id(run_id: str, output_dir: str) -> str:
    """`run_id`, or UsageError when it is not a safe folder name or names a committed
    snapshot."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.fullmatch(run_id):
        raise UsageError(
            f"--run_id must be 1-128 letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit (it names a folder under {output_dir}). Received: --run_id {run_id!r}")
    if _committed(output_dir, run_id):
        raise UsageError(
            f"--run_id {run_id}: snapshot {run_id} is already committed in {output_dir}; a "
            f"committed snapshot is never overwritten. Choose another run id or leave "
            f"--run_id out (a UTC timestamp).")
    return run_id


def clean_unfinished(output_dir: str) -> None:
    """Under the lock, whatever a killed run left is garbage: staged folders, snapshot folders
    without a manifest (never committed, so no reader or memory ever saw them) and the
    temporary files of an interrupted atomic write. A folder whose manifest exists but is
    broken is left for a person (`pixelmill verify`); readers already skip it."""
    manifests = file_reads.match(FileSystems.join(output_dir, layout.SNAPSHOTS, "*",
                                                  layout.MANIFEST))
    with_manifest = {m.path.rstrip("/").rsplit("/", 2)[-2] for m in manifests}
    found = file_reads.match(FileSystems.join(output_dir, layout.SNAPSHOTS, "*", "**"))
    folders = {m.path[len(output_dir.rstrip("/")) + 1:].split("/")[1] for m in found}
    local = os.path.join(output_dir, layout.SNAPSHOTS)
    if "://" not in output_dir and os.path.isdir(local):  # also folders holding no file yet
        folders.update(os.listdir(local))
    unfinished = sorted(folders - with_manifest)
    for run_id in unfinished:
        _LOG.warning("removing snapshot %s: its run never committed it", run_id)
        remove_tree(layout.snapshot_dir(output_dir, run_id))
    remove_tree(layout.staging_root(output_dir))
    leftovers = file_reads.match(FileSystems.join(output_dir, TEMPORARY_GLOB))
    if leftovers:
        FileSystems.delete([m.path for m in leftovers])


def _discard_own(output_dir: str, run_id: str) -> None:
    remove_tree(layout.staging_dir(output_dir, run_id))
    if not _committed(output_dir, run_id):
        remove_tree(layout.snapshot_dir(output_dir, run_id))


@contextlib.contextmanager
def locked_run(output_dir: str, run_id: str, stale_after_s: float = 12 * 3600):
    """Takes the lock (or LockHeld), cleans what dead runs left, checks the run id again under
    the lock, yields the `RunLock`; on failure removes this run's own leftovers."""
    with RunLock(output_dir, run_id, stale_after_s=stale_after_s) as lock:
        clear_blocked(output_dir)
        clean_unfinished(output_dir)
        check_run_id(run_id, output_dir)
        try:
            yield lock
        except BaseException:
            # debug: the failure's own one line comes first (runners.console.report_failure);
            # a signal's line is the command's (runners.stop_signals)
            _LOG.debug("run %s failed: removing its staging and uncommitted files", run_id)
            _discard_own(output_dir, run_id)
            raise


def locked_maintenance(output_dir: str, work):
    """`work(run_id)` under the output folder's lock, for commands that change committed
    snapshots (`forget`, `compact`): a UsageError when there is none, leftovers of dead runs
    cleaned first, as for a run. They rewrite files through `tf.io.gfile`, which has no
    `s3://` in TensorFlow 2.21: an `s3://` folder is one clear line, not a stack trace."""
    if output_dir.startswith("s3://"):
        raise UsageError(f"--output_dir {output_dir}: forget and compact work on local and gs:// "
                         f"folders; for s3://, run them on a local copy and sync it back.")
    if not layout.committed_snapshots(output_dir):
        raise UsageError(f"--output_dir {output_dir}: no committed snapshot.")
    run_id = layout.new_run_id()
    with locked_run(output_dir, run_id):
        return work(run_id)
