"""Dataset statistics: the index rows of one run combined into `stats.json` and `stats.pb`.

`SummarizeIndexFn` folds every index row (see `transforms.offline.index_table`) into one
JSON-able dict: counts per split, class and reject reason, size and quality distributions, and
the normalization statistics (per-channel pixel mean/std) of the accepted images.
`transforms.reporting.stats_proto.to_statistics_proto` turns that dict into TFDV's
`DatasetFeatureStatisticsList`, so the usual TFDV/Facets viewers read it.

The combine is deterministic regardless of how Beam splits and merges bundles:
- histograms use fixed edges (`HISTOGRAM_EDGES`), so merging is adding counts;
- sums are exact: each float is added as an integer multiple of 2**-1074 (the smallest double
  step; squares use 2**-2148), so addition is associative and the order of inputs and merges
  cannot change a single bit of the output;
- reject examples keep the 5 lexicographically smallest paths per reason.
The accumulator stays small: its size depends on the number of splits, classes and reasons,
never on the number of images.
"""
from __future__ import annotations

import bisect
import collections
import copy
import fractions
import math
import types
from typing import Iterable, Mapping

import apache_beam as beam

from configs.schema import SPLITS
from transforms.codec import QUALITY_METRICS
from transforms.offline import quality_rules
from transforms.offline.rejects import KINDS, REASONS

__all__ = ["SummarizeIndexFn", "HISTOGRAM_EDGES", "empty_summary", "finalize_stats"]

# Fixed histogram edges per summarized value: the sizes here, the quality metrics from their
# rule table. Bin i holds [edges[i], edges[i+1]); the last bin also holds its right edge.
# Values below the first edge count in the first bin and values above the last edge in the
# last bin, so no value is ever dropped from a histogram.
_SIDE_EDGES = (0, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384)
HISTOGRAM_EDGES = types.MappingProxyType({
    "width": _SIDE_EDGES,
    "height": _SIDE_EDGES,
    "megapixels": (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0),
    **quality_rules.histogram_edges(),
})

_SIZE_NAMES = ("width", "height", "megapixels")
_SPLIT_FEATURE_NAMES = ("width", "height") + QUALITY_METRICS
_CHANNELS = ("r", "g", "b")
_MAX_REJECT_EXAMPLES = 5
_NO_LABEL = "(none)"
_UNKNOWN_FORMAT = "unknown"

# Exact sums: a finite double is numerator / 2**k with k <= 1074, so value * 2**1074 is an
# integer, and value**2 * 2**2148 is one too.
_SCALE_BITS = 1074
_SQUARE_SCALE_BITS = 2 * _SCALE_BITS


def _exact_parts(value) -> tuple[int, int]:
    """value * 2**1074 and value**2 * 2**2148 as exact integers (value: a finite int or float)."""
    numerator, denominator = value.as_integer_ratio()
    shift = _SCALE_BITS - (denominator.bit_length() - 1)
    return numerator << shift, (numerator * numerator) << (2 * shift)


def _bin_index(value: float, edges: tuple) -> int:
    """The histogram bin of value; out-of-range values go to the first or last bin."""
    return min(max(bisect.bisect_right(edges, value) - 1, 0), len(edges) - 2)


def _measure(value, edges: tuple) -> tuple[int, int, int] | None:
    """(`_exact_parts`, `_bin_index`) of a finite value; None for any other."""
    if not math.isfinite(value):
        return None
    return (*_exact_parts(value), _bin_index(value, edges))


