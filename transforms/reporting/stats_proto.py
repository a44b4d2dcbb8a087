"""stats.json's summary as TFDV's `DatasetFeatureStatisticsList` (stats.pb), so the usual
TFDV/Facets viewers read a snapshot's statistics.

Kept apart from `stats` (the Beam combine that makes the summary): this is the one place that
knows the proto, and it runs in the launcher after the graph.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from tensorflow_metadata.proto.v0 import statistics_pb2

from configs.schema import SPLITS
from transforms import codec
from transforms.codec import QUALITY_METRICS
from transforms.reporting.stats import empty_summary

__all__ = ["to_statistics_proto"]

# The proto's feature names are the record contract's keys, so TFDV shows what the shards hold.
_PROTO_FEATURES = (
    ("width", codec.IMAGE_WIDTH, statistics_pb2.FeatureNameStatistics.INT),
    ("height", codec.IMAGE_HEIGHT, statistics_pb2.FeatureNameStatistics.INT),
) + tuple((name, codec.QUALITY_PREFIX + name, statistics_pb2.FeatureNameStatistics.FLOAT)
          for name in QUALITY_METRICS)
# TFDV's defaults for the string statistics of one feature.
_TOP_VALUES = 20
_RANK_HISTOGRAM_BUCKETS = 1000


def _split_order(splits: Iterable[str]) -> list:
    """train, validation, test first (when present), then any other split name sorted."""
    splits = set(splits)
    return [s for s in SPLITS if s in splits] + sorted(splits - set(SPLITS))


def _add_numeric_feature(dataset, proto_name: str, feature_type, summary: Mapping,
                         num_examples: int) -> None:
    feature = dataset.features.add(type=feature_type)
    feature.path.step.append(proto_name)
    numeric = feature.num_stats
    common = numeric.common_stats
    present = summary["count"] + summary["non_finite"]
    common.num_non_missing = present
    common.num_missing = num_examples - present
    if present:
        common.min_num_values = 1
        common.max_num_values = 1
        common.avg_num_values = 1.0
        common.tot_num_values = present
    numeric.num_zeros = summary["zeros"]
    if summary["count"]:
        numeric.mean = summary["mean"]
        numeric.std_dev = summary["std"]
        numeric.min = summary["min"]
        numeric.max = summary["max"]
    histogram = numeric.histograms.add(type=statistics_pb2.Histogram.STANDARD,
                                       num_nan=summary["non_finite"])
    edges, counts = summary["histogram"]["edges"], summary["histogram"]["counts"]
    for index, count in enumerate(counts):
        low, high = edges[index], edges[index + 1]
        # The end bins also hold values outside the fixed edges: widen them to the true range.
        if index == 0 and summary["min"] is not None:
            low = min(low, summary["min"])
        if index == len(counts) - 1 and summary["max"] is not None:
            high = max(high, summary["max"])
        histogram.buckets.add(low_value=low, high_value=high, sample_count=count)


def _add_label_feature(dataset, class_counts: Mapping, num_examples: int) -> None:
    feature = dataset.features.add(type=statistics_pb2.FeatureNameStatistics.STRING)
    feature.path.step.append(codec.CLASS_TEXT)
    strings = feature.string_stats
    present = sum(class_counts.values())
    strings.common_stats.num_non_missing = present
    strings.common_stats.num_missing = num_examples - present
    if present:
        strings.common_stats.min_num_values = 1
        strings.common_stats.max_num_values = 1
        strings.common_stats.avg_num_values = 1.0
        strings.common_stats.tot_num_values = present
        strings.avg_length = sum(len(label.encode()) * count
                                 for label, count in class_counts.items()) / present
    strings.unique = len(class_counts)
    ranked = sorted(class_counts.items(), key=lambda item: (-item[1], item[0]))
    for label, count in ranked[:_TOP_VALUES]:
        strings.top_values.add(value=label, frequency=count)
    for rank, (label, count) in enumerate(ranked[:_RANK_HISTOGRAM_BUCKETS]):
        strings.rank_histogram.buckets.add(low_rank=rank, high_rank=rank, label=label,
                                           sample_count=count)


def to_statistics_proto(stats: dict) -> statistics_pb2.DatasetFeatureStatisticsList:
    """TFDV's statistics of the accepted images: one DatasetFeatureStatistics per split.

    Each holds `image/width`, `image/height` (INT) and `quality/<metric>` (FLOAT) numeric
    statistics with the fixed-edge histogram (end buckets widened to the observed min/max) and
    `image/class/text` (STRING) with top values and a rank histogram. Medians and quantile
    histograms are left unset: a mergeable summary does not know them.
    """
    result = statistics_pb2.DatasetFeatureStatisticsList()
    for split in _split_order(stats["by_split"]):
        num_examples = stats["by_split"][split]
        dataset = result.datasets.add(name=split, num_examples=num_examples)
        features = stats["by_split_features"].get(split, {})
        for name, proto_name, feature_type in _PROTO_FEATURES:
            summary = features.get(name) or empty_summary(name)
            _add_numeric_feature(dataset, proto_name, feature_type, summary, num_examples)
        _add_label_feature(dataset, stats["by_split_class"].get(split, {}), num_examples)
    return result
