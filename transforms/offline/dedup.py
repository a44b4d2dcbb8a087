"""Duplicate removal among the images that passed every other rule, tonight and across runs.

Exact: images with the same sha256 keep the one with the lowest path; the others are rejected
as `duplicate`, naming it. Content already accepted in an earlier snapshot (the `archive`:
rows of committed `index.parquet` tables) is rejected as `duplicate` naming that snapshot.

Near: an image is a `near_duplicate` when an archived image or a lower-path image of tonight is
within `max_hamming` bits of its 64-bit perceptual hash; the detail names the closest archived
one, else the closest (then lowest) path. Only images sharing a hash band are compared
(`near_search.search_bucket`), never all pairs; the rule is order-free, so any runner gives the
same answer. Crop-tolerant (`crop_max_hamming`, from `dedup.crop_tolerant`): a second banded
search (`crop_search`) compares each record's centre hash (`center_phash`) with the others'
full hashes, either way round, same keep rule; the detail says which hash matched.

A bucket with more than `hot_bucket_values` distinct values is split into parts by a hash of
the value, each pair of parts searched on its own, so no worker compares more than two parts;
the best neighbour of each image is then combined with `min` per path (on Beam's local runner
the finds join the records as they are, and the marking takes the smallest). Details and why:
docs/architecture.md ("Near-duplicate search").
"""
from __future__ import annotations

import functools
import typing
import zlib

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.offline import image_hash, progress
from transforms.offline.beam_steps import FlatMap, LeanDoFn, Map
from transforms.offline.classes import AssignClassIdFn
from transforms.offline.crop_search import CENTER, FULL, search_crop_bucket
from transforms.offline.gather import GroupByKeyInLanes, JoinByKey, merged
from transforms.offline.join_labels import REJECTED, routed
from transforms.offline.near_search import search_bucket

__all__ = ["DropExactDuplicates", "DropNearDuplicates", "HOT_BUCKET_VALUES"]

# Distinct hash values of one band bucket searched by one worker; above it, in parts. A bucket
# holds images / 8192 random values (13-bit bands at max_hamming 4): 12k at 100M images. Two
# parts of 20k values cost ~1-2 s of XORs; a whole 100k-image hot cluster of near-identical
# hashes (~2k values) ~5 s of CPU (bench scale). Splitting that cluster by image instead cost
# 74 s on this machine: every part held nearly all of its values, and every image was copied.
HOT_BUCKET_VALUES = 20_000
_HOT = "hot"


def _routed_from(item, step, *args):
    """Each record `step(item, *args)` yields, `join_labels.routed`."""
    return map(routed, step(item, *args))


def _keep_lowest_path(item):
    progress.enter("dedup")
    _sha, grouped = item
    ordered = sorted(grouped["records"], key=lambda r: r.path)
    archived = sorted(grouped.get("archive", ()))  # (run_id, rel) of earlier acceptances
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


class _ClassIdsThenKeepLowestPathFn(LeanDoFn):
    """`_keep_lowest_path` of a sha256 group whose candidates first get their class ids
    (`AssignClassIdFn`; a quality reject stays as it is): one rejected for its label comes
    out at once and takes no part in the keep rule."""

    def __init__(self, routed: bool = False):
        self._assign = AssignClassIdFn()
        self._routed = routed  # every record out `join_labels.routed`

    def process(self, item, table):
        records = self._kept(item, table)
        return map(routed, records) if self._routed else records

    def _kept(self, item, table):
        sha, grouped = item
        records = []
        for record in grouped["records"]:
            if record.reject is None:
                record = self._assign.assign(record, table)
                if record.reject is not None:  # its label or a box class is not in the table
                    yield record
                    continue
            records.append(record)
        yield from _keep_lowest_path((sha, {**grouped, "records": records}))


