"""Config files: YAML read safely, one `extends:` chain merged into one mapping.

A preset names its parent (`extends: base.yaml`, relative to the preset's folder, or absolute,
or a URL Beam's FileSystems reads) and overrides only what differs; sections merge key by key.
What a file holds is validated later (`configs.schema`); here only what makes it a config file
at all: readable, small, UTF-8, YAML, a mapping, and an `extends:` chain without a loop.
"""
from __future__ import annotations

import copy
import functools
import os
from typing import Mapping

import yaml

from configs.checks import ConfigError

__all__ = ["read_yaml", "MAX_CONFIG_BYTES", "MAX_EXTENDS_DEPTH"]

MAX_CONFIG_BYTES = 1 << 20   # a config is a few KB; more is not a config (or /dev/zero)
MAX_EXTENDS_DEPTH = 16       # presets extend base.yaml; a longer chain is a mistake


def _deep_merge(base: dict, override: Mapping) -> dict:
    """`override` over `base`: nested sections merge key by key, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names one key twice; `key` is its dotted path, `first`/`second` the lines."""

    def __init__(self, key: str, first: int, second: int):
        super().__init__(problem=f"duplicate key {key!r}")
        self.key, self.first, self.second = key, first, second


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last
    one silently, so a config would quietly lose a setting). Merge keys (`<<`) may override."""

    def construct_document(self, node):
        self._checked = set()
        self._check_unique(node, ())
        return super().construct_document(node)

    def _check_unique(self, node, path: tuple) -> None:
        if id(node) in self._checked:  # an alias of a node already checked (or a cycle)
            return
        self._checked.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._check_unique(item, path + (str(index),))
            return
        if not isinstance(node, yaml.MappingNode):
            return
        seen = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                    key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            dotted = ".".join(path + (str(key),))
            if key in seen:
                raise _DuplicateKey(dotted, seen[key], line)
            seen[key] = line
            self._check_unique(value_node, path + (str(key),))


@functools.lru_cache(maxsize=16)
def _parsed(text: str):
    """`text` parsed, remembered by the text itself (so an edited file is parsed anew): a
    config is parsed ~8 ms in pure Python, and a process that loads one config many times
    (a test suite, a notebook, a bench) parses it once. Callers get a deep copy to change."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader


def _load_mapping(path: str) -> dict:
    """One YAML file -> its mapping. Errors name the file and where it went wrong, never its
    contents: an `extends:` may point anywhere, and its text must not end up in a log."""
    from apache_beam.io.filesystems import FileSystems
    try:
        with FileSystems.open(path) as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"Config file {path} is larger than {MAX_CONFIG_BYTES} bytes; "
                          "it is not a pixelmill config")
    try:
        data = copy.deepcopy(_parsed(raw.decode("utf-8")))
    except _DuplicateKey as exc:
        raise ConfigError(f"Config file {path}: duplicate key {exc.key!r} at line {exc.second} "
                          f"(first at line {exc.first}); a key may appear once per section, "
                          f"or the earlier value would be silently lost") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Config file {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                          f"at offset {exc.start}); it is not a YAML file") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"Config file {path} is not valid YAML: "
                          f"{exc.problem or exc.context or type(exc).__name__}{where}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {path} is not valid YAML ({type(exc).__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must hold a mapping of sections (e.g. quality:). "
                          f"Received: a YAML {type(data).__name__}")
    return data


def _config_identity(path: str) -> str:
    """The file a path names, so that `a.yaml` and `./a.yaml` (or a symlink) are one file."""
    return path if "://" in path else os.path.realpath(path)


def read_yaml(path: str, chain: tuple = ()) -> dict:
    """`path` merged over the file its `extends:` names, recursively. `chain` holds the files
    that extend this one, to name a loop instead of recursing until a RecursionError."""
    data = _load_mapping(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent.strip():
        raise ConfigError(f"extends in {path} must name one YAML file. "
                          f"Received: extends={parent!r}")
    parent_path = parent if os.path.isabs(parent) or "://" in parent else os.path.join(
        os.path.dirname(path), parent)
    chain = chain + (path,)
    if _config_identity(parent_path) in {_config_identity(p) for p in chain}:
        raise ConfigError(f"extends loop: {' -> '.join(chain + (parent_path,))}. "
                          "A config must not extend itself, directly or through another file")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ConfigError(f"extends chain longer than {MAX_EXTENDS_DEPTH} files: "
                          f"{' -> '.join(chain + (parent_path,))}")
    return _deep_merge(read_yaml(parent_path, chain), data)
