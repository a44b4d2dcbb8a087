"""Statistics of every feature of the written records, per split, as TFDV writes them.

The shard writer hands its records' features over, a shard at a time (`record_features`: the
values of every key; image bytes as their length and digest, not the bytes). `FeatureStatsFn`
combines them per split with the sketches TFDV itself uses (tfx_bsl's quantiles and KMV, and
its Misra-Gries algorithm in `misra_gries`, which gives one answer where tfx_bsl's varied
between runs), so memory stays bounded whatever the number of records: one
`DatasetFeatureStatistics` per split, which `feature_stats_files` writes in TFX's layout for
`tfdv.load_stats_binary`, schema inference and the Facets view.

Per feature, like TFDV's basic statistics generator:
  common    num_non_missing, num_missing, min/max/avg/tot num_values, num_values quantiles
  INT, FLOAT  mean, std_dev (population), num_zeros, min, median, max; a STANDARD histogram
            (10 equal-width buckets from min to max) and a QUANTILES histogram (10 buckets of
            equal count); NaN and infinities count as `num_nan` and stay out of the numbers
  STRING    unique, avg_length (bytes), top 20 values and a rank histogram (1000 ranks)
  BYTES     (values that are not UTF-8, e.g. image/encoded) unique, avg/min/max num_bytes
Mean and std_dev come from exact sums, so they are the same however a runner splits and
merges the work. Quantiles, unique counts and top values are exact on small data; on large
data they are within about 1% (the sketches' error) and depend on the order the values came
in, which `feature_stats_files` fixes (shards merged in index order). The STANDARD histogram
is read off a 1000-point quantile curve. Records are added a batch at a time, column by column
(see `feature_sketches._RECORD_BATCH`).
"""
from __future__ import annotations

import apache_beam as beam
from tensorflow_metadata.proto.v0 import statistics_pb2

from transforms.reporting.feature_sketches import SplitAccumulator, add_records, merged
from transforms.reporting.feature_stats_proto import feature_proto
from transforms.reporting.feature_values import summarize_features

__all__ = ["record_features", "summarize_features", "FeatureStatsFn", "to_statistics_list"]


def record_features(serialized: bytes) -> tuple:
    """((key, kind, values), ...) of one serialized tf.train.Example, sorted by key. `kind` is
    the Feature's oneof ("int64_list", "float_list", "bytes_list"). A bytes value is itself
    when it is UTF-8 of at most 1 KiB, else `(length, sha1 digest, is UTF-8)`, so image bytes
    are not carried to the statistics."""
    from tensorflow.core.example import example_pb2  # here: the job's launcher imports no TF
    example = example_pb2.Example.FromString(serialized)
    result = []
    for key, feature in sorted(example.features.feature.items()):
        kind = feature.WhichOneof("kind")
        if kind is not None:
            result.append((key, kind, tuple(getattr(feature, kind).value)))
    return summarize_features(result)


class FeatureStatsFn(beam.CombineFn):
    """Batches of `record_features` tuples of one split (a shard's records: one Beam element
    per shard, not per record, as the launcher's cost per element is the job's bottleneck on
    small images) -> its `DatasetFeatureStatistics` (unnamed; `to_statistics_list` names it).
    How records are batched does not change the result: they wait in the accumulator and
    reach the sketches `feature_sketches._RECORD_BATCH` at a time, as added one by one."""

    def create_accumulator(self) -> SplitAccumulator:
        return SplitAccumulator()

    def add_input(self, accumulator: SplitAccumulator, batch: tuple) -> SplitAccumulator:
        return add_records(accumulator, batch)

    def merge_accumulators(self, accumulators) -> SplitAccumulator:
        return merged(accumulators)

    def compact(self, accumulator: SplitAccumulator) -> SplitAccumulator:
        return accumulator.fold()

    def extract_output(self, accumulator: SplitAccumulator
                       ) -> statistics_pb2.DatasetFeatureStatistics:
        accumulator.fold()
        dataset = statistics_pb2.DatasetFeatureStatistics(num_examples=accumulator.examples)
        for key, feature in sorted(accumulator.features.items()):
            feature_proto(dataset.features.add(), key, feature, accumulator.examples)
        return dataset


def to_statistics_list(split: str, dataset: statistics_pb2.DatasetFeatureStatistics
                       ) -> statistics_pb2.DatasetFeatureStatisticsList:
    """One split's statistics as TFX stores them: a list holding one dataset, named `split`."""
    result = statistics_pb2.DatasetFeatureStatisticsList()
    result.datasets.add().CopyFrom(dataset)
    result.datasets[0].name = split
    return result
