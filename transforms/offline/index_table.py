"""The index: one row per discovered image, whatever happened to it (`index.parquet`).

Users query it with pandas/DuckDB/BigQuery to re-slice a dataset without re-reading images, and
the nightly run reads it back as its memory of what was seen. The pipeline builds rows with
`make_row` so every row has every column (None where unknown; `index_rows`, which imports no
pyarrow); `upgrade_row` reads a row of an index written by an older version. Rows travel
between the job's steps as `IndexPart`s, an Arrow batch and their summary a part: the accepted
records' a shard at a time, made by the process that wrote the shard.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import pyarrow as pa

from transforms.offline.index_rows import (
    CHANNEL_COLUMNS,
    INDEX_COLUMNS,
    INDEX_FIELDS,
    make_row,
    record_row,
)
from transforms.reporting.index_summary import packed_summary

__all__ = ["INDEX_SCHEMA", "INDEX_COLUMNS", "CHANNEL_COLUMNS", "make_row", "record_row",
           "upgrade_row", "IndexPart", "index_part"]

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
                "bool": pa.bool_()}
INDEX_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in INDEX_FIELDS])


class IndexPart(NamedTuple):
    """Index rows as the job's steps pass them on: `batch`, the rows (`INDEX_SCHEMA`), and
    `summary`, theirs for the dataset statistics (`index_summary.packed_summary`)."""
    batch: pa.RecordBatch
    summary: bytes


def index_part(rows: list) -> IndexPart:
    """The `IndexPart` of index rows (`make_row`'s, each checked by the summary: an unknown
    reject reason or an accepted row without a split raises ValueError). One part a shard, or
    a batch of rows, instead of a Beam element a row: the launcher handled each row four times
    (its message, two steps, its batch) and summarized it (~10 us a row)."""
    return IndexPart(pa.RecordBatch.from_pylist(rows, schema=INDEX_SCHEMA), packed_summary(rows))


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