class DropExactDuplicates(beam.PTransform):
    """ImageRecords (a PCollection, or a tuple of them) -> ImageRecords (duplicates
    rejected). `archive`: PCollection of (sha256, (run_id, rel)) accepted earlier, or None on
    a full run: the join then has the records alone as input, which Beam's local runner does
    not copy once more (it materializes every Flatten of several inputs). `class_table`: a
    singleton PCollection of class names (`classes.ClassTable` of these records), or None;
    with it each candidate gets its class id in its group, after the shuffle, and one
    rejected for its label (`unknown_class`, `bad_box`) comes out rejected before the keep
    rule, as if classified before the dedup. Read before the shuffle, the table would make
    Beam's local runner keep every record once more until the table is known. `lanes`: the
    shuffle in lanes (`gather.GroupByKeyInLanes`; None: key by key). `routed`: the output is
    (records without a reject, records with one), split by the step that decides, not by a
    step after it."""

    def __init__(self, archive=None, class_table=None, lanes: int | None = None,
                 routed: bool = False):
        super().__init__()
        self._archive = archive
        self._class_table = class_table
        self._lanes = lanes
        self._routed = routed

    def expand(self, records):
        inputs = {"records": records}
        if self._archive is not None:
            inputs["archive"] = self._archive
        grouped = inputs | "GroupBySha256" >> JoinByKey({"records": lambda r: (r.sha256, r)},
                                                           packed=("records",),
                                                           lanes=self._lanes)
        if self._class_table is None:
            step = (FlatMap(_routed_from, _keep_lowest_path) if self._routed
                    else FlatMap(_keep_lowest_path))
        else:
            step = beam.ParDo(_ClassIdsThenKeepLowestPathFn(self._routed),
                              beam.pvalue.AsSingleton(self._class_table))
        if not self._routed:
            return grouped | "KeepLowestPath" >> step
        kept = grouped | "KeepLowestPath" >> step.with_outputs(REJECTED, main="kept")
        return kept.kept, kept[REJECTED]


def _band_keys(member, max_hamming: int, member_of=None):
    """(band, member) pairs of a hash member (of `member_of(element)` with `member_of`)."""
    if member_of is not None:
        member = member_of(member)
    return [(band, member) for band in image_hash.hash_bands(member[1], max_hamming)]


def _tonight_member(record) -> tuple:
    """A record of tonight as a hash member of the band search: (rel, phash, no run_id)."""
    return record.path, record.phash, ""


def _sides(members):
    """(rel, phash, run_id) members -> tonight's (rel, phash), archived (run_id, rel, phash)."""
    tonight, archived = [], []
    for rel, phash, run_id in members:
        if run_id:
            archived.append((run_id, rel, phash))
        else:
            tonight.append((rel, phash))
    return tonight, archived


def _part(member, parts: int) -> int:
    """The part of a member: by its hash value, so equal hashes share a part."""
    return zlib.crc32(int(member[1], 16).to_bytes(8, "big")) % parts


# Output type declared (what Beam infers anyway: Any), so that building the graph does not
# disassemble `process` and everything it calls (tens of ms per DoFn and job).
@beam.typehints.with_output_types(typing.Any)
class _BucketFn(LeanDoFn):
    """((band, value), members) -> (tonight's rel, best neighbour here), for the plain and the
    crop-tolerant search alike; a bucket with more than `hot_bucket_values` distinct values
    goes out tagged `hot` instead, each member once per sub-key (`_sub_keyed`) that holds its
    part, to be searched in parts by more than one worker. A bucket has two members or more:
    `_BandSearch` leaves the others (most buckets) out before they are steps' elements."""
    COMPARED = HOT = ""   # counter names

    def __init__(self, max_hamming: int, hot_bucket_values: int | None):
        self._max_hamming = max_hamming
        self._hot_values = hot_bucket_values
        self._compared = Metrics.counter("pixelmill", self.COMPARED)
        self._hot = Metrics.counter("pixelmill", self.HOT)

    def process(self, item):
        (band, value), members = item
        members = list(members)
        parts = _hot_parts(members, self._hot_values)
        if parts > 1:
            self._hot.inc()
            for member in members:
                mine = _part(member, parts)
                for other in range(parts):
                    yield beam.pvalue.TaggedOutput(
                        _HOT, self._sub_keyed(band, value, member, mine, other))
            return
        found, compared = self._search(band, members)
        self._compared.inc(compared)
        yield from found

    def _sub_keyed(self, band, value, member, mine: int, other: int) -> tuple:
        raise NotImplementedError

    def _search(self, band: int, members: list) -> tuple[list, int]:
        raise NotImplementedError


