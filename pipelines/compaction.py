"""Compaction and forgetting: make the files match the live view (`transforms.live_view`).

`compact` writes a new *base* snapshot holding exactly the live records: each shard of the
live snapshots is copied byte for byte when nothing in it was retired, or rewritten without
its retired records; the index keeps each path's latest row (less retired records), and
TFDS's metadata, DALI indexes, the class table and the newest TFT transform come along. It
becomes LATEST, so TFDS `builder_from_directory`, DALI and tfrecord-index readers, which know
nothing of retirements, read the live set from it. Earlier snapshots stay (history).

`forget` retires named images from every future read: one audit line per record in
`OUTPUT/forgotten.jsonl` (the removal list `make_dataset` and nightly apply), then every shard
of every committed snapshot holding one is rewritten without it, so its bytes are gone.

Every file is written under a temporary name and renamed into place; a compaction is staged
and committed by its manifest, as a run is. A rewritten shard is renamed over the old one
before its snapshot's manifest is rewritten: a crash between the two leaves a shard whose
sha256 `pixelmill verify` reports, and running `forget` again finishes the job (a record
already gone is not looked for twice); readers still apply the removal list meanwhile.
"""
from __future__ import annotations

import datetime
import gzip
import hashlib
import json
from typing import Iterable, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

from pipelines import beam_files
from transforms import codec, json_text
from transforms import snapshot_layout as layout
from transforms.live_view import LiveView, is_base, live_view, read_retirements
from transforms.offline.class_names import table_text
from transforms.offline.dali_index import IndexBuilder
from transforms.offline.index_table import INDEX_SCHEMA, upgrade_row
from transforms.offline.write_shards import frame_record
from transforms.reporting.tfds_metadata import DATASET_INFO, tfds_files
from transforms.snapshot_layout import Snapshot, join

__all__ = ["compact", "forget", "write_atomically", "ForgetResult"]

_COPIED = ("transform_fn", "transformed_metadata")


def write_atomically(path: str, data: bytes) -> None:
    """`beam_files.write_atomically` (a temporary name, fsync, a rename), its folder made
    first: compaction and forget write into folders that may not exist yet."""
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    beam_files.write_atomically(path, data)


def _records(shard: str) -> Iterable[bytes]:
    for serialized in tf.data.TFRecordDataset(shard, layout.tfrecord_compression(shard)):
        yield serialized.numpy()


def _filename(serialized: bytes) -> str:
    feature = tf.train.Example.FromString(serialized).features.feature[codec.IMAGE_FILENAME]
    return feature.bytes_list.value[0].decode("utf-8", "surrogateescape")


def _shard_bytes(records: list[bytes], gzip_it: bool) -> tuple[bytes, bytes]:
    """(file bytes, DALI index) of a shard of these serialized records."""
    index = IndexBuilder()
    framed = []
    for record in records:
        frame = frame_record(record)
        index.add(len(frame))
        framed.append(frame)
    data = b"".join(framed)
    return (gzip.compress(data, mtime=0) if gzip_it else data), index.text()


