"""The job's feature statistics files: each split's `Split-<split>/FeatureStats.pb` (TFX's
layout, `transforms.snapshot_layout.feature_stats_name`) from the shard writer's features.

The same records give the same file every run. The sketches behind quantiles and top values
(`feature_stats`) answer differently for the same values taken in another order, and shards
finish in any order (another run, runner or worker count): one accumulator fed the shards as
they finished changed the train split's file of 2,000 photos over 21,841 classes in 1 run of
3. So each shard's records are folded alone, in their order (by the shard writer:
`feature_sketches.shard_accumulator`), and the shards merged in index order:
`_SHARDS_PER_BLOCK` at a time, then block by block, so that no merge holds every shard (an
accumulator of a shard of 853 photos pickles to 0.4 MB; 10,000 shards are 157 blocks).
A block's shards are merged in one step (`_merged_block`); a block of one shard is passed on
unloaded, so a split of one shard is loaded once, where its statistics are made.
"""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import CompressionTypes, FileSystems
from tensorflow_metadata.proto.v0 import statistics_pb2

from transforms.offline.beam_steps import Map
from transforms.offline.packing import packed, unpacked
from transforms.reporting.feature_sketches import merged
from transforms.reporting.feature_stats import FeatureStatsFn, to_statistics_list
from transforms.s3_storage import create_file
from transforms.snapshot_layout import feature_stats_name

__all__ = ["WriteFeatureStatistics"]


def _write_split(item, staging_dir: str) -> str:
    split, dataset = item
    path = FileSystems.join(staging_dir, feature_stats_name(split))
    with create_file(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(to_statistics_list(split, dataset).SerializeToString(deterministic=True))
    return path


# Shards whose statistics are merged in one place first (`WriteFeatureStatistics`): a split's
# final merge then holds one accumulator per block, not one per shard.
_SHARDS_PER_BLOCK = 64


def _in_order(parts) -> list:
    """(position, pickled accumulator) pairs -> the accumulators in position order; a position
    given twice is an error (each shard and block is handed over once)."""
    by_position: dict = {}
    for position, part in parts:
        if position in by_position:
            raise ValueError(f"Statistics part {position!r} was handed over twice.")
        by_position[position] = part
    return [by_position[position] for position in sorted(by_position)]


def _merged_block(item) -> tuple:
    """((split, block), its shards' (index, pickled `shard_accumulator`) pairs) -> (split,
    (block, the shards' accumulators merged in index order, pickled)); a block of one shard
    is that shard's, as it came."""
    (split, block), shards = item
    parts = _in_order(shards)
    return split, (block, parts[0] if len(parts) == 1 else packed(merged(map(unpacked, parts))))


class _BlocksInOrder(beam.CombineFn):
    """(block, its pickled accumulator) pairs -> the split's `DatasetFeatureStatistics`, the
    blocks merged in block order, whatever order a runner adds and merges them in."""

    _STATS = FeatureStatsFn()

    def create_accumulator(self) -> list:
        return []

    def add_input(self, blocks: list, item) -> list:
        blocks.append(item)
        return blocks

    def merge_accumulators(self, accumulators) -> list:
        return [item for blocks in accumulators for item in blocks]

    def extract_output(self, blocks: list) -> statistics_pb2.DatasetFeatureStatistics:
        return self._STATS.extract_output(self._STATS.merge_accumulators(
            [unpacked(part) for part in _in_order(blocks)]
            or [self._STATS.create_accumulator()]))


def _by_block(item) -> tuple:
    split, (index, records) = item
    return (split, index // _SHARDS_PER_BLOCK), (index, records)


class WriteFeatureStatistics(beam.PTransform):
    """(split, (shard index, the shard's pickled `shard_accumulator`)) pairs -> `Split-<split>/
    FeatureStats.pb` under `staging_dir` for every split with records; outputs the written
    paths. The same file every run of the same records: shards are merged in index order,
    `_SHARDS_PER_BLOCK` at a time and then block by block, so no merge holds every shard."""

    def __init__(self, staging_dir: str):
        super().__init__()
        self._staging_dir = staging_dir

    def expand(self, features):
        return (features
                | "ByBlock" >> Map(_by_block)
                | "GroupByBlock" >> beam.GroupByKey()
                | "MergeBlock" >> Map(_merged_block)
                | "CombinePerSplit" >> beam.CombinePerKey(_BlocksInOrder())
                | "WriteSplitStatistics" >> Map(_write_split, self._staging_dir))
