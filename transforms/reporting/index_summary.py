"""What the dataset statistics (`stats.SummarizeIndexFn`) keep of index rows: an
`IndexSummary` of counts, exact moments and fixed-bin histograms, and how rows are added to one
and two are merged. Beam-free and TensorFlow-free, so a shard-writing child
(`transforms.offline.shard_writing`) summarizes the rows of the shard it writes and the launcher
only merges a summary a shard (`stats.py` says why the merge is exact, in any order).
"""
from __future__ import annotations

import collections
import fractions
import math
import operator
import types
from typing import Iterable, Mapping

import numpy as np

from configs.schema import SPLITS
from transforms.codec import QUALITY_METRICS
from transforms.offline import quality_rules
from transforms.offline.packing import packed
from transforms.offline.rejects import REASONS
from transforms.reporting.exact_sums import exponent_groups
from transforms.reporting.moments import EXACT_INTEGERS, SCALE_BITS, Moments, exact_parts

__all__ = ["HISTOGRAM_EDGES", "IndexSummary", "check_row", "add_rows", "merge_into",
           "summary_of", "packed_summary", "summary_output", "sorted_keys"]

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


def _moments_by_name(names: Iterable[str]) -> dict:
    return {name: Moments(HISTOGRAM_EDGES[name]) for name in names}


def _merge_moment_maps(into: dict, other: Mapping) -> None:
    """Merges other's moments into into's own objects (never aliases other's)."""
    for name, moments in other.items():
        into[name].merge(moments)


class IndexSummary:
    """What is kept of index rows; sized by splits/classes/reasons, not by images."""

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
        self.pending = []  # rows not added yet: `SummarizeIndexFn` adds them a batch at a time


def _split_features(summary: IndexSummary, split: str) -> dict:
    """The per-split moments of summary for split, created on first use."""
    if split not in summary.split_features:
        summary.split_features[split] = _moments_by_name(_SPLIT_FEATURE_NAMES)
    return summary.split_features[split]


def _keep_smallest(paths: list, new_paths: Iterable[str]) -> list:
    return sorted(set(paths).union(new_paths))[:_MAX_REJECT_EXAMPLES]


def check_row(row: Mapping) -> None:
    """Raises on a row a summary cannot count: an unknown reject reason, or an accepted
    row without a split."""
    if not row["accepted"]:
        if row["reason"] not in REASONS:
            raise ValueError(
                f"Unknown reject reason in index row for path {row['path']!r}. Expected "
                f"one of {tuple(REASONS)}. Received: reason={row['reason']!r}")
    elif not row["split"]:
        raise ValueError(
            f"Accepted index row for path {row['path']!r} names no split. Expected one of "
            f"{SPLITS}. Received: split={row['split']!r}")


def _column(rows: list, name: str) -> list:
    return list(map(operator.itemgetter(name), rows))


def _add_column(moments: Moments, values: list) -> None:
    """Adds the values that are not None to moments."""
    present = [value for value in values if value is not None]
    if present:
        moments.add_many(present, np.array(present, np.float64))


def add_rows(summary: IndexSummary, rows: list) -> None:
    """Adds checked index rows to summary, a column at a time (NumPy and C-level sums):
    the same summary as adding them one by one, in order."""
    summary.discovered += len(rows)
    summary.bytes_discovered += sum(filter(None, _column(rows, "bytes")))
    accepted = [row for row in rows if row["accepted"]]
    for row in rows:
        if not row["accepted"]:
            reason = row["reason"]
            summary.by_reason[reason] += 1
            examples = summary.reject_examples[reason]
            summary.reject_examples[reason] = _keep_smallest(examples, [row["path"]])
    by_split = collections.defaultdict(list)
    for row in accepted:
        by_split[row["split"]].append(row)
    for name in QUALITY_METRICS:
        _add_column(summary.quality_all[name], _column(rows, f"quality_{name}"))
        _add_column(summary.quality[name], _column(accepted, f"quality_{name}"))
    for name in ("width", "height"):
        _add_column(summary.size[name], _column(accepted, name))
    for split, split_rows in by_split.items():
        for name, moments in _split_features(summary, split).items():
            column = name if name in ("width", "height") else f"quality_{name}"
            _add_column(moments, _column(split_rows, column))
    if not accepted:
        return
    summary.accepted += len(accepted)
    summary.bytes_accepted += sum(filter(None, _column(accepted, "bytes")))
    summary.by_split.update(_column(accepted, "split"))
    for (split, label), count in collections.Counter(
            zip(_column(accepted, "split"), _column(accepted, "label"))).items():
        summary.by_split_class[split][_NO_LABEL if label is None else label] += count
    summary.formats.update(f or _UNKNOWN_FORMAT for f in _column(accepted, "format"))
    _add_column(summary.size["megapixels"], [
        width * height / 1e6 for width, height in zip(_column(accepted, "width"),
                                                      _column(accepted, "height"))
        if width is not None and height is not None])
    _add_pixel_moments(summary, accepted)
    num_boxes = [n or 0 for n in _column(accepted, "num_boxes")]
    summary.images_with_boxes += sum(n > 0 for n in num_boxes)
    summary.boxes += sum(num_boxes)


