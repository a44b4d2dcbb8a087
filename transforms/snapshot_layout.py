"""The output folder's layout: the one owner of its names, the shard-file pattern, and which
snapshots are committed or latest (which are live or selected: `transforms.live_view`).

    OUTPUT/  LATEST (newest committed run_id)  classes.txt (append-only class table)
      .staging/<run_id>/      a run being written, never read; `_work/` inside: internal summaries
      candidates/<run_id>/    a refused run's ledgers and report, candidate.json (why); never read
      snapshots/<run_id>/     <split>/<name>-<split>.tfrecord-00000-of-00008[.gz],
                              <split>/dali_index/*.idx, classes.txt, stats.json, stats.pb,
                              report.html, rejects.jsonl, index.parquet, summary.json,
                              TFDS's dataset_info.json, features.json, *.labels.txt,
                              Split-<split>/FeatureStats.pb, transform_fn/, transformed_metadata/,
                              manifest.json: written last; without it (or if it does not parse
                              or list its files) the snapshot is not committed

Both halves use it: the shard writer and publisher (Beam's FileSystems), nightly, and the
training reader (`tf.io.gfile`; it never imports Beam). Functions that look at files take a
`Storage` (default `GFILE`), a four-method adapter, so each rule is written once. Run ids are
UTC timestamps (`new_run_id`), so sorting them orders snapshots oldest first. What each file
holds: README.md, "What a run writes".
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import re
from typing import NamedTuple, Protocol, Sequence

from configs.checks import check_one_of
from configs.schema import SPLITS

__all__ = [
    "SNAPSHOTS", "LATEST", "MANIFEST", "CLASSES", "STATS", "STATS_PB", "REPORT", "REJECTS",
    "SUMMARY", "RETIRED", "FORGOTTEN",
    "INDEX", "TRANSFORM_FN", "STAGING", "WORK_DIR", "CANDIDATES",
    "CANDIDATE", "LOCK", "LOCK_BLOCKED", "WORK_SHARDS", "WORK_COUNTS", "WORK_META_COLUMNS",
    "WORK_INDEX_SUMMARY", "WORK_TRANSFORM_SUMMARY",
    "Snapshot", "Storage", "GfileStorage", "GFILE", "Selection",
    "join", "new_run_id", "snapshot_dir", "staging_dir", "staging_root", "work_file",
    "candidate_dir",
    "shard_name", "shard_glob", "parse_shard_name", "tfrecord_compression", "DALI_INDEX_DIR",
    "dali_index_name", "FEATURE_STATS", "feature_stats_name",
    "parse_manifest", "snapshot_problems", "committed_snapshots", "read_latest",
    "latest_snapshot", "parse_selection", "list_shards",
    "list_split_shards", "shard_run_id",
]

SNAPSHOTS = "snapshots"          # OUTPUT/snapshots/<run_id>/
LATEST = "LATEST"                # OUTPUT/LATEST
MANIFEST = "manifest.json"       # the commit point of a snapshot
CLASSES = "classes.txt"          # OUTPUT/classes.txt and snapshots/<run_id>/classes.txt
STATS = "stats.json"
STATS_PB = "stats.pb"
REPORT = "report.html"
REJECTS = "rejects.jsonl"
SUMMARY = "summary.json"         # a snapshot's stats and reject keys for later nights
INDEX = "index.parquet"
RETIRED = "retired.jsonl"        # a snapshot's retirements of earlier records (live_view)
FORGOTTEN = "forgotten.jsonl"    # OUTPUT/forgotten.jsonl: records `pixelmill forget` retired
TRANSFORM_FN = "transform_fn"    # TFT's exported transform, next to the shards
STAGING = ".staging"             # OUTPUT/.staging/<run_id>/
WORK_DIR = "_work"               # job-internal summaries inside the staging folder
CANDIDATES = "candidates"        # OUTPUT/candidates/<run_id>/: refused runs (runners.jobs.guard)
CANDIDATE = "candidate.json"     # why it was refused, with its counts
LOCK = ".lock"                   # OUTPUT/.lock: the run holding the folder (runners.locking.run_lock)
LOCK_BLOCKED = ".lock_blocked"   # OUTPUT/.lock_blocked: a run that found the lock held
# Inside `_work/` (`pipelines.staged_run` writes and reads them): the graph -> publisher hand-off.
WORK_SHARDS = "shards.json"
WORK_COUNTS = "counts.json"
WORK_META_COLUMNS = "meta_columns.json"
WORK_INDEX_SUMMARY = "index_summary.json"
WORK_TRANSFORM_SUMMARY = "transform_summary.json"  # stats.json's `transform`

_SHARD = "{name}-{split}.tfrecord-{index:05d}-of-{count:05d}{suffix}"
_GZIP_SUFFIX = ".gz"
DALI_INDEX_DIR = "dali_index"    # <split>/dali_index/<shard>.idx
FEATURE_STATS = "FeatureStats.pb"  # Split-<split>/FeatureStats.pb, as TFX's StatisticsGen


def feature_stats_name(split: str) -> str:
    """A split's TFDV statistics inside the snapshot: `Split-<split>/FeatureStats.pb`."""
    return f"Split-{split}/{FEATURE_STATS}"


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One snapshot: `OUTPUT/snapshots/<run_id>/` at `path`.

    A snapshot is identified by `run_id` and `path` (equality and hashing use only those).
    The publisher also fills in what the run reported (`accounting`, `stats` and `manifest`,
    for the CLI summary and tests); a snapshot found on disk by the reader leaves them None.
    """
    run_id: str
    path: str
    accounting: dict | None = dataclasses.field(default=None, compare=False, repr=False)
    stats: dict | None = dataclasses.field(default=None, compare=False, repr=False)
    manifest: dict | None = dataclasses.field(default=None, compare=False, repr=False)


class Storage(Protocol):
    """The four file operations the layout's rules need (paths as strings, any scheme the
    implementation knows)."""

    def glob(self, pattern: str) -> list[str]:
        """Paths matching `pattern` (`*` within one folder level)."""

    def exists(self, path: str) -> bool:
        """Whether a file or folder exists at `path`."""

    def read_text(self, path: str) -> str:
        """The whole file, decoded as UTF-8."""

    def mtime(self, path: str) -> float:
        """Last modification time (any unit, compared only with the same storage's)."""


class GfileStorage:
    """`Storage` through `tf.io.gfile`: local paths, gs:// and TensorFlow's other file systems;
    `s3://` paths (which TensorFlow 2.21 cannot open) through boto3 (`transforms.s3_storage`).
    TensorFlow is imported on first use, so importing the layout stays cheap."""

    @staticmethod
    def _gfile():
        import tensorflow as tf
        return tf.io.gfile

    @staticmethod
    def _s3(path: str):
        if not path.startswith("s3://"):
            return None
        from transforms.s3_storage import S3_FILES
        return S3_FILES

    def glob(self, pattern: str) -> list[str]:
        s3 = self._s3(pattern)
        return s3.glob(pattern) if s3 else list(self._gfile().glob(pattern))

    def exists(self, path: str) -> bool:
        s3 = self._s3(path)
        return s3.exists(path) if s3 else self._gfile().exists(path)

    def read_text(self, path: str) -> str:
        s3 = self._s3(path)
        if s3:
            return s3.read_text(path)
        with self._gfile().GFile(path, "r") as handle:
            return handle.read()

    def mtime(self, path: str) -> float:
        s3 = self._s3(path)
        return s3.mtime(path) if s3 else self._gfile().stat(path).mtime_nsec


GFILE = GfileStorage()


def join(*parts: str) -> str:
    """Joins path parts with "/" (local, gs:// and other URLs alike)."""
    return "/".join(p.rstrip("/") for p in parts)


def new_run_id(now: datetime.datetime | None = None) -> str:
    """A run id: the UTC start time to the microsecond (`20260101T000000000000Z`); their
    sort order is their time order."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S%fZ")


def snapshot_dir(output_dir: str, run_id: str) -> str:
    return join(output_dir, SNAPSHOTS, run_id)


def staging_root(output_dir: str) -> str:
    return join(output_dir, STAGING)


def staging_dir(output_dir: str, run_id: str) -> str:
    return join(output_dir, STAGING, run_id)


def candidate_dir(output_dir: str, run_id: str) -> str:
    """A refused run's ledgers and report: outside `snapshots/`, never committed or read."""
    return join(output_dir, CANDIDATES, run_id)


def work_file(staging: str, name: str) -> str:
    """A job-internal file in a staging folder (`_work/<name>`, never published)."""
    return join(staging, WORK_DIR, name)


# ----------------------------------------------------------------------------- shards

class ShardName(NamedTuple):
    index: int
    count: int
    gzip: bool


def shard_name(name: str, split: str, index: int, count: int, compression: str) -> str:
    """A shard's path inside its snapshot: `<split>/<name>-<split>.tfrecord-NNNNN-of-NNNNN`,
    `.gz` appended when `compression` is "gzip"."""
    suffix = _GZIP_SUFFIX if compression == "gzip" else ""
    return f"{split}/" + _SHARD.format(name=name, split=split, index=index, count=count,
                                       suffix=suffix)


def dali_index_name(shard_rel: str) -> str:
    """A shard's DALI index (path inside the snapshot): `<split>/dali_index/<shard>.idx`. In a
    subfolder, so a glob for the shards (`<split>/<name>-<split>.tfrecord-*`, as tf.data users
    write it) never takes an index for a TFRecord file."""
    folder, _, filename = shard_rel.rpartition("/")
    return "/".join(part for part in (folder, DALI_INDEX_DIR, f"{filename}.idx") if part)


def shard_glob(name: str, split: str) -> str:
    """A glob for the shard files of a split (inside `<snapshot>/<split>/`)."""
    return f"{name}-{split}.tfrecord-*"


def parse_shard_name(filename: str, name: str, split: str) -> ShardName | None:
    """(index, count, gzip) of a shard file name (the last path part), or None when the name
    is not one of `shard_name`'s."""
    pattern = rf"^{re.escape(name)}-{re.escape(split)}\.tfrecord-(\d+)-of-(\d+)(\.gz)?$"
    match = re.match(pattern, filename.rstrip("/").rsplit("/", 1)[-1])
    if match is None:
        return None
    return ShardName(int(match.group(1)), int(match.group(2)), match.group(3) is not None)


def tfrecord_compression(path: str) -> str:
    """The `tf.data.TFRecordDataset` compression type of a shard file: "GZIP" or ""."""
    return "GZIP" if path.endswith(_GZIP_SUFFIX) else ""


def list_shards(snapshot: Snapshot, split: str, name: str = "images",
                storage: Storage = GFILE) -> list[str]:
    """The shard files of one split, sorted: `<name>-<split>.tfrecord-00000-of-00008[.gz]`.

    Raises if the split has no shards or if shards are missing from the `-of-N` series.
    """
    check_one_of("split", split, SPLITS)
    directory = join(snapshot.path, split)
    named = [(path, parse_shard_name(path, name, split))
             for path in storage.glob(join(directory, shard_glob(name, split)))]
    named = [(path, parsed) for path, parsed in named if parsed is not None]
    if not named:
        raise FileNotFoundError(
            f"No shards for split {split!r} in snapshot {snapshot.run_id!r}: nothing matches "
            f"{directory}/{name}-{split}.tfrecord-NNNNN-of-NNNNN[.gz]")
    indices = {parsed.index for _, parsed in named}
    totals = {parsed.count for _, parsed in named}
    if len(totals) != 1 or indices != set(range(next(iter(totals)))):
        raise ValueError(
            f"Incomplete shard series for split {split!r} in {directory}: expected indices "
            f"0..N-1 of one N. Received: indices {sorted(indices)}, N in {sorted(totals)}")
    return sorted(path for path, _ in named)


def shard_run_id(shard_path: str) -> str:
    """The run_id of the snapshot a shard file (`.../snapshots/<run_id>/<split>/<file>`) is in."""
    return shard_path.rstrip("/").rsplit("/", 3)[-3]


def list_split_shards(snapshots: Sequence[Snapshot], split: str, name: str = "images",
                      storage: Storage = GFILE) -> list[str]:
    """Shards of `split` over several snapshots, oldest snapshot first. One snapshot must have
    the split; of several, one may have none of it (a small night), but not all of them."""
    if len(snapshots) == 1:
        return list_shards(snapshots[0], split, name, storage)
    files = []
    for snapshot in snapshots:
        if storage.glob(join(snapshot.path, split, shard_glob(name, split))):
            files += list_shards(snapshot, split, name, storage)
    if not files:
        raise FileNotFoundError(
            f"No shards for split {split!r} in the {len(snapshots)} selected snapshots.")
    return files


# ----------------------------------------------------------------------------- snapshots

def parse_manifest(text: str) -> tuple[dict | None, str | None]:
    """(manifest, None) when `text` is a manifest that can commit a snapshot: a JSON object
    whose `files` is a list of entries with a relative `path`; else (None, what is wrong)."""
    if not text.strip():
        return None, "empty"
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(manifest, dict):
        return None, f"not a JSON object (a {type(manifest).__name__})"
    files = manifest.get("files")
    if not isinstance(files, list):
        return None, "lists no files (no 'files' list)"
    for entry in files:
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or not rel or rel.startswith("/") or "://" in rel:
            return None, f"a 'files' entry has no relative 'path': {entry!r}"[:300]
    return manifest, None


def _listed(manifest: dict) -> list[str]:
    return [entry["path"] for entry in manifest["files"]]


def _existing_files(output_dir: str, manifests: Sequence[dict], storage: Storage) -> set[str]:
    """Which files the manifests list exist: one glob per folder depth for all snapshots
    together (`snapshots/*/*`, `snapshots/*/*/*`, ...), never one request per file."""
    depths = {rel.count("/") + 1 for manifest in manifests for rel in _listed(manifest)}
    found: set[str] = set()
    for depth in sorted(depths):
        found.update(path.rstrip("/") for path in
                     storage.glob(join(output_dir, SNAPSHOTS, "*", *(["*"] * depth))))
    return found


def _broken(snapshot_path: str, manifest: dict | None, problem: str | None,
            existing: set[str]) -> str | None:
    if problem:
        return f"{MANIFEST} {problem}"
    missing = [rel for rel in _listed(manifest) if join(snapshot_path, rel) not in existing]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return f"{MANIFEST} lists files that do not exist: {missing[0]}{more}"
    return None


def _read_manifest(path: str, storage: Storage) -> tuple[dict | None, str | None]:
    try:
        text = storage.read_text(path)
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc})"
    return parse_manifest(text)