class _Moments:
    """Exact running count, sum, sum of squares, min, max and fixed-bin histogram of a value."""

    __slots__ = ("edges", "count", "zeros", "non_finite", "total", "total_squares", "minimum",
                 "maximum", "bins")

    def __init__(self, edges: tuple):
        self.edges = edges
        self.count = 0
        self.zeros = 0
        self.non_finite = 0
        self.total = 0
        self.total_squares = 0
        self.minimum = None
        self.maximum = None
        self.bins = [0] * (len(edges) - 1)

    def add(self, value) -> None:
        self.add_measured(value, _measure(value, self.edges))

    def add_measured(self, value, measured: tuple | None) -> None:
        """Adds value, whose `_measure` for these edges is given (one value goes into several
        summaries: measured once)."""
        if measured is None:
            self.non_finite += 1
            return
        scaled, scaled_square, bin_index = measured
        self.count += 1
        self.zeros += value == 0
        self.total += scaled
        self.total_squares += scaled_square
        self.minimum = value if self.minimum is None else min(self.minimum, value)
        self.maximum = value if self.maximum is None else max(self.maximum, value)
        self.bins[bin_index] += 1

    def merge(self, other: "_Moments") -> None:
        self.count += other.count
        self.zeros += other.zeros
        self.non_finite += other.non_finite
        self.total += other.total
        self.total_squares += other.total_squares
        for name in ("minimum", "maximum"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is None or theirs is None:
                setattr(self, name, theirs if mine is None else mine)
            else:
                setattr(self, name, min(mine, theirs) if name == "minimum" else max(mine, theirs))
        self.bins = [a + b for a, b in zip(self.bins, other.bins)]

    def summary(self) -> dict:
        """SUMMARY: count, min, max, mean, std (population), zeros, non_finite and histogram.

        min/max/mean/std are None when no finite value was seen."""
        mean = std = None
        if self.count:
            exact_mean = fractions.Fraction(self.total, self.count << _SCALE_BITS)
            exact_square_mean = fractions.Fraction(self.total_squares,
                                                   self.count << _SQUARE_SCALE_BITS)
            mean = float(exact_mean)
            std = math.sqrt(float(exact_square_mean - exact_mean * exact_mean))
        return {
            "count": self.count,
            "min": self.minimum,
            "max": self.maximum,
            "mean": mean,
            "std": std,
            "zeros": self.zeros,
            "non_finite": self.non_finite,
            "histogram": {"edges": list(self.edges), "counts": list(self.bins)},
        }


def empty_summary(name: str) -> dict:
    """The SUMMARY (see SummarizeIndexFn) of a value of which nothing was seen."""
    return _Moments(HISTOGRAM_EDGES[name]).summary()


def _moments_by_name(names: Iterable[str]) -> dict:
    return {name: _Moments(HISTOGRAM_EDGES[name]) for name in names}


def _merge_moment_maps(into: dict, other: Mapping) -> None:
    """Merges other's moments into into's own objects (never aliases other's)."""
    for name, moments in other.items():
        into[name].merge(moments)


class _Accumulator:
    """Everything SummarizeIndexFn keeps; sized by splits/classes/reasons, not by images."""

    def __init__(self):
        self.discovered = 0
        self.accepted = 0
        self.bytes_discovered = 0
        self.bytes_accepted = 0
        self.by_split = collections.Counter()
        self.by_split_class = collections.defaultdict(collections.Counter)
        self.by_reason = collections.Counter()
        self.reject_examples = collections.defaultdict(list)
        self.formats = collections.Counter()
        self.size = _moments_by_name(_SIZE_NAMES)
        self.quality = _moments_by_name(QUALITY_METRICS)
        self.quality_all = _moments_by_name(QUALITY_METRICS)
        self.split_features = {}
        self.pixel_images = 0
        self.pixel_weight = 0
        self.pixel_sums = [0, 0, 0]  # sum of w*h*mean_c, scaled by 2**1074
        self.pixel_square_sums = [0, 0, 0]  # sum of w*h*sqmean_c, scaled by 2**1074
        self.images_with_boxes = 0
        self.boxes = 0


def _split_features(accumulator: _Accumulator, split: str) -> dict:
    """The per-split moments of accumulator for split, created on first use."""
    if split not in accumulator.split_features:
        accumulator.split_features[split] = _moments_by_name(_SPLIT_FEATURE_NAMES)
    return accumulator.split_features[split]


def _keep_smallest(paths: list, new_paths: Iterable[str]) -> list:
    return sorted(set(paths).union(new_paths))[:_MAX_REJECT_EXAMPLES]


def _pixel_moments(row: Mapping) -> tuple[int, list, list] | None:
    """(w*h, exact w*h*mean_c, exact w*h*sqmean_c) of an accepted row, None when unmeasured."""
    width, height = row["width"], row["height"]
    values = [row[f"mean_{c}"] for c in _CHANNELS] + [row[f"sqmean_{c}"] for c in _CHANNELS]
    if width is None or height is None or any(v is None or not math.isfinite(v) for v in values):
        return None
    weight = int(width) * int(height)
    scaled = [weight * _exact_parts(v)[0] for v in values]
    return weight, scaled[:3], scaled[3:]


class SummarizeIndexFn(beam.CombineFn):
    """Combines index rows (dicts from `index_table.make_row`) into one stats dict.

    Output (JSON-able, keys sorted at every level):
      images {discovered, accepted, rejected}; by_split {train, validation, test, ...};
      by_split_class {split: {class: n}}; by_reason {reason: n} (image rejects);
      reject_examples {reason: [5 smallest paths]}; bytes {discovered, accepted};
      formats {format: n}; size {width, height, megapixels: SUMMARY};
      quality {metric: SUMMARY} (accepted); quality_all {metric: SUMMARY} (every decoded image);
      by_split_features {split: {width, height, <metric>: SUMMARY}} (for the TFDV proto);
      pixel_stats {mean [r,g,b], std [r,g,b], scale "0-1", weighting "pixels", images};
      boxes {images_with_boxes, boxes} (accepted).
    SUMMARY = {count, min, max, mean, std, zeros, non_finite, histogram {edges, counts}}; std is
    the population std; non-finite values are counted apart and left out of everything else.
    pixel_stats weights each image's channel moments (of pixel/255) by its original w*h:
    mean = sum(w*h*mean_c) / sum(w*h), std = sqrt(E[x^2] - mean^2).
    """

    def create_accumulator(self) -> _Accumulator:
        return _Accumulator()

    def add_input(self, accumulator: _Accumulator, row: Mapping) -> _Accumulator:
        accumulator.discovered += 1
        accumulator.bytes_discovered += row["bytes"] or 0
        measured = {}  # metric -> (value, _measure): the same for the three summaries
        for name in QUALITY_METRICS:
            value = row[f"quality_{name}"]
            if value is not None:
                moments = accumulator.quality_all[name]
                measured[name] = value, _measure(value, moments.edges)
                moments.add_measured(*measured[name])
        if not row["accepted"]:
            reason = row["reason"]
            if reason not in REASONS:
                raise ValueError(
                    f"Unknown reject reason in index row for path {row['path']!r}. Expected "
                    f"one of {tuple(REASONS)}. Received: reason={reason!r}")
            accumulator.by_reason[reason] += 1
            examples = accumulator.reject_examples[reason]
            accumulator.reject_examples[reason] = _keep_smallest(examples, [row["path"]])
            return accumulator
        split = row["split"]
        if not split:
            raise ValueError(
                f"Accepted index row for path {row['path']!r} names no split. Expected one of "
                f"{SPLITS}. Received: split={split!r}")
        accumulator.accepted += 1
        accumulator.bytes_accepted += row["bytes"] or 0
        accumulator.by_split[split] += 1
        label = row["label"]
        accumulator.by_split_class[split][_NO_LABEL if label is None else label] += 1
        accumulator.formats[row["format"] or _UNKNOWN_FORMAT] += 1
        width, height = row["width"], row["height"]
        split_features = _split_features(accumulator, split)
        for name, value in (("width", width), ("height", height)):
            if value is not None:
                moments = accumulator.size[name]
                measured_size = _measure(value, moments.edges)
                moments.add_measured(value, measured_size)
                split_features[name].add_measured(value, measured_size)
        if width is not None and height is not None:
            accumulator.size["megapixels"].add(width * height / 1e6)
        for name, (value, measured_value) in measured.items():
            accumulator.quality[name].add_measured(value, measured_value)
            split_features[name].add_measured(value, measured_value)
        pixel = _pixel_moments(row)
        if pixel is not None:
            weight, sums, square_sums = pixel
            accumulator.pixel_images += 1
            accumulator.pixel_weight += weight
            accumulator.pixel_sums = [a + b for a, b in zip(accumulator.pixel_sums, sums)]
            accumulator.pixel_square_sums = [
                a + b for a, b in zip(accumulator.pixel_square_sums, square_sums)]
        num_boxes = row["num_boxes"] or 0
        accumulator.images_with_boxes += num_boxes > 0
        accumulator.boxes += num_boxes
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[_Accumulator]) -> _Accumulator:
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            merged.discovered += other.discovered
            merged.accepted += other.accepted
            merged.bytes_discovered += other.bytes_discovered
            merged.bytes_accepted += other.bytes_accepted
            merged.by_split.update(other.by_split)
            for split, classes in other.by_split_class.items():
                merged.by_split_class[split].update(classes)
            merged.by_reason.update(other.by_reason)
            for reason, paths in other.reject_examples.items():
                merged.reject_examples[reason] = _keep_smallest(
                    merged.reject_examples[reason], paths)
            merged.formats.update(other.formats)
            _merge_moment_maps(merged.size, other.size)
            _merge_moment_maps(merged.quality, other.quality)
            _merge_moment_maps(merged.quality_all, other.quality_all)
            for split, features in other.split_features.items():
                _merge_moment_maps(_split_features(merged, split), features)
            merged.pixel_images += other.pixel_images
            merged.pixel_weight += other.pixel_weight
            merged.pixel_sums = [a + b for a, b in zip(merged.pixel_sums, other.pixel_sums)]
            merged.pixel_square_sums = [
                a + b for a, b in zip(merged.pixel_square_sums, other.pixel_square_sums)]
            merged.images_with_boxes += other.images_with_boxes
            merged.boxes += other.boxes
        return merged

    def extract_output(self, accumulator: _Accumulator) -> dict:
        by_split = {split: 0 for split in SPLITS}
        by_split.update(accumulator.by_split)
        by_split_class = {split: {} for split in SPLITS}
        by_split_class.update(
            {split: dict(classes) for split, classes in accumulator.by_split_class.items()})
        split_features = {split: _moments_by_name(_SPLIT_FEATURE_NAMES) for split in by_split}
        for split, features in accumulator.split_features.items():
            _merge_moment_maps(split_features[split], features)
        output = {
            "images": {
                "discovered": accumulator.discovered,
                "accepted": accumulator.accepted,
                "rejected": accumulator.discovered - accumulator.accepted,
            },
            "by_split": by_split,
            "by_split_class": by_split_class,
            "by_reason": dict(accumulator.by_reason),
            "reject_examples": dict(accumulator.reject_examples),
            "bytes": {"discovered": accumulator.bytes_discovered,
                      "accepted": accumulator.bytes_accepted},
            "formats": dict(accumulator.formats),
            "size": {name: m.summary() for name, m in accumulator.size.items()},
            "quality": {name: m.summary() for name, m in accumulator.quality.items()},
            "quality_all": {name: m.summary() for name, m in accumulator.quality_all.items()},
            "by_split_features": {
                split: {name: m.summary() for name, m in features.items()}
                for split, features in split_features.items()},
            "pixel_stats": _pixel_stats(accumulator),
            "boxes": {"images_with_boxes": accumulator.images_with_boxes,
                      "boxes": accumulator.boxes},
        }
        return _sorted_keys(output)