class _SearchBucketFn(_BucketFn):
    """The plain search: sub-key (p, q), p <= q, holds the members of parts p and q."""
    COMPARED, HOT = "near_dup_comparisons", "near_dup_hot_buckets"

    def _sub_keyed(self, band, value, member, mine, other):
        return (band, value, min(mine, other), max(mine, other)), (mine, member)

    def _search(self, band, members):
        tonight, archived = _sides(members)
        return search_bucket(tonight, tonight, archived, self._max_hamming, band)


@beam.typehints.with_output_types(typing.Any)
class _SearchPartsFn(LeanDoFn):
    """((band, value, p, q), [(part, member)]) -> best neighbours of part p's images among
    part q's and of q's among p's (p's among p's when p == q)."""

    def __init__(self, max_hamming: int):
        self._max_hamming = max_hamming
        self._compared = Metrics.counter("pixelmill", "near_dup_comparisons")

    def process(self, item):
        (band, _value, p, q), tagged = item
        by_part = {p: [], q: []}
        for part, member in tagged:
            by_part[part].append(member)
        sides = {part: _sides(members) for part, members in by_part.items()}
        for mine, other in ([(p, p)] if p == q else [(p, q), (q, p)]):
            found, compared = search_bucket(sides[mine][0], *sides[other], self._max_hamming,
                                            band)
            self._compared.inc(compared)
            yield from found


