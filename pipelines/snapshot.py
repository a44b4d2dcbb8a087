"""Turning a staged run into a committed snapshot, or into nothing.

After the graph ran, the job itself checks that every input is accounted for
(`accepted + rejected == discovered` for images, and likewise for label and box CSV rows). Only
then are stats, stats.pb and report.html written, the staged files moved to
`snapshots/<run_id>/` (and fsync'd), `OUTPUT/classes.txt` updated, `manifest.json` written last
(a snapshot without it is not committed and readers ignore it), then the `LATEST` pointer. Every
file written here goes through a temporary name and a rename (`beam_files.write_atomically`), so
a full disk or a kill leaves either the old file or the whole new one. A run that fails at any
point before the manifest publishes nothing, and the previous snapshot stays readable. The names and the committed/latest
rules are `transforms.snapshot_layout`'s; `BEAM_FILES` lets the job's side apply those rules
through Beam's FileSystems, the file systems it writes with.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import json
import platform
import posixpath

from apache_beam.io.filesystems import FileSystems

from configs.schema import SPLITS, config_to_dict
from pipelines.beam_files import (
    BEAM_FILES,
    BeamStorage,
    read_json,
    remove_tree,
    sync_files,
    write_atomically,
)
from pipelines.job import PreprocessJob
from pipelines.staged_run import (
    BOX_ROWS,
    IMAGES,
    LABEL_ROWS,
    LIVE,
    Counts,
    read_staged,
    read_transform_summary,
)
from transforms import file_changes, file_reads, json_text
from transforms import snapshot_layout as layout
from transforms.file_reads import read_bytes
from transforms.offline import classes, file_kinds, quality_rules
from transforms.offline.rejects import REASONS
from transforms.reporting.history import fingerprint, reject_key, snapshot_summary
from transforms.reporting.report import render_report
from transforms.reporting.stats import finalize_stats
from transforms.reporting.stats_proto import to_statistics_proto
from transforms.reporting.tfds_metadata import tfds_files
from transforms.reporting.thumbnails import thumbnails_png
from transforms.snapshot_layout import WORK_DIR, Snapshot

__all__ = ["AccountingError", "BeamStorage", "BEAM_FILES", "check_accounting",
           "publish_snapshot", "publish_candidate", "staged_accounting", "staged_stats",
           "staged_rejects", "discard_staging", "remove_tree", "read_json"]


class AccountingError(RuntimeError):
    """The job lost or double-counted inputs: it fails and publishes nothing."""


def _write_bytes(path: str, data: bytes) -> None:
    """Through a temporary name and a rename (`beam_files.write_atomically`)."""
    write_atomically(path, data)


def _write_json(path: str, data) -> None:
    """Strict JSON (NaN or Infinity is an error, not a bare `NaN` other readers reject),
    indented, keys sorted (`json_text.pretty`)."""
    _write_bytes(path, json_text.pretty_file(data))


def check_accounting(counts: Counts) -> dict:
    """The accounting section of the manifest, with an `ok` flag per kind and overall."""
    def section(kind: str, done: tuple) -> dict:
        values = {name: counts.get(kind, name)
                  for name in ("discovered" if kind == IMAGES else "total",) + done}
        total = values["discovered" if kind == IMAGES else "total"]
        values["ok"] = total == sum(values[name] for name in done)
        return values
    accounting = {
        IMAGES: section(IMAGES, ("accepted", "rejected", "skipped")),
        LABEL_ROWS: section(LABEL_ROWS, ("matched", "rejected")),
        BOX_ROWS: section(BOX_ROWS, ("matched", "rejected")),
        LIVE: live_accounting(counts),
    }
    accounting["ok"] = all(part["ok"] for part in accounting.values())
    return accounting


def live_accounting(counts: Counts) -> dict:
    """The live set across the night (`transforms.live_view`): every record live before it
    is kept or retired, and what is live after it is what was kept plus tonight's accepted
    records (`before + added - retired == after`)."""
    live = {name: counts.get(LIVE, name) for name in ("before", "kept", "retired")}
    live["added"] = counts.get(IMAGES, "accepted")
    live["after"] = live["kept"] + live["added"]
    live["retired_by_reason"] = counts.retired_by_reason()
    live["ok"] = (live["before"] == live["kept"] + live["retired"]
                  == sum(live["retired_by_reason"].values()) + live["kept"])
    return live


def _find_input(data_roots, rel: str) -> str | None:
    for root in data_roots:
        candidate = FileSystems.join(root.rstrip("/"), rel)
        if file_reads.exists(candidate):
            return candidate
    return None


def _thumbnails(job: PreprocessJob, stats: dict) -> dict:
    """{reason: [(path, PNG or None)]}, the PNGs made in an isolated process (never here)."""
    shown = {reason: examples[:job.config.report.thumbnails_per_reason]
             for reason, examples in sorted(stats.get("reject_examples", {}).items())}
    found = {rel: _find_input(job.data_roots, rel) for reason, rels in shown.items()
             if reason not in REASONS.no_thumbnail for rel in rels}
    pngs = thumbnails_png([path for path in found.values() if path], job.config.limits,
                          job.config.decode.timeout_s, job.config.decode.exif_orientation)
    return {reason: [(rel, pngs.get(found.get(rel))) for rel in rels]
            for reason, rels in shown.items()}


def _tensorflow_version() -> str:
    """TensorFlow's version, from its package's metadata: the launcher does not import
    TensorFlow for it (~3 s). A build installed under another name is asked itself."""
    try:
        return importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        import tensorflow
        return tensorflow.__version__


def _versions() -> dict:
    """The manifest's package versions: a new dict each call, looked up once a process (the
    metadata lookups cost ~0.8 ms a publish)."""
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> dict:
    import apache_beam
    import pyarrow
    versions = {"python": platform.python_version(), "apache_beam": apache_beam.__version__,
                "tensorflow": _tensorflow_version(), "pyarrow": pyarrow.__version__}
    for key, package in (("pixelmill", "pixelmill"),
                         ("tensorflow_transform", "tensorflow-transform"),
                         ("tfx_bsl", "tfx-bsl")):
        try:
            versions[key] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = "not installed"
    return versions


def _file_entry(path: str, rel: str) -> dict:
    digest = hashlib.sha256()
    size = 0
    with file_reads.open_file(path) as handle:
        while True:
            chunk = handle.read(1 << 20)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return {"path": rel, "bytes": size, "sha256": digest.hexdigest()}


def _staged_files(staging: str) -> list[str]:
    matched = file_reads.match(FileSystems.join(staging, "**"))
    prefix = staging.rstrip("/") + "/"
    rels = sorted(m.path[len(prefix):] for m in matched)
    return [rel for rel in rels if not rel.startswith(WORK_DIR + "/")]


def _move(sources: list[str], destinations: list[str]) -> None:
    for destination in destinations:
        parent = posixpath.dirname(destination)
        if "://" not in parent and not FileSystems.exists(parent):
            FileSystems.mkdirs(parent)
    if sources:
        file_changes.rename(sources, destinations)


def _checked_accounting(staged) -> dict:
    accounting = check_accounting(staged.counts)
    if not accounting["ok"]:
        raise AccountingError(
            "Inputs are not all accounted for; nothing was published. "
            f"Accounting: {json.dumps(accounting, sort_keys=True)}")
    return accounting


def staged_accounting(job: PreprocessJob) -> dict:
    """The staged run's accounting alone (what the guard decides on), without the stats;
    AccountingError when inputs went missing."""
    return _checked_accounting(read_staged(job.staging_dir))


def staged_stats(job: PreprocessJob) -> tuple[dict, dict]:
    """(accounting, stats) of the staged run; AccountingError when inputs went missing."""
    staging = job.staging_dir
    staged = read_staged(staging)
    accounting = _checked_accounting(staged)
    stats = finalize_stats(staged.index_summary, staged.counts.rejects_by_kind(), accounting)
    stats["thresholds"] = quality_rules.thresholds(job.config.quality)
    stats[file_kinds.OTHER_FILES] = staged.counts.other_files()
    stats["classes"] = classes.read_class_table(FileSystems.join(staging, layout.CLASSES))
    if job.config.transform.enabled:
        stats["transform"] = read_transform_summary(staging)
    return accounting, stats


def staged_rejects(job: PreprocessJob) -> list[dict]:
    """The staged rejects ledger, parsed."""
    text = read_bytes(FileSystems.join(job.staging_dir, layout.REJECTS)).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def discard_staging(job: PreprocessJob) -> None:
    """Removes a staged run that will not be published."""
    remove_tree(job.staging_dir)


def _write_tfds_files(job: PreprocessJob, run_id: str, table: list) -> None:
    """TFDS's dataset_info.json, features.json and class names into the staging folder, so the
    snapshot is a TFDS dataset directory; none for gzip shards, which TFDS cannot read."""
    output = job.config.output
    if output.compression == "gzip":
        return
    staging = job.staging_dir
    staged = read_staged(staging)
    files = tfds_files(name=output.name, run_id=run_id, shards=staged.shards, class_table=table,
                       meta_columns=staged.meta_columns, label_offset=output.label_offset)
    for filename, data in files.items():
        _write_bytes(FileSystems.join(staging, filename), data)


def _staged_fingerprints(staging: str) -> set:
    """The fingerprint of every reject key of the staged ledger, read line by line."""
    with file_reads.open_file(FileSystems.join(staging, layout.REJECTS)) as handle:
        return {fingerprint(reject_key(json.loads(line))) for line in handle if line.strip()}


def _stage_reports(job: PreprocessJob, run_id: str, extra_stats: dict | None,
                   reject_keys) -> tuple[dict, dict]:
    """(accounting, stats) of the staged run, after writing its stats, report, TFDS metadata
    and summary.json into the staging folder (see `publish_snapshot` for the arguments)."""
    staging = job.staging_dir
    accounting, stats = staged_stats(job)
    stats.update(extra_stats or {})
    _write_json(FileSystems.join(staging, layout.STATS), stats)
    _write_bytes(FileSystems.join(staging, layout.STATS_PB),
                 to_statistics_proto(stats).SerializeToString(deterministic=True))
    html = render_report(stats, _thumbnails(job, stats), title=f"pixelmill snapshot {run_id}",
                         run_id=run_id)
    _write_bytes(FileSystems.join(staging, layout.REPORT), html.encode("utf-8"))
    _write_tfds_files(job, run_id, stats["classes"])
    _write_json(FileSystems.join(staging, layout.SUMMARY), snapshot_summary(
        stats, reject_keys or (),
        _staged_fingerprints(staging) if reject_keys is None else ()))
    return accounting, stats


def _is_shard_file(rel: str) -> bool:
    """A shard or its DALI index: everything under a split's folder."""
    return rel.split("/", 1)[0] in SPLITS and "/" in rel


