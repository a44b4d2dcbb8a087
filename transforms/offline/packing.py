"""A value carried as its pickle (`packed` / `unpacked`), without Beam: the shuffles' packing
(`gather`, see `packed`) and what a child process hands back to be loaded only where it is
merged (a shard's statistics accumulator and index summary, `shard_writing`)."""
from __future__ import annotations

import pickle

__all__ = ["packed", "unpacked"]

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
