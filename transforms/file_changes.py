"""Renaming and deleting files (the publisher's moves, the cleanup of staged parts and
folders), as Beam's `FileSystems.rename` and `FileSystems.delete` do them.

`s3://` goes through one shared S3IO (`transforms.s3_storage`): Beam's S3 file system builds
a new boto3 session and client for every call, ~0.1 s of CPU each (botocore parses its
service models again), seven of them in every run that writes to `s3://`. Every other scheme
goes to Beam's FileSystems, which pick the file system from the first path, as here.
"""
from __future__ import annotations

from transforms import s3_storage
from transforms.beam_filesystems import beam_filesystems

__all__ = ["rename", "delete"]


def rename(sources: list, destinations: list) -> None:
    """`FileSystems.rename(sources, destinations)`."""
    if sources and s3_storage.is_s3(sources[0]):
        s3_storage.rename_objects(sources, destinations)
    else:
        beam_filesystems().rename(sources, destinations)


def delete(paths: list) -> None:
    """`FileSystems.delete(paths)`: files, or folders with everything under them."""
    if paths and s3_storage.is_s3(paths[0]):
        s3_storage.delete_objects(paths)
    else:
        beam_filesystems().delete(paths)
