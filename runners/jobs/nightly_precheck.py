"""Nightly's quick look: is tonight certainly a night with nothing new, known from the listing,
the CSVs and the archive's index alone, without TensorFlow or a Beam pipeline?

Most nights of a big, slowly growing corpus change nothing, and the full job would start a
runner, build the graph, trace the TFT transform and read every archived index row through
Beam only to say so. This look runs the same decisions in one process, with the job's own
functions: discovery (`discover.list_images`), the label and box CSV readers, the label key
and the "unchanged since it was last seen" rule of `join_labels`, and the reject fingerprints
of `reporting.history`. It answers "nothing new" only when the job would: every discovered
image is unchanged since the latest snapshot that saw it (so none would be inspected, and
none accepted), and every reject the job would write tonight (discovery, CSV rows, rows that
name no file) has already been reported. Anything else, including an error while looking, is
"maybe": the full job runs and decides, as it always did.

What it reads: the listing of the data roots, the CSVs, the `path, bytes, mtime, label_key,
reason` columns of each committed index, and the summaries the caller already read. It holds
the listing in memory, so a listing of more than `--quick_look_max_files` files (default 1M)
is left to the job.
"""
from __future__ import annotations

import logging

import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.job import PreprocessJob
from runners.flags import DEFAULT_QUICK_LOOK_MAX_FILES
from transforms import snapshot_layout as layout
from transforms.live_view import removal_key
from transforms.offline.discover import TooManyFiles, list_images
from transforms.offline.join_labels import (
    assign_rows,
    label_key,
    missing_file_rejects,
    read_box_csv,
    read_label_csv,
    unchanged_since,
)
from transforms.offline.rejects import Reject
from transforms.reporting.history import fingerprint, reject_key

__all__ = ["QuickLook", "quick_look", "DEFAULT_MAX_FILES"]

_LOG = logging.getLogger(__name__)
_PRIOR_COLUMNS = ("path", "bytes", "mtime", "label_key", "reason", "sha256")
# The look keeps tonight's listing in the launcher's memory (~400 bytes a file): past this many
# files the job, which streams it, decides (`pixelmill nightly --quick_look_max_files`).
DEFAULT_MAX_FILES = DEFAULT_QUICK_LOOK_MAX_FILES  # the default of --quick_look_max_files


class QuickLook:
    """Tonight's inputs, listed and joined the way the job joins them (`TooManyFiles` past
    `max_files` listed files: the look holds the listing in memory)."""

    def __init__(self, job: PreprocessJob, max_files: int | None = None):
        self.refs, self.discovery_rejects, self.other_files = list_images(
            job.data_roots, job.config.discovery.extensions, job.config.limits.max_file_bytes,
            max_files)
        label_rows, self.row_rejects = _split(
            item for path in job.label_csvs for item in read_label_csv(path, job.config.labels))
        box_rows, box_rejects = _split(
            item for path in job.box_csvs
            for item in read_box_csv(path, job.config.labels.max_cell_bytes))
        self.row_rejects += box_rejects
        seen = {ref.path for ref in self.refs} | {r.path for r in self.discovery_rejects}
        # Rows by the discovered path they name, as the job's join matches them (NFC).
        self.label_rows, missing_labels, hints = assign_rows(label_rows, seen)
        self.box_rows, missing_boxes, box_hints = assign_rows(box_rows, seen)
        self.row_rejects += missing_file_rejects(missing_labels, missing_boxes,
                                                 {**hints, **box_hints})
        self._renames = dict(job.config.classes.renames)
        self._folder_labels = job.folder_labels
        self._forgotten = (job.forgotten_paths, job.forgotten_shas)

    def changed(self, priors: dict) -> list[str]:
        """Paths of discovered images the job would inspect tonight (new or changed, or
        whose latest record is no longer live)."""
        return [ref.path for ref in self.refs
                if (priors.get(ref.path) or {}).get("removed")
                or not unchanged_since(ref, priors.get(ref.path), label_key(
                    ref.path, self.label_rows.get(ref.path, ()), self._renames,
                    self._folder_labels, self.box_rows.get(ref.path, ())),
                    self._forgotten)]

    def rejects(self) -> list[Reject]:
        """Every reject the job would write tonight if it inspected nothing."""
        return [r.reject for r in self.discovery_rejects] + self.row_rejects


