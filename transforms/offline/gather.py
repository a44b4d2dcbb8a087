"""Small Beam building blocks that keep the job's graph short.

Every transform the graph applies costs Beam ~5 ms of construction, serialization and worker
set-up (type checks, option views, DoFn signature inspection), and that is paid by every run,
however few images it reads. `beam.combiners.ToList()` is 14 applied transforms (a keyed
combine, a default value injected through a side input); `Gather` is 3 for the same list:
one impulse whose only element reads the PCollection as a list side input. Use it where the
whole PCollection goes to one place anyway (small lists: labels, shard files, ranges); a
combine whose partial results shrink the data (sums, sketches) stays a combine. `JoinByKey`
is `beam.CoGroupByKey` with each input keyed and tagged in one step instead of two.
`FoldToOne` is `beam.CombineGlobally` over partial results (a few a bundle or a shard) in one
step and one stage, its empty-input default included.
`packed` / `unpacked` (from the Beam-free `packing`) carry a shuffled value as its pickle.
`GroupByKeyInLanes` is `beam.GroupByKey` with each bundle's pairs shuffled together in a few
lists (`lanes`).
"""
from __future__ import annotations

import itertools
import typing
import zlib

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from transforms.offline.beam_steps import FlatMap, LeanDoFn, Map
from transforms.offline.packing import packed, unpacked

__all__ = ["Gather", "FoldToOne", "JoinByKey", "GroupByKeyInLanes", "lane_of",
           "InLists", "WrappedCombineFn", "constant", "once", "merged", "packed",
           "unpacked"]

def once(pipeline: beam.Pipeline, label: str) -> beam.PCollection:
    """A PCollection of exactly one element (`b""`): one transform where `beam.Create([x])`
    applies five."""
    return pipeline | label >> beam.Impulse()


def merged(pcolls, label: str) -> beam.PCollection:
    """The PCollections of `pcolls` that are not None as one: the only one itself, or a
    Flatten labelled `label`. Beam's local runner copies every element of a Flatten of several
    inputs once more, so a side that is absent (a full run's archive) is left out, not made
    empty."""
    present = [pcoll for pcoll in pcolls if pcoll is not None]
    if len(present) == 1:
        return present[0]
    return tuple(present) | label >> beam.Flatten()


def constant(pipeline: beam.Pipeline, label: str, values, spread: bool = False
             ) -> beam.PCollection:
    """A PCollection of `values`, a small list known when the graph is built: an impulse and
    a FlatMap, where `beam.Create` applies five transforms (eleven with its redistribution).
    `spread`: more than one value is redistributed over workers, as `beam.Create` does; for
    values that are each much work (a CSV file to parse, an index to read)."""
    values = list(values)
    if spread and len(values) > 1:
        return pipeline | label >> beam.Create(values)
    return once(pipeline, label) | f"{label}Values" >> FlatMap(lambda _: values)


class Gather(beam.PTransform):
    """PCollection -> a singleton PCollection holding `finish(list of every element, *args)`
    (`finish([], *args)` when the PCollection is empty). The list's order is unspecified, as
    with `ToList`: `finish` sorts when order matters."""

    def __init__(self, finish=list, *args):
        super().__init__()
        self._finish = finish
        self._args = args

    def expand(self, pcoll):
        finish, args = self._finish, self._args
        return (once(pcoll.pipeline, "Once")
                | "All" >> Map(lambda _, items: finish(list(items), *args),
                               beam.pvalue.AsList(pcoll)))


def _folded(_, items, combine_fn: beam.CombineFn):
    """`combine_fn`'s output over `items`, added one at a time."""
    combine_fn.setup()
    try:
        accumulator = combine_fn.create_accumulator()
        for item in items:
            accumulator = combine_fn.add_input(accumulator, item)
        return combine_fn.extract_output(accumulator)
    finally:
        combine_fn.teardown()


class FoldToOne(beam.PTransform):
    """PCollection -> a singleton PCollection holding `combine_fn`'s result over it, its result
    over nothing when the PCollection is empty: what `beam.CombineGlobally(combine_fn)` gives,
    for a PCollection of partial results (a few a bundle or a shard: summaries, accumulators).
    One impulse reads it as an iterable side input and folds it: 2 transforms and one stage,
    where Beam's combine shuffles its partial results in one more stage (~8 ms of every run on
    the local runner) and injects its default through 4 more transforms. Not for many raw
    elements: one step adds them all."""

    def __init__(self, combine_fn: beam.CombineFn):
        super().__init__()
        self._combine_fn = combine_fn

    def expand(self, pcoll):
        return (once(pcoll.pipeline, "Once")
                | "Folded" >> Map(_folded, beam.pvalue.AsIter(pcoll), self._combine_fn))


_HELD = 4096
"""Elements a step holds before it sends them on as lists (`InLists`, a shuffle in lanes)."""


def lane_of(key, lanes: int) -> int:
    """The lane (0 .. `lanes` - 1) a key is shuffled in: the same in every process and on every
    run (Python's own `hash` of a string is not), for any key with a faithful `repr`."""
    return zlib.crc32(repr(key).encode("utf-8", "backslashreplace")) % lanes


