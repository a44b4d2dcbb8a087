"""Renaming and deleting files (the publisher's moves, the cleanup of staged parts and
folders), as Beam's `FileSystems.rename` and `FileSystems.delete` do them.

`s3://` goes to Beam's own S3IO over the one shared client (`s3_storage.beam_io`), with Beam's
semantics and its BeamIOError: Beam's S3 file system builds a new boto3 session and client for
every call, ~0.1 s of CPU each (botocore parses its service models again), seven of them in
every run that wrote to `s3://`. Every other scheme goes to Beam's FileSystems, which pick the
file system from the first path, as here.
"""
from __future__ import annotations

from transforms import s3_storage
from transforms.beam_filesystems import beam_filesystems

__all__ = ["rename", "delete"]


def rename(sources: list, destinations: list) -> None:
    """`FileSystems.rename(sources, destinations)`."""
    if not (sources and s3_storage.is_s3(sources[0])):
        beam_filesystems().rename(sources, destinations)
        return
    from apache_beam.io.filesystem import BeamIOError
    if len(sources) != len(destinations):
        raise BeamIOError("Unable to rename unequal number of sources and destinations")
    results = s3_storage.beam_io().rename_files(list(zip(sources, destinations)))
    failed = {(source, destination): error for source, destination, error in results
              if error is not None}
    if failed:
        raise BeamIOError("Rename operation failed", failed)


def delete(paths: list) -> None:
    """`FileSystems.delete(paths)`: files, or folders with everything under them (on `s3://`
    a path ending in "/")."""
    if not (paths and s3_storage.is_s3(paths[0])):
        beam_filesystems().delete(paths)
        return
    from apache_beam.io.filesystem import BeamIOError
    failed = {path: error for path, error
              in s3_storage.beam_io().delete_paths(list(paths)).items() if error is not None}
    if failed:
        raise BeamIOError("Delete operation failed", failed)
