"""The index: one row per discovered image, whatever happened to it (`index.parquet`).

Users query it with pandas/DuckDB/BigQuery to re-slice a dataset without re-reading images, and
the nightly run reads it back as its memory of what was seen. The pipeline builds rows with
`make_row` so every row has every column (None where unknown; `index_rows`, which imports no
pyarrow); `upgrade_row` reads a row of an index written by an older version.
"""
from __future__ import annotations

from typing import Mapping

import pyarrow as pa

from transforms.offline.index_rows import (
    CHANNEL_COLUMNS,
    INDEX_COLUMNS,
    INDEX_FIELDS,
    make_row,
    record_row,
)

__all__ = ["INDEX_SCHEMA", "INDEX_COLUMNS", "CHANNEL_COLUMNS", "make_row", "record_row",
           "upgrade_row"]

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
                "bool": pa.bool_()}
INDEX_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in INDEX_FIELDS])


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
