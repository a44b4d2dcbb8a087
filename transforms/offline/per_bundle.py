"""Steps that do a record's per-step work where the record already is, once per bundle: what
they send on is one element per bundle (its distinct values, its accumulator), not one or two
per record. Beam's local runner spends a few us on each element of each step in the
launcher's one process, so a step that takes a record and sends nothing per record is an
element-step less per image for each (docs/benchmarks.md, forty-first round). Global window
only: the job's is the global one.
"""
from __future__ import annotations

import typing

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from transforms.offline.beam_steps import LeanDoFn
from transforms.offline.gather import FoldToOne, WrappedCombineFn

__all__ = ["DistinctPerBundle", "CombineInBundles"]


class _DistinctPerBundleFn(LeanDoFn):
    """Elements -> each value `values_of` gives for a bundle's elements, once, at the bundle's
    end (global window)."""

    def __init__(self, values_of):
        self._values_of = values_of

    def start_bundle(self):
        self._seen: set = set()

    def process(self, element):
        self._seen.update(self._values_of(element))

    def finish_bundle(self):
        seen, self._seen = self._seen, set()
        for value in seen:
            yield GlobalWindows.windowed_value(value)


def DistinctPerBundle(values_of) -> beam.ParDo:  # noqa: N802 (a step, named as one)
    """Elements -> the distinct values `values_of(element)` (an iterable) gives, once per bundle
    (global window): with `beam.Distinct` after it, a PCollection's distinct values, each
    element an element of this one step, where `FlatMap(values_of) | Distinct()` makes it
    and each of its values elements of two (Beam's local runner spends a few us on each)."""
    return beam.ParDo(_DistinctPerBundleFn(values_of)).with_output_types(typing.Any)


class _AccumulateFn(LeanDoFn):
    """Elements -> one `combine_fn` accumulator per bundle, compacted, at its end (global
    window)."""

    def __init__(self, combine_fn: beam.CombineFn):
        self._fn = combine_fn

    def setup(self):
        self._fn.setup()

    def start_bundle(self):
        self._accumulator = None

    def process(self, element):
        if self._accumulator is None:
            self._accumulator = self._fn.create_accumulator()
        self._accumulator = self._fn.add_input(self._accumulator, element)

    def finish_bundle(self):
        accumulator, self._accumulator = self._accumulator, None
        if accumulator is not None:
            yield GlobalWindows.windowed_value(self._fn.compact(accumulator))

    def teardown(self):
        self._fn.teardown()


class _MergedFn(WrappedCombineFn):
    """`combine_fn` over its own accumulators (what `_AccumulateFn` sends): merged, then its
    output extracted."""

    def add_input(self, accumulator, other):
        return self._fn.merge_accumulators([accumulator, other])


class CombineInBundles(beam.PTransform):
    """PCollection -> a singleton PCollection holding `combine_fn`'s result over it, as
    `FoldToOne` gives it (the result over nothing when it is empty), each bundle's elements
    added by the step that receives them and one accumulator per bundle merged after: an
    element is an element of that one step, where `CombineGlobally` keys it (a Map) and hands it
    to Beam's precombine. Global window only; for a combine whose result does not depend on
    how its inputs are split and merged."""

    def __init__(self, combine_fn: beam.CombineFn):
        super().__init__()
        self._combine_fn = combine_fn

    def expand(self, pcoll):
        return (pcoll
                | "PerBundle" >> beam.ParDo(_AccumulateFn(self._combine_fn)
                                            ).with_output_types(typing.Any)
                | "Merged" >> FoldToOne(_MergedFn(self._combine_fn)))
