"""Crop-tolerant near-duplicate search inside one hash-band bucket (`dedup.crop_tolerant`).

A moderate centre crop B of a photo A does not hash close to A (6-20 bits of 64), but A's
centre-region hash (`quality.center_hash`) lands within a few bits of B's full hash. So with
the option on every image has two hashes, and a pair of images is a near duplicate when one's
centre hash is within `dedup.crop_max_hamming` bits of the other's full hash, either way round.

`dedup.DropNearDuplicates` puts both hashes of tonight's images, and the archive's full hashes,
under the same band keys as the plain search (`quality.hash_bands`), so every close (centre,
full) pair meets in a bucket, and is searched only in the first band it shares
(`near_search.close_pairs`, vectorized over the distinct values). The path rule is the plain
search's: an archived image, else the lower path, is kept; the other one gets the neighbour
`(rank, distance, who, which)` (rank 0 archived, 1 tonight; `which`: `center` when the rejected
image's centre hash matched the kept one's full hash, `full` when its full hash matched the kept
one's centre hash), combined with the plain search's `(rank, distance, who)` by `min`.
Archived images have no centre hash (the index does not store one), so an image of tonight
that contains an archived one as its centre is not caught; the other way round is.
"""
from __future__ import annotations

import bisect
import itertools

import numpy as np

from transforms.offline.near_search import close_pairs

__all__ = ["search_crop_bucket", "CENTER", "FULL"]

CENTER = "center"   # the rejected image's centre hash matched the kept image's full hash
FULL = "full"       # the rejected image's full hash matched the kept image's centre hash


def _values(hashes) -> np.ndarray:
    return np.array([int(phash, 16) for phash in hashes], dtype=np.uint64)


def _groups(keys, inverse, wanted) -> dict:
    """Value index -> the sorted keys holding that value (only for the `wanted` values)."""
    wanted, groups = set(wanted.tolist()), {}
    for key, value in zip(keys, inverse.tolist()):
        if value in wanted:
            groups.setdefault(value, []).append(key)
    return {value: sorted(members) for value, members in groups.items()}


def _lowest_names(paths: list) -> list:
    """For sorted `paths`, the smallest repr among paths[:k + 1], for each k (the name the
    detail gives; the plain search names the same way)."""
    return list(itertools.accumulate((repr(path) for path in paths), min))


def _offer(best: dict, path: str, neighbour: tuple) -> None:
    if path not in best or neighbour < best[path]:
        best[path] = neighbour


def search_crop_bucket(centers, fulls, archive, max_hamming: int, band: int):
    """The best crop neighbour of tonight's images in one bucket of band `band`.

    `centers`: tonight's (path, centre hash); `fulls`: tonight's (path, full hash); `archive`:
    (run_id, path, full hash) accepted earlier. Pairs sharing a band before `band` are left to
    that band's bucket. Returns ([(path, (rank, distance, who, which))], hash comparisons).
    """
    if not centers or not (fulls or archive):
        return [], 0
    center_values, center_of = np.unique(_values(h for _, h in centers), return_inverse=True)
    full_values, full_of = np.unique(
        _values([h for _, h in fulls] + [h for _, _, h in archive]), return_inverse=True)
    i, j, dist, compared = close_pairs(center_values, full_values, max_hamming, band, True)
    if not len(i):
        return [], compared
    center_paths = _groups([path for path, _ in centers], center_of, i)
    full_paths = _groups([path for path, _ in fulls], full_of[:len(fulls)], j)
    archived = {value: names[0] for value, names in _groups(
        [f"{rel!r} in snapshot {run_id}" for run_id, rel, _ in archive],
        full_of[len(fulls):], j).items()}
    best = {}
    for c, f, d in zip(i.tolist(), j.tolist(), dist.tolist()):
        cropped, whole = center_paths.get(c, []), full_paths.get(f, [])
        for path in cropped:
            if f in archived:
                _offer(best, path, (0, d, archived[f], CENTER))
        lowest_whole, lowest_cropped = _lowest_names(whole), _lowest_names(cropped)
        for path in cropped:    # its centre matched the full hash of a lower path
            below = bisect.bisect_left(whole, path)
            if below:
                _offer(best, path, (1, d, lowest_whole[below - 1], CENTER))
        for path in whole:      # its full hash matched the centre of a lower path
            below = bisect.bisect_left(cropped, path)
            if below:
                _offer(best, path, (1, d, lowest_cropped[below - 1], FULL))
    return sorted(best.items()), compared
