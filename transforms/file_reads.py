"""A file's bytes (or its first bytes), a reading stream, whether it exists, when it last
changed, and the files a glob matches, for the reads the job makes per file and the small
files around it.

Beam's S3 file system builds a new boto3 session and client for every open, exists and list:
botocore parses its JSON service models again each time, ~110 ms of CPU per call (measured
2026-12-02), more than decoding a photo, and an `s3://` image was opened three times
(discovery's head, inspection, shard writing). `s3://` is read here through one shared client
with the settings Beam's FileSystems use in this process (`transforms.s3_storage`); every other
scheme through Beam's FileSystems, as before. Errors leave as OSError, as Beam's do.

A local path (no `scheme://`, Beam's own test) is opened with `open(path, "rb")`, which is what
Beam's LocalFileSystem does for an uncompressed read: so a process that reads only local files
(the decoding children, `transforms.offline.image_inspection`) never imports Beam. Beam's
FileSystems come from `transforms.beam_filesystems`, which applies a child's pending options.
"""
from __future__ import annotations

from transforms import s3_storage
from transforms.beam_filesystems import beam_filesystems
from transforms.local_paths import is_local

__all__ = ["read_bytes", "open_file", "exists", "match", "last_updated"]


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The bytes of `path`, or its first `limit` bytes (fewer when the file is shorter)."""
    if s3_storage.is_s3(path):
        return s3_storage.read_object(path, limit)
    with open_file(path) as handle:
        return handle.read() if limit is None else handle.read(limit)


def open_file(path: str):
    """`FileSystems.open(path, compression_type="uncompressed")`: a binary reading stream."""
    if is_local(path):
        return open(path, "rb")  # the caller closes it, as it closes Beam's stream
    if s3_storage.is_s3(path):
        return s3_storage.open_object(path)
    return beam_filesystems().open(path, compression_type="uncompressed")


def exists(path: str) -> bool:
    """`FileSystems.exists(path)`."""
    if s3_storage.is_s3(path):
        return s3_storage.object_exists(path)
    return beam_filesystems().exists(path)


def match(pattern: str) -> list:
    """`FileSystems.match([pattern])[0].metadata_list`: the `FileMetadata` of each file the
    glob matches."""
    if s3_storage.is_s3(pattern):
        return s3_storage.match_objects(pattern)
    return beam_filesystems().match([pattern])[0].metadata_list


def last_updated(path: str) -> float:
    """`FileSystems.last_updated(path)`: seconds since the epoch (on `s3://` Beam's S3IO over
    the shared client, with Beam's conversion and its BeamIOError)."""
    if not s3_storage.is_s3(path):
        return beam_filesystems().last_updated(path)
    from apache_beam.io.filesystem import BeamIOError
    try:
        return s3_storage.beam_io().last_updated(path)
    except Exception as exc:  # Beam's S3FileSystem wraps every failure the same way
        raise BeamIOError("last_updated operation failed", {path: exc}) from exc
