"""Statistics of every feature of the written records, per split, as TFDV writes them.

The shard writer hands each record's features over as it writes it (`record_features`: the
values of every key; image bytes as their length and digest, not the bytes). `FeatureStatsFn`
combines them per split with the sketches TFDV itself uses (tfx_bsl's quantiles, KMV and
Misra-Gries sketches), so memory stays bounded whatever the number of records, and
`extract_output` gives one `DatasetFeatureStatistics` per split. The job writes each as its own
`DatasetFeatureStatisticsList` in TFX's layout (`Split-<split>/FeatureStats.pb`, see
`transforms.snapshot_layout.feature_stats_name`), which `tfdv.load_stats_binary`, schema
inference and the Facets view read as they are.

Per feature, like TFDV's basic statistics generator:
  common    num_non_missing, num_missing, min/max/avg/tot num_values, num_values quantiles
  INT, FLOAT  mean, std_dev (population), num_zeros, min, median, max; a STANDARD histogram
            (10 equal-width buckets from min to max) and a QUANTILES histogram (10 buckets of
            equal count); NaN and infinities count as `num_nan` and stay out of the numbers
  STRING    unique, avg_length (bytes), top 20 values and a rank histogram (1000 ranks)
  BYTES     (values that are not UTF-8, e.g. image/encoded) unique, avg/min/max num_bytes
Mean and std_dev come from exact sums, so they are the same however a runner splits and
merges the work. Quantiles, unique counts and top values are exact on small data; on large
data they are within about 1% (the sketches' error) and may differ in the last digits between
runs that merge in another order. The STANDARD histogram is read off a 1000-point quantile
curve.
"""
from __future__ import annotations

import fractions
import hashlib
import math
from typing import Iterable

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import CompressionTypes, FileSystems
from tensorflow.core.example import example_pb2
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl import sketches

from transforms.s3_storage import create_file
from transforms.snapshot_layout import feature_stats_name

__all__ = ["record_features", "summarize_features", "FeatureStatsFn", "to_statistics_list",
           "WriteFeatureStatistics"]

_EPS = 0.01                      # TFDV's quantiles sketch error
_MAX_ELEMENTS = 1 << 32
_KMV_BUCKETS = 1024
_MISRA_GRIES_BUCKETS = 1000      # TFDV's rank histogram size
_KMV_BATCH = 4096   # values a feature holds before they go into its sketches in one call
_TOP_VALUES = 20
_HISTOGRAM_BUCKETS = 10
_CURVE_POINTS = 1000             # quantiles the STANDARD histogram is read from
_LARGE_STRING = 1024             # longer values are summarized by length and digest only
_FLUSH = 4096                    # values buffered before they go into a sketch
_FEATURE = statistics_pb2.FeatureNameStatistics
_KIND_TYPE = {"int64_list": _FEATURE.INT, "float_list": _FEATURE.FLOAT}


def record_features(serialized: bytes) -> tuple:
    """((key, kind, values), ...) of one serialized tf.train.Example, sorted by key. `kind` is
    the Feature's oneof ("int64_list", "float_list", "bytes_list"). A bytes value is itself
    when it is UTF-8 of at most 1 KiB, else `(length, sha1 digest, is UTF-8)`, so image bytes
    are not carried to the statistics."""
    example = example_pb2.Example.FromString(serialized)
    result = []
    for key, feature in sorted(example.features.feature.items()):
        kind = feature.WhichOneof("kind")
        if kind is not None:
            result.append((key, kind, tuple(getattr(feature, kind).value)))
    return summarize_features(result)


def summarize_features(features) -> tuple:
    """`record_features` of the Example whose features (`codec.example_features`: (key, kind,
    values) sorted by key, as a parser reads them) are given, without serializing and parsing
    it again."""
    return tuple((key, kind, tuple(_string_or_digest(v) for v in values)
                  if kind == "bytes_list" else tuple(values))
                 for key, kind, values in features)


def _string_or_digest(value: bytes):
    try:
        value.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    if utf8 and len(value) <= _LARGE_STRING:
        return value
    return (len(value), hashlib.sha1(value).digest(), utf8)


