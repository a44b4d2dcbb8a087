"""Duplicate removal among the images that passed every other rule, tonight and across runs.

Exact: images with the same sha256 keep the one with the lowest path; the others are rejected
as `duplicate`, naming it. Content already accepted in an earlier snapshot (the `archive`:
rows of committed `index.parquet` tables) is rejected as `duplicate` naming that snapshot.

Near: 64-bit perceptual hashes are cut into `max_hamming + 1` bands; two hashes within
`max_hamming` bits must agree on at least one band (pigeonhole), so only images sharing a band
are compared (bucketed, never all-pairs). An image is a `near_duplicate` when an archived image
or a lower-path image of tonight is within `max_hamming` bits; the detail names the closest
archived one, else the lowest such path. The rule is order-free, so any runner gives the same
answer.
"""
from __future__ import annotations

import apache_beam as beam

from transforms.offline import quality

__all__ = ["DropExactDuplicates", "DropNearDuplicates"]


def _keep_lowest_path(item):
    _sha, grouped = item
    ordered = sorted(grouped["records"], key=lambda r: r.path)
    archived = sorted(grouped["archive"])  # (run_id, rel) of earlier acceptances
    if archived:
        run_id, rel = archived[0]
        for record in ordered:
            yield record.rejected(
                "duplicate", f"same sha256 as {rel!r}, accepted in snapshot {run_id}")
        return
    if not ordered:
        return
    yield ordered[0]
    for other in ordered[1:]:
        yield other.rejected("duplicate", f"same sha256 as {ordered[0].path!r} (kept)")


class DropExactDuplicates(beam.PTransform):
    """ImageRecords -> ImageRecords (duplicates rejected). `archive`: PCollection of
    (sha256, (run_id, rel)) accepted earlier."""

    def __init__(self, archive):
        super().__init__()
        self._archive = archive

    def expand(self, records):
        return ({"records": records | "KeyBySha256" >> beam.Map(lambda r: (r.sha256, r)),
                 "archive": self._archive}
                | "GroupBySha256" >> beam.CoGroupByKey()
                | "KeepLowestPath" >> beam.FlatMap(_keep_lowest_path))


def _close_pairs(item, max_hamming: int):
    """Members are (rel, phash, run_id); run_id is "" for tonight's images. Yields
    (tonight's rel, (rank, distance, neighbour description)) for each close neighbour that
    outranks it: any archived image, or a lower path of tonight."""
    _band, members = item
    tonight = sorted({(rel, phash) for rel, phash, run_id in members if not run_id})
    archived = sorted({(run_id, rel, phash) for rel, phash, run_id in members if run_id})
    for i, (rel, phash) in enumerate(tonight):
        for run_id, old_rel, old_hash in archived:
            distance = quality.hamming(phash, old_hash)
            if distance <= max_hamming:
                yield rel, (0, distance, f"{old_rel!r} in snapshot {run_id}")
        for low_rel, low_hash in tonight[:i]:
            distance = quality.hamming(phash, low_hash)
            if distance <= max_hamming:
                yield rel, (1, distance, f"{low_rel!r}")


def _mark(item, max_hamming: int):
    _rel, grouped = item
    neighbours = sorted(grouped["neighbours"])
    for record in grouped["records"]:
        if neighbours:
            _rank, distance, who = neighbours[0]
            yield record.rejected(
                "near_duplicate",
                f"perceptual hash {distance} bit(s) from {who} "
                f"(<= dedup.max_hamming={max_hamming}; the earlier or lower path is kept)")
        else:
            yield record


class DropNearDuplicates(beam.PTransform):
    """ImageRecords -> ImageRecords (near duplicates rejected). `archive`: PCollection of
    (rel, phash, run_id) accepted earlier."""

    def __init__(self, max_hamming: int, archive):
        super().__init__()
        self._max_hamming = max_hamming
        self._archive = archive

    def expand(self, records):
        max_hamming = self._max_hamming
        tonight = records | "TonightHashes" >> beam.Map(lambda r: (r.path, r.phash, ""))
        neighbours = (
            (tonight, self._archive)
            | "AllHashes" >> beam.Flatten()
            | "HashBands" >> beam.FlatMap(lambda m: [
                (band, m) for band in quality.hash_bands(m[1], max_hamming)])
            | "GroupByBand" >> beam.GroupByKey()
            | "ClosePairs" >> beam.FlatMap(_close_pairs, max_hamming))
        return ({"records": records | "KeyByPath" >> beam.Map(lambda r: (r.path, r)),
                 "neighbours": neighbours}
                | "JoinNeighbours" >> beam.CoGroupByKey()
                | "MarkNearDuplicates" >> beam.FlatMap(_mark, max_hamming))
