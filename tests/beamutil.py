"""Helpers for testing Beam steps: an in-process test pipeline with the job's options, and
checks of what a step outputs.

`assert_that` is Beam's check (`apache_beam.testing.util.assert_that`: the matcher gets the
list of every element) made as the job gathers a small list, an impulse and a step with the
list as a side input (`transforms.offline.gather`): two transforms where Beam's applies about
ten, ~60 ms less CPU a check. A step with several outputs is checked with one `assert_outputs`.
"""
from __future__ import annotations

import functools
import pickle

import apache_beam as beam
import pyarrow as pa
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import equal_to

from runners.beam_runner import beam_options
from transforms.offline.beam_steps import Map
from transforms.offline.gather import once
from transforms.offline.index_table import IndexPart

__all__ = ["beam_pipeline", "fn_api_pipeline", "assert_that", "assert_outputs",
           "merged_in_parts", "paths_part"]


def beam_pipeline() -> beam.Pipeline:
    """A pipeline on the in-process portable runner (no Prism download, no workers) with the
    job's own Beam options (`runners.beam_runner.beam_options`: construction-time type checks
    off), so a step is tested as the job runs it, ~30-50 ms less a pipeline."""
    return beam.Pipeline(runner=FnApiRunner(), options=beam_options([]))


def fn_api_pipeline() -> test_pipeline.TestPipeline:
    """`beam_pipeline`'s runner and options as a TestPipeline (run on leaving its `with`)."""
    return test_pipeline.TestPipeline(runner=FnApiRunner(), options=beam_options([]))


def assert_that(actual, matcher, label: str = "assert_that") -> None:
    """Calls `matcher` (e.g. Beam's `equal_to(expected)`) with the list of every element of
    `actual` (global window), in the pipeline; whatever it raises fails the run. `label` names
    the check, made unique with a number as Beam's is (tests reuse step names for checks)."""
    pipeline = actual.pipeline
    if getattr(pipeline, "result", None):
        raise RuntimeError("assert_that must be called before the pipeline runs")
    unique, number = label, 2
    while unique in pipeline.applied_labels:
        unique, number = f"{label}_{number}", number + 1
    pipeline | unique >> _Match(matcher, [actual])


def assert_outputs(outputs: dict, expected: dict, label: str = "AssertOutputs") -> None:
    """Asserts that each named PCollection in `outputs` holds exactly `expected[name]` (any
    order; a name missing from `expected` must be empty), as one check of the elements tagged
    `(name, element)`."""
    unknown = set(expected) - set(outputs)
    if unknown:
        raise ValueError(f"expected values for outputs that were not given: {sorted(unknown)}")
    names = list(outputs)
    matcher = equal_to([(name, x) for name, xs in expected.items() for x in xs])
    tagged = functools.partial(_tagged, names, matcher)
    next(iter(outputs.values())).pipeline | label >> _Match(tagged, list(outputs.values()))


class _Match(beam.PTransform):
    """pipeline -> `check(list of every element of each of pcolls)` called once, after them."""

    def __init__(self, check, pcolls: list):
        super().__init__()
        self._check, self._pcolls = check, pcolls

    def expand(self, pbegin):
        return (once(pbegin.pipeline, "Once")
                | "Match" >> Map(_checked, self._check,
                                 *[beam.pvalue.AsList(pcoll) for pcoll in self._pcolls]))


def _checked(_, check, *elements: list) -> None:
    check(*elements)


def _tagged(names: list, matcher, *elements: list) -> None:
    matcher([(name, x) for name, xs in zip(names, elements) for x in xs])


def merged_in_parts(fn: beam.CombineFn, items: list, cuts=()):
    """`fn`'s merged accumulator of `items` cut into parts at `cuts`, each part pickled first,
    as a runner moves partial accumulators between bundles."""
    parts, start = [], 0
    for end in (*cuts, len(items)):
        accumulator = fn.create_accumulator()
        for item in items[start:end]:
            accumulator = fn.add_input(accumulator, item)
        parts.append(pickle.loads(pickle.dumps(accumulator)))
        start = end
    return fn.merge_accumulators(parts)


def paths_part(*paths: str) -> IndexPart:
    """An IndexPart of rows that hold a path alone: what a step that counts rows sees."""
    return IndexPart(pa.RecordBatch.from_pylist([{"path": path} for path in paths]), b"")
