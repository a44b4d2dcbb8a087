"""WriteIndexTable: index.parquet sorted by path, merged from sorted runs and never gathered in
one list; the same bytes whatever the input order, the bundles and the batches (`IndexParts`
of rows, or a shard's rows in one part), in row groups of the run size."""
from __future__ import annotations

import os
import pickle
import random

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import equal_to

from tests.beamutil import assert_that, beam_pipeline
from transforms.offline import index_writer
from transforms.offline.index_table import INDEX_SCHEMA, index_part, make_row
from transforms.reporting.index_summary import summary_of, summary_output


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


def _write(tmp_path, rows, part_rows, name, bundles=1, in_lists=None, parts=None) -> bytes:
    """The index of `rows` (in lists of `in_lists` rows when given; as `index_part`s of
    `parts` rows each when given, as a shard's writer makes them) as written."""
    path = os.path.join(tmp_path, name, "index.parquet")
    pipeline = beam_pipeline()
    if in_lists or parts:
        rows = [rows[i:i + (in_lists or parts)]
                for i in range(0, len(rows), in_lists or parts)]
    if parts:
        rows = [index_part(shard_rows) for shard_rows in rows]
    created = [pipeline | f"Create{i}" >> beam.Create(rows[i::bundles]) for i in range(bundles)]
    flat = created | beam.Flatten()
    if not parts:
        flat = flat | index_writer.IndexParts(in_lists=bool(in_lists))
    (flat
     | beam.Map(lambda part: part.batch)
     | index_writer.WriteIndexTable(path, INDEX_SCHEMA, part_rows=part_rows))
    pipeline.run().wait_until_finish()
    assert os.listdir(os.path.dirname(path)) == ["index.parquet"]  # no range left behind
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("part_rows,fan_in", [(9, 64), (9, 3), (100_000, 64)])
def test_index_is_sorted_by_path_and_the_same_whatever_the_runs(tmp_path, part_rows, fan_in,
                                                                    monkeypatch):
    from transforms.offline import outputs
    monkeypatch.setattr(index_writer, "_BATCH_ROWS", 16)  # several batches per run
    monkeypatch.setattr(outputs, "MERGE_FAN_IN", fan_in)  # 3: ~20 runs merged in passes
    rows = _rows(200)
    shuffled = rows[::-1]
    written = _write(tmp_path, rows, part_rows, "out")
    assert _write(tmp_path, shuffled, part_rows, "again", bundles=3) == written
    # rows in lists (of 7: a batch of 16 takes parts of lists) give the same file
    assert _write(tmp_path, shuffled, part_rows, "lists", bundles=2, in_lists=7) == written
    # a shard's rows in one part each, as the shard's writer sends them: the same file
    assert _write(tmp_path, shuffled, part_rows, "shards", bundles=2, parts=70) == written
    table = pq.read_table(os.path.join(tmp_path, "out", "index.parquet"))
    assert table.schema == INDEX_SCHEMA
    assert table.to_pylist() == sorted(rows, key=lambda row: row["path"])
    metadata = pq.ParquetFile(os.path.join(tmp_path, "out", "index.parquet")).metadata
    # row groups of part_rows rows, the last fewer: with 9, the rows were never in one list
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sizes == [9] * 22 + [2] if part_rows == 9 else sizes == [200]


def test_a_failed_bundles_run_is_not_merged_and_goes_with_the_folder(tmp_path):
    """The merge reads only the runs of committed bundles (a retried bundle's first run is
    in no output) and leaves no run behind."""
    import pyarrow as pa
    rows = _rows(60)
    runs_dir = str(tmp_path / "index.parquet.parts")
    runs = []
    for part in (rows[1::2], rows[0::2], rows[:5]):
        step = index_writer._SortedRunsFn(runs_dir, INDEX_SCHEMA, 100)
        step.start_bundle()
        assert list(step.process(pa.RecordBatch.from_pylist(part, INDEX_SCHEMA))) == []
        [run] = [value.value for value in step.finish_bundle()]
        runs.append(run)
    path = str(tmp_path / "index.parquet")
    assert index_writer._join_runs(runs[:2], path, runs_dir, INDEX_SCHEMA, 25) == path
    assert pq.read_table(path).to_pylist() == sorted(rows, key=lambda row: row["path"])
    assert os.listdir(tmp_path) == ["index.parquet"]


def test_index_parts_hold_at_most_a_batch_of_rows_and_their_summary(monkeypatch):
    monkeypatch.setattr(index_writer, "_BATCH_ROWS", 16)
    rows = _rows(40)
    with beam_pipeline() as pipeline:
        parts = (pipeline | beam.Create([rows]) | index_writer.IndexParts(in_lists=True)
                 | beam.Map(lambda part: (part.batch.to_pylist(),
                                          summary_output(pickle.loads(part.summary)))))
        assert_that(parts, equal_to([(batch, summary_output(summary_of(batch)))
                                     for batch in (rows[:16], rows[16:32], rows[32:])]))

def test_no_rows_is_an_index_with_the_schema_and_no_rows(tmp_path):
    _write(tmp_path, [], 9, "empty")
    table = pq.read_table(os.path.join(tmp_path, "empty", "index.parquet"))
    assert (table.schema, table.num_rows) == (INDEX_SCHEMA, 0)
