"""JSON for the files the job publishes and the ones it reads back, cheaper to make and load.

`pretty(data)` is `json.dumps(data, indent=2, sort_keys=True, allow_nan=False)`, character for
character, with the same errors. Python encodes in C only without `indent`; with it, its pure
Python encoder yields every piece through one generator per level of nesting. stats.json over
21,841 classes is 3.2 MB (the transform's summary holds an entry per class): 117 ms that way,
82-84 ms here (2026-12-06). The tests compare both on every kind of value.

`loads(text)` is `json.loads(text)` with the cyclic collector paused: what it builds holds no
cycle, so a collection during it frees nothing, and loading that summary (~130,000 containers)
set off a full collection of the launcher's heap: 122-144 ms, against 12-13 ms paused.
"""
from __future__ import annotations

import functools
import json
from json.encoder import encode_basestring_ascii

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


@functools.cache
def _flat_encoder(level: int):
    """Python's C encoder for a container at `level` that holds no container: each item on its
    own line, indented one level deeper, which is what the pretty form gives such a
    container once its brackets get their own lines."""
    return json.JSONEncoder(separators=(",\n" + _INDENT * (level + 1), ": "), sort_keys=True,
                            allow_nan=False).encode


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
    if not any(isinstance(item, _CONTAINERS) for item in items):
        text = _flat_encoder(level)(value)
        parts.append(text[0] + "\n" + _INDENT * (level + 1) + text[1:-1] + "\n"
                     + _INDENT * level + text[-1])
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
