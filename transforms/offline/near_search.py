"""Exact near-duplicate search inside one hash-band bucket: which earlier image is closest.

`dedup.DropNearDuplicates` groups every perceptual hash under its `max_hamming + 1` band keys
(`image_hash.hash_bands`); two hashes within `max_hamming` bits share at least one band, so
every close pair meets in at least one bucket. `search_bucket` answers, for each of tonight's
images (the queries) in one bucket, the best neighbour the rule allows, as `(rank, distance,
who)`: rank 0 for an archived image (any path), rank 1 for a tonight image with a lower
`(path, phash)`; the smallest tuple wins, as in the ledger detail. The answers of all buckets
are combined with `min` per path, so the result is the same as comparing every pair.

The work stays near-linear (multi-index hashing, Norouzi et al., CVPR 2012): a pair is searched
only in its first shared band's bucket, equal hashes once, candidates from a second pigeonhole
on sub-bands, buckets without a close pair in one pass, small buckets in plain Python. Each
rule and why: docs/architecture.md ("Near-duplicate search").
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from transforms.offline import image_hash

__all__ = ["search_bucket", "close_pairs", "band_masks", "SMALL_BUCKET_PAIRS",
           "BRUTE_FORCE_PAIRS"]

_HASH_BITS = 64
# Measured on this machine (CPU time, random hashes): the plain loop costs ~0.3 us a pair and
# numpy ~2-4 us a call, so buckets of up to this many (query, reference) pairs take the loop.
SMALL_BUCKET_PAIRS = 256
# Distinct values are XORed all-pairs up to this many pairs, else through the sub-band index.
# All-pairs is ~2x faster per bucket up to a few hundred members (~130 vs ~400 us at 122, the
# mean bucket at 1M images), but its comparisons per image grow with N (N / 8192 per band);
# the index keeps them near 25 (each value meets itself in 5 sub-bands x 5 bands) plus
# 25 * N / 2^33 random ones, and is faster from ~1,000 members on (3 vs 4.5 ms at 1,220).
BRUTE_FORCE_PAIRS = 1 << 10
_MIN_SUB_BAND_BITS = 6      # narrower sub-bands select too little to pay for their sort
_BLOCK = 1 << 20            # pairs per numpy block: 8 MB per uint64 array
_INF = np.iinfo(np.int64).max
_RANK_SHIFT, _DIST_SHIFT = 40, 32   # key = rank << 40 | distance << 32 | rank of `who`


@functools.lru_cache(maxsize=None)
def band_masks(max_hamming: int) -> tuple[int, ...]:
    """Bit masks of the bands `image_hash.hash_bands` cuts, band 0 first (its layout, read back
    from the all-ones hash so the band rule has one owner)."""
    masks, shift = [], _HASH_BITS
    for _index, ones in image_hash.hash_bands("f" * 16, max_hamming):
        width = ones.bit_length()
        shift -= width
        masks.append(((1 << width) - 1) << shift)
    return tuple(masks)


@functools.lru_cache(maxsize=None)
def _earlier_masks(max_hamming: int, band: int) -> tuple[np.uint64, ...]:
    return tuple(np.uint64(mask) for mask in band_masks(max_hamming)[:band])


@dataclasses.dataclass(frozen=True)
class _SubBands:
    """The bits outside one band, packed low (`pack`), cut into `max_hamming + 1` contiguous
    sub-bands; a sub-band's key carries its index above bit 32, so one sort serves all."""
    low_bits: int                 # the band starts here ...
    high_shift: int               # ... and the bits above it start here (64: none above)
    offsets: tuple[int, ...]
    widths: tuple[int, ...]

    def pack(self, values: np.ndarray) -> np.ndarray:
        low = values & np.uint64((1 << self.low_bits) - 1)
        if self.high_shift >= _HASH_BITS:
            return low
        return low | ((values >> np.uint64(self.high_shift)) << np.uint64(self.low_bits))

    def keys(self, packed: np.ndarray) -> np.ndarray:
        """(sub-band, key) as one int64 per value and sub-band, sub-band major."""
        return np.concatenate([
            (np.int64(s) << 32) | ((packed >> np.uint64(offset))
                                  & np.uint64((1 << width) - 1)).astype(np.int64)
            for s, (offset, width) in enumerate(zip(self.offsets, self.widths))])

    def first_shared(self, xor_packed: np.ndarray) -> np.ndarray:
        """Index of the first sub-band on which a pair agrees (len(widths) when none)."""
        first = np.full(len(xor_packed), len(self.widths), dtype=np.int64)
        for s in reversed(range(len(self.widths))):
            mask = np.uint64(((1 << self.widths[s]) - 1) << self.offsets[s])
            first[(xor_packed & mask) == 0] = s
        return first


