"""Duplicate removal among the images that passed every other rule.

Exact: images with the same sha256 keep the one with the lowest path; the others are rejected
as `duplicate`, naming it. Near: 64-bit perceptual hashes are cut into `max_hamming + 1`
bands; two hashes within `max_hamming` bits must agree on at least one band (pigeonhole), so
only images sharing a band are compared (bucketed, never all-pairs). An image is a
`near_duplicate` when a lower-path image is within `max_hamming` bits; the detail names the
lowest such path. The rule is order-free, so it gives the same answer on any runner.
"""
from __future__ import annotations

import apache_beam as beam

from transforms import quality

__all__ = ["DropExactDuplicates", "DropNearDuplicates"]


def _keep_lowest_path(item):
    _sha, records = item
    ordered = sorted(records, key=lambda r: r.rel)
    yield ordered[0]
    for other in ordered[1:]:
        yield other.rejected("duplicate", f"same sha256 as {ordered[0].rel!r} (kept)")


class DropExactDuplicates(beam.PTransform):
    def expand(self, records):
        return (records
                | "KeyBySha256" >> beam.Map(lambda r: (r.sha256, r))
                | "GroupBySha256" >> beam.GroupByKey()
                | "KeepLowestPath" >> beam.FlatMap(_keep_lowest_path))


def _close_pairs(item, max_hamming: int):
    _band, members = item
    ordered = sorted(set(members))
    for i, (low_rel, low_hash) in enumerate(ordered):
        for high_rel, high_hash in ordered[i + 1:]:
            distance = quality.hamming(low_hash, high_hash)
            if distance <= max_hamming:
                yield high_rel, (low_rel, distance)


def _mark(item, max_hamming: int):
    _rel, grouped = item
    neighbours = sorted(grouped["neighbours"])
    for record in grouped["records"]:
        if neighbours:
            low_rel, distance = neighbours[0]
            yield record.rejected(
                "near_duplicate",
                f"perceptual hash {distance} bit(s) from {low_rel!r} "
                f"(<= dedup.max_hamming={max_hamming}; the lower path is kept)")
        else:
            yield record


class DropNearDuplicates(beam.PTransform):
    def __init__(self, max_hamming: int):
        super().__init__()
        self._max_hamming = max_hamming

    def expand(self, records):
        max_hamming = self._max_hamming
        neighbours = (
            records
            | "HashBands" >> beam.FlatMap(lambda r: [
                (band, (r.rel, r.phash)) for band in quality.hash_bands(r.phash, max_hamming)])
            | "GroupByBand" >> beam.GroupByKey()
            | "ClosePairs" >> beam.FlatMap(_close_pairs, max_hamming))
        return ({"records": records | "KeyByPath" >> beam.Map(lambda r: (r.rel, r)),
                 "neighbours": neighbours}
                | "JoinNeighbours" >> beam.CoGroupByKey()
                | "MarkNearDuplicates" >> beam.FlatMap(_mark, max_hamming))


