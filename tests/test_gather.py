"""`transforms.offline.gather`: `FoldToOne` gives what `beam.CombineGlobally` gives, with
its empty-input default, in one step; `JoinByKey` gives what `beam.CoGroupByKey` gives,
the values of the tags it is told crossing the shuffle as pickled bytes (`packed`);
`GroupByKeyInLanes` gives what `beam.GroupByKey` gives, and in lanes both shuffle lists."""
from __future__ import annotations

import zlib

import apache_beam as beam
import pytest
from apache_beam.testing.util import equal_to
from apache_beam.transforms.window import FixedWindows

from tests.beamutil import assert_that, beam_pipeline
from transforms.offline import gather
from transforms.offline.gather import (
    FoldToOne,
    GroupByKeyInLanes,
    InLists,
    JoinByKey,
    lane_of,
    packed,
    unpacked,
)
from transforms.offline.image_record import RECORD_METRICS, ImageRecord


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
def test_fold_to_one_is_combine_globally_with_its_default(values, expected):
    pipeline = beam_pipeline()
    numbers = pipeline | beam.Create(values, reshuffle=False)
    ours = numbers | "Ours" >> FoldToOne(_SumAndCount())
    beams = numbers | "Beams" >> beam.CombineGlobally(_SumAndCount())
    assert_that(ours, equal_to([expected]), label="CheckOurs")
    assert_that(beams, equal_to([expected]), label="CheckBeams")
    pipeline.run().wait_until_finish()
    ours_labels = [label for label in _labels(pipeline) if label.startswith("Ours/")]
    beams_labels = [label for label in _labels(pipeline) if label.startswith("Beams/")]
    assert ours_labels == ["Ours/Once", "Ours/Folded"]  # no shuffle, no injected default
    assert len(ours_labels) < len(beams_labels)


def _record(path: str, sha256: str) -> ImageRecord:
    return ImageRecord(uri=f"/data/{path}", path=path, file_bytes=len(path), sha256=sha256,
                       format="jpeg", width=4, height=3, split="train", label="cat",
                       metrics=tuple((name, 0.5) for name in RECORD_METRICS),
                       moments=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6), phash="0123456789abcdef")


def test_a_packed_record_unpacks_equal_to_itself():
    record = _record("a/b.jpg", "ab" * 32)
    assert isinstance(packed(record), bytes)
    assert unpacked(packed(record)) == record
    assert unpacked(packed(("key", [1, 2.5]))) == ("key", [1, 2.5])


def _join_inputs(pipeline) -> tuple[list, dict]:
    """Three records (two share a sha256) and two notes keyed by sha256, one of them on no
    record: (the records, {tag: PCollection})."""
    records = [_record("a.jpg", "11" * 32), _record("b.jpg", "11" * 32),
               _record("c.jpg", "22" * 32)]
    notes = [("11" * 32, "first"), ("33" * 32, "alone")]
    return records, {"records": pipeline | "Records" >> beam.Create(records, reshuffle=False),
                     "notes": pipeline | "Notes" >> beam.Create(notes, reshuffle=False)}


def _comparable(item):
    key, grouped = item
    return key, sorted((tag, sorted(values, key=repr)) for tag, values in grouped.items())


def _joined(records) -> list:
    """What the join of `_join_inputs` gives, as `_comparable` shows it."""
    return [("11" * 32, [("notes", ["first"]), ("records", sorted(records[:2], key=repr))]),
            ("22" * 32, [("notes", []), ("records", [records[2]])]),
            ("33" * 32, [("notes", ["alone"]), ("records", [])])]