def _tag_pair(pair, tag, pack):
    return pair[0], (tag, packed(pair[1]) if pack else pair[1])


def _key_and_tag(element, tag, key_value, pack):
    key, value = key_value(element)
    return key, (tag, packed(value) if pack else value)


def _collect(item, tags, packed_tags):
    key, tagged = item
    grouped = {tag: [] for tag in tags}
    for tag, value in tagged:
        grouped[tag].append(unpacked(value) if tag in packed_tags else value)
    return key, grouped


def _regrouped(item, tags, packed_tags, min_values: int = 1):
    """(lane, [(tag, [(key, value)])]) -> (key, {tag: [values]}) for each key of the lane, or
    (key, [values]) when `tags` is None (values `unpacked` for the `packed_tags`), the latter
    only for keys with `min_values` values or more."""
    _lane, batches = item
    groups: dict = {}
    for tag, pairs in batches:
        load = tag in packed_tags
        for key, value in pairs:
            grouped = groups.get(key)
            if grouped is None:
                grouped = groups[key] = [] if tags is None else {name: [] for name in tags}
            (grouped if tags is None else grouped[tag]).append(
                unpacked(value) if load else value)
    if min_values > 1:
        return [(key, values) for key, values in groups.items() if len(values) >= min_values]
    return groups.items()


def _through_lanes(in_lists, tags, packed_tags, min_values: int = 1):
    """The lists every `_IntoLanes` step made (`in_lists`), grouped by key (`_regrouped`)."""
    for pcoll in in_lists:
        if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
            raise ValueError(f"A shuffle in lanes needs the global window; {pcoll} is in "
                             f"{pcoll.windowing.windowfn}. Use lanes=None.")
    # One input needs no Flatten: each applied transform costs every run a few ms.
    merged_lists = in_lists[0] if len(in_lists) == 1 else in_lists | "Flatten" >> beam.Flatten()
    return (merged_lists
            | "GroupByLane" >> beam.GroupByKey()
            | "Regroup" >> FlatMap(_regrouped, tags, packed_tags, min_values).with_output_types(
                typing.Any))


class _InListsFn(LeanDoFn):
    """Elements -> lists of them (of `each(element)` with `each`): a bundle's, `_HELD` at most
    each (global window)."""

    def __init__(self, each=None):
        self._each = each

    def start_bundle(self):
        self._held: list = []

    def process(self, element):
        self._held.append(element if self._each is None else self._each(element))
        if len(self._held) >= _HELD:
            yield from self._send()

    def finish_bundle(self):
        yield from self._send()

    def _send(self):
        held, self._held = self._held, []
        if held:
            yield from self._outputs(held)

    def _outputs(self, held: list):
        yield GlobalWindows.windowed_value(held)


class _IntoLanes(_InListsFn):
    """Elements -> (lane, (tag, [(key, value), ...])): the elements `_InListsFn` holds, each
    as its (key, value) (`key_value(element)`, or the element itself when None; the value
    `packed` with `pack`), one list per lane (`lane_of` the key) of what was held. With
    `many`, `key_value(element)` is an iterable of (key, value) pairs, each laned."""

    def __init__(self, tag, key_value, pack: bool, lanes: int, many: bool = False):
        super().__init__()  # holds the elements themselves
        self._tag, self._key_value, self._pack, self._lanes = tag, key_value, pack, lanes
        self._many = many

    def _outputs(self, held: list):
        key_value, pack, lanes = self._key_value, self._pack, self._lanes
        pairs = (held if key_value is None
                 else itertools.chain.from_iterable(map(key_value, held)) if self._many
                 else map(key_value, held))
        by_lane: dict = {}
        for key, value in pairs:
            by_lane.setdefault(lane_of(key, lanes), []).append(
                (key, packed(value) if pack else value))
        for lane, pairs in by_lane.items():
            yield GlobalWindows.windowed_value((lane, (self._tag, pairs)))


def InLists(each=None) -> beam.ParDo:  # noqa: N802 (a step, named as one)
    """Elements -> lists of them (each bundle's, `_HELD` at most a list), in the global window:
    for elements Beam's local runner would keep one by one while a step waits, e.g. for a side
    input (it encodes and decodes each element it keeps, a list's items only as data). With
    `each`, the lists hold `each(element)`: a `Map(each)` before it, without its elements."""
    return beam.ParDo(_InListsFn(each)).with_output_types(typing.Any)


class WrappedCombineFn(beam.CombineFn):
    """`combine_fn`, its inputs taken otherwise by a subclass's `add_input`; everything else
    (its lifecycle, accumulators, merging, output) is the wrapped combine's."""

    def __init__(self, combine_fn: beam.CombineFn):
        self._fn = combine_fn

    def setup(self, *args, **kwargs):
        self._fn.setup(*args, **kwargs)

    def create_accumulator(self):
        return self._fn.create_accumulator()

    def add_input(self, accumulator, element):
        raise NotImplementedError

    def merge_accumulators(self, accumulators):
        return self._fn.merge_accumulators(accumulators)

    def compact(self, accumulator):
        return self._fn.compact(accumulator)

    def extract_output(self, accumulator):
        return self._fn.extract_output(accumulator)

    def teardown(self, *args, **kwargs):
        self._fn.teardown(*args, **kwargs)


