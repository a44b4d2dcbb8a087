"""Small Beam building blocks that keep the job's graph short.

Every transform the graph applies costs Beam ~5 ms of construction, serialization and worker
set-up (type checks, option views, DoFn signature inspection), and that is paid by every run,
however few images it reads. `beam.combiners.ToList()` is 14 applied transforms (a keyed
combine, a default value injected through a side input); `Gather` is 3 for the same list:
one impulse whose only element reads the PCollection as a list side input. Use it where the
whole PCollection goes to one place anyway (small lists: labels, shard files, ranges); a
combine whose partial results shrink the data (sums, sketches) stays a combine. `JoinByKey`
is `beam.CoGroupByKey` with each input keyed and tagged in one step instead of two.
`CombineToOne` is `beam.CombineGlobally` with its empty-input default in 2 transforms, not 4.
`packed` / `unpacked` carry a shuffled value as its pickle (see `packed`).
"""
from __future__ import annotations

import pickle
import typing

import apache_beam as beam

from transforms.offline.beam_steps import FlatMap, Map

__all__ = ["Gather", "CombineToOne", "combined", "JoinByKey", "constant", "once", "merged",
           "packed", "unpacked"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL  # what Beam's PickleCoder writes


def packed(value) -> bytes:
    """`value` pickled, to travel through a GroupByKey as bytes. Beam's local runner decodes
    every element it groups and encodes the grouped values again: a value Beam pickles (a
    record, a CSV row) makes two pickle round trips per shuffle, one in the runner; bytes it
    only copies. So a record is pickled once where it is keyed and loaded once where its group
    is read (`unpacked`): ~6 us less per record and shuffle there (docs/benchmarks.md), the
    same bytes to shuffle on any other runner."""
    return pickle.dumps(value, _PROTOCOL)


unpacked = pickle.loads
"""The value `packed` pickled (its pickle loaded, as Beam's coder would)."""


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


def combined(pcoll, combine_fn: beam.CombineFn, label: str = "Combine", finish=None,
             finish_label: str = "Finish", finish_args: tuple = ()) -> beam.pvalue.AsSingleton:
    """`combine_fn`'s result over `pcoll` (then `finish(result, *finish_args)`, a step named
    `finish_label`) as a singleton side input, which is what that gives over nothing when
    `pcoll` is empty. The combine is `without_defaults()`: Beam's own default for an empty
    input is 4 more transforms (an impulse and 3 ParDos, ~5 ms of every run each); the side
    input's default is computed once, when the graph is built, from an empty accumulator."""
    empty = combine_fn.extract_output(combine_fn.create_accumulator())
    result = pcoll | label >> beam.CombineGlobally(combine_fn).without_defaults()
    if finish is not None:
        empty = finish(empty, *finish_args)
        result = result | finish_label >> Map(finish, *finish_args)
    return beam.pvalue.AsSingleton(result, default_value=empty)


class CombineToOne(beam.PTransform):
    """PCollection -> a singleton PCollection holding `combine_fn`'s result over it, its result
    over nothing when the PCollection is empty: what `beam.CombineGlobally(combine_fn)` gives,
    in 2 transforms where that injects its default through 4 (`combined`, read by one
    impulse)."""

    def __init__(self, combine_fn: beam.CombineFn):
        super().__init__()
        self._combine_fn = combine_fn

    def expand(self, pcoll):
        return (once(pcoll.pipeline, "Once")
                | "Result" >> Map(lambda _, result: result,
                                  combined(pcoll, self._combine_fn)))


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
    encodes faster than a pickle: they travel as they are."""

    def __init__(self, key_values: dict | None = None, tags=None, packed=()):
        super().__init__()
        self._key_values = dict(key_values or {})
        self._tags = None if tags is None else list(tags)
        self._packed = frozenset(packed)

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
                step = (Map(_tag_pair, tag, pack) if key_value is None
                        else Map(_key_and_tag, tag, key_value, pack))
                label = f"Key[{tag}]" if number == 0 else f"Key[{tag}:{number}]"
                tagged.append(pcoll | label >> step.with_output_types(typing.Any))
        return (tagged
                | "Flatten" >> beam.Flatten()
                | "GroupByKey" >> beam.GroupByKey()
                | "Collect" >> Map(_collect, tags, self._packed
                                   ).with_output_types(typing.Any))
