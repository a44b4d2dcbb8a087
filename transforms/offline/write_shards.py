"""Sharded TFRecord writing that is deterministic and scales.

Only small metadata flows through the job; the image bytes are read again here, when a shard is
written (and their sha256 checked, so a file that changed during the run fails the job instead
of writing content the rest of the job never validated). The number of shards per split comes
from the split's total bytes and `output.target_shard_mb` (or `output.num_shards`); a record's
shard comes from its content hash, and records inside a shard are ordered by hash, so the same
inputs and config always give byte-identical files, whatever the runner or worker count.
Every uncompressed shard gets its DALI index (`transforms.offline.dali_index`) as it is written;
every record gets every `meta/` column of the run (empty where its CSV row had none).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import typing
import zlib

import apache_beam as beam
from apache_beam.io.filesystems import CompressionTypes, FileSystems
from apache_beam.metrics import Metrics

from configs.schema import OutputConfig
from transforms import codec
from transforms.file_reads import read_bytes
from transforms.offline import progress, splits
from transforms.offline.dali_index import IndexBuilder
from transforms.offline.gather import Gather, once
from transforms.offline.index_table import record_row
from transforms.offline.tfrecord_framing import frame_record
from transforms.reporting.feature_stats import summarize_features
from transforms.s3_storage import create_file
from transforms.snapshot_layout import dali_index_name, shard_name

__all__ = ["AssignShards", "WriteShards", "MetaColumns", "shard_counts", "frame_record",
           "ShardFile", "WrittenShards", "FILES", "FEATURES"]

FILES = "files"
FEATURES = "features"  # (split, reporting.feature_stats.record_features) per written record


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One written shard, for the manifest."""
    path: str        # relative to the snapshot folder
    bytes: int
    sha256: str
    records: int


def shard_counts(bytes_by_split: dict, output: OutputConfig) -> dict:
    """split -> number of shards (at least one for every split that has records)."""
    target = output.target_shard_mb * 1024 * 1024
    return {split: output.num_shards or max(1, math.ceil(total / target))
            for split, total in bytes_by_split.items()}


class MetaColumns(beam.PTransform):
    """ImageRecords -> a singleton: the sorted names of their `meta/` columns."""

    def expand(self, records):
        return (records
                | "ColumnNames" >> beam.FlatMap(lambda r: [column for column, _ in r.meta])
                | "Distinct" >> beam.Distinct()
                | "Sorted" >> Gather(sorted))


def _features(record, data: bytes, class_ids: dict, columns, label_offset: int) -> tuple:
    """`codec.example_features` of the record's Example."""
    return codec.example_features(
        encoded=data, image_format=record.format, height=record.height, width=record.width,
        orientation=record.orientation, filename=record.path, sha256=record.sha256,
        label=record.label_id, label_text=record.label,
        boxes=[box[:4] for box in record.boxes],
        box_labels=[class_ids[box[4]] for box in record.boxes],
        box_texts=[box[4] for box in record.boxes],
        quality=dict(record.metrics), meta={**dict.fromkeys(columns, ""), **dict(record.meta)},
        label_offset=label_offset)