def test_join_by_key_is_co_group_by_key_with_packed_tags_shuffled_as_bytes():
    pipeline = beam_pipeline()
    records, inputs = _join_inputs(pipeline)
    ours = inputs | "Ours" >> JoinByKey({"records": lambda r: (r.sha256, r)},
                                        packed=("records",))
    keyed = inputs["records"] | "Key" >> beam.Map(lambda r: (r.sha256, r))
    beams = {"records": keyed, "notes": inputs["notes"]} | "Beams" >> beam.CoGroupByKey()
    assert_that(ours | "OursComparable" >> beam.Map(_comparable), equal_to(_joined(records)),
                label="CheckOurs")
    assert_that(beams | "BeamsComparable" >> beam.Map(_comparable), equal_to(_joined(records)),
                label="CheckBeams")
    shuffled = []

    class ShuffleInput(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if node.full_label == "Ours/GroupByKey":
                shuffled.append(node.inputs[0])

    pipeline.visit(ShuffleInput())
    (value_types,) = shuffled
    assert_that(value_types | "ValueTypes" >> beam.Map(lambda kv: (kv[1][0], type(kv[1][1]))),
                equal_to([("records", bytes)] * 3 + [("notes", str)] * 2), label="Bytes")
    pipeline.run().wait_until_finish()


def test_a_keys_lane_is_the_crc32_of_its_repr_whatever_the_key():
    assert lane_of("a.jpg", 64) == zlib.crc32(b"'a.jpg'") % 64 == 10
    assert lane_of((1, 5), 64) == zlib.crc32(b"(1, 5)") % 64 == 50
    assert lane_of("\udcff.jpg", 8) == zlib.crc32(b"'\\udcff.jpg'") % 8 == 6  # a lone surrogate
    assert lane_of("a.jpg", 1) == 0


def _shuffled(pipeline, label: str) -> beam.PCollection:
    """The input PCollection of the step whose full label is `label`."""
    found = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if node.full_label == label:
                found.append(node.inputs[0])

    pipeline.visit(Visitor())
    (pcoll,) = found
    return pcoll


@pytest.mark.parametrize("held,lists", [(gather._HELD, 3), (2, 5)])
def test_group_by_key_in_lanes_is_group_by_key(monkeypatch, held, lists):
    """In lanes (3 of them; a bundle's pairs sent on every 2 pairs too) and key by key, the
    groups Beam's own GroupByKey gives; in lanes the shuffle carries a list per lane held:
    the keys' lanes are 2, 1, 2, 0, 2, 2, so 3 lists from the whole bundle, and 2 + 2 + 1
    sent two pairs at a time."""
    monkeypatch.setattr(gather, "_HELD", held)  # the DoFn runs in this process
    pairs = [("a", 1), (("t", 2), 2), ("a", 3), ("b", 4), ("é", 5), ("a", 6)]
    expected = [("a", [1, 3, 6]), (("t", 2), [2]), ("b", [4]), ("é", [5])]
    pipeline = beam_pipeline()
    created = pipeline | beam.Create(pairs, reshuffle=False)
    for label, lanes in (("Lanes", 3), ("ByKey", None), ("Beams", "beam")):
        step = beam.GroupByKey() if lanes == "beam" else GroupByKeyInLanes(lanes)
        assert_that(created | label >> step | f"{label}Sorted" >> beam.MapTuple(
            lambda key, values: (key, sorted(values))), equal_to(expected),
            label=f"Check{label}")
    shuffled = _shuffled(pipeline, "Lanes/GroupByLane")
    assert_that(shuffled | "Shape" >> beam.MapTuple(
        lambda lane, tagged: (lane < 3, tagged[0], all(lane_of(k, 3) == lane
                                                      for k, _ in tagged[1]))),
        equal_to([(True, None, True)] * lists), label="OneListPerLane")
    pipeline.run().wait_until_finish()


def test_join_by_key_in_lanes_is_co_group_by_key_with_packed_values_in_lists():
    pipeline = beam_pipeline()
    records, inputs = _join_inputs(pipeline)
    ours = inputs | "Ours" >> JoinByKey({"records": lambda r: (r.sha256, r)},
                                        packed=("records",), lanes=2)
    assert_that(ours | "OursComparable" >> beam.Map(_comparable), equal_to(_joined(records)),
                label="CheckOurs")
    # The keys' lanes: 1 for "11...", 1 for "22...", 0 for "33...".
    shuffled = _shuffled(pipeline, "Ours/GroupByLane")
    assert_that(shuffled | "ValueTypes" >> beam.MapTuple(lambda lane, tagged: (
        lane, tagged[0], [type(value).__name__ for _key, value in tagged[1]])),
        equal_to([(1, "records", ["bytes"] * 3), (1, "notes", ["str"]), (0, "notes", ["str"])]),
        label="Bytes")
    pipeline.run().wait_until_finish()


def test_a_shuffle_in_lanes_refuses_a_window_other_than_the_global_one():
    pipeline = beam_pipeline()
    windowed = (pipeline | beam.Create([("a", 1)]) | beam.WindowInto(FixedWindows(10)))
    with pytest.raises(ValueError, match="needs the global window"):
        windowed | GroupByKeyInLanes(4)
    with pytest.raises(ValueError, match="needs the global window"):
        {"a": windowed} | JoinByKey(lanes=4)


@pytest.mark.parametrize("held,sizes", [(gather._HELD, [5]), (2, [2, 2, 1])])
def test_in_lists_sends_a_bundles_elements_as_lists(monkeypatch, held, sizes):
    monkeypatch.setattr(gather, "_HELD", held)
    pipeline = beam_pipeline()
    numbers = pipeline | beam.Create([1, 2, 3, 4, 5], reshuffle=False)
    lists = numbers | InLists()
    assert_that(lists | "Sizes" >> beam.Map(len), equal_to(sizes), label="Sizes")
    assert_that(lists | "Items" >> beam.FlatMap(lambda items: items), equal_to([1, 2, 3, 4, 5]),
                label="Items")
    empty = pipeline | "Empty" >> beam.Create([]) | "EmptyLists" >> InLists()
    assert_that(empty, equal_to([]), label="Nothing")
    pipeline.run().wait_until_finish()


def _bands(word: str) -> list:
    """A word's (letter, word) pairs: the pairs of `pairs_of` in the tests below."""
    return [(letter, word) for letter in word]


@pytest.mark.parametrize("lanes", [3, None])
def test_group_by_key_in_lanes_makes_each_elements_pairs_and_keeps_groups_of_min_values(lanes):
    """With `pairs_of` the elements are not pairs: each one's pairs are grouped, as
    `FlatMap(pairs_of) | GroupByKey()` groups them; `min_values` leaves out the smaller groups
    (lanes or key by key alike)."""
    words = ["ab", "bc", "cd", "aa"]
    everything = [("a", ["aa", "aa", "ab"]), ("b", ["ab", "bc"]), ("c", ["bc", "cd"]),
                  ("d", ["cd"])]
    pipeline = beam_pipeline()
    created = pipeline | beam.Create(words, reshuffle=False)
    for label, least, expected in (("All", 1, everything),
                                   ("Two", 2, everything[:3]), ("Three", 3, everything[:1])):
        grouped = created | label >> GroupByKeyInLanes(lanes, _bands, min_values=least)
        assert_that(grouped | f"{label}Sorted" >> beam.MapTuple(
            lambda key, values: (key, sorted(values))), equal_to(expected),
            label=f"Check{label}")
    pipeline.run().wait_until_finish()


def test_in_lists_with_each_holds_what_each_makes_of_the_elements():
    pipeline = beam_pipeline()
    lists = (pipeline | beam.Create([1, 2, 3], reshuffle=False)
             | InLists(lambda number: (number, number * 10)))
    assert_that(lists, equal_to([[(1, 10), (2, 20), (3, 30)]]))
    pipeline.run().wait_until_finish()