def _entry(rel: str, data: bytes, records: int | None = None) -> dict:
    entry = {"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if records is not None:
        entry["records"] = records
    return entry


def _read_json(path: str) -> dict:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


def _read_index(snapshot: Snapshot, columns=None) -> list[dict]:
    with tf.io.gfile.GFile(join(snapshot.path, layout.INDEX), "rb") as handle:
        return pq.read_table(pa.BufferReader(handle.read()), columns=columns).to_pylist()


# ----------------------------------------------------------------------------- compact

def _live_shards(view: LiveView, split: str, name: str) -> list[tuple[Snapshot, str]]:
    shards = []
    for snapshot in view.snapshots:
        if tf.io.gfile.glob(join(snapshot.path, split, layout.shard_glob(name, split))):
            shards += [(snapshot, path) for path in layout.list_shards(snapshot, split, name)]
    return shards


def _merged_index(view: LiveView, shard_names: dict) -> pa.Table:
    """Each path's latest index row over the view, without removed records; an accepted
    row's `shard` names its shard in the compacted snapshot."""
    latest: dict = {}
    for snapshot in view.snapshots:
        removed = view.removed_rows(snapshot.run_id)
        for row in _read_index(snapshot):
            row = upgrade_row(row)
            if row["accepted"] and row["path"] in removed:
                latest.pop(row["path"], None)
                continue
            if row["accepted"]:
                row["shard"] = shard_names[(snapshot.run_id, row["shard"])]
            latest[row["path"]] = row
    rows = [latest[path] for path in sorted(latest)]
    return pa.Table.from_pylist(rows, schema=INDEX_SCHEMA)


def compact(output_dir: str, run_id: str | None = None) -> Snapshot | None:
    """Writes the live set as a new base snapshot and points LATEST at it; None (nothing
    written) when the live view is already one base snapshot with nothing removed."""
    view = live_view(output_dir)
    if not view.snapshots:
        raise FileNotFoundError(f"No committed snapshot under {output_dir} to compact.")
    if len(view.snapshots) == 1 and not view.removed and is_base(view.snapshots[0]):
        return None
    run_id = run_id or layout.new_run_id()
    newest = view.snapshots[-1]
    manifests = {s.run_id: _read_json(join(s.path, layout.MANIFEST)) for s in view.snapshots}
    config = manifests[newest.run_id].get("config", {})
    name = config.get("output", {}).get("name", "images")
    staging = layout.staging_dir(output_dir, run_id)
    files, shard_names, by_split, shard_entries = [], {}, {}, []
    for split in layout.SPLITS:
        sources = _live_shards(view, split, name)
        kept = []
        for snapshot, path in sources:
            removed = view.removed_rows(snapshot.run_id)
            records = [r for r in _records(path) if not removed or _filename(r) not in removed]
            if records:
                kept.append((snapshot, path, records))
        for index, (snapshot, path, records) in enumerate(kept):
            gzip_it = layout.tfrecord_compression(path) == "GZIP"
            rel = layout.shard_name(name, split, index, len(kept), "gzip" if gzip_it else "none")
            data, dali = _shard_bytes(records, gzip_it)
            write_atomically(join(staging, rel), data)
            shard_entries.append(_entry(rel, data, len(records)))
            if not gzip_it:
                dali_rel = layout.dali_index_name(rel)
                write_atomically(join(staging, dali_rel), dali)
                files.append(_entry(dali_rel, dali))
            shard_names[(snapshot.run_id, path[len(snapshot.path) + 1:])] = rel
            by_split[split] = by_split.get(split, 0) + len(records)
    files += shard_entries
    table = [line for line in tf.io.gfile.GFile(join(output_dir, layout.CLASSES)).read()
             .splitlines() if line.strip()]
    sink = pa.BufferOutputStream()
    pq.write_table(_merged_index(view, shard_names), sink)
    total = sum(by_split.values())
    stats = _compacted_stats(view, by_split, table)
    label_offset = manifests[newest.run_id].get("label_offset", 0)
    extra = {layout.INDEX: sink.getvalue().to_pybytes(), layout.STATS: json_text.pretty_file(stats),
             layout.CLASSES: table_text(table).encode("utf-8")}
    if not any(p.endswith(".gz") for p in (e["path"] for e in shard_entries)):
        extra.update(tfds_files(name=name, run_id=run_id, shards=shard_entries,
                                class_table=table, meta_columns=_meta_columns(newest),
                                label_offset=label_offset))
    for rel, data in sorted(extra.items()):
        write_atomically(join(staging, rel), data)
        files.append(_entry(rel, data))
    files += _copy_transform(view, staging)
    final = layout.snapshot_dir(output_dir, run_id)
    tf.io.gfile.makedirs(layout.join(output_dir, layout.SNAPSHOTS))
    tf.io.gfile.rename(staging, final)
    live = {"before": total, "kept": total, "retired": 0, "added": 0, "after": total,
            "retired_by_reason": {}, "ok": True}
    manifest = {
        "run_id": run_id, "base": True, "kind": "compaction",
        "compacted_from": [s.run_id for s in view.snapshots],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "accounting": {"images": {"discovered": total, "accepted": total, "rejected": 0,
                                  "skipped": 0, "ok": True}, "live": live, "ok": True},
        "splits": by_split, "num_classes": len(table), "label_offset": label_offset,
        # records are copied as they are: they all carry image/orientation if every source's do
        "orientation_recorded": all(m.get("orientation_recorded") is True
                                    for m in manifests.values()),
        "files": sorted(files, key=lambda f: f["path"]), "config": config,
    }
    # the commit point
    write_atomically(join(final, layout.MANIFEST), json_text.pretty_file(manifest))
    write_atomically(join(output_dir, layout.LATEST), (run_id + "\n").encode("utf-8"))
    return Snapshot(run_id, final, accounting=manifest["accounting"], stats=stats,
                    manifest=manifest)


def _compacted_stats(view: LiveView, by_split: dict, table: list) -> dict:
    """What the reader needs of stats.json: counts per split, boxes, pooled pixel stats."""
    from pipelines.reader_metadata import read_pixel_stats, read_stats
    boxes = 0
    for snapshot in view.snapshots:
        boxes += int(read_stats(snapshot).get("boxes", {}).get("images_with_boxes", 0) or 0)
    try:
        mean, std = read_pixel_stats(view.snapshots)
        pixel_stats = {"mean": mean, "std": std, "scale": "0-1", "images": sum(by_split.values())}
    except ValueError:
        pixel_stats = None
    return {"by_split": dict(by_split), "images": {"accepted": sum(by_split.values())},
            "boxes": {"images_with_boxes": boxes}, "classes": table,
            "compacted_from": [s.run_id for s in view.snapshots],
            **({"pixel_stats": pixel_stats} if pixel_stats else {})}


def _meta_columns(snapshot: Snapshot) -> list[str]:
    path = join(snapshot.path, "features.json")
    if not tf.io.gfile.exists(path):
        return []
    features = _read_json(path)["featuresDict"]["features"]
    return sorted(k[len(codec.META_PREFIX):] for k in features if k.startswith(codec.META_PREFIX))


def _copy_transform(view: LiveView, staging: str) -> list[dict]:
    """The newest live snapshot's TFT output, copied (what serving normalizes with)."""
    for snapshot in reversed(view.snapshots):
        if not tf.io.gfile.exists(join(snapshot.path, _COPIED[0])):
            continue
        entries = []
        for folder in _COPIED:
            for root, _dirs, names in tf.io.gfile.walk(join(snapshot.path, folder)):
                for filename in names:
                    source = join(root, filename)
                    rel = source[len(snapshot.path) + 1:]
                    with tf.io.gfile.GFile(source, "rb") as handle:
                        data = handle.read()
                    write_atomically(join(staging, rel), data)
                    entries.append(_entry(rel, data))
        return entries
    return []


# ----------------------------------------------------------------------------- forget

class ForgetResult(NamedTuple):
    """What `forget` did: the audit lines it wrote and the shard files it rewrote."""
    lines: list
    scrubbed: list


def _index_matches(snapshot: Snapshot, paths: set, shas: set) -> list[dict]:
    rows = _read_index(snapshot, ["path", "sha256", "accepted", "split", "label", "shard"])
    return [dict(row, run_id=snapshot.run_id) for row in rows
            if row["accepted"] and (row["path"] in paths or row["sha256"] in shas)]


def forget(output_dir: str, paths: Iterable[str] = (), shas: Iterable[str] = (),
           detail: str = "") -> ForgetResult:
    """Retires every record of the named paths or contents from every future read (audit lines
    in `forgotten.jsonl`) and rewrites the shards holding them without them."""
    paths, shas = set(paths), set(shas)
    snapshots = layout.committed_snapshots(output_dir)
    matches = [row for s in snapshots for row in _index_matches(s, paths, shas)]
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    ledger = join(output_dir, layout.FORGOTTEN)
    old = read_retirements(ledger)
    done = {(line["snapshot"], line["path"]) for line in old}
    lines = [{"path": row["path"], "sha256": row["sha256"], "split": row["split"],
              "label": row["label"], "snapshot": row["run_id"], "reason": "forgotten",
              "detail": detail, "forgotten_at": now}
             for row in matches if (row["run_id"], row["path"]) not in done]
    found_paths = {row["path"] for row in matches} | {line["path"] for line in old}
    found_shas = {row["sha256"] for row in matches} | {line.get("sha256") for line in old}
    # names with no record yet still keep a later run from bringing them in
    lines += [{"path": p, "sha256": "", "split": None, "label": None, "snapshot": None,
               "reason": "forgotten", "detail": detail + " (no record held it)",
               "forgotten_at": now} for p in sorted(paths - found_paths)]
    lines += [{"path": "", "sha256": h, "split": None, "label": None, "snapshot": None,
               "reason": "forgotten", "detail": detail + " (no record held it)",
               "forgotten_at": now} for h in sorted(shas - found_shas)]
    if lines:
        text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in old + lines)
        write_atomically(ledger, text.encode("utf-8"))
    scrubbed = _scrub(output_dir, snapshots, read_retirements(ledger))
    return ForgetResult(lines=lines, scrubbed=scrubbed)