@functools.lru_cache(maxsize=None)
def _sub_bands(max_hamming: int, band: int) -> _SubBands | None:
    """The sub-bands of the bits outside `band` (None when they would be too narrow)."""
    mask = band_masks(max_hamming)[band]
    low_bits = (mask & -mask).bit_length() - 1
    free, parts = _HASH_BITS - mask.bit_count(), max_hamming + 1
    if free < parts * _MIN_SUB_BAND_BITS:
        return None
    widths = [len(chunk) for chunk in np.array_split(np.arange(free), parts)]
    offsets = [sum(widths[:s]) for s in range(parts)]
    return _SubBands(low_bits, low_bits + mask.bit_count(), tuple(offsets), tuple(widths))


def _chunks(weights: np.ndarray, limit: int):
    """Consecutive row ranges whose summed weight stays near `limit` (at least one row)."""
    ends = np.cumsum(weights)
    start = 0
    while start < len(weights):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + limit, side="right")))
        yield start, stop
        start = stop


def _filter(xor, i, j, max_hamming, earlier, include_zero):
    """The candidate pairs (XOR of their hashes: `xor`) within `max_hamming` that share no
    earlier band."""
    dist = np.bitwise_count(xor)
    keep = np.flatnonzero((dist <= max_hamming) & (dist > 0) if not include_zero
                          else dist <= max_hamming)
    xor, i, j, dist = xor[keep], i[keep], j[keep], dist[keep].astype(np.int64)
    if earlier:
        first = np.ones(len(keep), dtype=bool)
        for mask in earlier:
            first &= (xor & mask) != 0
        i, j, dist = i[first], j[first], dist[first]
    return i, j, dist


def _all_pairs_close(a, b, rows, max_hamming, earlier, include_zero):
    """`_filter` over every pair of the rows `rows` of `a` with `b` (one broadcast XOR)."""
    xor = a[rows[0]:rows[1], None] ^ b[None, :]
    dist = np.bitwise_count(xor)
    close = (dist <= max_hamming) & (dist > 0) if not include_zero else dist <= max_hamming
    if not close.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    i, j = np.divmod(np.flatnonzero(close), len(b))
    return _filter(xor[i, j], i + rows[0], j, max_hamming, earlier, include_zero)


def _shared_sub_band_pairs(sub, a_packed, b_packed, plan, rows):
    """(i, j) for the (row of `a`, sub-band) entries `rows` that share a sub-band key with a
    row of `b`, each pair once: in the first sub-band it shares."""
    order, lo, counts = plan
    n = counts[rows[0]:rows[1]]
    entry = np.repeat(np.arange(*rows), n)
    offsets = np.arange(len(entry)) - np.repeat(np.cumsum(n) - n, n)
    j = order[np.repeat(lo[rows[0]:rows[1]], n) + offsets] % len(b_packed)
    i, band_of_entry = entry % len(a_packed), entry // len(a_packed)
    first = sub.first_shared(a_packed[i] ^ b_packed[j]) == band_of_entry
    return i[first], j[first]


