"""Helpers for testing Beam steps: an in-process test pipeline and one check of all outputs.

Each `assert_that` adds its own stages (about 0.4 s of CPU each on the in-process runner), so a
step with several outputs is checked with one `assert_outputs` instead of one per output.
"""
from __future__ import annotations

import pickle

import apache_beam as beam
import pyarrow as pa
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from runners.beam_runner import beam_options
from transforms.offline.index_table import IndexPart

__all__ = ["beam_pipeline", "fn_api_pipeline", "assert_outputs", "merged_in_parts",
           "paths_part"]


def beam_pipeline() -> beam.Pipeline:
    """A pipeline on the in-process portable runner (no Prism download, no workers) with the
    job's own Beam options (`runners.beam_runner.beam_options`: construction-time type checks
    off), so a step is tested as the job runs it, ~30-50 ms less a pipeline."""
    return beam.Pipeline(runner=FnApiRunner(), options=beam_options([]))


def fn_api_pipeline() -> test_pipeline.TestPipeline:
    """`beam_pipeline`'s runner and options as a TestPipeline (run on leaving its `with`)."""
    return test_pipeline.TestPipeline(runner=FnApiRunner(), options=beam_options([]))


def assert_outputs(outputs: dict, expected: dict, label: str = "AssertOutputs") -> None:
    """Asserts that each named PCollection in `outputs` holds exactly `expected[name]` (any
    order; a name missing from `expected` must be empty), as one `assert_that` over the
    elements tagged `(name, element)`."""
    unknown = set(expected) - set(outputs)
    if unknown:
        raise ValueError(f"expected values for outputs that were not given: {sorted(unknown)}")
    tagged = [pcoll | f"{label}Tag{name}" >> beam.Map(lambda x, name=name: (name, x))
              for name, pcoll in outputs.items()]
    assert_that(tagged | f"{label}Flatten" >> beam.Flatten(),
                equal_to([(name, x) for name, xs in expected.items() for x in xs]), label=label)


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
