"""Which paths are local files: those Beam's FileSystems give to its LocalFileSystem, so that
reads and writes of local files can skip Beam (a process that touches only local files then
never imports it: the decoding and shard-writing children)."""
from __future__ import annotations

import re

__all__ = ["is_local"]

# Beam's `FileSystems.URI_SCHEMA_PATTERN`: a path it does not match is LocalFileSystem's.
_SCHEME = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")


def is_local(path: str) -> bool:
    """Whether Beam's FileSystems would take `path` to its LocalFileSystem (no `scheme://`)."""
    return _SCHEME.match(path.strip()) is None
