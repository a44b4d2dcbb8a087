"""transforms/offline/per_bundle.py: a bundle's distinct values and a combine per bundle give
what the whole-PCollection steps give."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import equal_to

from tests.beamutil import assert_that, beam_pipeline
from transforms.offline import per_bundle
from transforms.offline.gather import FoldToOne
from transforms.offline.per_bundle import CombineInBundles, DistinctPerBundle


def test_distinct_per_bundle_then_distinct_is_each_value_once():
    pipeline = beam_pipeline()
    words = pipeline | beam.Create(["ab", "bc", "", "cab"], reshuffle=False)
    values = words | DistinctPerBundle(list)
    assert_that(values, equal_to(["a", "b", "c"]), label="OncePerBundle")
    assert_that(values | beam.Distinct(), equal_to(["a", "b", "c"]), label="Distinct")
    empty = pipeline | "Empty" >> beam.Create([]) | "None" >> DistinctPerBundle(list)
    assert_that(empty, equal_to([]), label="NothingFromNothing")
    pipeline.run().wait_until_finish()


class _Counted(beam.combiners.CountCombineFn):
    """Beam's count (0 over nothing, not None) with a `compact` of its own (the step compacts
    each bundle's count)."""

    def compact(self, accumulator):
        return int(accumulator)


def test_combine_in_bundles_is_fold_to_one_also_over_nothing_and_over_bundles():
    pipeline = beam_pipeline()
    numbers = pipeline | beam.Create([1, 2, 3, 4, 5])  # reshuffled: bundles of its own
    for label, pcoll, expected in (
            ("Some", numbers, 5), ("Nothing", pipeline | "Empty" >> beam.Create([]), 0)):
        ours = pcoll | label >> CombineInBundles(_Counted())
        theirs = pcoll | f"{label}ToOne" >> FoldToOne(beam.combiners.CountCombineFn())
        assert_that(ours, equal_to([expected]), label=f"Check{label}")
        assert_that(theirs, equal_to([expected]), label=f"CheckToOne{label}")
    pipeline.run().wait_until_finish()


def test_combine_in_bundles_merges_one_accumulator_per_bundle():
    fn = per_bundle._AccumulateFn(_Counted())
    fn.setup()
    fn.start_bundle()
    for value in (4, 5, 6):
        assert fn.process(value) is None  # nothing leaves before the bundle's end
    [sent] = list(fn.finish_bundle())
    assert sent.value == 3
    fn.start_bundle()
    assert list(fn.finish_bundle()) == []  # an empty bundle sends nothing
    merged = per_bundle._MergedFn(_Counted())
    total = merged.add_input(merged.create_accumulator(), sent.value)
    total = merged.merge_accumulators([total, 2])
    assert merged.extract_output(total) == 5
