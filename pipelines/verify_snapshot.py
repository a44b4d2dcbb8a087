"""Checking committed snapshots after the fact, byte by byte (`pixelmill verify`).

For each snapshot folder with a manifest that lists its files, every listed file is read once:
its size and sha256 are compared with `manifest.json`; a shard's TFRecord framing and both
CRCs are walked (gzip shards decompressed first), its record count compared with the manifest;
an uncompressed shard's DALI index (`<split>/dali_index/<shard>.idx`) must exist and match the
shard's record offsets; the manifest's accounting must add up and its per-split record counts
match the records in the shards. Folders whose manifest is missing or does not parse were never
committed (readers skip them): warnings, errors only when named. Reads through
`transforms.file_reads`: `s3://` through one shared client (Beam's S3 file system makes a
client per call, ~0.1 s of CPU each: 68 of them for the demo's snapshot), every other scheme
through Beam's FileSystems (local, gs://, any registered one); no TensorFlow.
"""
from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import zlib

from transforms import file_reads
from transforms import snapshot_layout as layout
from transforms.offline.dali_index import index_line
from transforms.offline.tfrecord_framing import FramingError, framed_records

__all__ = ["Findings", "verify_output", "verify_snapshot", "snapshot_folders"]

_MISSING = "missing (listed in manifest.json)"


@dataclasses.dataclass
class Findings:
    """What `verify_output` found: `broken` {path: [problems]} (errors), `warnings`
    {path: problem}, the snapshots verified and the number of files read."""
    broken: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    warnings: dict = dataclasses.field(default_factory=dict)
    snapshots: list = dataclasses.field(default_factory=list)
    files: int = 0

    @property
    def ok(self) -> bool:
        return not self.broken

    def add(self, path: str, problem: str) -> None:
        self.broken[path].append(problem)


class _Hashing:
    """A raw stream that hashes and counts what is read through it."""

    def __init__(self, handle):
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size) if size is not None and size >= 0 else self._handle.read()
        self.digest.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def _scan(path: str, is_shard: bool, gzipped: bool):
    """(size, sha256, record offsets or None, framing problem or None) in one read."""
    with file_reads.open_file(path) as handle:
        raw = _Hashing(handle)
        offsets, problem = None, None
        if is_shard:
            offsets = []
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            try:
                for offset, size in framed_records(stream):
                    offsets.append((offset, size))
            except FramingError as exc:
                problem = str(exc)
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                problem = f"gzip stream: {exc}"
            if problem:
                offsets = None
        raw.drain()
        return raw.size, raw.digest.hexdigest(), offsets, problem


def _is_shard(rel: str, name: str) -> tuple[bool, bool]:
    split, _, filename = rel.partition("/")
    parsed = layout.parse_shard_name(filename, name, split) if "/" not in filename else None
    return parsed is not None, bool(parsed and parsed.gzip)


def _check_dali(snapshot_path: str, rel: str, offsets, listed: set, findings: Findings):
    index_rel = layout.dali_index_name(rel)
    index_path = layout.join(snapshot_path, index_rel)
    if index_rel in listed and _MISSING in findings.broken.get(index_path, ()):
        return  # already said
    if not file_reads.exists(index_path):
        findings.add(index_path, f"missing: the DALI index of {rel}")
        return
    with file_reads.open_file(index_path) as handle:
        lines = handle.read().decode("ascii", "replace").splitlines(keepends=True)
    expected = [index_line(offset, size) for offset, size in offsets]
    if lines != expected:
        differ = next((i for i, (a, b) in enumerate(zip(lines, expected)) if a != b),
                      min(len(lines), len(expected)))
        findings.add(index_path, f"does not match the records of {rel}: line {differ + 1} "
                                 f"({len(lines)} lines, the shard has {len(expected)} records)")


def _check_accounting(manifest: dict, manifest_path: str, findings: Findings) -> None:
    accounting = manifest.get("accounting")
    if not isinstance(accounting, dict):
        findings.add(manifest_path, "no accounting section")
        return
    parts_ok = []
    for kind, part in sorted(accounting.items()):
        if not isinstance(part, dict):
            continue
        if kind == "live":  # the live set: before + added - retired == after (live_view)
            adds_up = (part.get("before", 0) + part.get("added", 0) - part.get("retired", 0)
                       == part.get("after"))
            parts_ok.append(adds_up and part.get("ok") is True)
            if not parts_ok[-1]:
                findings.add(manifest_path, f"accounting.live (ok={part.get('ok')}): before "
                             f"{part.get('before')} + added {part.get('added')} - retired "
                             f"{part.get('retired')} vs after {part.get('after')}")
            continue
        total_key = "discovered" if "discovered" in part else "total"
        counts = {key: value for key, value in part.items()
                  if key not in (total_key, "ok") and isinstance(value, int)}
        adds_up = part.get(total_key) == sum(counts.values())
        parts_ok.append(adds_up and part.get("ok") is True)
        if not adds_up or part.get("ok") is not True:
            terms = " + ".join(f"{key} {value}" for key, value in counts.items())
            findings.add(manifest_path, f"accounting.{kind} (ok={part.get('ok')}): "
                                        f"{total_key} {part.get(total_key)} vs {terms}")
    if accounting.get("ok") is not True or not all(parts_ok):
        if all(parts_ok):
            findings.add(manifest_path, f"accounting.ok is {accounting.get('ok')!r}")