class _ExactSum:
    """An exact sum of doubles, the same in any order, so mean and std_dev do not depend on how
    a runner splits and merges the work. A double is n / 2**k (`as_integer_ratio`); integer
    numerators are added per k, and only the final value is rounded."""

    def __init__(self):
        self.by_scale: dict = {}

    def add(self, numerator: int, scale: int) -> None:
        self.by_scale[scale] = self.by_scale.get(scale, 0) + numerator

    def merge(self, other: "_ExactSum") -> None:
        for scale, numerator in other.by_scale.items():
            self.add(numerator, scale)

    def value(self) -> fractions.Fraction:
        return sum((fractions.Fraction(n, 1 << k) for k, n in self.by_scale.items()),
                   fractions.Fraction(0))


class _Quantiles:
    """A quantiles sketch with a buffer (values go in by the thousand, not one by one)."""

    def __init__(self):
        self.sketch = sketches.QuantilesSketch(_EPS, _MAX_ELEMENTS, 1)
        self.pending: list = []

    def add(self, values: Iterable[float]) -> None:
        self.pending.extend(values)
        if len(self.pending) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.sketch.AddValues(pa.array(self.pending, pa.float64()))
            self.pending = []

    def merge(self, other: "_Quantiles") -> None:
        self.flush()
        other.flush()
        self.sketch.Merge(other.sketch)

    def boundaries(self, num: int) -> list:
        """num + 1 boundaries (min, the num - 1 inner quantiles, max); [] when empty."""
        self.flush()
        quantiles = self.sketch.GetQuantiles(num).to_pylist()
        return quantiles[0] if quantiles else []

    def curve(self, num: int) -> tuple[list, list]:
        """(values, cumulative counts <= value) at num + 1 quantiles."""
        self.flush()
        values, weights = self.sketch.GetQuantilesAndCumulativeWeights(num)
        values, weights = values.to_pylist(), weights.to_pylist()
        return (values[0], weights[0]) if values else ([], [])


class _Feature:
    """What is known about one feature of one split so far."""

    def __init__(self, kind: str):
        self.kind = kind
        self.present = 0                    # records with the feature
        self.num_values = [math.inf, 0, 0]  # min, max, total values
        self.num_values_quantiles = _Quantiles()
        self.count, self.sum, self.squares = 0, _ExactSum(), _ExactSum()  # finite numbers
        self.extent = [math.inf, -math.inf]
        self.zeros = self.nan = 0
        self.invalid_utf8 = 0
        self.lengths = [math.inf, 0, 0]     # min, max, total bytes of the values
        numeric = kind != "bytes_list"
        self.quantiles = _Quantiles() if numeric else None
        self.kmv = None if numeric else sketches.KmvSketch(_KMV_BUCKETS)
        # KMV keeps the smallest hashes of the distinct values: the same sketch whatever the
        # batches, so values wait here and enter it thousands at a time (one Arrow array each)
        self.kmv_pending: list = []
        self.top = None if numeric else sketches.MisraGriesSketch(_MISRA_GRIES_BUCKETS)
        # Misra-Gries counts its values one by one in order, so one call per thousands of
        # values in the same order is the same sketch (a call per record cost ~0.04 ms)
        self.top_pending: list = []

    def add(self, values: tuple) -> None:
        self.present += 1
        count = len(values)
        num_values = self.num_values
        num_values[0] = min(num_values[0], count)
        num_values[1] = max(num_values[1], count)
        num_values[2] += count
        self.num_values_quantiles.add((count,))
        if not values:
            return
        if self.kind == "bytes_list":
            self._add_bytes(values)
        else:
            self._add_numbers(values)

    def _add_numbers(self, values: tuple) -> None:
        finite = [float(v) for v in values if math.isfinite(v)]
        self.nan += len(values) - len(finite)
        if not finite:
            return
        self.count += len(finite)
        sums, squares = self.sum.by_scale, self.squares.by_scale
        for value in finite:
            numerator, denominator = value.as_integer_ratio()
            scale = denominator.bit_length() - 1
            sums[scale] = sums.get(scale, 0) + numerator  # _ExactSum.add, inlined
            squares[2 * scale] = squares.get(2 * scale, 0) + numerator * numerator
        extent = self.extent
        extent[0] = min(extent[0], min(finite))
        extent[1] = max(extent[1], max(finite))
        self.zeros += finite.count(0)
        self.quantiles.add(finite)

    def _add_bytes(self, values: tuple) -> None:
        strings = [v for v in values if isinstance(v, bytes)]
        if len(strings) == len(values):
            lengths = [len(v) for v in strings]
            self.kmv_pending += strings
        else:
            digests = [v for v in values if not isinstance(v, bytes)]
            lengths = [len(v) for v in strings] + [v[0] for v in digests]
            self.invalid_utf8 += sum(1 for _, _, utf8 in digests if not utf8)
            self.kmv_pending += strings
            self.kmv_pending += [digest for _, digest, _ in digests]
        known = self.lengths
        known[0] = min(known[0], min(lengths))
        known[1] = max(known[1], max(lengths))
        known[2] += sum(lengths)
        if len(self.kmv_pending) >= _KMV_BATCH:
            self.distinct()
        self.top_pending += strings
        if len(self.top_pending) >= _KMV_BATCH:
            self.frequent()

    def distinct(self):
        """The KMV sketch of every value added so far (pending values go in first)."""
        if self.kmv_pending:
            self.kmv.AddValues(pa.array(self.kmv_pending, pa.binary()))
            self.kmv_pending = []
        return self.kmv

    def frequent(self):
        """The Misra-Gries sketch of every UTF-8 value added so far (pending values go in
        first, in the order they were added)."""
        if self.top_pending:
            self.top.AddValues(pa.array(self.top_pending, pa.binary()))
            self.top_pending = []
        return self.top

    def merge(self, other: "_Feature") -> None:
        self.present += other.present
        self.num_values = [min(self.num_values[0], other.num_values[0]),
                           max(self.num_values[1], other.num_values[1]),
                           self.num_values[2] + other.num_values[2]]
        self.num_values_quantiles.merge(other.num_values_quantiles)
        self.count += other.count
        self.sum.merge(other.sum)
        self.squares.merge(other.squares)
        self.extent = [min(self.extent[0], other.extent[0]),
                       max(self.extent[1], other.extent[1])]
        self.zeros += other.zeros
        self.nan += other.nan
        self.invalid_utf8 += other.invalid_utf8
        self.lengths = [min(self.lengths[0], other.lengths[0]),
                        max(self.lengths[1], other.lengths[1]),
                        self.lengths[2] + other.lengths[2]]
        if self.quantiles is not None:
            self.quantiles.merge(other.quantiles)
        else:
            self.distinct().Merge(other.distinct())
            self.frequent().Merge(other.frequent())