def publish_candidate(job: PreprocessJob, output_dir: str, run_id: str, inputs: dict,
                      why: dict, extra_stats: dict | None = None, reject_keys=None) -> str:
    """Publishes a refused run (`runners.jobs.guard`) as a failed candidate and returns its folder,
    `candidates/<run_id>/`: its ledgers, stats and report as a snapshot would have them, no
    shards, and `candidate.json` (`why`, the inputs and the accounting). Nothing is committed:
    LATEST, classes.txt and the live view stay; the staging folder is removed."""
    staging = job.staging_dir
    accounting, _ = _stage_reports(job, run_id, extra_stats, reject_keys)
    final = layout.candidate_dir(output_dir, run_id)
    remove_tree(final)  # a candidate of the same --run_id refused before
    rels = [rel for rel in _staged_files(staging) if not _is_shard_file(rel)]
    _move([FileSystems.join(staging, rel) for rel in rels],
          [FileSystems.join(final, rel) for rel in rels])
    _write_json(FileSystems.join(final, layout.CANDIDATE), {
        "run_id": run_id, "refused": why, "inputs": inputs, "accounting": accounting,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat()})
    remove_tree(staging)
    return final


def publish_snapshot(job: PreprocessJob, output_dir: str, run_id: str, inputs: dict,
                     extra_stats: dict | None = None, reject_keys=None) -> Snapshot:
    """Checks the staged run and commits it as `snapshots/<run_id>/` (see module docstring).
    `extra_stats` sections (e.g. the nightly drift and cumulative totals) are added to
    stats.json, the report and the manifest. `reject_keys`: the rejects this snapshot is the
    first to report, for its summary.json (the nightly passes tonight's new ones; None: every
    line of its ledger)."""
    staging = job.staging_dir
    accounting, stats = _stage_reports(job, run_id, extra_stats, reject_keys)
    table = stats["classes"]
    shard_entries = {entry["path"]: entry for entry in read_staged(staging).shards}
    final = layout.snapshot_dir(output_dir, run_id)
    rels = _staged_files(staging)
    files = []
    for rel in rels:
        entry = shard_entries.get(rel) or _file_entry(FileSystems.join(staging, rel), rel)
        files.append(entry)
    _move([FileSystems.join(staging, rel) for rel in rels],
          [FileSystems.join(final, rel) for rel in rels])
    sync_files([FileSystems.join(final, rel) for rel in rels])  # durable before the commit
    manifest = {
        "run_id": run_id,
        # A base holds everything live when it was written; a night adds to the one before
        # and retires what changed (transforms.live_view).
        "base": not job.archive,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "inputs": inputs,
        "accounting": accounting,
        "splits": stats.get("by_split", {}),
        "num_classes": len(table),
        "label_offset": job.config.output.label_offset,  # stored class ids = table ids + this
        "orientation_recorded": True,  # every record has image/orientation (reader_metadata)
        "files": files,
        "config": config_to_dict(job.config),
        "versions": _versions(),
        **{key: (extra_stats or {})[key] for key in ("drift",) if key in (extra_stats or {})},
    }
    # The table first: a snapshot is never committed with ids that classes.txt lacks (a run
    # failing after this only reserves its new ids; they are append-only anyway).
    classes_path = FileSystems.join(output_dir, layout.CLASSES)
    _write_bytes(classes_path, classes.class_table_bytes(classes_path, table))
    _write_json(FileSystems.join(final, layout.MANIFEST), manifest)  # the commit point
    _write_bytes(FileSystems.join(output_dir, layout.LATEST), (run_id + "\n").encode("utf-8"))
    remove_tree(staging)
    return Snapshot(run_id=run_id, path=final, accounting=accounting, stats=stats,
                    manifest=manifest)