def verify_snapshot(snapshot_path: str, manifest: dict, findings: Findings) -> None:
    """Checks one snapshot whose manifest parsed (`layout.parse_manifest`) into `findings`."""
    manifest_path = layout.join(snapshot_path, layout.MANIFEST)
    name = ((manifest.get("config") or {}).get("output") or {}).get("name", "images")
    entries = {entry["path"]: entry for entry in manifest["files"]}
    records_by_split = collections.Counter()
    complete_splits = collections.defaultdict(lambda: True)
    shards = {}
    for rel, entry in sorted(entries.items()):
        path = layout.join(snapshot_path, rel)
        findings.files += 1
        if not file_reads.exists(path):
            findings.add(path, _MISSING)
            continue
        is_shard, gzipped = _is_shard(rel, name)
        size, sha256, offsets, problem = _scan(path, is_shard, gzipped)
        if problem:
            findings.add(path, problem)
        if "bytes" in entry and size != entry["bytes"]:
            findings.add(path, f"{size} bytes, manifest.json says {entry['bytes']}")
        elif "sha256" in entry and sha256 != entry["sha256"]:
            findings.add(path, f"sha256 {sha256[:12]}..., manifest.json says "
                               f"{str(entry['sha256'])[:12]}...")
        if not is_shard:
            continue
        split = rel.split("/", 1)[0]
        if offsets is None:
            complete_splits[split] = False
            continue
        records_by_split[split] += len(offsets)
        if "records" in entry and entry["records"] != len(offsets):
            findings.add(path, f"{len(offsets)} records, manifest.json says {entry['records']}")
        if not gzipped:
            shards[rel] = offsets
    for rel, offsets in sorted(shards.items()):
        _check_dali(snapshot_path, rel, offsets, set(entries), findings)
    _check_accounting(manifest, manifest_path, findings)
    splits = manifest.get("splits")
    for split, count in sorted((splits or {}).items()):
        if isinstance(count, int) and complete_splits[split] and \
                records_by_split[split] != count:
            findings.add(manifest_path, f"splits.{split} is {count}, the shards hold "
                                        f"{records_by_split[split]} records")


def snapshot_folders(output_dir: str) -> list[str]:
    """The run ids of every folder under `snapshots/` that holds a file, sorted."""
    root = layout.join(output_dir, layout.SNAPSHOTS)
    found = file_reads.match(layout.join(root, "*", "**"))
    prefix = file_reads.match(root)  # a local folder's own path, as Beam spells it
    base = (prefix[0].path if prefix else root).rstrip("/") + "/"
    return sorted({m.path[len(base):].split("/", 1)[0] for m in found
                   if m.path.startswith(base)})


def verify_output(output_dir: str, run_id: str | None = None) -> Findings:
    """Verifies every snapshot of `output_dir` (or the one `run_id` names: FileNotFoundError
    when there is no such folder). A folder whose manifest is missing or does not parse is a
    warning (never committed), an error when named."""
    findings = Findings()
    run_ids = snapshot_folders(output_dir)
    if run_id is not None:
        if run_id not in run_ids:
            raise FileNotFoundError(f"No snapshot {run_id!r} under "
                                    f"{layout.join(output_dir, layout.SNAPSHOTS)}")
        run_ids = [run_id]
    for rid in run_ids:
        path = layout.snapshot_dir(output_dir, rid)
        manifest_path = layout.join(path, layout.MANIFEST)
        if not file_reads.exists(manifest_path):
            manifest, problem = None, "missing: never committed (a run writing, or one that died)"
        else:
            with file_reads.open_file(manifest_path) as handle:
                manifest, problem = layout.parse_manifest(handle.read().decode("utf-8",
                                                                               "replace"))
            if problem:
                problem = f"{problem}: not committed"
        if problem:
            if run_id is not None:
                findings.add(manifest_path, problem)
            else:
                findings.warnings[manifest_path] = problem
            continue
        findings.snapshots.append(rid)
        verify_snapshot(path, manifest, findings)
    return findings