def snapshot_problems(output_dir: str, storage: Storage = GFILE) -> tuple[list[Snapshot],
                                                                         dict[str, str]]:
    """(committed snapshots oldest first, {folder: what is wrong} for the others that have a
    manifest). Committed: `manifest.json` parses as a JSON object whose `files` list names
    files that all exist (`parse_manifest`; existence only, no hashing: `pixelmill verify`
    does that). A folder without a manifest is a run still writing or one that died: neither
    committed nor reported."""
    manifests = storage.glob(join(output_dir, SNAPSHOTS, "*", MANIFEST))
    run_ids = sorted({path.rstrip("/").rsplit("/", 2)[-2] for path in manifests})
    snapshots = [Snapshot(run_id, snapshot_dir(output_dir, run_id)) for run_id in run_ids]
    parsed = [_read_manifest(join(s.path, MANIFEST), storage) for s in snapshots]
    good = [manifest for manifest, _ in parsed if manifest is not None]
    existing = _existing_files(output_dir, good, storage) if good else set()
    committed, broken = [], {}
    for snapshot, (manifest, problem) in zip(snapshots, parsed):
        problem = _broken(snapshot.path, manifest, problem, existing)
        if problem:
            broken[snapshot.path] = problem
        else:  # the parsed manifest travels along: later rules (live_view) read it again
            committed.append(dataclasses.replace(snapshot, manifest=manifest))
    return committed, broken


