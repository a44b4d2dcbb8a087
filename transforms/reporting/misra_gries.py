"""The Misra-Gries top-values sketch of the feature statistics, deterministic.

TFDV ranks string values with tfx_bsl's `MisraGriesSketch`; with more distinct values than
buckets (filenames, hashes: one value per record) its result depended on what else the process
held: the same values, fed the same way, kept different items in 7 of 30 runs when other
sketches were alive, so `FeatureStats.pb` changed between reruns of the same job. This is that
algorithm (tfx_bsl `misragries_sketch.cc`, unweighted: +1 per value; a new value past
`num_buckets` counters takes 1 from every counter and drops those at 0; a merge adds the
counters and cuts at the `num_buckets`-th largest; estimates are counter + everything taken)
with nothing left to chance: where tfx_bsl gives one answer, this gives the same one.

A decrement is O(1): counters are stored as count + `_offset`, grouped by stored value, so
taking 1 from all is a step of `_offset` and dropping one group.
"""
from __future__ import annotations

__all__ = ["MisraGries"]


class MisraGries:
    """Top values of a stream of bytes values, within `num_buckets` counters."""

    def __init__(self, num_buckets: int):
        self.num_buckets = num_buckets
        self._delta = 0.0       # everything taken from every counter so far
        self._offset = 0        # unit decrements not yet applied to the stored values
        self._stored: dict = {}  # value -> its count + _offset
        self._levels: dict = {}  # stored value -> the values stored at it

    def add_values(self, values) -> None:
        """Adds each value, in order."""
        stored, levels = self._stored, self._levels
        for value in values:
            level = stored.get(value)
            if level is None:
                level = self._offset
            else:
                levels[level].discard(value)
            stored[value] = level + 1
            levels.setdefault(level + 1, set()).add(value)
            if len(stored) > self.num_buckets:  # only a new value can overflow
                self._offset += 1
                self._delta += 1.0
                for dropped in levels.pop(self._offset, ()):
                    del stored[dropped]

    def counts(self) -> dict:
        """value -> counter (what is left after the decrements)."""
        offset = self._offset
        return {value: level - offset for value, level in self._stored.items()}

    def merge(self, other: "MisraGries") -> None:
        """Adds `other`'s counters, then keeps those above the `num_buckets`-th largest. Added
        in place: the job merges a shard's sketch at a time into the split's, and rebuilding
        the split's every time cost it O(values seen) a merge."""
        if other.num_buckets != self.num_buckets:
            raise ValueError(f"Both sketches must have the same number of buckets: "
                             f"{self.num_buckets} vs {other.num_buckets}")
        stored, levels, offset = self._stored, self._levels, self._offset
        for value, count in other.counts().items():
            level = stored.get(value)
            if level is None:
                level = offset
            else:
                levels[level].discard(value)
            stored[value] = level + count
            levels.setdefault(level + count, set()).add(value)
        self._delta += other._delta
        if len(stored) > self.num_buckets:
            counts = self.counts()
            cut = sorted(counts.values(), reverse=True)[self.num_buckets]
            counts = {value: count - cut for value, count in counts.items() if count > cut}
            self._delta += cut
            self._offset, self._stored, self._levels = 0, counts, {}
            for value, count in counts.items():
                self._levels.setdefault(count, set()).add(value)

    def estimate(self) -> list[tuple[bytes, float]]:
        """(value, upper bound of its count) pairs, highest first, then by value."""
        delta = self._delta
        return sorted(((value, count + delta) for value, count in self.counts().items()),
                      key=lambda pair: (-pair[1], pair[0]))
