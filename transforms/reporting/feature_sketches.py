"""The accumulators behind the feature statistics (`feature_stats`): a split's
(`SplitAccumulator`) and its features' (`_Feature`: counts, exact sums, tfx_bsl's quantiles and
KMV sketches, the deterministic Misra-Gries of `misra_gries`), and how records and
accumulators are added together (`add_records`, `merged`, `shard_accumulator`).

Apart from `feature_stats` (a Beam CombineFn and the protos) so that the shard writer, a child
of the decoders' forkserver that imports no Beam, folds a shard's records itself
(`shard_accumulator`): the job's launcher then only merges the shards' accumulators.
"""
from __future__ import annotations

import itertools
import math
import operator

import numpy as np
import pyarrow as pa
from tfx_bsl import sketches

from transforms.reporting.exact_sums import ExactSum, add_exactly, first_extremes
from transforms.reporting.misra_gries import MisraGries

__all__ = ["SplitAccumulator", "add_records", "merged", "shard_accumulator"]

_EPS = 0.01                      # TFDV's quantiles sketch error
_MAX_ELEMENTS = 1 << 32
_KMV_BUCKETS = 1024
_MISRA_GRIES_BUCKETS = 1000      # TFDV's rank histogram size
_KMV_BATCH = 4096   # values a feature holds before they go into its sketches in one call
_FLUSH = 4096                    # values buffered before they go into a sketch
# Records an accumulator holds before it adds them to its features, column by column (NumPy
# for the numbers, `exact_sums` for the sums): the launcher adds every record, and a record's
# 25 features one by one cost ~50 us, in batches ~7 us. Every sketch still gets the same
# values in the same calls as when records are added one by one.
_RECORD_BATCH = 1024
_KEY, _KIND, _VALUES = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


def _batches(waiting: int, values, counts, limit: int):
    """(part, then flush) pairs that cut `values`, consecutive records' values (`counts`
    each), where a buffer holding `waiting` values, flushed after each record that brings it
    to `limit` values, would flush: a sketch gets the same calls as when records come one by
    one."""
    start = 0
    if waiting + len(values) >= limit:
        ends = np.cumsum(counts)
        while True:
            index = int(np.searchsorted(ends, start + limit - waiting))
            if index == len(ends):
                break
            yield values[start:int(ends[index])], True
            start, waiting = int(ends[index]), 0
    yield values[start:], False


class _Quantiles:
    """A quantiles sketch with a buffer (values go in by the thousand, not one by one)."""

    def __init__(self):
        self.sketch = sketches.QuantilesSketch(_EPS, _MAX_ELEMENTS, 1)
        self.pending: list = []  # float64 arrays
        self.waiting = 0         # values in them

    def add_records(self, values: np.ndarray, counts) -> None:
        """Adds consecutive records' values (`counts` each), flushing after each record that
        brings the buffer to _FLUSH values."""
        for part, full in _batches(self.waiting, values, counts, _FLUSH):
            self._hold(part)
            if full:
                self.flush()

    def _hold(self, values: np.ndarray) -> None:
        if len(values):
            self.pending.append(values)
            self.waiting += len(values)

    def flush(self) -> None:
        if self.pending:
            self.sketch.AddValues(pa.array(np.concatenate(self.pending), pa.float64()))
            self.pending, self.waiting = [], 0

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
    """What is known about one feature of one split so far. Records come in batches
    (`add_records`), column by column; the result is the same as adding them one by one."""

    def __init__(self, kind: str):
        self.kind = kind
        self.present = 0                    # records with the feature
        self.num_values = [math.inf, 0, 0]  # min, max, total values
        self.num_values_quantiles = _Quantiles()
        self.count, self.sum, self.squares = 0, ExactSum(), ExactSum()  # finite numbers
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
        self.top = None if numeric else MisraGries(_MISRA_GRIES_BUCKETS)
        # Misra-Gries counts its values one by one in order, so one call per thousands of
        # values in the same order is the same sketch
        self.top_pending: list = []

    def add_records(self, records: list) -> None:
        """Adds the values (a tuple per record) of consecutive records that hold the feature."""
        counts = list(map(len, records))
        self.present += len(records)
        num_values = self.num_values
        num_values[0] = min(num_values[0], min(counts))
        num_values[1] = max(num_values[1], max(counts))
        num_values[2] += sum(counts)
        self.num_values_quantiles.add_records(np.array(counts, np.float64),
                                              np.ones(len(counts), np.int64))
        values = list(itertools.chain.from_iterable(records))
        if not values:
            return
        if self.kind == "bytes_list":
            self._add_bytes(values, counts)
        else:
            self._add_numbers(values, counts)

    def _add_numbers(self, values: list, counts: list) -> None:
        numbers = np.array(values, np.float64)  # as float(value) rounds an int64
        finite = np.isfinite(numbers)
        if not finite.all():
            self.nan += len(numbers) - int(np.count_nonzero(finite))
            record = np.repeat(np.arange(len(counts)), counts)
            counts = np.bincount(record[finite], minlength=len(counts))
            numbers = numbers[finite]
            if not len(numbers):
                return
        self.count += len(numbers)
        add_exactly(self.sum, self.squares, numbers)
        lowest, highest = first_extremes(numbers, numbers)
        extent = self.extent
        extent[0] = min(extent[0], float(lowest))
        extent[1] = max(extent[1], float(highest))
        self.zeros += len(numbers) - int(np.count_nonzero(numbers))
        self.quantiles.add_records(numbers, counts)

    def _add_bytes(self, values: list, counts: list) -> None:
        kinds = set(map(type, values))
        if kinds == {bytes}:     # all UTF-8 strings
            strings, string_counts, distinct = values, counts, values
            lengths = list(map(len, values))
        elif kinds == {tuple}:   # all (length, digest, is UTF-8)
            strings, string_counts = [], [0] * len(counts)
            lengths = [length for length, _, _ in values]
            distinct = [digest for _, digest, _ in values]
            self.invalid_utf8 += sum(1 for _, _, utf8 in values if not utf8)
        else:
            strings, string_counts, distinct, lengths = self._split_mixed(values, counts)
        known = self.lengths
        known[0] = min(known[0], min(lengths))
        known[1] = max(known[1], max(lengths))
        known[2] += sum(lengths)
        for part, full in _batches(len(self.kmv_pending), distinct, counts, _KMV_BATCH):
            self.kmv_pending += part
            if full:
                self.distinct()
        for part, full in _batches(len(self.top_pending), strings, string_counts, _KMV_BATCH):
            self.top_pending += part
            if full:
                self.frequent()

    def _split_mixed(self, values: list, counts: list) -> tuple:
        """(strings, strings per record, values for KMV, lengths) of records whose values mix
        strings and digests: per record its strings, then its digests' digests."""
        strings, string_counts, distinct, lengths, start = [], [], [], [], 0
        for count in counts:
            record, start = values[start:start + count], start + count
            own = [v for v in record if isinstance(v, bytes)]
            digests = [v for v in record if not isinstance(v, bytes)]
            self.invalid_utf8 += sum(1 for _, _, utf8 in digests if not utf8)
            strings += own
            string_counts.append(len(own))
            distinct += own + [digest for _, digest, _ in digests]
            lengths += [len(v) for v in own] + [v[0] for v in digests]
        return strings, string_counts, distinct, lengths

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
            self.top.add_values(self.top_pending)
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
            self.frequent().merge(other.frequent())