def close_pairs(a, b, max_hamming: int, band: int, include_zero: bool):
    """Index pairs (i, j, distance) of hash values `a` x `b` (uint64 arrays of one bucket of
    band `band`) within `max_hamming` bits, sharing no band before `band`; and how many pairs
    were XORed."""
    empty = np.zeros(0, dtype=np.int64)
    if not len(a) or not len(b):
        return empty, empty, empty, 0
    sub = _sub_bands(max_hamming, band)
    plan, compared = None, len(a) * len(b)
    if sub is not None and compared > BRUTE_FORCE_PAIRS:
        a_packed, b_packed = sub.pack(a), sub.pack(b)
        b_keys, a_keys = sub.keys(b_packed), sub.keys(a_packed)
        order = np.argsort(b_keys, kind="stable")
        lo = np.searchsorted(b_keys[order], a_keys, side="left")
        counts = np.searchsorted(b_keys[order], a_keys, side="right") - lo
        if int(counts.sum()) < compared:
            plan, compared, weights = (order, lo, counts), int(counts.sum()), counts
    if plan is None:
        weights = np.full(len(a), len(b), dtype=np.int64)
    found = ([], [], [])
    earlier = _earlier_masks(max_hamming, band)
    for rows in _chunks(weights, _BLOCK):
        if plan is not None:
            i, j = _shared_sub_band_pairs(sub, a_packed, b_packed, plan, rows)
            close = _filter(a[i] ^ b[j], i, j, max_hamming, earlier, include_zero)
        else:
            close = _all_pairs_close(a, b, rows, max_hamming, earlier, include_zero)
        for part, values in zip(found, close):
            part.append(values)
    return (*(np.concatenate(part) for part in found), compared)


def _shares_earlier(xor: int, earlier) -> bool:
    return any(not xor & mask for mask in earlier)


def _search_small(queries, tonight, archive, max_hamming, earlier):
    """The plain loop for small buckets: same answers as `_search_arrays`."""
    archived = [(f"{rel!r} in snapshot {run_id}", int(phash, 16))
                for run_id, rel, phash in archive]
    references = [(key, repr(key[0]), int(key[1], 16)) for key in tonight]
    found, compared = [], 0
    for key in queries:
        value, best = int(key[1], 16), None
        for who, other in archived:
            compared += 1
            xor = value ^ other
            if xor.bit_count() <= max_hamming and not _shares_earlier(xor, earlier):
                best = min(best or (1,), (0, xor.bit_count(), who))
        if best is None:
            for other_key, who, other in references:
                if other_key >= key:
                    continue
                compared += 1
                xor = value ^ other
                if xor.bit_count() <= max_hamming and not _shares_earlier(xor, earlier):
                    best = min(best or (2,), (1, xor.bit_count(), who))
        if best is not None:
            found.append((key[0], best))
    return found, compared


def _ranks(names: list[str]) -> tuple[list[str], np.ndarray]:
    """Sorted distinct names and each name's rank among them."""
    ordered = sorted(set(names))
    index = {name: i for i, name in enumerate(ordered)}
    return ordered, np.array([index[name] for name in names], dtype=np.int64)


def _hash_array(phashes) -> np.ndarray:
    """16-hex-digit hashes as uint64 (one `bytes.fromhex` for all; `int` when a hash is
    spelled in a way only `int` reads, e.g. with "_" separators)."""
    phashes = list(phashes)
    try:
        return np.frombuffer(bytes.fromhex("".join(phashes)), dtype=">u8").astype(np.uint64)
    except ValueError:
        return np.array([int(phash, 16) for phash in phashes], dtype=np.uint64)