def _hot_parts(members, hot_values: int | None) -> int:
    """How many parts a bucket is searched in: 1 unless it holds more than `hot_values`
    distinct hash values."""
    if not hot_values or len(members) <= hot_values:
        return 1
    values = len({int(m[1], 16) for m in members})
    return -(-values // hot_values) if values > hot_values else 1


def _crop_sides(members) -> dict:
    """(rel, hash, run_id, kind) members -> `search_crop_bucket`'s keyword arguments:
    tonight's centres and fulls, the archive's fulls and centres."""
    sides = {"centers": [], "fulls": [], "archive": [], "archive_centers": []}
    for rel, phash, run_id, kind in members:
        if run_id:
            sides["archive_centers" if kind == CENTER else "archive"].append((run_id, rel, phash))
        else:
            sides["centers" if kind == CENTER else "fulls"].append((rel, phash))
    return sides


class _SearchCropBucketFn(_BucketFn):
    """The crop-tolerant search over (rel, hash, run_id, kind) members: sub-key (p, q) pairs
    the centre hashes of part p with the full hashes of part q, so each (centre, full) pair of
    values is searched in exactly one sub-bucket."""
    COMPARED, HOT = "near_dup_crop_comparisons", "near_dup_crop_hot_buckets"

    def _sub_keyed(self, band, value, member, mine, other):
        center = member[3] == CENTER  # tonight's or archived
        return ((band, value, mine, other) if center else (band, value, other, mine)), member

    def _search(self, band, members):
        return search_crop_bucket(max_hamming=self._max_hamming, band=band,
                                  **_crop_sides(members))


@beam.typehints.with_output_types(typing.Any)
class _SearchCropPartsFn(LeanDoFn):
    """((band, value, p, q), members) -> best crop neighbours of part p's centre hashes among
    part q's full hashes (and of those full hashes' images among p's centres)."""

    def __init__(self, max_hamming: int):
        self._max_hamming = max_hamming
        self._compared = Metrics.counter("pixelmill", "near_dup_crop_comparisons")

    def process(self, item):
        (band, _value, _p, _q), members = item
        found, compared = search_crop_bucket(max_hamming=self._max_hamming, band=band,
                                             **_crop_sides(members))
        self._compared.inc(compared)
        yield from found


def _crop_members(record):
    yield record.path, record.phash, "", FULL
    if record.center_phash:
        yield record.path, record.center_phash, "", CENTER


def _detail(neighbour, max_hamming: int, crop_max_hamming: int | None) -> str:
    if len(neighbour) == 3:
        _rank, distance, who = neighbour
        return (f"perceptual hash {distance} bit(s) from {who} "
                f"(<= dedup.max_hamming={max_hamming}; the earlier or lower path is kept)")
    _rank, distance, who, which = neighbour
    matched = (f"center-crop hash {distance} bit(s) from the perceptual hash of {who}"
               if which == CENTER else
               f"perceptual hash {distance} bit(s) from the center-crop hash of {who}")
    return (f"{matched} (<= dedup.crop_max_hamming={crop_max_hamming}; the earlier or lower "
            f"path is kept)")


def _mark(item, max_hamming: int, crop_max_hamming: int | None = None):
    _rel, grouped = item
    neighbours = sorted(grouped["neighbours"])
    for record in grouped["records"]:
        if neighbours:
            yield record.rejected("near_duplicate",
                                  _detail(neighbours[0], max_hamming, crop_max_hamming))
        else:
            yield record


class DropNearDuplicates(beam.PTransform):
    """ImageRecords -> ImageRecords (near duplicates rejected). `archive`: PCollection of
    (rel, phash, run_id) accepted earlier (None: no archive, so tonight's hashes are searched
    without a Flatten, which Beam's local runner pays with a copy of each).
    `hot_bucket_values`: distinct hashes above which a band bucket is searched in parts (None:
    never split; the answers are the same either way).
    `crop_max_hamming`: also the crop-tolerant search (records carry `center_phash`) within
    this distance; None: off. `archive_centers`: PCollection of (rel, center_phash, run_id) of
    archived images indexed with a centre hash, for the crop search (None: none). `lanes`:
    the band search's and the join's shuffles in lanes (`gather.GroupByKeyInLanes`; None: key
    by key, each record's finds combined to its closest before the join). `routed`: as
    `DropExactDuplicates`'."""

    def __init__(self, max_hamming: int, archive,
                 hot_bucket_values: int | None = HOT_BUCKET_VALUES,
                 crop_max_hamming: int | None = None, archive_centers=None,
                 lanes: int | None = None, routed: bool = False):
        super().__init__()
        if hot_bucket_values is not None and (isinstance(hot_bucket_values, bool)
                                              or not isinstance(hot_bucket_values, int)
                                              or hot_bucket_values < 1):
            raise ValueError(f"hot_bucket_values must be a positive integer or None. "
                             f"Received: hot_bucket_values={hot_bucket_values!r}")
        self._max_hamming = max_hamming
        self._archive = archive
        self._hot_bucket_values = hot_bucket_values
        self._crop_max_hamming = crop_max_hamming
        self._archive_centers = archive_centers
        self._lanes = lanes
        self._routed = routed

    def expand(self, records):
        max_hamming = self._max_hamming
        search = (max_hamming, self._hot_bucket_values, _SearchBucketFn, _SearchPartsFn,
                  self._lanes)
        if self._archive is None:  # tonight's records go into the band search as they are
            found = list(records
                         | "SearchBands" >> _BandSearch(*search, member_of=_tonight_member))
        else:
            tonight = records | "TonightHashes" >> Map(_tonight_member)
            found = list(merged([tonight, self._archive], "AllHashes")
                         | "SearchBands" >> _BandSearch(*search))
        if self._crop_max_hamming is not None:
            found.extend(self._crop_search(records))
        if self._lanes is None:  # each record's closest neighbour before the join's shuffle
            neighbours = (tuple(found)
                          | "AllFound" >> beam.Flatten()
                          | "ClosestNeighbour" >> beam.CombinePerKey(min))
        else:
            # Beam's local runner: the finds join the records in lanes as they are (the
            # marking takes the closest), where a Flatten and a combine were two more stages;
            # a combine there would see each find one by one in the one process anyway.
            neighbours = tuple(found)
        mark_args = (max_hamming,) if self._crop_max_hamming is None else (
            max_hamming, self._crop_max_hamming)
        joined = ({"records": records, "neighbours": neighbours}
                  | "JoinNeighbours" >> JoinByKey({"records": lambda r: (r.path, r)},
                                                  packed=("records",), lanes=self._lanes))
        if not self._routed:
            return joined | "MarkNearDuplicates" >> FlatMap(_mark, *mark_args)
        marked = joined | "MarkNearDuplicates" >> FlatMap(
            _routed_from, _mark, *mark_args).with_outputs(REJECTED, main="kept")
        return marked.kept, marked[REJECTED]

    def _crop_search(self, records) -> tuple:
        """(rel, best crop neighbour) from the centre hashes against the full hashes: the
        PCollections `_BandSearch` gives."""
        crop_max = self._crop_max_hamming
        members = [records | "CropHashes" >> FlatMap(_crop_members)]
        if self._archive is not None:
            members.append(self._archive | "ArchiveFullHashes" >> Map(lambda m: (*m, FULL)))
        if self._archive_centers is not None:
            members.append(self._archive_centers
                           | "ArchiveCenterHashes" >> Map(lambda m: (*m, CENTER)))
        return (merged(members, "AllCropHashes")
                | "SearchCropBands" >> _BandSearch(crop_max, self._hot_bucket_values,
                                                   _SearchCropBucketFn, _SearchCropPartsFn,
                                                   self._lanes))


class _BandSearch(beam.PTransform):
    """Hash members -> band buckets (`_band_keys`) -> (rel, best neighbour) within
    `max_hamming` bits, as two PCollections (the whole buckets', the hot ones'; flattened once
    with the other searches' by the caller: a Flatten of a Flatten is one more stage of Beam's
    local runner): each bucket searched whole by a `bucket_fn` (a `_BucketFn` class), or,
    when it is hot, by a `parts_fn` (its parts DoFn class) in the sub-buckets the bucket step
    sends out tagged `hot`. The plain and the crop search differ only in those two steps.
    `lanes`: the buckets' shuffle in lanes (`gather.GroupByKeyInLanes`; five pairs an image,
    laned as each member's bands are made). A bucket of one member has nothing to compare and
    is left out there (about four of an image's five). `member_of`: the input's elements are
    not members; each one's member is `member_of(element)`, made where its bands are."""

    def __init__(self, max_hamming: int, hot_bucket_values: int | None,
                 bucket_fn: type, parts_fn: type, lanes: int | None = None, member_of=None):
        super().__init__()
        self._lanes = lanes
        self._member_of = member_of
        self._max_hamming = max_hamming
        self._bucket_fn = bucket_fn(max_hamming, hot_bucket_values)
        self._parts_fn = parts_fn(max_hamming)

    def expand(self, members):
        searched = (members
                    | "GroupByBand" >> GroupByKeyInLanes(
                        self._lanes, functools.partial(_band_keys, max_hamming=self._max_hamming,
                                                       member_of=self._member_of),
                        min_values=2)
                    | "SearchBuckets" >> beam.ParDo(self._bucket_fn).with_outputs(
                        _HOT, main="found"))
        in_parts = (searched[_HOT]
                    | "GroupHotParts" >> beam.GroupByKey()
                    | "SearchHotParts" >> beam.ParDo(self._parts_fn))
        return searched.found, in_parts
