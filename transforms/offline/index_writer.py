"""`index.parquet`: the index rows, written sorted by (path, sha256) in one Parquet file.

Sorted, so the file is the same on every runner, worker count and rerun (Beam's
`WriteToParquet` wrote rows in the order bundles finished, which moved the rejected rows
between runs of the same inputs). Never gathered in one list: the step that receives the rows
sorts a bundle's and writes them as runs (an Arrow stream under `<path>.parts/`, `part_rows`
rows at most a run), and one step merges the runs into the file a bounded slice at a time,
in row groups of exactly `part_rows` rows (the last fewer), so the file does not depend on how
the rows fell into bundles. Rows travel as Arrow record batches (a shard's, or up to
`_BATCH_ROWS` made by `IndexParts`), not one Beam element per row: the launcher's per-image
work is the job's bottleneck on small images (issue 22), and Beam's Parquet sink cost ~22 us
per row there.
"""
from __future__ import annotations

import bisect

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.transforms.window import GlobalWindows

from transforms import file_reads
from transforms.offline.beam_steps import LeanDoFn
from transforms.offline.gather import Gather
from transforms.offline.index_table import index_part
from transforms.offline.outputs import SortedRunsFn, already_joined, fewer_runs, remove_runs
from transforms.s3_storage import create_file

__all__ = ["WriteIndexTable", "IndexParts", "INDEX_PART_ROWS"]

INDEX_PART_ROWS = 200_000   # rows per run and per row group (~60 MB of Arrow on one worker)
_BATCH_ROWS = 4096          # rows per `IndexParts` part, and per batch of a run, at most
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


class _SortedRunsFn(SortedRunsFn):
    """Record batches -> sorted runs of their rows, `run_rows` rows at most a run (a batch
    more at most), sorted by (path, sha256) and written as an Arrow stream of
    `_BATCH_ROWS`-row batches (the merge reads a batch of each run at a time)."""

    SUFFIX = ".arrows"

    def __init__(self, runs_dir: str, schema: pa.Schema, run_rows: int):
        super().__init__(runs_dir, run_rows)
        self._schema = schema

    def _size(self, batch: pa.RecordBatch) -> int:
        return batch.num_rows

    def _write(self, held: list, path: str) -> None:
        _write_run(path, self._schema,
                   [pa.Table.from_batches(held, schema=self._schema).sort_by(_SORT)])


def _write_run(path: str, schema: pa.Schema, tables) -> None:
    """The rows of `tables`, in order, as the Arrow stream `path` of `_BATCH_ROWS`-row batches
    at most: a run as the merge reads it."""
    with create_file(path) as handle, pa.ipc.new_stream(
            pa.PythonFile(_Sink(handle), mode="w"), schema) as stream:
        for table in tables:
            stream.write_table(table, max_chunksize=_BATCH_ROWS)


class _Run:
    """A sorted run read a batch at a time: the current batch, its rows' (path, sha256) keys
    and the first row not merged yet (`batch` None: the run is done)."""

    def __init__(self, handle):
        self._reader = pa.ipc.open_stream(pa.PythonFile(handle, mode="r"))
        self.next_batch()

    def next_batch(self) -> None:
        self.batch, self.keys, self.start = None, [], 0
        for batch in iter(self._read, None):
            if batch.num_rows:
                self.batch = batch
                self.keys = list(zip(batch.column("path").to_pylist(),
                                     batch.column("sha256").to_pylist()))
                return

    def _read(self):
        try:
            return self._reader.read_next_batch()
        except StopIteration:
            return None

    def take_through(self, bound) -> pa.RecordBatch | None:
        """The rows of the current batch not merged yet whose key is <= `bound`; the next
        batch is read when this one is done."""
        end = bisect.bisect_right(self.keys, bound, self.start)
        taken = self.batch.slice(self.start, end - self.start) if end > self.start else None
        self.start = end
        if end == len(self.keys):
            self.next_batch()
        return taken


def _merged_groups(handles: list, schema: pa.Schema, group_rows: int):
    """The rows of the sorted runs open in `handles`, merged in (path, sha256) order, as
    one-chunk tables of `group_rows` rows (the last fewer). Each round takes, from every run,
    its rows up to the smallest last key of the runs' current batches: no row after it can be
    smaller, so the rounds' sorted rows follow one another in order; each round ends at least
    one batch. What is held: a batch of each run and less than a group."""
    runs = [run for run in map(_Run, handles) if run.batch is not None]
    pending, held = [], 0
    while runs:
        bound = min(run.keys[-1] for run in runs)
        taken = [batch for batch in (run.take_through(bound) for run in runs)
                 if batch is not None]
        runs = [run for run in runs if run.batch is not None]
        merged = pa.Table.from_batches(taken, schema=schema).sort_by(_SORT)
        pending.append(merged)
        held += merged.num_rows
        while held >= group_rows:
            table = pa.concat_tables(pending)
            yield table.slice(0, group_rows).combine_chunks()
            pending, held = [table.slice(group_rows)], held - group_rows
    if held:
        yield pa.concat_tables(pending).combine_chunks()


def _merged_tables(runs: list, schema: pa.Schema, group_rows: int):
    """`_merged_groups` of the runs at these paths, each open while the tables are read."""
    handles = [file_reads.open_file(run) for run in runs]
    try:
        yield from _merged_groups(handles, schema, group_rows)
    finally:
        for handle in handles:
            handle.close()


def _run_merger(schema: pa.Schema):
    """A `fewer_runs` merge: runs into one run of `_BATCH_ROWS`-row batches."""
    def merge_into(runs: list, path: str) -> None:
        _write_run(path, schema, _merged_tables(runs, schema, _BATCH_ROWS))
    return merge_into


def _join_runs(runs: list, path: str, runs_dir: str, schema: pa.Schema,
               group_rows: int) -> str:
    """Merges the sorted runs into the Parquet file `path` (`_merged_groups`, a row group
    each; `MERGE_FAN_IN` runs at most at once: `outputs.fewer_runs`), then removes them and
    their folder. A retried bundle may find runs removed: then `path` is already complete."""
    if already_joined(runs, path, runs_dir):
        return path
    merged = fewer_runs(runs, runs_dir, _run_merger(schema))
    with create_file(path) as out, pq.ParquetWriter(
            pa.PythonFile(_Sink(out), mode="w"), schema, compression="none") as writer:
        for table in _merged_tables(merged, schema, group_rows):
            writer.write_table(table)
    remove_runs(runs_dir)
    return path


class WriteIndexTable(beam.PTransform):
    """Record batches of index rows (`schema`'s) -> the Parquet file `path`, rows sorted by
    (path, sha256) in row groups of `part_rows` rows; outputs `path`. No rows: a file with
    the schema and no rows. Two stages of Beam's local runner, where ranges cut from a sample
    were five (the sample's shuffle, the rows waiting for its cuts, the ranges' shuffle, their
    join; ~10 ms of every run each)."""

    def __init__(self, path: str, schema: pa.Schema, part_rows: int = INDEX_PART_ROWS):
        super().__init__()
        self._path = path
        self._schema = schema
        self._part_rows = part_rows

    def expand(self, batches):
        path, schema, part_rows = self._path, self._schema, self._part_rows
        runs_dir = path + ".parts"
        return (batches
                | "SortedRuns" >> beam.ParDo(_SortedRunsFn(runs_dir, schema, part_rows))
                | "JoinRuns" >> Gather(_join_runs, path, runs_dir, schema, part_rows))