def committed_snapshots(output_dir: str, storage: Storage = GFILE) -> list[Snapshot]:
    """The committed snapshots, oldest first (`snapshot_problems`). Each folder whose manifest
    exists but does not commit it is logged as a warning naming the folder and what is wrong,
    once per call, and is treated as not committed: never read, never history."""
    committed, broken = snapshot_problems(output_dir, storage)
    for path, problem in broken.items():
        logging.warning("snapshot %s is not committed: %s (`pixelmill verify %s` checks it)",
                        path, problem, output_dir)
    return committed


def read_latest(output_dir: str, storage: Storage = GFILE) -> str | None:
    """The run_id that `OUTPUT/LATEST` names, or None before the first committed run or when
    it names no committed snapshot (with a warning; `latest_snapshot` then falls back)."""
    path = join(output_dir, LATEST)
    if not storage.exists(path):
        return None
    run_id = storage.read_text(path).strip()
    if not run_id:
        return None
    if run_id not in {s.run_id for s in committed_snapshots(output_dir, storage)}:
        logging.warning("%s names %r, which is not a committed snapshot", path, run_id)
        return None
    return run_id


def latest_snapshot(output_dir: str, storage: Storage = GFILE) -> Snapshot:
    """The snapshot `LATEST` names; if `LATEST` is missing or names an uncommitted snapshot,
    the committed one with the newest manifest (with a warning). Raises when none is
    committed."""
    committed = committed_snapshots(output_dir, storage)
    if not committed:
        raise FileNotFoundError(
            f"No committed snapshot under {output_dir}/{SNAPSHOTS} (a snapshot is committed once "
            f"its {MANIFEST} is written). Run `pixelmill preprocess` first.")
    by_id = {s.run_id: s for s in committed}
    pointer = join(output_dir, LATEST)
    if storage.exists(pointer):
        run_id = storage.read_text(pointer).strip()
        if run_id in by_id:
            return by_id[run_id]
        logging.warning("%s names %r, which is not a committed snapshot; using the committed "
                        "snapshot with the newest manifest instead", pointer, run_id)
    else:
        logging.warning("%s is missing; using the committed snapshot with the newest manifest",
                        pointer)
    return max(committed, key=lambda s: (storage.mtime(join(s.path, MANIFEST)), s.run_id))


class Selection(NamedTuple):
    """A parsed `snapshots` choice: kind "latest" | "all" | "last" | "mix", with the count N
    ("last") or the newest snapshot's weight W ("mix"); 0 otherwise."""
    kind: str
    value: float

    @property
    def mix_weight(self) -> float | None:
        return self.value if self.kind == "mix" else None


def parse_selection(spec) -> Selection:
    """The `snapshots` argument ("latest", "all", N, "last:N", "mix:W") as a `Selection`."""
    if isinstance(spec, bool):
        spec = str(spec)
    if isinstance(spec, int):
        spec = f"last:{spec}"
    if spec in ("latest", "all"):
        return Selection(spec, 0)
    kind, _, value = str(spec).partition(":")
    try:
        number = float(value)
    except ValueError:
        number = None
    if kind == "last" and number is not None and number >= 1 and number == int(number):
        return Selection("last", int(number))
    if kind == "mix" and number is not None and 0.0 < number < 1.0:
        return Selection("mix", number)
    raise ValueError(
        "Unknown snapshots selection. Expected one of ('latest', 'all', N or 'last:N' with "
        "N >= 1, 'mix:W' with 0 < W < 1 the share of the newest snapshot). "
        f"Received: snapshots={spec!r}")
