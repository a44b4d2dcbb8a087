"""`transforms.offline.gather`: `CombineToOne` gives what `beam.CombineGlobally` gives, with
its empty-input default in fewer transforms."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.offline.gather import CombineToOne


class _SumAndCount(beam.CombineFn):
    """(sum, count): a combine whose result over nothing is not Beam's `None`."""

    def create_accumulator(self):
        return 0, 0

    def add_input(self, accumulator, value):
        return accumulator[0] + value, accumulator[1] + 1

    def merge_accumulators(self, accumulators):
        return tuple(map(sum, zip(*accumulators)))

    def extract_output(self, accumulator):
        return {"sum": accumulator[0], "count": accumulator[1]}


def _labels(pipeline) -> list[str]:
    labels = []

    class Labels(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            labels.append(node.full_label)

    pipeline.visit(Labels())
    return labels


@pytest.mark.parametrize("values,expected", [
    ([3, 4, 5], {"sum": 12, "count": 3}),
    ([], {"sum": 0, "count": 0}),
])
def test_combine_to_one_is_combine_globally_with_its_default(values, expected):
    pipeline = beam.Pipeline(runner=FnApiRunner())
    numbers = pipeline | beam.Create(values, reshuffle=False)
    ours = numbers | "Ours" >> CombineToOne(_SumAndCount())
    beams = numbers | "Beams" >> beam.CombineGlobally(_SumAndCount())
    assert_that(ours, equal_to([expected]), label="CheckOurs")
    assert_that(beams, equal_to([expected]), label="CheckBeams")
    pipeline.run().wait_until_finish()
    ours_labels = [label for label in _labels(pipeline) if label.startswith("Ours/")]
    beams_labels = [label for label in _labels(pipeline) if label.startswith("Beams/")]
    assert len(beams_labels) - len(ours_labels) == 2  # 4 transforms of default, here 2
    assert not [label for label in ours_labels if "InjectDefault" in label]
