"""Crop-tolerant near-duplicate search inside one hash-band bucket (`dedup.crop_tolerant`).

A moderate centre crop B of a photo A does not hash close to A (6-20 bits of 64), but A's
centre-region hash (`quality.center_hash`) lands within a few bits of B's full hash. So with
the option on every image has two hashes, and a pair of images is a near duplicate when one's
centre hash is within `dedup.crop_max_hamming` bits of the other's full hash, either way round.

`dedup.DropNearDuplicates` puts both hashes of tonight's images, and the archive's full and
centre hashes, under the same band keys as the plain search (`image_hash.hash_bands`), so every
close (centre, full) pair meets in a bucket, and is searched only in the first band it shares
(`near_search.close_pairs`, vectorized over the distinct values). The path rule is the plain
search's: an archived image, else the lower path, is kept; the other one gets the neighbour
`(rank, distance, who, which)` (rank 0 archived, 1 tonight; `which`: `center` when the rejected
image's centre hash matched the kept one's full hash, `full` when its full hash matched the kept
one's centre hash), combined with the plain search's `(rank, distance, who)` by `min`.
Archived centre hashes come from the index's `center_phash` column (written when the option
is on); an archived image indexed without one (option off, or an older index) is matched by
its full hash only, so tonight's crop of it is not caught.
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


def search_crop_bucket(centers, fulls, archive, max_hamming: int, band: int,
                       archive_centers=()):
    """The best crop neighbour of tonight's images in one bucket of band `band`.

    `centers`: tonight's (path, centre hash); `fulls`: tonight's (path, full hash); `archive`:
    (run_id, path, full hash) and `archive_centers`: (run_id, path, centre hash) accepted
    earlier. Pairs sharing a band before `band` are left to that band's bucket. Returns
    ([(path, (rank, distance, who, which))], hash comparisons).
    """
    if not (centers and (fulls or archive)) and not (fulls and archive_centers):
        return [], 0
    center_values, center_of = np.unique(
        _values([h for _, h in centers] + [h for _, _, h in archive_centers]),
        return_inverse=True)
    full_values, full_of = np.unique(
        _values([h for _, h in fulls] + [h for _, _, h in archive]), return_inverse=True)
    i, j, dist, compared = close_pairs(center_values, full_values, max_hamming, band, True)
    if not len(i):
        return [], compared
    center_paths = _groups([path for path, _ in centers], center_of[:len(centers)], i)
    full_paths = _groups([path for path, _ in fulls], full_of[:len(fulls)], j)
    archived_fulls = _archived(archive, full_of[len(fulls):], j)
    archived_centers = _archived(archive_centers, center_of[len(centers):], i)
    best = {}
    for c, f, d in zip(i.tolist(), j.tolist(), dist.tolist()):
        cropped, whole = center_paths.get(c, []), full_paths.get(f, [])
        if f in archived_fulls:     # tonight's centre matched an archived full hash
            for path in cropped:
                _offer(best, path, (0, d, archived_fulls[f], CENTER))
        if c in archived_centers:   # tonight's full hash matched an archived centre
            for path in whole:
                _offer(best, path, (0, d, archived_centers[c], FULL))
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


def _archived(members, value_of, wanted) -> dict:
    """Value index -> the name of the archived image holding it (the smallest name when
    several do)."""
    return {value: names[0] for value, names in _groups(
        [f"{rel!r} in snapshot {run_id}" for run_id, rel, _ in members], value_of,
        wanted).items()}
