"""`index.parquet`: the index rows, written sorted by path in one Parquet file.

Sorted, so the file is the same on every runner, worker count and rerun (Beam's
`WriteToParquet` wrote rows in the order bundles finished, which moved the rejected rows
between runs of the same inputs). Never gathered in one list: the rows are range-partitioned
on their path at boundaries cut from a fixed-size sample (`outputs.range_cuts`), each range is
sorted and written on its own (an Arrow stream under `<path>.parts/`), and the ranges are
appended in order, one row group each, to the one Parquet file: the last step copies, where
merging sorted runs (as the rejects ledger does, `outputs.WriteRejectsLedger`) would compare
every row of the index in one place. Rows travel as Arrow record batches (a
shard's, or up to `_BATCH_ROWS` made by `IndexParts`), not one Beam element per row: the
launcher's per-image work is the job's bottleneck on small images (issue 22), and Beam's
Parquet sink cost ~22 us per row there.
"""
from __future__ import annotations

import bisect
import zlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from transforms import file_reads
from transforms.offline.beam_steps import FlatMap, LeanDoFn, Map
from transforms.offline.gather import Gather
from transforms.offline.index_table import index_part
from transforms.offline.outputs import (
    SampleAndCountFn,
    already_joined,
    range_cuts,
    remove_parts,
)
from transforms.s3_storage import create_file

__all__ = ["WriteIndexTable", "IndexParts", "INDEX_PART_ROWS"]

INDEX_PART_ROWS = 200_000   # rows per sorted range (~60 MB of Arrow on one worker)
_SAMPLE = 1024              # paths sampled to cut the ranges (at most this many ranges)
_BATCH_ROWS = 4096          # rows per `IndexParts` part at most
_SORT = [("path", "ascending"), ("sha256", "ascending")]


class _IndexPartsFn(LeanDoFn):
    """Index rows (dicts with every column), or lists of them (`in_lists`) -> `IndexPart`s of
    up to `_BATCH_ROWS` rows."""

    def __init__(self, in_lists: bool = False):
        self._in_lists = in_lists

    def start_bundle(self):
        self._rows = []

    def process(self, rows):
        if self._in_lists:
            self._rows.extend(rows)
        else:
            self._rows.append(rows)
        while len(self._rows) >= _BATCH_ROWS:
            yield index_part(self._rows[:_BATCH_ROWS])
            self._rows = self._rows[_BATCH_ROWS:]

    def finish_bundle(self):
        if self._rows:
            rows, self._rows = self._rows, []
            yield GlobalWindows.windowed_value(index_part(rows))


def IndexParts(in_lists: bool = False) -> beam.ParDo:  # noqa: N802 (a step, named as one)
    """Index rows (`index_table.make_row`'s; lists of them with `in_lists`) ->
    `index_table.IndexPart`s (global window): what `WriteIndexTable` and the statistics take,
    where the rows were not made a shard at a time by the process that wrote the shard."""
    return beam.ParDo(_IndexPartsFn(in_lists))


class _PathSampleFn(SampleAndCountFn):
    """Record batches -> (sample of at most `size` paths, number of rows): the ledger's
    bottom-k sample, on the CRC-32 of each path."""

    def add_input(self, accumulator, batch):
        return self.add_hashed(accumulator, [(zlib.crc32(path.encode("utf-8")), path)
                                             for path in batch.column("path").to_pylist()])


def _split_batch(batch: pa.RecordBatch, cuts: list):
    """(range index, the batch's rows in that range) for every range the batch reaches."""
    rows_by_range: dict = {}
    for row, path in enumerate(batch.column("path").to_pylist()):
        rows_by_range.setdefault(bisect.bisect_right(cuts, path), []).append(row)
    for index, rows in rows_by_range.items():
        yield index, batch.take(pa.array(rows, pa.int64()))


class _Sink:
    """What pyarrow needs of a file it writes to, over a `create_file` handle (an object
    store's writer has no `closed` or `tell`); closing it leaves the handle to its owner."""

    def __init__(self, handle):
        self._handle, self._written, self.closed = handle, 0, False

    def write(self, data) -> int:
        self._handle.write(data)
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _write_part(item, parts_dir: str, schema: pa.Schema) -> tuple:
    index, batches = item
    path = FileSystems.join(parts_dir, f"part-{index:05d}.arrows")
    table = pa.Table.from_batches(list(batches), schema=schema).sort_by(_SORT)
    with create_file(path) as handle, pa.ipc.new_stream(pa.PythonFile(_Sink(handle), mode="w"),
                                                         schema) as stream:
        stream.write_table(table)
    return index, path


def _join_parts(ranges, path: str, parts_dir: str, schema: pa.Schema) -> str:
    """Appends the sorted ranges in order to the Parquet file `path`, then removes them. A
    retried bundle may find the parts removed: then `path` is already complete."""
    parts = [part for _index, part in ranges]
    if already_joined(parts, path, parts_dir):
        return path
    with create_file(path) as out, pq.ParquetWriter(
            pa.PythonFile(_Sink(out), mode="w"), schema, compression="none") as writer:
        for _index, part in sorted(ranges):
            with file_reads.open_file(part) as handle:
                writer.write_table(pa.ipc.open_stream(pa.py_buffer(handle.read())).read_all())
    remove_parts(parts, parts_dir)
    return path


class WriteIndexTable(beam.PTransform):
    """Record batches of index rows (`schema`'s) -> the Parquet file `path`, rows sorted by
    (path, sha256); outputs `path`. No rows: a file with the schema and no rows."""

    def __init__(self, path: str, schema: pa.Schema, part_rows: int = INDEX_PART_ROWS):
        super().__init__()
        self._path = path
        self._schema = schema
        self._part_rows = part_rows

    def expand(self, batches):
        path, schema, part_rows = self._path, self._schema, self._part_rows
        parts_dir = path + ".parts"
        cuts = range_cuts(batches, _PathSampleFn(_SAMPLE), part_rows)
        return (batches
                | "SplitByRange" >> FlatMap(_split_batch, cuts)
                | "GroupByRange" >> beam.GroupByKey()
                | "WriteRange" >> Map(_write_part, parts_dir, schema)
                | "JoinRanges" >> Gather(_join_parts, path, parts_dir, schema))
