"""Which paths are local files: those Beam's FileSystems give to its LocalFileSystem, so that
reads and writes of local files can skip Beam (a process that touches only local files then
never imports it: the decoding, shard-writing and transform-writing children)."""
from __future__ import annotations

import os
import re

__all__ = ["is_local", "join"]

# Beam's `FileSystems.URI_SCHEMA_PATTERN`: a path it does not match is LocalFileSystem's.
_SCHEME = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")


def is_local(path: str) -> bool:
    """Whether Beam's FileSystems would take `path` to its LocalFileSystem (no `scheme://`)."""
    return _SCHEME.match(path.strip()) is None


def join(path: str, *parts: str) -> str:
    """`FileSystems.join(path, *parts)`; for a local `path` without importing Beam (its
    LocalFileSystem joins with `os.path.join`)."""
    if is_local(path):
        return os.path.join(path, *parts)
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.join(path, *parts)
