"""`feature_stats`' accumulated features -> TFDV's FeatureNameStatistics protos.

`feature_proto` reads one feature's accumulator (see `feature_sketches._Feature`: counts, exact
sums, extents and the tfx_bsl sketches) into the statistics TFDV's basic generator writes; the
list of what each type gets is in `feature_stats`' docstring.
"""
from __future__ import annotations

import bisect
import itertools
import math

from tensorflow_metadata.proto.v0 import statistics_pb2

__all__ = ["feature_proto"]

_TOP_VALUES = 20
_HISTOGRAM_BUCKETS = 10
_CURVE_POINTS = 1000             # quantiles the STANDARD histogram is read from
_FEATURE = statistics_pb2.FeatureNameStatistics
_KIND_TYPE = {"int64_list": _FEATURE.INT, "float_list": _FEATURE.FLOAT}


def feature_proto(proto, key: str, feature, examples: int) -> None:
    """Fills `proto` (a FeatureNameStatistics) from one split's accumulated `feature`."""
    proto.path.step.append(key)
    if feature.kind != "bytes_list":
        proto.type = _KIND_TYPE[feature.kind]
        _numeric_proto(proto.num_stats, feature, examples)
    elif feature.invalid_utf8:
        proto.type = _FEATURE.BYTES
        _bytes_proto(proto.bytes_stats, feature, examples)
    else:
        proto.type = _FEATURE.STRING
        _string_proto(proto.string_stats, feature, examples)


def _common_proto(common, feature, examples: int) -> None:
    common.num_non_missing = feature.present
    common.num_missing = examples - feature.present
    if not feature.present:
        return
    common.min_num_values, common.max_num_values, common.tot_num_values = feature.num_values
    common.avg_num_values = feature.num_values[2] / feature.present
    _quantiles_histogram(common.num_values_histogram, feature.num_values_quantiles,
                         feature.present)


def _quantiles_histogram(histogram, quantiles, count: int) -> None:
    histogram.type = statistics_pb2.Histogram.QUANTILES
    bounds = quantiles.boundaries(_HISTOGRAM_BUCKETS)
    for low, high in zip(bounds, bounds[1:]):
        histogram.buckets.add(low_value=low, high_value=high,
                              sample_count=count / _HISTOGRAM_BUCKETS)


def _standard_histogram(histogram, quantiles, low: float, high: float,
                        count: int) -> None:
    """10 equal-width buckets over [low, high] (the last one closed; one bucket when all
    values are equal), counted off the quantile curve: the values below an edge are the
    cumulative count at the last curve point below it."""
    histogram.type = statistics_pb2.Histogram.STANDARD
    if high == low:
        histogram.buckets.add(low_value=low, high_value=high, sample_count=float(count))
        return
    values, cumulative = quantiles.curve(_CURVE_POINTS)
    highest_so_far = list(itertools.accumulate(cumulative, max))
    ordered = values == sorted(values)  # quantiles are; else the rule is applied point by point

    def below(edge: float) -> float:
        if not ordered:
            return max((c for v, c in zip(values, cumulative) if v < edge), default=0.0)
        index = bisect.bisect_left(values, edge)  # the points below edge come first
        return highest_so_far[index - 1] if index else 0.0

    width = (high - low) / _HISTOGRAM_BUCKETS
    edges = [low + width * i for i in range(_HISTOGRAM_BUCKETS)] + [high]
    before = 0.0
    for index in range(_HISTOGRAM_BUCKETS):
        upto = float(count) if index == _HISTOGRAM_BUCKETS - 1 else below(edges[index + 1])
        histogram.buckets.add(low_value=edges[index], high_value=edges[index + 1],
                              sample_count=upto - before)
        before = upto


def _numeric_proto(numeric, feature, examples: int) -> None:
    _common_proto(numeric.common_stats, feature, examples)
    count = feature.count
    numeric.num_zeros = feature.zeros
    if count:
        mean = feature.sum.value() / count
        variance = feature.squares.value() / count - mean * mean
        numeric.mean = float(mean)
        numeric.std_dev = math.sqrt(float(variance))
        numeric.min, numeric.max = feature.extent
        bounds = feature.quantiles.boundaries(_HISTOGRAM_BUCKETS)
        numeric.median = bounds[_HISTOGRAM_BUCKETS // 2]
    standard = numeric.histograms.add(num_nan=feature.nan)
    quantiles = numeric.histograms.add(num_nan=feature.nan)
    if count:
        _standard_histogram(standard, feature.quantiles, *feature.extent, count)
        _quantiles_histogram(quantiles, feature.quantiles, count)
    else:
        standard.type = statistics_pb2.Histogram.STANDARD
        quantiles.type = statistics_pb2.Histogram.QUANTILES


def _string_proto(strings, feature, examples: int) -> None:
    _common_proto(strings.common_stats, feature, examples)
    total_values = feature.num_values[2]
    strings.unique = feature.distinct().Estimate()
    strings.avg_length = feature.lengths[2] / total_values if total_values else 0.0
    ranked = feature.frequent().estimate()
    for value, count in ranked[:_TOP_VALUES]:
        strings.top_values.add(value=value.decode("utf-8"), frequency=count)
    for rank, (value, count) in enumerate(ranked):
        strings.rank_histogram.buckets.add(low_rank=rank, high_rank=rank,
                                           label=value.decode("utf-8"), sample_count=count)


def _bytes_proto(byte_stats, feature, examples: int) -> None:
    _common_proto(byte_stats.common_stats, feature, examples)
    total_values = feature.num_values[2]
    byte_stats.unique = feature.distinct().Estimate()
    if total_values:
        byte_stats.avg_num_bytes = feature.lengths[2] / total_values
        byte_stats.min_num_bytes = feature.lengths[0]
        byte_stats.max_num_bytes = feature.lengths[1]
        byte_stats.max_num_bytes_int = feature.lengths[1]
