"""WriteIndexTable: index.parquet sorted by path, written in ranges and never gathered in one
list; the same bytes whatever the range size, the input order and the bundles."""
from __future__ import annotations

import os
import random

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from transforms.offline import index_writer
from transforms.offline.index_table import INDEX_SCHEMA, make_row


def _rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        accepted = rng.random() < 0.7
        rows.append(make_row(
            path=f"{rng.choice(['a', 'B', 'é', 'z z'])}/{i:05d}.jpg", sha256=f"{i:064x}",
            format="jpeg", width=rng.randint(1, 99), height=None if i % 7 == 0 else 5,
            bytes=i, accepted=accepted, reason=None if accepted else "blurry",
            detail="" if accepted else f"d{i}", split="train" if accepted else None,
            quality_entropy=rng.random(), num_boxes=i % 3))
    return rows


def _write(tmp_path, rows, part_rows, name, bundles=1, in_lists=None) -> bytes:
    """The index of `rows` (in lists of `in_lists` rows when given) as written."""
    path = os.path.join(tmp_path, name, "index.parquet")
    pipeline = beam.Pipeline(runner=FnApiRunner())
    if in_lists:
        rows = [rows[i:i + in_lists] for i in range(0, len(rows), in_lists)]
    created = [pipeline | f"Create{i}" >> beam.Create(rows[i::bundles]) for i in range(bundles)]
    (created | beam.Flatten()
     | index_writer.WriteIndexTable(path, INDEX_SCHEMA, part_rows=part_rows,
                                    in_lists=bool(in_lists)))
    pipeline.run().wait_until_finish()
    assert os.listdir(os.path.dirname(path)) == ["index.parquet"]  # no range left behind
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("part_rows", [9, 100_000])
def test_index_is_sorted_by_path_and_the_same_whatever_the_ranges(tmp_path, part_rows,
                                                                    monkeypatch):
    monkeypatch.setattr(index_writer, "_BATCH_ROWS", 16)  # several batches per range
    rows = _rows(200)
    shuffled = rows[::-1]
    written = _write(tmp_path, rows, part_rows, "out")
    assert _write(tmp_path, shuffled, part_rows, "again", bundles=3) == written
    # rows in lists (of 7: a batch of 16 takes parts of lists) give the same file
    assert _write(tmp_path, shuffled, part_rows, "lists", bundles=2, in_lists=7) == written
    table = pq.read_table(os.path.join(tmp_path, "out", "index.parquet"))
    assert table.schema == INDEX_SCHEMA
    assert table.to_pylist() == sorted(rows, key=lambda row: row["path"])
    groups = pq.ParquetFile(os.path.join(tmp_path, "out", "index.parquet")
                            ).metadata.num_row_groups
    # one row group per sorted range: with 9 rows a range, the rows were never in one list
    assert groups > 1 if part_rows < len(rows) else groups == 1

def test_no_rows_is_an_index_with_the_schema_and_no_rows(tmp_path):
    _write(tmp_path, [], 9, "empty")
    table = pq.read_table(os.path.join(tmp_path, "empty", "index.parquet"))
    assert (table.schema, table.num_rows) == (INDEX_SCHEMA, 0)