class _Split:
    """The accumulator of one split: its record count and a `_Feature` per key."""

    def __init__(self):
        self.examples = 0
        self.features: dict = {}

    def feature(self, key: str, kind: str) -> _Feature:
        if key not in self.features:
            self.features[key] = _Feature(kind)
        elif self.features[key].kind != kind:
            raise ValueError(f"Feature {key!r} holds {kind} in one record and "
                             f"{self.features[key].kind} in another; one key has one type.")
        return self.features[key]


class FeatureStatsFn(beam.CombineFn):
    """`record_features` tuples of one split -> its `DatasetFeatureStatistics` (unnamed;
    `to_statistics_list` names it)."""

    def create_accumulator(self) -> _Split:
        return _Split()

    def add_input(self, accumulator: _Split, features: tuple) -> _Split:
        accumulator.examples += 1
        for key, kind, values in features:
            accumulator.feature(key, kind).add(values)
        return accumulator

    def merge_accumulators(self, accumulators) -> _Split:
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            merged.examples += other.examples
            for key, feature in other.features.items():
                if key in merged.features:
                    merged.feature(key, feature.kind).merge(feature)
                else:
                    merged.features[key] = feature
        return merged

    def extract_output(self, accumulator: _Split) -> statistics_pb2.DatasetFeatureStatistics:
        dataset = statistics_pb2.DatasetFeatureStatistics(num_examples=accumulator.examples)
        for key, feature in sorted(accumulator.features.items()):
            _feature_proto(dataset.features.add(), key, feature, accumulator.examples)
        return dataset


def to_statistics_list(split: str, dataset: statistics_pb2.DatasetFeatureStatistics
                       ) -> statistics_pb2.DatasetFeatureStatisticsList:
    """One split's statistics as TFX stores them: a list holding one dataset, named `split`."""
    result = statistics_pb2.DatasetFeatureStatisticsList()
    result.datasets.add().CopyFrom(dataset)
    result.datasets[0].name = split
    return result


