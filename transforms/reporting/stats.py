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
The accumulator (`index_summary.IndexSummary`) stays small: its size depends on the number of
splits, classes and reasons, never on the number of images (plus the up to `_ROW_BATCH` rows
that wait in it: rows are added a batch at a time, column by column, with NumPy and C-level
exact sums, into the same accumulator as one by one). The job's accepted rows come summarized
a shard at a time, by the process that wrote the shard (`MergeIndexSummariesFn`).
"""
from __future__ import annotations

import copy
from typing import Iterable, Mapping

import apache_beam as beam

from transforms.offline.packing import unpacked
from transforms.offline.rejects import KINDS, REASONS
from transforms.reporting.index_summary import (
    HISTOGRAM_EDGES,
    IndexSummary,
    add_rows,
    check_row,
    merge_into,
    sorted_keys,
    summary_output,
)
from transforms.reporting.moments import Moments

__all__ = ["SummarizeIndexFn", "MergeIndexSummariesFn", "HISTOGRAM_EDGES", "empty_summary",
           "finalize_stats"]

# Rows an accumulator holds before it adds them up a column at a time: a row's 33 columns one
# by one cost ~40 us, a batch ~10 us a row.
_ROW_BATCH = 1024


def empty_summary(name: str) -> dict:
    """The SUMMARY (see SummarizeIndexFn) of a value of which nothing was seen."""
    return Moments(HISTOGRAM_EDGES[name]).summary()


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

    def create_accumulator(self) -> IndexSummary:
        return IndexSummary()

    def add_input(self, accumulator: IndexSummary, row: Mapping) -> IndexSummary:
        check_row(row)
        accumulator.pending.append(row)
        if len(accumulator.pending) >= _ROW_BATCH:
            self.compact(accumulator)
        return accumulator

    def compact(self, accumulator: IndexSummary) -> IndexSummary:
        rows, accumulator.pending = accumulator.pending, []
        if rows:
            add_rows(accumulator, rows)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[IndexSummary]) -> IndexSummary:
        accumulators = iter(accumulators)
        merged = self.compact(next(accumulators))
        for other in accumulators:
            merge_into(merged, self.compact(other))
        return merged

    def extract_output(self, accumulator: IndexSummary) -> dict:
        return summary_output(self.compact(accumulator))


class MergeIndexSummariesFn(SummarizeIndexFn):
    """`SummarizeIndexFn` whose inputs are summaries of rows already made
    (`index_summary.packed_summary`: a shard's, made where it was written), not rows: the same
    output as of their rows."""

    def add_input(self, accumulator: IndexSummary, packed: bytes) -> IndexSummary:
        return merge_into(self.compact(accumulator), unpacked(packed))


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
    return sorted_keys(stats)
