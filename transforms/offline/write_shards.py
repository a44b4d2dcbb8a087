"""Sharded TFRecord writing that is deterministic and scales.

Only small metadata flows through the job; the image bytes are read again when a shard is
written (`shard_writing`: their sha256 checked, so a file that changed during the run fails the
job instead of writing content the rest of the job never validated), in the worker or in child
processes beside it (`_WriteShardFn`). The number of shards per split comes
from the split's total bytes and `output.target_shard_mb` (or `output.num_shards`); a record's
shard comes from its content hash, and records inside a shard are ordered by hash, so the same
inputs and config always give byte-identical files, whatever the runner or worker count.
Every uncompressed shard gets its DALI index (`transforms.offline.dali_index`) as it is written;
every record gets every `meta/` column of the run (empty where its CSV row had none).
"""
from __future__ import annotations

import math
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from configs.schema import OutputConfig
from transforms.offline import isolation, progress, splits
from transforms.offline.beam_steps import FlatMap, LeanDoFn, Map
from transforms.offline.gather import Gather, GroupByKeyInLanes, InLists, once, packed
from transforms.offline.index_table import IndexPart
from transforms.offline.shard_writing import (
    ShardFile,
    ShardWriter,
    write_packed_shard,
    write_shard,
)
from transforms.offline.tfrecord_framing import frame_record
from transforms.snapshot_layout import shard_name

__all__ = ["AssignShards", "WriteShards", "ShardPlan", "shard_plan", "shard_counts",
           "frame_record", "ShardFile", "WrittenShards", "FILES", "FEATURES"]

FILES = "files"
FEATURES = "features"  # (split, (shard index, its pickled feature_sketches.shard_accumulator))


def shard_counts(bytes_by_split: dict, output: OutputConfig) -> dict:
    """split -> number of shards (at least one for every split that has records)."""
    target = output.target_shard_mb * 1024 * 1024
    return {split: output.num_shards or max(1, math.ceil(total / target))
            for split, total in bytes_by_split.items()}


class ShardPlan(typing.NamedTuple):
    """What writing any shard needs of every record first: the number of shards of each split
    (`counts`, `shard_counts`) and the sorted names of the records' `meta/` columns (every
    record is written with all of them)."""
    counts: dict
    meta_columns: list


class _PlanPartsFn(LeanDoFn):
    """Accepted records -> one ({split: file bytes}, [meta column names]) a bundle, at its end
    (global window): a bundle's part of the `ShardPlan`, summed where its records pass."""

    def start_bundle(self):
        self._bytes: dict = {}
        self._columns: set = set()

    def process(self, record):
        self._bytes[record.split] = self._bytes.get(record.split, 0) + record.file_bytes
        if record.meta:
            self._columns.update(column for column, _ in record.meta)

    def finish_bundle(self):
        if self._bytes:
            part = (self._bytes, sorted(self._columns))
            self._bytes, self._columns = {}, set()
            yield GlobalWindows.windowed_value(part)


def shard_plan(parts, output: OutputConfig) -> ShardPlan:
    """The `ShardPlan` of the records whose bundles' parts (`_PlanPartsFn`) are `parts`."""
    bytes_by_split: dict = {}
    columns: set = set()
    for sums, names in parts:
        for split, total in sums.items():
            bytes_by_split[split] = bytes_by_split.get(split, 0) + total
        columns.update(names)
    return ShardPlan(shard_counts(bytes_by_split, output), sorted(columns))


class WrittenShards(typing.NamedTuple):
    """What `WriteShards` gives: the written records' index rows (`index`, an `IndexPart` a
    shard), a singleton list of every ShardFile sorted by path (`files`), (split, (index, its
    records' statistics accumulator, pickled)) per shard (`features`), and the singleton
    `ShardPlan` they were written by (`plan`: its meta columns are the run's)."""
    index: beam.PCollection
    files: beam.PCollection
    features: beam.PCollection
    plan: beam.PCollection


_WRITE_TIMEOUT_S = 3600.0  # one shard (128 MB by default) written by a child, remote included


