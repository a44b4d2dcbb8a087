"""Near-duplicate search: the banded, vectorized search gives exactly the decisions of the
brute-force all-pairs rule ("within max_hamming of any archived image or of a lower-path image
of tonight; the smallest (rank, distance, who) is named"), on random and skewed hash sets."""
from __future__ import annotations

import collections
import functools
import random
import zlib

import numpy as np
import pytest

from tests.beamutil import assert_that, beam_pipeline
from transforms.offline import image_hash, near_search


def brute_force(tonight, archive, max_hamming):
    """The rule, pair by pair: {path: (rank, distance, who)} of the best neighbour."""
    ordered, archived = sorted(set(tonight)), sorted(set(archive))
    best = {}
    for i, (rel, phash) in enumerate(ordered):
        found = [(0, d, f"{old!r} in snapshot {run_id}") for run_id, old, other in archived
                 if (d := image_hash.hamming(phash, other)) <= max_hamming]
        found += [(1, d, f"{low!r}") for low, other in ordered[:i]
                  if (d := image_hash.hamming(phash, other)) <= max_hamming]
        if found:  # a path listed twice (two hashes): its best over both, as the job joins
            best[rel] = min(found + ([best[rel]] if rel in best else []))
    return best


def banded(tonight, archive, max_hamming, parts=1, by_value=False):
    """What DropNearDuplicates computes, without Beam: every member under its band keys, each
    bucket searched (in `parts` parts, every pair of parts on its own when parts > 1), the
    answers combined with min per path."""
    buckets = collections.defaultdict(lambda: ([], []))
    for rel, phash in tonight:
        for key in image_hash.hash_bands(phash, max_hamming):
            buckets[key][0].append((rel, phash))
    for run_id, rel, phash in archive:
        for key in image_hash.hash_bands(phash, max_hamming):
            buckets[key][1].append((run_id, rel, phash))
    best, compared = {}, 0
    for (band, _value), (mine, old) in buckets.items():
        for queries, refs, archived in _part_pairs(mine, old, parts, by_value):
            found, n = near_search.search_bucket(queries, refs, archived, max_hamming, band)
            compared += n
            for rel, neighbour in found:
                best[rel] = min(best.get(rel, neighbour), neighbour)
    return best, compared


def _part_pairs(tonight, archive, parts, by_value):
    if parts == 1:
        yield tonight, tonight, archive
        return

    def part(text):
        return zlib.crc32(text.encode()) % parts

    split_t = [[m for m in tonight if part(m[1] if by_value else m[0]) == p] for p in range(parts)]
    split_a = [[m for m in archive if part(m[2] if by_value else m[1]) == p] for p in range(parts)]
    for p in range(parts):
        yield split_t[p], split_t[p], split_a[p]
        for q in range(p + 1, parts):
            yield split_t[p], split_t[q], split_a[q]
            yield split_t[q], split_t[p], split_a[p]


def _flip(rng, value: int, bits: int) -> int:
    for bit in rng.sample(range(64), bits):
        value ^= 1 << bit
    return value