class GroupByKeyInLanes(beam.PTransform):
    """(key, value) pairs -> (key, [values]) for every key, as `beam.GroupByKey` gives them in
    the global window (a key's values in no particular order; keys equal in Python are one).
    With `pairs_of`, the input's elements are not pairs: each element's pairs are
    `pairs_of(element)` (an iterable), laned as they are made, not sent on one by one (the
    near-duplicate search's five bands an image: docs/benchmarks.md, forty-first round). Keys
    with fewer than `min_values` values are left out (a band bucket of one hash, most of them,
    has nothing to compare).

    With `lanes`, each bundle's pairs are shuffled as `lanes` lists at most (`lane_of` their
    key), which one step then groups by key. Beam's local runner works on every element it
    shuffles in the launcher's one process, a pair in a list it only encodes: the job's
    shuffles went from 15 elements an image to ~3 (the near-duplicate search's bands were 5),
    and the launcher from ~0.56 to ~0.50 ms an image (docs/benchmarks.md, thirty-ninth round).
    The grouped step gets a lane at a time, so `lanes` bounds its parallelism: the launcher
    sets it on the local runner only (`runners.beam_runner.LOCAL_SHUFFLE_LANES`); None (any
    other runner) is `beam.GroupByKey` itself."""

    def __init__(self, lanes: int | None = None, pairs_of=None, min_values: int = 1):
        super().__init__()
        self._lanes = lanes
        self._pairs_of = pairs_of
        self._min_values = min_values

    def expand(self, elements):
        pairs_of, min_values = self._pairs_of, self._min_values
        if self._lanes is None:
            pairs = elements if pairs_of is None else elements | "Pairs" >> FlatMap(pairs_of)
            grouped = pairs | "GroupByKey" >> beam.GroupByKey()
            if min_values <= 1:
                return grouped
            return grouped | "AtLeast" >> FlatMap(_with_at_least, min_values)
        in_lists = elements | "IntoLanes" >> beam.ParDo(
            _IntoLanes(None, pairs_of, False, self._lanes, many=pairs_of is not None)
        ).with_output_types(typing.Any)
        return _through_lanes([in_lists], None, (), min_values)


def _with_at_least(group, min_values: int):
    """A (key, values) group as (key, [values]) when it has `min_values` values or more."""
    key, values = group
    values = list(values)
    if len(values) >= min_values:
        yield key, values


class JoinByKey(beam.PTransform):
    """{tag: PCollection} -> (key, {tag: [values]}) for every key any input has, as
    `beam.CoGroupByKey` gives it. `key_values` maps a tag to a function element ->
    (key, value); the PCollection of a tag without one holds (key, value) pairs already. A
    tag may name a tuple of PCollections: their values join under that tag, without a
    `beam.Flatten` before the join (Beam's local runner copies every element of a Flatten
    whose inputs come from different steps once more). `tags`: every tag a result lists,
    when some have no input (one the run does not have: its lists are empty, and no step is
    built for it); by default the inputs' tags.
    Keying and tagging are one Map per input (CoGroupByKey's own tagging is a second), and
    the Maps declare their output type, so that building does not disassemble them.
    `packed`: the tags whose values travel `packed` from the keying to the result: those
    Beam pickles (records, CSV rows; dataclasses). Tuples, dicts and strings Beam's own coder
    encodes faster than a pickle: they travel as they are.
    `lanes`: shuffled in lanes, as `GroupByKeyInLanes` (global window only); the Flatten then
    copies a bundle's lists, not each element."""

    def __init__(self, key_values: dict | None = None, tags=None, packed=(),
                 lanes: int | None = None):
        super().__init__()
        self._key_values = dict(key_values or {})
        self._tags = None if tags is None else list(tags)
        self._packed = frozenset(packed)
        self._lanes = lanes

    def expand(self, pcolls):
        tags = list(pcolls) if self._tags is None else self._tags
        tagged = []
        for tag in pcolls:
            key_value = self._key_values.get(tag)
            inputs = pcolls[tag]
            if not isinstance(inputs, (tuple, list)):
                inputs = (inputs,)
            pack = tag in self._packed
            for number, pcoll in enumerate(inputs):
                label = f"Key[{tag}]" if number == 0 else f"Key[{tag}:{number}]"
                if self._lanes is not None:
                    step = beam.ParDo(_IntoLanes(tag, key_value, pack, self._lanes))
                elif key_value is None:
                    step = Map(_tag_pair, tag, pack)
                else:
                    step = Map(_key_and_tag, tag, key_value, pack)
                tagged.append(pcoll | label >> step.with_output_types(typing.Any))
        if self._lanes is not None:
            return _through_lanes(tagged, tags, self._packed)
        return (tagged
                | "Flatten" >> beam.Flatten()
                | "GroupByKey" >> beam.GroupByKey()
                | "Collect" >> Map(_collect, tags, self._packed
                                   ).with_output_types(typing.Any))
