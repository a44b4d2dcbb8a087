"""Writing one shard: its records' Examples, framed as TFRecords, into one file, with the DALI
index of an uncompressed shard and its records' feature statistics folded into the shard's
accumulator (`feature_sketches.shard_accumulator`).

The image bytes are read again here and their sha256 checked, so a file that changed during
the run fails the job instead of writing content the rest of the job never validated. Records
are written in sha256 order (`write_shards` sorts them), so the same records always give the
same bytes.

Apart from the Beam step (`write_shards`) because a shard is also written in a child process
(`ShardWriter`, run by `isolation.ChildPool`): this module imports neither Beam nor TensorFlow
(the statistics' sketches, tfx_bsl's, and pyarrow are imported by the forkserver already),
so a child of the decoders' forkserver starts in milliseconds. The records come pickled and
their index rows (an Arrow batch and their summary) and statistics go back, so the worker
neither loads, pickles again, folds, turns into rows nor summarizes a record it writes (what
this saves the launcher: docs/benchmarks.md, forty-second and forty-third rounds).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import zlib

from transforms import codec
from transforms.file_reads import read_bytes
from transforms.local_paths import is_local, join
from transforms.offline.dali_index import IndexBuilder
from transforms.offline.index_rows import record_row
from transforms.offline.index_table import IndexPart, index_part
from transforms.offline.packing import packed, unpacked
from transforms.offline.tfrecord_framing import framed_parts
from transforms.reporting.feature_sketches import shard_accumulator
from transforms.reporting.feature_values import summarize_features
from transforms.s3_storage import create_file
from transforms.snapshot_layout import dali_index_name

__all__ = ["ShardFile", "write_shard", "write_packed_shard", "ShardWriter"]


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One written shard, for the manifest."""
    path: str        # relative to the snapshot folder
    bytes: int
    sha256: str
    records: int


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


def write_shard(staging_dir: str, output, rel_path: str, records, box_class_ids: dict,
                columns) -> tuple[ShardFile, list]:
    """Writes the shard `rel_path` (under `staging_dir`, with `output`'s compression and label
    offset) of `records` in the order given (the caller sorts them by sha256, so the same
    records give the same bytes), and, uncompressed, its DALI index. `box_class_ids`:
    the class id of each class name the records' boxes use (not the whole class table, which
    may hold tens of thousands of names). Returns its ShardFile and, per record in the order
    written, `feature_values.summarize_features` of its Example. No record gives an empty
    shard (a gzip shard: gzip's empty stream). A local shard is fsync'd before it is closed:
    the publish fsyncs every file before its commit (`pipelines.snapshot`), and a shard written
    back here, by the writing children side by side, leaves it nothing to wait for (the
    writeback's kernel CPU was the launcher's: ~1 ms a camera photo)."""
    summaries = []
    digest = hashlib.sha256()
    size = 0
    compressor = (zlib.compressobj(9, zlib.DEFLATED, 31)
                  if output.compression == "gzip" else None)
    dali = IndexBuilder()
    path = join(staging_dir, rel_path)
    with create_file(path, compression_type="uncompressed") as handle:
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
            features = _features(record, data, box_class_ids, columns, output.label_offset)
            framed = framed_parts(codec.serialized_parts(features))  # image bytes not copied
            dali.add(sum(map(len, framed)))
            if compressor is not None:  # gzip's stream from the record's bytes as one input
                framed = [b"".join(framed)]
            for part in framed:
                write(part)
            summaries.append(summarize_features(features))
        if compressor is not None:
            tail = compressor.flush()
            handle.write(tail)
            digest.update(tail)
            size += len(tail)
        if is_local(path):  # on disk now, by the process that wrote it (see the docstring)
            handle.flush()
            os.fsync(handle.fileno())
    if compressor is None:
        index_path = join(staging_dir, dali_index_name(rel_path))
        with create_file(index_path, compression_type="uncompressed") as handle:
            handle.write(dali.text())
    return ShardFile(path=rel_path, bytes=size, sha256=digest.hexdigest(),
                     records=len(records)), summaries


def write_packed_shard(staging_dir: str, output, rel_path: str, packed_records,
                       box_class_ids: dict, columns) -> tuple[ShardFile, bytes, IndexPart]:
    """`write_shard` of records given pickled (`packing.packed`), in that order, with its
    records' features folded into the shard's statistics accumulator
    (`feature_sketches.shard_accumulator`, pickled: it is loaded once, where the shards are
    merged in order), and its records' index rows (`index_rows.record_row`, naming the shard)
    as one `index_table.IndexPart`: what the job's worker would otherwise load, pickle again
    for a child, fold, turn into rows and summarize itself."""
    records = [unpacked(record) for record in packed_records]
    shard, summaries = write_shard(staging_dir, output, rel_path, records, box_class_ids,
                                   columns)
    statistics = packed(shard_accumulator(summaries))
    return shard, statistics, index_part([record_row(record, rel_path) for record in records])


class ShardWriter:
    """What a shard-writing child runs (`isolation.ChildPool`): `write_packed_shard` of each
    item, an argument tuple."""

    def setup(self) -> None:
        pass

    def run(self, arguments: tuple) -> tuple[ShardFile, bytes, IndexPart]:
        return write_packed_shard(*arguments)