def corpus(seed: int, n: int, hot_share: float, archive_share: float = 0.2):
    """Tonight's (path, phash) and archived (run_id, path, phash): random hashes, clusters of
    near duplicates, one hot cluster of near-identical hashes, equal hashes, paths whose
    repr() sorts differently from the path itself (quotes, backslashes), archived paths equal
    to tonight's."""
    rng = random.Random(seed)
    centers = [rng.getrandbits(64) for _ in range(max(1, n // 15))]
    tonight, archive = [], []
    for _ in range(n):
        draw = rng.random()
        if draw < hot_share:
            value = _flip(rng, centers[0], rng.choice([0, 0, 0, 1, 1, 2, 3]))
        elif draw < 0.6:
            value = _flip(rng, rng.choice(centers), rng.randint(0, 6))
        else:
            value = rng.getrandbits(64)
        rel = rng.choice(["", "it's ", "a\\b/", 'say "hi"/']) + f"d{rng.randint(0, 9)}/" \
            f"{rng.randint(0, 10 ** 6):07d}.jpg"
        if rng.random() < archive_share:
            old = rel if rng.random() < 0.3 else "old/" + rel
            archive.append((f"run{rng.randint(1, 3)}", old, f"{value:016x}"))
        else:
            tonight.append((rel, f"{value:016x}"))
    return tonight, archive


@functools.lru_cache(maxsize=None)
def corpus_and_rule(seed: int, n: int, hot_share: float, max_hamming: int):
    """(tonight, archive, brute_force(...)) of `corpus(seed, n, hot_share)`: the reference
    answer is the same for every path and split a test tries, so it is computed once. Callers
    only read what it returns."""
    tonight, archive = corpus(seed, n, hot_share)
    return tonight, archive, brute_force(tonight, archive, max_hamming)


@pytest.fixture(params=["small_loop", "numpy"])
def path(request, monkeypatch):
    """Runs a test on the pure-Python path for small buckets and on the numpy path for all."""
    if request.param == "numpy":
        monkeypatch.setattr(near_search, "SMALL_BUCKET_PAIRS", 0)
    return request.param


@pytest.mark.parametrize("seed,n,hot,max_hamming", [
    (0, 400, 0.0, 4), (1, 400, 0.5, 4), (2, 1500, 0.3, 4), (3, 300, 0.2, 0),
    (4, 300, 0.2, 1), (5, 200, 0.4, 9), (6, 800, 0.9, 2)])
def test_banded_search_equals_brute_force(path, seed, n, hot, max_hamming):
    tonight, archive, expected = corpus_and_rule(seed, n, hot, max_hamming)
    found, _ = banded(tonight, archive, max_hamming)
    assert found == expected
    assert expected  # the corpus has near duplicates to find


@pytest.mark.parametrize("parts,by_value", [(2, True), (3, True), (2, False)])
def test_searching_a_bucket_in_parts_gives_the_same_answers(path, parts, by_value):
    """Any split into parts searched pairwise gives the same answers (the job splits a hot
    bucket by hash value)."""
    tonight, archive, expected = corpus_and_rule(11, 1200, 0.6, 4)
    whole, _ = banded(tonight, archive, 4)
    assert banded(tonight, archive, 4, parts, by_value)[0] == whole == expected


def test_no_archive_and_no_tonight_neighbour():
    tonight = [("a.jpg", "0000000000000000"), ("b.jpg", "00000000ffffffff")]
    assert banded(tonight, [], 4)[0] == {}
    assert near_search.search_bucket([], [], [("r", "x.jpg", "0" * 16)], 4, 0) == ([], 0)


def test_equal_hashes_name_the_lowest_earlier_path_and_the_archive_wins():
    same = "00000000000000ff"
    tonight = [("c.jpg", same), ("a.jpg", same), ("b.jpg", same)]
    assert banded(tonight, [], 4)[0] == {"b.jpg": (1, 0, "'a.jpg'"), "c.jpg": (1, 0, "'a.jpg'")}
    archive = [("run1", "z.jpg", "00000000000000f0")]
    assert banded(tonight, archive, 4)[0] == {
        rel: (0, 4, "'z.jpg' in snapshot run1") for rel in ("a.jpg", "b.jpg", "c.jpg")}


def test_close_pairs_sub_band_index_equals_all_pairs(monkeypatch):
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2 ** 63, size=400, dtype=np.uint64)
    near = base ^ (np.uint64(1) << rng.integers(0, 51, size=400).astype(np.uint64))
    a = np.unique(np.concatenate([base, near]))
    band_bits = np.uint64(near_search.band_masks(4)[0])
    a = np.unique((a & ~band_bits) | (a[0] & band_bits))  # one bucket: band 0 equal everywhere
    monkeypatch.setattr(near_search, "BRUTE_FORCE_PAIRS", 0)
    i, j, dist, compared = near_search.close_pairs(a, a, 4, 0, False)
    monkeypatch.setattr(near_search, "BRUTE_FORCE_PAIRS", 1 << 40)
    all_i, all_j, all_dist, all_compared = near_search.close_pairs(a, a, 4, 0, False)
    assert sorted(zip(i, j, dist)) == sorted(zip(all_i, all_j, all_dist))
    assert len(all_i) >= 400 and compared < all_compared / 20


def test_a_hot_cluster_costs_its_distinct_values_not_its_size():
    rng = random.Random(5)
    center = rng.getrandbits(64)
    hot = [(f"hot/{i:06d}.jpg", f"{_flip(rng, center, rng.choice([0, 0, 1, 2])):016x}")
           for i in range(20_000)]
    found, compared = near_search.search_bucket(hot, hot, [], 4, 0)
    assert len(found) == len(hot) - 1
    distinct = len({phash for _, phash in hot})
    assert compared < 3 * distinct ** 2 + 3 * len(hot) < len(hot) ** 2 / 10


def test_band_masks_are_the_bands_hash_bands_cuts():
    for max_hamming in (0, 4, 9):
        value = 0x0123456789ABCDEF
        masks = near_search.band_masks(max_hamming)
        bands = image_hash.hash_bands(f"{value:016x}", max_hamming)
        assert sum(masks) == 2 ** 64 - 1
        for mask, (_index, band_value) in zip(masks, bands):
            shift = (mask & -mask).bit_length() - 1
            assert (value & mask) >> shift == band_value


def _detail(neighbour, max_hamming: int) -> str:
    _rank, distance, who = neighbour
    return (f"perceptual hash {distance} bit(s) from {who} (<= dedup.max_hamming={max_hamming}; "
            f"the earlier or lower path is kept)")


def test_drop_near_duplicates_equals_brute_force_with_and_without_hot_bucket_split():
    import apache_beam as beam
    from apache_beam.testing.util import equal_to

    from transforms.offline.dedup import DropNearDuplicates
    from transforms.offline.image_record import ImageRecord

    tonight, archive = corpus(21, 400, 0.5)
    tonight = sorted({rel: (rel, phash) for rel, phash in tonight}.values())  # one per path
    records = [ImageRecord(uri=f"/data/{rel}", path=rel, file_bytes=10, sha256=f"{i:064x}",
                           phash=phash) for i, (rel, phash) in enumerate(tonight)]
    best = brute_force(tonight, archive, 4)
    expected = [r.rejected("near_duplicate", _detail(best[r.path], 4)) if r.path in best else r
                for r in records]
    assert 0 < len(best) < len(records)
    pipeline = beam_pipeline()
    kept = pipeline | "Tonight" >> beam.Create(records)
    archived = pipeline | "Archive" >> beam.Create([(rel, ph, run) for run, rel, ph in archive])
    whole = kept | "Whole" >> DropNearDuplicates(4, archived, hot_bucket_values=None)
    split = kept | "InParts" >> DropNearDuplicates(4, archived, hot_bucket_values=6)
    assert_that(whole, equal_to(expected), label="WholeBuckets")
    assert_that(split, equal_to(expected), label="SplitBuckets")
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    assert counters["near_dup_hot_buckets"] >= 5  # the hot cluster's buckets, one per band


def test_hot_bucket_values_must_be_positive():
    from transforms.offline.dedup import DropNearDuplicates
    with pytest.raises(ValueError, match=r"hot_bucket_values must be a positive integer or "
                                         r"None\. Received: hot_bucket_values=0"):
        DropNearDuplicates(4, None, hot_bucket_values=0)


def test_a_bucket_of_one_member_is_skipped_and_of_two_is_searched():
    from transforms.offline import dedup
    plain, crop = dedup._SearchBucketFn(4, None), dedup._SearchCropBucketFn(4, None)
    phash, near = "0123456789abcdef", "0123456789abcdee"  # one bit apart
    for member in (("a.jpg", phash, ""), ("a.jpg", phash, "20261201T000000Z")):
        assert list(plain.process(((0, 1), [member]))) == []
    for kind in (dedup.CENTER, dedup.FULL):
        assert list(crop.process(((0, 1), [("a.jpg", phash, "", kind)]))) == []
    pair = [("a.jpg", phash, ""), ("b.jpg", near, "")]
    assert list(plain.process(((0, 1), pair))) == [("b.jpg", (1, 1, "'a.jpg'"))]