class SplitAccumulator:
    """The accumulator of one split: its record count, a `_Feature` per key, and the records
    not yet added to them (`pending`: they wait to be added column by column, a batch at a
    time; `fold` adds them)."""

    def __init__(self):
        self.examples = 0
        self.features: dict = {}
        self.pending: list = []

    def feature(self, key: str, kind: str) -> _Feature:
        if key not in self.features:
            self.features[key] = _Feature(kind)
        elif self.features[key].kind != kind:
            raise _kind_error(key, kind, self.features[key].kind)
        return self.features[key]

    def fold(self) -> "SplitAccumulator":
        """Adds the pending records to the features, in order."""
        records, self.pending = self.pending, []
        if records:
            for key, kind, column in _columns(records):
                self.feature(key, kind).add_records(column)
        return self


def _same(part, column: tuple) -> bool:
    """Whether every feature of column has the first one's `part` (key or kind)."""
    return list(map(part, column)).count(part(column[0])) == len(column)


def _kind_error(key: str, kind: str, known: str) -> ValueError:
    return ValueError(f"Feature {key!r} holds {kind} in one record and {known} in another; "
                      "one key has one type.")


def _columns(records: list) -> list:
    """[(key, kind, [values of each record holding key]), ...] of `record_features` tuples,
    keys in order of first appearance. Records with the same keys in the same order (all of
    one job's) are transposed in C; others are grouped one feature at a time."""
    width = len(records[0])
    if all(len(record) == width for record in records):
        columns = list(zip(*records))
        if (all(_same(_KEY, column) and _same(_KIND, column) for column in columns)
                and len({column[0][0] for column in columns}) == width):
            return [(column[0][0], column[0][1], list(map(_VALUES, column)))
                    for column in columns]
    grouped: dict = {}
    for record in records:
        for key, kind, values in record:
            if key not in grouped:
                grouped[key] = (kind, [])
            elif grouped[key][0] != kind:
                raise _kind_error(key, kind, grouped[key][0])
            grouped[key][1].append(values)
    return [(key, kind, column) for key, (kind, column) in grouped.items()]


def add_records(accumulator: SplitAccumulator, batch) -> SplitAccumulator:
    """`batch`'s `record_features` tuples added to `accumulator`; they wait and reach the
    features `_RECORD_BATCH` at a time, as if added one by one."""
    accumulator.examples += len(batch)
    accumulator.pending.extend(batch)
    if len(accumulator.pending) >= _RECORD_BATCH:
        accumulator.fold()
    return accumulator


def merged(accumulators) -> SplitAccumulator:
    """The accumulators merged into the first, in order (each folded first)."""
    accumulators = iter(accumulators)
    result = next(accumulators).fold()
    for other in accumulators:
        other.fold()
        result.examples += other.examples
        for key, feature in other.features.items():
            if key in result.features:
                result.feature(key, feature.kind).merge(feature)
            else:
                result.features[key] = feature
    return result


def shard_accumulator(records) -> SplitAccumulator:
    """One shard's records (`record_features` tuples, in the order written) folded alone: the
    part `feature_stats_files` merges in shard order."""
    return add_records(SplitAccumulator(), records).fold()
