"""The deterministic Misra-Gries top-values sketch: tfx_bsl's answer wherever tfx_bsl has one,
the same answer every time past its buckets, whatever else the process holds."""
from __future__ import annotations

import pickle
import random

import pyarrow as pa
import pytest
from tfx_bsl import sketches

from transforms.reporting.misra_gries import MisraGries


def _theirs(num_buckets: int, parts: list) -> list:
    merged = None
    for part in parts:
        sketch = sketches.MisraGriesSketch(num_buckets)
        for chunk in part:
            sketch.AddValues(pa.array(chunk, pa.binary()))
        if merged is None:
            merged = sketch
        else:
            merged.Merge(sketch)
    return [(entry["values"], entry["counts"]) for entry in merged.Estimate().to_pylist()]


def _ours(num_buckets: int, parts: list) -> list:
    sketches_ = []
    for part in parts:
        sketch = MisraGries(num_buckets)
        for chunk in part:
            sketch.add_values(chunk)
        sketches_.append(pickle.loads(pickle.dumps(sketch)))  # as Beam moves accumulators
    for other in sketches_[1:]:
        sketches_[0].merge(other)
    return sketches_[0].estimate()


def test_within_its_buckets_it_is_tfx_bsls_sketch():
    # Exact counts, highest first then by value, across chunks, pickling and merges.
    rng = random.Random(0)
    for _ in range(500):
        universe = rng.randint(1, 6)
        parts = [[[b"v%d" % rng.randrange(universe) for _ in range(rng.randint(0, 20))]
                  for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
        assert _ours(6, parts) == _theirs(6, parts)


def test_past_its_buckets_it_follows_the_algorithm():
    # +1 per value; a new value past 2 counters takes 1 from each and drops those at 0; the
    # estimate adds back what was taken (2 decrements here).
    sketch = MisraGries(2)
    sketch.add_values([b"a", b"a", b"a", b"b", b"c", b"b", b"d"])
    assert sketch.counts() == {b"a": 1}
    assert sketch.estimate() == [(b"a", 3.0)]
    sketch.add_values([b"e", b"e"])
    assert sketch.estimate() == [(b"e", 4.0), (b"a", 3.0)]


def test_a_merge_cuts_at_the_largest_counter_past_the_buckets():
    left, right = MisraGries(2), MisraGries(2)
    left.add_values([b"a"] * 5 + [b"b"] * 2)
    right.add_values([b"b"] * 2 + [b"c"] * 3)
    left.merge(right)  # a 5, b 4, c 3: the third largest (3) is taken from every counter
    assert left.counts() == {b"a": 2, b"b": 1}
    assert left.estimate() == [(b"a", 5.0), (b"b", 4.0)]
    with pytest.raises(ValueError, match="same number of buckets"):
        left.merge(MisraGries(3))


def _merged_anew(sketch: MisraGries, other: MisraGries) -> MisraGries:
    """The merge as a new sketch built from the summed counters (the rule, written plainly)."""
    counts = sketch.counts()
    for value, count in other.counts().items():
        counts[value] = counts.get(value, 0) + count
    delta = sketch._delta + other._delta
    if len(counts) > sketch.num_buckets:
        cut = sorted(counts.values(), reverse=True)[sketch.num_buckets]
        counts = {value: count - cut for value, count in counts.items() if count > cut}
        delta += cut
    merged = MisraGries(sketch.num_buckets)
    for value, count in counts.items():  # counts one by one: the same counters, no decrement
        merged.add_values([value] * count)
    merged._delta = delta
    return merged


def test_a_merge_in_place_equals_the_merge_built_anew_then_adds_alike():
    # Within and past the buckets, after decrements on either side: the same counters and
    # estimate, and the values added next leave the same sketch.
    rng = random.Random(3)
    for _ in range(300):
        buckets = rng.randint(1, 8)
        sketches_ = []
        for _ in range(3):
            sketch = MisraGries(buckets)
            sketch.add_values([b"v%d" % rng.randrange(12) for _ in range(rng.randint(0, 30))])
            sketches_.append(sketch)
        ours, anew = sketches_[0], pickle.loads(pickle.dumps(sketches_[0]))
        for other in sketches_[1:]:
            anew = _merged_anew(anew, other)
            ours.merge(other)
            assert (ours.counts(), ours.estimate()) == (anew.counts(), anew.estimate())
        more = [b"v%d" % rng.randrange(12) for _ in range(rng.randint(0, 30))]
        ours.add_values(more)
        anew.add_values(more)
        assert (ours.counts(), ours.estimate()) == (anew.counts(), anew.estimate())


def test_all_distinct_values_give_one_answer():
    # Filenames or hashes: one value per record, far past the buckets; tfx_bsl's answer here
    # changed with what else the process held.
    values = [b"%08x" % random.Random(1).getrandbits(32) + b"-%d" % i for i in range(3500)]
    answers = set()
    for _ in range(3):
        sketch = MisraGries(1000)
        for start in range(0, len(values), 700):
            sketch.add_values(values[start:start + 700])
        answers.add(tuple(sketch.estimate()))
    answer, = answers
    # 3 x 1,001 values each emptied the counters: 497 are left, each 1 + 3 taken
    assert len(answer) == 497 and {count for _, count in answer} == {4.0}
