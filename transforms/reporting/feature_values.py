"""What the feature statistics keep of one written record: its features with every large or
binary bytes value (image bytes) replaced by its length and digest (`summarize_features`).

Apart from `feature_stats` (Beam, tfx_bsl) so that the shard writer, which makes these
summaries as it writes, can run in a child process that imports neither
(`transforms.offline.shard_writing`).
"""
from __future__ import annotations

import hashlib

__all__ = ["summarize_features", "LARGE_STRING"]

LARGE_STRING = 1024  # longer values are summarized by length and digest only


def summarize_features(features) -> tuple:
    """((key, kind, values), ...) of a record whose features (`codec.example_features`: (key,
    kind, values) sorted by key, as a parser reads them) are given; a bytes value is itself
    when it is UTF-8 of at most `LARGE_STRING` bytes, else `(length, sha1 digest, is UTF-8)`,
    so image bytes are not carried to the statistics."""
    return tuple((key, kind, tuple(_string_or_digest(v) for v in values)
                  if kind == "bytes_list" else tuple(values))
                 for key, kind, values in features)


def _string_or_digest(value: bytes):
    try:
        value.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    if utf8 and len(value) <= LARGE_STRING:
        return value
    return (len(value), hashlib.sha1(value).digest(), utf8)
