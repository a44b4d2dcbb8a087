"""The index: one row per discovered image, whatever happened to it (`index.parquet`).

Users query it with pandas/DuckDB/BigQuery to re-slice a dataset without re-reading images, and
the nightly run reads it back as its memory of what was seen. The pipeline builds rows with
`make_row` so every row has every column (None where unknown); `upgrade_row` reads a row of an
index written by an older version.
"""
from __future__ import annotations

from typing import Mapping

import pyarrow as pa

from transforms.codec import QUALITY_METRICS

__all__ = ["INDEX_SCHEMA", "INDEX_COLUMNS", "CHANNEL_COLUMNS", "make_row", "record_row",
           "upgrade_row"]

# Per-channel mean and mean of squares of pixel/255, measured on the analysis copy;
# the dataset's normalization statistics are their pixel-count-weighted averages.
CHANNEL_COLUMNS = ("mean_r", "mean_g", "mean_b", "sqmean_r", "sqmean_g", "sqmean_b")

INDEX_SCHEMA = pa.schema(
    [
        ("path", pa.string()),          # relative to the data root
        ("sha256", pa.string()),        # "" when the file was never read (unsafe_path)
        ("format", pa.string()),        # from magic bytes; "" when unknown
        ("width", pa.int64()),          # from the header, as displayed (decode.exif_orientation);
        ("height", pa.int64()),         # null when unknown
        ("orientation", pa.int64()),    # EXIF orientation 1..8 of the bytes; null when unknown
        ("bytes", pa.int64()),
        ("mtime", pa.float64()),        # last modified (seconds) when it was seen
        ("label_key", pa.string()),     # the labels its CSV rows gave it ("" for none)
        ("reason", pa.string()),        # the reject reason; null when accepted (see `split`)
        ("accepted", pa.bool_()),
        ("detail", pa.string()),        # reject detail; "" when accepted
        ("label", pa.string()),         # class name; null when none
        ("label_id", pa.int64()),       # class id; null when none
        ("split", pa.string()),         # train/validation/test when accepted
        ("phash", pa.string()),         # 16 hex chars; null when not decoded
        ("center_phash", pa.string()),  # hash of the central region (dedup.crop_tolerant); null
        ("shard", pa.string()),         # shard file (relative to the snapshot) when accepted
        ("num_boxes", pa.int64()),
    ]
    + [(f"quality_{name}", pa.float64()) for name in QUALITY_METRICS]
    + [(name, pa.float64()) for name in CHANNEL_COLUMNS]
)

INDEX_COLUMNS = tuple(INDEX_SCHEMA.names)


def make_row(**values) -> dict:
    """A complete index row: the given columns, None for the rest. Unknown names are an error."""
    unknown = set(values) - set(INDEX_COLUMNS)
    if unknown:
        raise ValueError(f"Unknown index columns {sorted(unknown)}. Expected: {INDEX_COLUMNS}")
    return {name: values.get(name) for name in INDEX_COLUMNS}


def record_row(record, shard: str | None = None) -> dict:
    """The index row of an `ImageRecord`: accepted (written to `shard`) or rejected."""
    metrics = dict(record.metrics)
    reject = record.reject
    return make_row(
        path=record.path, sha256=record.sha256, format=record.format, width=record.width,
        height=record.height,
        orientation=None if record.width is None else record.orientation,
        bytes=record.file_bytes, mtime=record.mtime,
        label_key=record.label_key, reason=reject.reason if reject else None,
        accepted=reject is None,
        detail=reject.detail if reject else "", label=record.label, label_id=record.label_id,
        split=None if reject else record.split, phash=record.phash,
        center_phash=record.center_phash, shard=shard,
        num_boxes=len(record.boxes),
        **{f"quality_{name}": metrics.get(name) for name in QUALITY_METRICS},
        **dict(zip(CHANNEL_COLUMNS, record.moments)))


def upgrade_row(row: Mapping) -> dict:
    """A row read back from an `index.parquet`, in the current columns. An index written
    before `reason` replaced `outcome` (the split when accepted, else the reject reason) is
    mapped: `reason` is the old `outcome` of a rejected row and None for an accepted one,
    whose split is in `split` in both versions. An index from before `center_phash` existed
    has None there; one from before `orientation` has 1 where the header was read (its
    width/height are the stored size) and None elsewhere. Other columns are kept as read."""
    row = dict(row)
    if "outcome" in row and "reason" not in row:
        outcome = row.pop("outcome")
        row["reason"] = None if row.get("accepted") else outcome
    row.setdefault("center_phash", None)
    if "orientation" not in row:
        row["orientation"] = None if row.get("width") is None else 1
    return row
