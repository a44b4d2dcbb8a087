"""JSON for the files the job publishes and the ones it reads back, cheaper to make and load.

`pretty(data)` is `json.dumps(data, indent=2, sort_keys=True, allow_nan=False)`, character for
character, with the same errors. Python encodes in C only without `indent`; with it, its pure
Python encoder yields every piece through one generator per level of nesting. stats.json over
21,841 classes is 3.2 MB (the transform's summary holds an entry per class): 117 ms that way,
82-84 ms here (2026-12-06); 33-43 ms since a list of flat dicts (the summary's per-class
entries) is made by one call of the C encoder (2026-12-07). The tests compare both on every
kind of value.

`loads(text)` is `json.loads(text)` with the cyclic collector paused: what it builds holds no
cycle, so a collection during it frees nothing, and loading that summary (~130,000 containers)
set off a full collection of the launcher's heap: 122-144 ms, against 12-13 ms paused.
"""
from __future__ import annotations

import functools
import itertools
import json
from json.encoder import encode_basestring_ascii

try:
    from _json import make_encoder as _c_make_encoder
except ImportError:  # an interpreter without json's C accelerator
    _c_make_encoder = None

from transforms.gc_policy import collector_paused

__all__ = ["pretty", "pretty_file", "loads"]

_INDENT = "  "


def loads(text: str | bytes):
    """`json.loads(text)`, the collector paused (see the module docstring)."""
    with collector_paused():
        return json.loads(text)


def pretty(data) -> str:
    """`json.dumps(data, indent=2, sort_keys=True, allow_nan=False)`, made with the collector
    paused (its pieces hold no cycle)."""
    parts: list[str] = []
    with collector_paused():
        _encode(data, 0, parts, set())
    return "".join(parts)


def pretty_file(data) -> bytes:
    """A published JSON file's bytes: `pretty(data)`, a final newline, UTF-8."""
    return (pretty(data) + "\n").encode("utf-8")


_CONTAINERS = (list, tuple, dict)


_NOT_SERIALIZABLE = json.JSONEncoder().default  # raises json's own TypeError


@functools.cache
def _flat_encoder(level: int):
    """Python's C encoder for a container at `level` that holds no container: each item on its
    own line, indented one level deeper, which is what the pretty form gives such a
    container once its brackets get their own lines. Made once per level, not per call as
    `JSONEncoder.encode` makes it; without circular checks, which a container holding no
    container does not need."""
    item_separator = ",\n" + _INDENT * (level + 1)
    if _c_make_encoder is None:
        return json.JSONEncoder(separators=(item_separator, ": "), sort_keys=True,
                                allow_nan=False).encode
    chunks = _c_make_encoder(None, _NOT_SERIALIZABLE, encode_basestring_ascii, None, ": ",
                             item_separator, True, False, False)
    return lambda value: "".join(chunks(value, 0))


def _key(key, level: int) -> str:
    """A dict key as the encoder writes it, quoted (a number, bool or None key as text)."""
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    return _flat_encoder(level)({key: None})[1:-7]


def _encode(value, level: int, parts: list, markers: set) -> None:
    if not isinstance(value, _CONTAINERS):
        parts.append(_flat_encoder(level)(value))  # a scalar, or the encoder's TypeError
        return
    if not value:
        parts.append("{}" if isinstance(value, dict) else "[]")
        return
    items = value.values() if isinstance(value, dict) else value
    if not any(map(isinstance, items, itertools.repeat(_CONTAINERS))):
        text = _flat_encoder(level)(value)
        parts.append(text[0] + "\n" + _INDENT * (level + 1) + text[1:-1] + "\n"
                     + _INDENT * level + text[-1])
        return
    if not isinstance(value, dict) and _flat_dicts(value):
        parts.append(_flat_dicts_text(value, level))
        return
    if id(value) in markers:
        raise ValueError("Circular reference detected")
    markers.add(id(value))
    inner = "\n" + _INDENT * (level + 1)
    if isinstance(value, dict):
        parts.append("{")
        for index, (key, item) in enumerate(sorted(value.items())):
            parts.append((inner if index == 0 else "," + inner) + _key(key, level) + ": ")
            _encode(item, level + 1, parts, markers)
        parts.append("\n" + _INDENT * level + "}")
    else:
        parts.append("[")
        for index, item in enumerate(value):
            parts.append(inner if index == 0 else "," + inner)
            _encode(item, level + 1, parts, markers)
        parts.append("\n" + _INDENT * level + "]")
    markers.discard(id(value))


def _flat_dicts(items) -> bool:
    """Whether every item of a list is a non-empty dict that holds no container."""
    return (all(map(isinstance, items, itertools.repeat(dict))) and all(items)
            and not any(map(isinstance, itertools.chain.from_iterable(map(dict.values, items)),
                            itertools.repeat(_CONTAINERS))))


def _flat_dicts_text(items, level: int) -> str:
    """The pretty form of a list at `level` of flat dicts (`_flat_dicts`), from one encoding of
    the whole list with the dicts' item separator. There, and only there, `},<separator>{`
    separates two dicts: a raw newline is never inside an encoded string, and no value is a
    container. Each such separator gets the dicts' closing and opening lines."""
    inner, outer = "\n" + _INDENT * (level + 2), "\n" + _INDENT * (level + 1)
    text = _flat_encoder(level + 1)(items)[2:-2]  # without "[{" and "}]"
    text = text.replace("}," + inner + "{", outer + "}," + outer + "{" + inner)
    return "[" + outer + "{" + inner + text + outer + "}\n" + _INDENT * level + "]"