def _best_archived(query_hashes, archive, max_hamming, band):
    """Per query, the best archived key (rank 0) or _INF; names of the archive; comparisons."""
    names, who = _ranks([f"{rel!r} in snapshot {run_id}" for run_id, rel, _ in archive])
    values, inverse = np.unique(_hash_array(p for _, _, p in archive), return_inverse=True)
    lowest = np.full(len(values), _INF, dtype=np.int64)
    np.minimum.at(lowest, inverse, who)
    distinct, query_inverse = np.unique(query_hashes, return_inverse=True)
    i, j, dist, compared = close_pairs(distinct, values, max_hamming, band, True)
    best = np.full(len(distinct), _INF, dtype=np.int64)
    np.minimum.at(best, i, (dist << _DIST_SHIFT) | lowest[j])
    return best[query_inverse], names, compared


class _Tonight:
    """Tonight's references of a bucket, by hash value then (path, phash) order, with the
    running minimum of their `who` rank: `lowest_before(group, pos)` is the best reference of
    that hash value below `pos`."""

    def __init__(self, tonight, pos, span):
        self.names, who = _ranks([repr(rel) for rel, _ in tonight])
        hashes = _hash_array(p for _, p in tonight)
        order = np.lexsort((pos, hashes))
        self.values, self.starts = np.unique(hashes[order], return_index=True)
        group = np.repeat(np.arange(len(self.values)),
                          np.diff(np.append(self.starts, len(order))))
        self.span = span
        self.keys = group * span + pos[order]
        shifted = np.minimum.accumulate(who[order] - (group << _DIST_SHIFT))
        self.lowest = shifted + (group << _DIST_SHIFT)

    def lowest_before(self, group, pos):
        """(found, who rank) of the best reference in `group` with a lower position."""
        at = np.searchsorted(self.keys, group * self.span + pos)
        found = at > self.starts[group]
        return found, self.lowest[np.maximum(at - 1, 0)]

    def group_of(self, hashes):
        """Group of each hash, or -1 when no reference has it."""
        at = np.minimum(np.searchsorted(self.values, hashes), len(self.values) - 1)
        return np.where(self.values[at] == hashes, at, -1)


def _expand(per_value, inverse):
    """For queries whose value is `inverse`, every (query, pair) of pairs grouped by value
    (`per_value` pairs each, in order)."""
    first = np.cumsum(per_value) - per_value
    n = per_value[inverse]
    query = np.repeat(np.arange(len(inverse)), n)
    pair = np.repeat(first[inverse], n) + np.arange(len(query)) - np.repeat(np.cumsum(n) - n, n)
    return query, pair


def _best_tonight(best, query_hashes, query_pos, refs, max_hamming, band):
    """Lowers `best` (per query) with tonight's references of lower position; comparisons."""
    group = refs.group_of(query_hashes)
    same, who = refs.lowest_before(np.maximum(group, 0), query_pos)
    same &= group >= 0
    if band == 0:  # distance 0: the pair's first shared band is band 0
        best[same] = np.minimum(best[same], (1 << _RANK_SHIFT) | who[same])
    # An archived neighbour or an equal hash below it already beats anything found here.
    open_ = np.flatnonzero(~same & (best == _INF))
    distinct, inverse = np.unique(query_hashes[open_], return_inverse=True)
    i, j, dist, compared = close_pairs(distinct, refs.values, max_hamming, band, False)
    order = np.argsort(i, kind="stable")
    query, pair = _expand(np.bincount(i, minlength=len(distinct)), inverse)
    found, who = refs.lowest_before(j[order][pair], query_pos[open_][query])
    keys = (1 << _RANK_SHIFT) | (dist[order][pair] << _DIST_SHIFT) | who
    lowest = np.full(len(open_), _INF, dtype=np.int64)
    np.minimum.at(lowest, query[found], keys[found])
    best[open_] = np.minimum(best[open_], lowest)
    return compared + len(query_hashes)