def _add_pixel_moments(summary: IndexSummary, accepted: list) -> None:
    """Adds the accepted rows measured in full (w, h and every channel moment finite) to the
    pixel sums: w*h and w*h*value scaled by 2**1074, exactly."""
    names = [f"{moment}_{c}" for moment in ("mean", "sqmean") for c in _CHANNELS]
    columns = [np.array(_column(accepted, name), np.float64) for name in names]  # None: NaN
    sized = [row["width"] is not None and row["height"] is not None for row in accepted]
    measured = np.flatnonzero(np.isfinite(np.stack(columns)).all(axis=0) & sized).tolist()
    if not measured:
        return
    weights = [int(accepted[i]["width"]) * int(accepted[i]["height"]) for i in measured]
    summary.pixel_images += len(measured)
    summary.pixel_weight += sum(weights)
    for index, name in enumerate(names):
        values = [accepted[i][name] for i in measured]
        scaled = _weighted_scaled_sum(weights, values, columns[index][measured])
        sums = summary.pixel_sums if index < 3 else summary.pixel_square_sums
        sums[index % 3] += scaled


def _weighted_scaled_sum(weights: list, values: list, numbers: np.ndarray) -> int:
    """sum(w * exact_parts(v)[0]) over weights and values (numbers: values as float64)."""
    if np.abs(numbers).max() >= EXACT_INTEGERS:  # an int may not be its float64
        return sum(weight * exact_parts(value)[0] for weight, value in zip(weights, values))
    total = 0
    for exponent, numerators, positions in exponent_groups(numbers):
        group_weights = [weights[i] for i in positions.tolist()]
        total += sum(map(operator.mul, group_weights, numerators)) << (SCALE_BITS + exponent)
    return total


def summary_of(rows: list) -> IndexSummary:
    """The summary of index rows (each checked: `check_row`)."""
    summary = IndexSummary()
    for row in rows:
        check_row(row)
    if rows:
        add_rows(summary, rows)
    return summary


def packed_summary(rows: list) -> bytes:
    """`summary_of(rows)` pickled: what a shard-writing child hands back, loaded only where the
    summaries are merged (a shuffle between moves its bytes as they are)."""
    return packed(summary_of(rows))


def merge_into(merged: IndexSummary, other: IndexSummary) -> IndexSummary:
    """Adds `other` (its rows all added: none pending) to `merged`; returns `merged`."""
    merged.discovered += other.discovered
    merged.accepted += other.accepted
    merged.bytes_discovered += other.bytes_discovered
    merged.bytes_accepted += other.bytes_accepted
    merged.by_split.update(other.by_split)
    for split, classes in other.by_split_class.items():
        merged.by_split_class[split].update(classes)
    merged.by_reason.update(other.by_reason)
    for reason, paths in other.reject_examples.items():
        merged.reject_examples[reason] = _keep_smallest(merged.reject_examples[reason], paths)
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


def summary_output(summary: IndexSummary) -> dict:
    """The summary as `stats.SummarizeIndexFn`'s output (its docstring: the keys); its rows
    all added (none pending)."""
    by_split = {split: 0 for split in SPLITS}
    by_split.update(summary.by_split)
    by_split_class = {split: {} for split in SPLITS}
    by_split_class.update(
        {split: dict(classes) for split, classes in summary.by_split_class.items()})
    split_features = {split: _moments_by_name(_SPLIT_FEATURE_NAMES) for split in by_split}
    for split, features in summary.split_features.items():
        _merge_moment_maps(split_features[split], features)
    output = {
        "images": {
            "discovered": summary.discovered,
            "accepted": summary.accepted,
            "rejected": summary.discovered - summary.accepted,
        },
        "by_split": by_split,
        "by_split_class": by_split_class,
        "by_reason": dict(summary.by_reason),
        "reject_examples": dict(summary.reject_examples),
        "bytes": {"discovered": summary.bytes_discovered, "accepted": summary.bytes_accepted},
        "formats": dict(summary.formats),
        "size": {name: m.summary() for name, m in summary.size.items()},
        "quality": {name: m.summary() for name, m in summary.quality.items()},
        "quality_all": {name: m.summary() for name, m in summary.quality_all.items()},
        "by_split_features": {
            split: {name: m.summary() for name, m in features.items()}
            for split, features in split_features.items()},
        "pixel_stats": _pixel_stats(summary),
        "boxes": {"images_with_boxes": summary.images_with_boxes, "boxes": summary.boxes},
    }
    return sorted_keys(output)


def _pixel_stats(summary: IndexSummary) -> dict:
    """Pixel-count-weighted channel mean/std of pixel/255; None per channel with no images."""
    means, stds = [None] * 3, [None] * 3
    if summary.pixel_weight:
        denominator = summary.pixel_weight << SCALE_BITS
        for channel in range(3):
            mean = fractions.Fraction(summary.pixel_sums[channel], denominator)
            square_mean = fractions.Fraction(summary.pixel_square_sums[channel], denominator)
            means[channel] = float(mean)
            # Each image's sqmean and mean are measured apart; rounding there can push a flat
            # image's variance a hair below zero.
            stds[channel] = math.sqrt(max(0.0, float(square_mean - mean * mean)))
    return {"mean": means, "std": stds, "scale": "0-1", "weighting": "pixels",
            "images": summary.pixel_images}


def sorted_keys(value):
    """A copy of value with every dict's keys in sorted order (lists keep their order)."""
    if isinstance(value, Mapping):
        return {key: sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(item) for item in value]
    return value