def _write_split(item, staging_dir: str) -> str:
    split, dataset = item
    path = FileSystems.join(staging_dir, feature_stats_name(split))
    with create_file(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(to_statistics_list(split, dataset).SerializeToString(deterministic=True))
    return path


class WriteFeatureStatistics(beam.PTransform):
    """(split, `record_features`) pairs -> `Split-<split>/FeatureStats.pb` under `staging_dir`
    for every split with records; outputs the written paths."""

    def __init__(self, staging_dir: str):
        super().__init__()
        self._staging_dir = staging_dir

    def expand(self, features):
        return (features
                | "CombinePerSplit" >> beam.CombinePerKey(FeatureStatsFn())
                | "WriteSplitStatistics" >> beam.Map(_write_split, self._staging_dir))


# ----------------------------------------------------------------------------- protos

def _feature_proto(proto, key: str, feature: _Feature, examples: int) -> None:
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


def _common_proto(common, feature: _Feature, examples: int) -> None:
    common.num_non_missing = feature.present
    common.num_missing = examples - feature.present
    if not feature.present:
        return
    common.min_num_values, common.max_num_values, common.tot_num_values = feature.num_values
    common.avg_num_values = feature.num_values[2] / feature.present
    _quantiles_histogram(common.num_values_histogram, feature.num_values_quantiles,
                         feature.present)


def _quantiles_histogram(histogram, quantiles: _Quantiles, count: int) -> None:
    histogram.type = statistics_pb2.Histogram.QUANTILES
    bounds = quantiles.boundaries(_HISTOGRAM_BUCKETS)
    for low, high in zip(bounds, bounds[1:]):
        histogram.buckets.add(low_value=low, high_value=high,
                              sample_count=count / _HISTOGRAM_BUCKETS)


def _standard_histogram(histogram, quantiles: _Quantiles, low: float, high: float,
                        count: int) -> None:
    """10 equal-width buckets over [low, high] (the last one closed; one bucket when all
    values are equal), counted off the quantile curve: the values below an edge are the
    cumulative count at the last curve point below it."""
    histogram.type = statistics_pb2.Histogram.STANDARD
    if high == low:
        histogram.buckets.add(low_value=low, high_value=high, sample_count=float(count))
        return
    values, cumulative = quantiles.curve(_CURVE_POINTS)

    def below(edge: float) -> float:
        return max((c for v, c in zip(values, cumulative) if v < edge), default=0.0)

    width = (high - low) / _HISTOGRAM_BUCKETS
    edges = [low + width * i for i in range(_HISTOGRAM_BUCKETS)] + [high]
    before = 0.0
    for index in range(_HISTOGRAM_BUCKETS):
        upto = float(count) if index == _HISTOGRAM_BUCKETS - 1 else below(edges[index + 1])
        histogram.buckets.add(low_value=edges[index], high_value=edges[index + 1],
                              sample_count=upto - before)
        before = upto


def _numeric_proto(numeric, feature: _Feature, examples: int) -> None:
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


def _string_proto(strings, feature: _Feature, examples: int) -> None:
    _common_proto(strings.common_stats, feature, examples)
    total_values = feature.num_values[2]
    strings.unique = feature.distinct().Estimate()
    strings.avg_length = feature.lengths[2] / total_values if total_values else 0.0
    ranked = feature.frequent().Estimate().to_pylist()
    for entry in ranked[:_TOP_VALUES]:
        strings.top_values.add(value=entry["values"].decode("utf-8"),
                               frequency=entry["counts"])
    for rank, entry in enumerate(ranked):
        strings.rank_histogram.buckets.add(low_rank=rank, high_rank=rank,
                                           label=entry["values"].decode("utf-8"),
                                           sample_count=entry["counts"])


def _bytes_proto(byte_stats, feature: _Feature, examples: int) -> None:
    _common_proto(byte_stats.common_stats, feature, examples)
    total_values = feature.num_values[2]
    byte_stats.unique = feature.distinct().Estimate()
    if total_values:
        byte_stats.avg_num_bytes = feature.lengths[2] / total_values
        byte_stats.min_num_bytes = feature.lengths[0]
        byte_stats.max_num_bytes = feature.lengths[1]
        byte_stats.max_num_bytes_int = feature.lengths[1]