def _write_shard(staging_dir: str, output: OutputConfig, rel_path: str, records,
                 class_table, columns, emit):
    """Writes the shard `rel_path` of `records` (sorted by sha256 here) and, uncompressed, its
    DALI index. Yields what `emit(record, features)` gives as each record is written; returns
    its ShardFile. No record gives an empty shard (a gzip shard: gzip's empty stream)."""
    records = sorted(records, key=lambda r: r.sha256)
    class_ids = {name: i for i, name in enumerate(class_table)}
    digest = hashlib.sha256()
    size = 0
    compressor = (zlib.compressobj(9, zlib.DEFLATED, 31)
                  if output.compression == "gzip" else None)
    dali = IndexBuilder()
    with create_file(FileSystems.join(staging_dir, rel_path),
                     compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        def write(chunk: bytes):
            nonlocal size
            if compressor is not None:
                chunk = compressor.compress(chunk)
            handle.write(chunk)
            digest.update(chunk)
            size += len(chunk)

        for record in records:
            data = read_bytes(record.uri)
            if hashlib.sha256(data).hexdigest() != record.sha256:
                raise RuntimeError(
                    f"{record.uri} changed while the job ran (sha256 differs from the one "
                    f"validated); rerun the job on a stable input.")
            features = _features(record, data, class_ids, columns, output.label_offset)
            framed = frame_record(codec.serialize_features(features))
            dali.add(len(framed))
            write(framed)
            yield from emit(record, features)
        if compressor is not None:
            tail = compressor.flush()
            handle.write(tail)
            digest.update(tail)
            size += len(tail)
    if compressor is None:
        index_path = FileSystems.join(staging_dir, dali_index_name(rel_path))
        with create_file(index_path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.write(dali.text())
    return ShardFile(path=rel_path, bytes=size, sha256=digest.hexdigest(),
                     records=len(records))


class WrittenShards(typing.NamedTuple):
    """What `WriteShards` gives: `index` rows of the written records, every ShardFile
    (`files`), and (split, features) per record (`features`)."""
    index: beam.PCollection
    files: beam.PCollection
    features: beam.PCollection


class _WriteShardFn(beam.DoFn):
    """((split, shard index), records) -> the shard written; an index row and (split,
    features) per record, the ShardFile tagged `files`."""

    def __init__(self, staging_dir: str, output: OutputConfig):
        self._staging_dir = staging_dir
        self._output = output
        self._written = Metrics.counter("pixelmill", "accepted")

    def process(self, item, counts, class_table, columns):
        (split, index), records = item
        progress.enter("writing")
        output = self._output
        rel_path = shard_name(output.name, split, index, counts[split], output.compression)
        shard = yield from _write_shard(
            self._staging_dir, output, rel_path, records, class_table, columns,
            emit=functools.partial(self._outputs, split, rel_path))
        yield beam.pvalue.TaggedOutput(FILES, shard)

    def _outputs(self, split: str, rel_path: str, record, features) -> tuple:
        """A written record's index row and (split, features)."""
        self._written.inc()
        progress.add("written")
        return (record_row(record, rel_path),
                beam.pvalue.TaggedOutput(FEATURES, (split, summarize_features(features))))


def _every_shard_file(_, written, counts, staging_dir: str, output: OutputConfig):
    """Every ShardFile of the run: the `written` ones and, for each shard the hash sent no
    record (names must not have gaps), an empty shard written here."""
    present = {shard.path for shard in written}
    yield from written
    for split in sorted(counts):
        for index in range(counts[split]):
            rel_path = shard_name(output.name, split, index, counts[split], output.compression)
            if rel_path not in present:
                yield _empty_shard(staging_dir, output, rel_path)


def _empty_shard(staging_dir: str, output: OutputConfig, rel_path: str) -> ShardFile:
    """Writes the shard `rel_path` with no record; its ShardFile."""
    writing = _write_shard(staging_dir, output, rel_path, (), (), (), emit=None)  # no record
    try:
        next(writing)
    except StopIteration as done:
        return done.value
    raise AssertionError(f"{rel_path}: a shard of no record wrote one")


class AssignShards(beam.PTransform):
    """Accepted ImageRecords (with split) -> (((split, shard index), record) pairs, a singleton
    {split: number of shards}). The number of shards of a split comes from its total file
    bytes (`shard_counts`), a record's shard from its sha256 (`splits.shard_index`), so the
    assignment is the same on every runner and worker count."""

    def __init__(self, output: OutputConfig):
        super().__init__()
        self._output = output

    def expand(self, records):
        counts = (records
                  | "BytesPerSplit" >> beam.Map(lambda r: (r.split, r.file_bytes))
                  | "SumBytes" >> beam.CombinePerKey(sum)
                  | "ShardCounts" >> Gather(lambda sums, output: shard_counts(dict(sums), output),
                                            self._output))
        keyed = records | "KeyByShard" >> beam.Map(
            lambda r, n: ((r.split, splits.shard_index(r.sha256, n[r.split])), r),
            beam.pvalue.AsSingleton(counts))
        return keyed, counts


class WriteShards(beam.PTransform):
    """Accepted ImageRecords (with split and label_id) -> `WrittenShards`: index rows; `files`:
    one ShardFile per shard, empty ones included; `features`: (split, each record's features) for
    the TFDV-style statistics. `class_table` and `meta_columns` (`MetaColumns` of the records:
    every record gets these columns) are singleton side inputs (lists of names)."""

    def __init__(self, staging_dir: str, output: OutputConfig, class_table, meta_columns):
        super().__init__()
        self._staging_dir = staging_dir
        self._output = output
        self._class_table = class_table
        self._meta_columns = meta_columns

    def expand(self, records):
        output = self._output
        keyed, shard_counts_per_split = records | "AssignShards" >> AssignShards(output)
        counts = beam.pvalue.AsSingleton(shard_counts_per_split)
        written = (keyed
                   | "GroupByShard" >> beam.GroupByKey()
                   | "WriteShard" >> beam.ParDo(
                       _WriteShardFn(self._staging_dir, output), counts,
                       beam.pvalue.AsSingleton(self._class_table),
                       beam.pvalue.AsSingleton(self._meta_columns)
                   ).with_outputs(FILES, FEATURES, main="index"))
        # Shards the hash sent no record are written after the others, from the list of
        # written ones: flattening an empty marker per shard into the records instead cost
        # Beam's local runner one more copy of every record (docs/benchmarks.md, ninth round).
        files = (once(records.pipeline, "Once")
                 | "EveryShardFile" >> beam.FlatMap(
                     _every_shard_file, beam.pvalue.AsList(written[FILES]), counts,
                     self._staging_dir, output))
        return WrittenShards(index=written.index, files=files, features=written[FEATURES])