class _WriteShardFn(LeanDoFn):
    """((split, shard index), `AssignShards`' (sha256, box class names, `packed` record)
    entries), the `ShardPlan` and the class table -> the shard written (`shard_writing.write_packed_shard`); its records' index rows
    as one `IndexPart`; (split, (shard index, the records' statistics accumulator, pickled))
    tagged `features` and the ShardFile tagged `files`.

    With `processes`, shards are written in that many child processes of the decoders'
    forkserver (`isolation.ChildPool`, one shard per child at a time): the worker then neither
    reads, hashes nor encodes an image (on one core it was ~half the launcher's CPU per photo),
    and the shards of a bundle are written side by side; the records go to the child as they
    came, pickled, and their index rows come back with the shard, summarized. Outputs leave in
    the order the shards came, as when they are written here, so the steps after see the same
    sequence.
    A child's failure fails the job with its cause, as the same error here would."""

    def __init__(self, staging_dir: str, output: OutputConfig, processes: int = 0):
        self._staging_dir = staging_dir
        self._output = output
        self._processes = processes
        self._written = Metrics.counter("pixelmill", "accepted")

    def setup(self):
        self._pool = None
        self._waiting: dict = {}  # key -> (split, index, rel_path, timestamp, window)
        self._results: dict = {}  # key -> a child's result, until the shards before it are out
        self._next_key = 0
        self._table, self._class_ids = None, {}  # the class table seen last, its names' ids

    def process(self, item, plan, class_table, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam):
        (split, index), entries = item
        counts, columns = plan
        progress.enter("writing")
        output = self._output
        rel_path = shard_name(output.name, split, index, counts[split], output.compression)
        # (sha256, box class names, `packed` record) by AssignShards, sorted by sha256: the
        # order written, and of the rows (two accepted records never share a sha256)
        entries = sorted(entries, key=lambda entry: entry[0])
        if class_table is not self._table:  # a new side input value: at most once a bundle
            self._table, self._class_ids = class_table, {n: i for i, n in enumerate(class_table)}
        box_class_ids = {name: self._class_ids[name] for _, names, _ in entries
                         for name in names}
        arguments = (self._staging_dir, output, rel_path, [entry[2] for entry in entries],
                     box_class_ids, columns)
        if not self._processes:
            yield from self._outputs(split, index, rel_path, *write_packed_shard(*arguments))
            return
        if self._pool is None:
            self._pool = isolation.ChildPool(ShardWriter(), self._processes, _WRITE_TIMEOUT_S,
                                             preload=isolation.DECODER_PRELOAD,
                                             role="shard writing", per_child=1,
                                             timeout_name=None)
        key, self._next_key = self._next_key, self._next_key + 1
        self._waiting[key] = (split, index, rel_path, timestamp, window)
        self._pool.put(key, arguments)
        yield from self._emit(self._pool.poll(wait=self._pool.in_flight >= self._processes))

    def finish_bundle(self):
        while self._waiting:
            yield from self._emit(self._pool.poll(wait=True))

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()

    def _emit(self, done):
        """The outputs of every shard whose result is in and whose predecessors are out."""
        self._results.update(done)
        while self._waiting and next(iter(self._waiting)) in self._results:
            key = next(iter(self._waiting))
            split, index, rel_path, timestamp, window = self._waiting.pop(key)
            result = self._results.pop(key)
            if isinstance(result, isolation.Failure):
                raise RuntimeError(f"Writing the shard {rel_path} failed in its process "
                                   f"({result.kind}): {result.detail}")
            for value in self._outputs(split, index, rel_path, *result):
                if isinstance(value, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(
                        value.tag, WindowedValue(value.value, timestamp, [window]))
                else:
                    yield WindowedValue(value, timestamp, [window])

    def _outputs(self, split: str, index: int, rel_path: str, shard: ShardFile,
                 statistics: bytes, part: IndexPart):
        """The shard's `IndexPart` (its records' index rows), then (split, (index, the
        shard's pickled statistics accumulator)) and the ShardFile."""
        if part.batch.num_rows != shard.records:
            raise AssertionError(f"{rel_path}: {part.batch.num_rows} index rows for "
                                 f"{shard.records} records")
        self._written.inc(shard.records)  # once a shard: each inc finds the metrics container
        progress.add("written", shard.records)
        yield part
        yield beam.pvalue.TaggedOutput(FEATURES, (split, (index, statistics)))
        yield beam.pvalue.TaggedOutput(FILES, shard)


def _every_shard_file(_, written, plan: ShardPlan, staging_dir: str, output: OutputConfig
                      ) -> list:
    """Every ShardFile of the run, sorted by path: the `written` ones and, for each shard the
    hash sent no record (names must not have gaps), an empty shard written here."""
    counts = plan.counts
    files = list(written)
    present = {shard.path for shard in files}
    for split in sorted(counts):
        for index in range(counts[split]):
            rel_path = shard_name(output.name, split, index, counts[split], output.compression)
            if rel_path not in present:
                files.append(_empty_shard(staging_dir, output, rel_path))
    return sorted(files, key=lambda shard: shard.path)


def _empty_shard(staging_dir: str, output: OutputConfig, rel_path: str) -> ShardFile:
    """Writes the shard `rel_path` with no record; its ShardFile."""
    shard, _summaries = write_shard(staging_dir, output, rel_path, (), {}, ())
    return shard


def _for_shards(record) -> tuple:
    """(split, (sha256, the class names of its boxes, the record `packed`)): what a shard's
    writing needs of a record, a tuple Beam's coder writes as it is."""
    return record.split, (record.sha256, tuple(box[4] for box in record.boxes), packed(record))


def _by_shard(packed_record: tuple, plan: ShardPlan) -> tuple:
    """(split, entry) of `_for_shards` -> ((split, shard index), entry)."""
    split, entry = packed_record
    return (split, splits.shard_index(entry[0], plan.counts[split])), entry


def _each_by_shard(packed_records: list, plan: ShardPlan) -> list:
    """`_by_shard` of each of a list of `_for_shards` tuples."""
    return [_by_shard(packed_record, plan) for packed_record in packed_records]


class AssignShards(beam.PTransform):
    """Accepted ImageRecords (with split) -> ((split, shard index), (sha256, box class names,
    `packed` record)) pairs (`_for_shards`), a singleton `ShardPlan`. The number of shards of
    a split comes from its total file bytes (`shard_counts`), a record's shard from its sha256
    (`splits.shard_index`), so the assignment is the same on every runner and worker count.
    The plan's two aggregates (bytes per split, meta column names) are made in one pass and
    one gathering step: each of them alone was two more Beam stages of every run (a shuffle
    and a gathering, ~8 ms each). `in_lists`: the records wait for the plan in lists
    (`gather.InLists`; the global window only), where Beam's local runner would keep them one
    by one."""

    def __init__(self, output: OutputConfig, in_lists: bool = False):
        super().__init__()
        self._output = output
        self._in_lists = in_lists

    def expand(self, records):
        plan = (records
                | "PlanParts" >> beam.ParDo(_PlanPartsFn()).with_output_types(typing.Any)
                | "ShardPlan" >> Gather(shard_plan, self._output))
        # The records wait for the plan (Beam's local runner keeps them meanwhile, encoded)
        # as tuples of strings and a pickle, which its coder writes and reads as they are: a
        # record is pickled once here, not pickled, loaded and pickled again (~8 us a record).
        if self._in_lists:  # packed as they go into the lists
            keyed = (records
                     | "PackForShards" >> InLists(_for_shards)
                     | "KeyByShard" >> FlatMap(_each_by_shard,
                                               beam.pvalue.AsSingleton(plan)))
        else:
            keyed = (records
                     | "PackForShards" >> Map(_for_shards)
                     | "KeyByShard" >> Map(_by_shard, beam.pvalue.AsSingleton(plan)))
        return keyed, plan


class WriteShards(beam.PTransform):
    """Accepted ImageRecords (with split and label_id) -> `WrittenShards`: `index`, the
    written records' index rows (an `IndexPart` a shard); `files`: a singleton list of one
    ShardFile per shard, empty ones included, sorted by path; `features`: (split, (index, the shard's
    records folded into a statistics accumulator, pickled)) per shard, for the TFDV-style
    statistics; `plan`, the `ShardPlan` (every record gets its meta columns). `class_table`
    is a singleton side input (a list of names). `processes`: shards are
    written in that many child processes per worker (0: in the worker). `lanes`: the records
    wait for the shard counts in lists and are grouped by shard in lanes
    (`gather.GroupByKeyInLanes`); None: one by one, key by key."""

    def __init__(self, staging_dir: str, output: OutputConfig, class_table,
                 processes: int = 0, lanes: int | None = None):
        super().__init__()
        self._staging_dir = staging_dir
        self._output = output
        self._class_table = class_table
        self._processes = processes
        self._lanes = lanes

    def expand(self, records):
        output = self._output
        keyed, plan = records | "AssignShards" >> AssignShards(
            output, in_lists=self._lanes is not None)
        plan_side = beam.pvalue.AsSingleton(plan)
        written = (keyed
                   | "GroupByShard" >> GroupByKeyInLanes(self._lanes)
                   | "WriteShard" >> beam.ParDo(
                       _WriteShardFn(self._staging_dir, output, self._processes), plan_side,
                       beam.pvalue.AsSingleton(self._class_table)
                   ).with_outputs(FILES, FEATURES, main="index"))
        # Shards the hash sent no record are written after the others, from the list of
        # written ones: flattening an empty marker per shard into the records instead cost
        # Beam's local runner one more copy of every record (docs/benchmarks.md, ninth round).
        files = (once(records.pipeline, "Once")
                 | "EveryShardFile" >> Map(
                     _every_shard_file, beam.pvalue.AsList(written[FILES]), plan_side,
                     self._staging_dir, output))
        return WrittenShards(index=written.index, files=files, features=written[FEATURES],
                             plan=plan)