def _split(items) -> tuple[list, list]:
    rows, rejects = [], []
    for item in items:
        (rejects if isinstance(item, Reject) else rows).append(item)
    return rows, rejects


def _latest_priors(output_dir: str, run_ids: list[str], wanted: set,
                   removed: frozenset) -> tuple[dict, list]:
    """(path -> the latest index row's `_PRIOR_COLUMNS` and whether its record was `removed`,
    for the paths in `wanted` (tonight's listing: what is kept grows with tonight, not with
    the archive); live records the job would retire: of paths not listed tonight, or older
    than their path's latest row). Older snapshots first, so a later one wins, as in the
    job's plan. An index from before `reason` replaced `outcome` is read with the same
    mapping as `index_table.upgrade_row`."""
    priors, live_paths, retiring = {}, {}, []
    for run_id in run_ids:
        path = FileSystems.join(layout.snapshot_dir(output_dir, run_id), layout.INDEX)
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            parquet = pq.ParquetFile(handle)
            names = [name for name in (*_PRIOR_COLUMNS, "outcome", "accepted")
                     if name in parquet.schema_arrow.names]
            for batch in parquet.iter_batches(batch_size=65536, columns=names):
                columns = {name: batch.column(name).to_pylist() for name in names}
                if "reason" not in columns:
                    columns["reason"] = [None if accepted else outcome for outcome, accepted
                                         in zip(columns["outcome"], columns["accepted"])]
                for values in zip(*(columns[name] for name in _PRIOR_COLUMNS)):
                    rel = values[0]
                    gone = removal_key(run_id, rel) in removed
                    if rel in live_paths:  # a later row of a path with a live record
                        retiring.append(rel)
                        del live_paths[rel]
                    if values[4] is None and not gone:
                        live_paths[rel] = run_id
                    if rel in wanted:
                        priors[rel] = dict(zip(_PRIOR_COLUMNS, values), removed=gone)
    retiring += [rel for rel in live_paths if rel not in wanted]
    return priors, retiring


def quick_look(job: PreprocessJob, output_dir: str, run_ids: list[str], reported: set,
               max_files: int | None = DEFAULT_MAX_FILES,
               removed: frozenset = frozenset()) -> str | None:
    """The nightly "nothing new" message when tonight certainly has nothing new, else None
    (the full job must run). `run_ids`: the live snapshots, oldest first; `reported`:
    the fingerprints of every reject they reported (`reporting.history.read_history`);
    `max_files`: a listing with more files is left to the job (None: no limit); `removed`:
    the live view's removed records (`live_view.removal_key`). A live record whose file is
    gone is news: the job retires it."""
    if not run_ids:
        return None
    try:
        look = QuickLook(job, max_files)
        listed = {ref.path for ref in look.refs} | {r.path for r in look.discovery_rejects}
        priors, retiring = _latest_priors(output_dir, run_ids, listed, removed)
        changed = look.changed(priors) + retiring + [
            r.path for r in look.discovery_rejects
            if r.path in priors and priors[r.path]["reason"] is None
            and not priors[r.path]["removed"]]
        news = [r for r in look.rejects() if fingerprint(reject_key(_line(r))) not in reported]
    except TooManyFiles as exc:
        _LOG.info("quick look skipped: %s (--quick_look_max_files); running the job", exc)
        return None
    except Exception as exc:  # the job will meet the same problem and say it properly
        _LOG.info("quick look failed (%s: %s); running the job", type(exc).__name__, exc)
        return None
    if changed or news:
        _LOG.info("quick look: %d new or changed images, %d new rejects (e.g. %s); running "
                  "the job", len(changed), len(news), (changed or [r.path for r in news])[0])
        return None
    return (f"nothing new since snapshot {run_ids[-1]}: {len(look.refs)} images unchanged, "
            f"{len(look.discovery_rejects)} rejected again as before; nothing published "
            f"(a look at the listing, the CSVs and the index; the job did not run)")


def _line(reject: Reject) -> dict:
    return {"kind": reject.kind, "path": reject.path, "reason": reject.reason,
            "sha256": reject.sha256}