def _scrub(output_dir: str, snapshots: list[Snapshot], forgotten: list[dict]) -> list[str]:
    """Rewrites each shard that still holds a forgotten record, then its snapshot's manifest."""
    by_snapshot: dict = {}
    for line in forgotten:
        if line.get("snapshot"):
            by_snapshot.setdefault(line["snapshot"], set()).add(line["path"])
    rewritten = []
    for snapshot in snapshots:
        gone = by_snapshot.get(snapshot.run_id)
        if not gone:
            continue
        manifest = _read_json(join(snapshot.path, layout.MANIFEST))
        entries = {entry["path"]: entry for entry in manifest.get("files", [])}
        counts, changed = {}, False
        for rel in sorted(entries):
            if layout.DALI_INDEX_DIR in rel.split("/") or ".tfrecord-" not in rel:
                continue
            shard = join(snapshot.path, rel)
            records = list(_records(shard))
            kept = [r for r in records if _filename(r) not in gone]
            counts[rel] = len(kept)
            if len(kept) == len(records):
                continue
            gzip_it = layout.tfrecord_compression(shard) == "GZIP"
            data, dali = _shard_bytes(kept, gzip_it)
            write_atomically(shard, data)
            entries[rel] = _entry(rel, data, len(kept))
            if not gzip_it:
                dali_rel = layout.dali_index_name(rel)
                write_atomically(join(snapshot.path, dali_rel), dali)
                entries[dali_rel] = _entry(dali_rel, dali)
            rewritten.append(shard)
            changed = True
        if changed and DATASET_INFO in entries:  # TFDS's shard lengths follow the shards
            info = _read_json(join(snapshot.path, DATASET_INFO))
            for split in info.get("splits", []):
                shards = sorted(rel for rel in counts if rel.startswith(split["name"] + "/"))
                split["shardLengths"] = [str(counts[rel]) for rel in shards]
            data = json_text.pretty_file(info)
            write_atomically(join(snapshot.path, DATASET_INFO), data)
            entries[DATASET_INFO] = _entry(DATASET_INFO, data)
        scrubbed = sorted(set(manifest.get("scrubbed", [])) | gone)
        if changed or scrubbed != manifest.get("scrubbed"):
            manifest["files"] = sorted(entries.values(), key=lambda e: e["path"])
            manifest["scrubbed"] = scrubbed
            write_atomically(join(snapshot.path, layout.MANIFEST), json_text.pretty_file(manifest))
    return rewritten