def _search_arrays(queries, tonight, archive, max_hamming, band):
    """The vectorized search (see the module docstring)."""
    if tonight is queries:
        query_pos = np.arange(len(queries), dtype=np.int64)
        tonight_pos, span = query_pos, len(queries)
    else:
        position = {key: i for i, key in enumerate(sorted(set(queries) | set(tonight)))}
        query_pos = np.array([position[key] for key in queries], dtype=np.int64)
        tonight_pos = np.array([position[key] for key in tonight], dtype=np.int64)
        span = len(position)
    query_hashes = _hash_array(p for _, p in queries)
    best = np.full(len(queries), _INF, dtype=np.int64)
    names, compared = {0: [], 1: []}, 0
    if archive:
        best, names[0], compared = _best_archived(query_hashes, archive, max_hamming, band)
    if tonight:
        refs = _Tonight(tonight, tonight_pos, span)
        names[1] = refs.names
        compared += _best_tonight(best, query_hashes, query_pos, refs, max_hamming, band)
    found = []
    for k in np.flatnonzero(best != _INF):
        key = int(best[k])
        rank, dist, who = key >> _RANK_SHIFT, key >> _DIST_SHIFT & 0xFF, key & 0xFFFFFFFF
        found.append((queries[k][0], (rank, dist, names[rank][who])))
    return found, compared


def _involved(query_values, ref_values, same: bool, max_hamming, band):
    """Which queries and references have a close partner at all (most buckets of random
    hashes have none; this costs one XOR of their distinct values); comparisons."""
    distinct = np.unique(query_values)
    refs, counts = np.unique(ref_values, return_counts=True)
    i, j, _dist, compared = close_pairs(distinct, refs, max_hamming, band, False)
    wanted_queries, wanted_refs = distinct[i], refs[j]
    if band == 0:  # equal hashes first share band 0; a query meets itself when `same`
        at = np.minimum(np.searchsorted(refs, distinct), len(refs) - 1)
        equal = (refs[at] == distinct) & (counts[at] > (1 if same else 0))
        wanted_queries = np.concatenate([wanted_queries, distinct[equal]])
        wanted_refs = np.concatenate([wanted_refs, distinct[equal]])
    return (np.isin(query_values, wanted_queries), np.isin(ref_values, wanted_refs),
            compared + len(distinct))


def _pick(items, keep) -> list:
    return [item for item, k in zip(items, keep) if k]


def search_bucket(queries, tonight, archive, max_hamming: int, band: int):
    """The best neighbour of each query in one bucket of band `band`.

    `queries` and `tonight` are (path, phash) of tonight's images (the references of lower
    (path, phash) count; pass the same list for both when they are the same images),
    `archive` is (run_id, path, phash) of archived ones. Pairs that share a band before `band`
    are left to that band's bucket. Returns ([(path, (rank, distance, who))] for the queries
    with a neighbour here, number of hash comparisons).
    """
    same = tonight is queries
    if not queries or not (tonight or archive):
        return [], 0
    earlier = band_masks(max_hamming)[:band]
    compared = 0
    if len(queries) * (len(tonight) + len(archive)) > SMALL_BUCKET_PAIRS:
        keep_q, keep_r, compared = _involved(
            _hash_array(p for _, p in queries),
            _hash_array([p for _, p in tonight] + [p for _, _, p in archive]),
            same, max_hamming, band)
        if not keep_q.any() or not keep_r.any():
            return [], compared
        keep_t, keep_a = keep_r[:len(tonight)], keep_r[len(tonight):]
        same = same and np.array_equal(keep_q, keep_t)
        queries, tonight, archive = (
            _pick(queries, keep_q), _pick(tonight, keep_t), _pick(archive, keep_a))
    queries, archive = sorted(set(queries)), sorted(set(archive))
    tonight = queries if same else sorted(set(tonight))
    if len(queries) * (len(tonight) + len(archive)) <= SMALL_BUCKET_PAIRS:
        found, more = _search_small(queries, tonight, archive, max_hamming, earlier)
    else:
        found, more = _search_arrays(queries, tonight, archive, max_hamming, band)
    return found, compared + more