def _pixel_stats(accumulator: _Accumulator) -> dict:
    """Pixel-count-weighted channel mean/std of pixel/255; None per channel with no images."""
    means, stds = [None] * 3, [None] * 3
    if accumulator.pixel_weight:
        denominator = accumulator.pixel_weight << _SCALE_BITS
        for channel in range(3):
            mean = fractions.Fraction(accumulator.pixel_sums[channel], denominator)
            square_mean = fractions.Fraction(accumulator.pixel_square_sums[channel], denominator)
            means[channel] = float(mean)
            # Each image's sqmean and mean are measured apart; rounding there can push a flat
            # image's variance a hair below zero.
            stds[channel] = math.sqrt(max(0.0, float(square_mean - mean * mean)))
    return {"mean": means, "std": stds, "scale": "0-1", "weighting": "pixels",
            "images": accumulator.pixel_images}


def _sorted_keys(value):
    """A copy of value with every dict's keys in sorted order (lists keep their order)."""
    if isinstance(value, Mapping):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def finalize_stats(index_summary: dict, rejects_by_kind: dict, accounting: dict) -> dict:
    """stats.json: the index summary plus rejects per input kind and the accounting check.

    rejects_by_kind is {kind: {reason: count}} over every reject (images, label CSV rows, box
    CSV rows); every kind of `transforms.offline.rejects.KINDS` is present in the result. accounting is
    the launcher's check, e.g. {"images": {"discovered", "accepted", "rejected", "ok"},
    "label_rows": {"total", "matched", "rejected", "ok"}, "box_rows": {...}, "ok": bool}.
    The inputs are not modified.
    """
    unknown_kinds = sorted(set(rejects_by_kind) - set(KINDS))
    if unknown_kinds:
        raise ValueError(f"Unknown reject kinds {unknown_kinds} in rejects_by_kind. Expected "
                         f"one of {KINDS}. Received: {sorted(rejects_by_kind)}")
    for kind, reasons in rejects_by_kind.items():
        unknown_reasons = sorted(set(reasons) - set(REASONS))
        if unknown_reasons:
            raise ValueError(f"Unknown reject reasons {unknown_reasons} for kind {kind!r}. "
                             f"Expected one of {tuple(REASONS)}.")
    if not isinstance(accounting, Mapping) or not isinstance(accounting.get("ok"), bool):
        received = accounting.get("ok") if isinstance(accounting, Mapping) else accounting
        raise ValueError(f"accounting must be a dict with a boolean 'ok'. Received: {received!r}")
    stats = copy.deepcopy(dict(index_summary))
    stats["rejects_by_kind"] = {kind: dict(rejects_by_kind.get(kind, {})) for kind in KINDS}
    stats["accounting"] = copy.deepcopy(dict(accounting))
    return _sorted_keys(stats)
