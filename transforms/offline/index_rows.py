"""The index's rows without pyarrow: every column's name and type (`INDEX_FIELDS`), and the row
of a record (`record_row`, `make_row`). Apart from `index_table` (the pyarrow schema, the
reading of older rows) so that a shard-writing child, which imports neither Beam nor pyarrow,
makes its records' rows as it writes them (`transforms.offline.shard_writing`).
"""
from __future__ import annotations

from transforms.codec import QUALITY_METRICS

__all__ = ["INDEX_FIELDS", "INDEX_COLUMNS", "CHANNEL_COLUMNS", "make_row", "record_row"]

# Per-channel mean and mean of squares of pixel/255, measured on the analysis copy;
# the dataset's normalization statistics are their pixel-count-weighted averages.
CHANNEL_COLUMNS = ("mean_r", "mean_g", "mean_b", "sqmean_r", "sqmean_g", "sqmean_b")

# (column, type): "string", "int64", "float64" or "bool" (`index_table.INDEX_SCHEMA`)
INDEX_FIELDS = (
    ("path", "string"),          # relative to the data root
    ("sha256", "string"),        # "" when the file was never read (unsafe_path)
    ("format", "string"),        # from magic bytes; "" when unknown
    ("width", "int64"),          # from the header, as displayed (decode.exif_orientation);
    ("height", "int64"),         # null when unknown
    ("orientation", "int64"),    # EXIF orientation 1..8 of the bytes; null when unknown
    ("bytes", "int64"),
    ("mtime", "float64"),        # last modified (seconds) when it was seen
    ("label_key", "string"),     # the labels its CSV rows gave it ("" for none)
    ("reason", "string"),        # the reject reason; null when accepted (see `split`)
    ("accepted", "bool"),
    ("detail", "string"),        # reject detail; "" when accepted
    ("label", "string"),         # class name; null when none
    ("label_id", "int64"),       # class id; null when none
    ("split", "string"),         # train/validation/test when accepted
    ("phash", "string"),         # 16 hex chars; null when not decoded
    ("center_phash", "string"),  # hash of the central region (dedup.crop_tolerant); null
    ("shard", "string"),         # shard file (relative to the snapshot) when accepted
    ("num_boxes", "int64"),
    *((f"quality_{name}", "float64") for name in QUALITY_METRICS),
    *((name, "float64") for name in CHANNEL_COLUMNS),
)

INDEX_COLUMNS = tuple(name for name, _kind in INDEX_FIELDS)


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
