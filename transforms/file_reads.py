"""A file's bytes (or its first bytes), for the reads the job makes per file and the small
files around it.

Beam's S3 file system builds a new boto3 session and client for every open: botocore parses
its JSON service models again each time, ~110 ms of CPU per open (measured 2026-12-02), more
than decoding a photo, and an `s3://` image was opened three times (discovery's head,
inspection, shard writing). `s3://` is read here through one shared client with the settings
Beam's FileSystems use in this process (`s3_storage.read_object`); every other scheme through
Beam's FileSystems, as before. Errors leave as OSError, as Beam's do.
"""
from __future__ import annotations

from apache_beam.io.filesystems import FileSystems

from transforms import s3_storage

__all__ = ["read_bytes"]


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The bytes of `path`, or its first `limit` bytes (fewer when the file is shorter)."""
    if s3_storage.is_s3(path):
        return s3_storage.read_object(path, limit)
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        return handle.read() if limit is None else handle.read(limit)
