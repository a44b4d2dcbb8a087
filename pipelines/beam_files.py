"""Files through Beam's FileSystems (local, gs://, any registered scheme), for the code that
runs around the graph: the publisher, the lock and the nightly run. Light to import (no
TensorFlow), so that a run which decides it has nothing to do stays quick."""
from __future__ import annotations

import json

from apache_beam.io.filesystems import FileSystems

__all__ = ["BeamStorage", "BEAM_FILES", "read_json", "remove_tree"]


class BeamStorage:
    """`transforms.snapshot_layout.Storage` through Beam's FileSystems (gs://, s3://, any
    registered scheme): nightly reads the committed snapshots the way the job wrote them."""

    def glob(self, pattern: str) -> list[str]:
        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]

    def exists(self, path: str) -> bool:
        return FileSystems.exists(path)

    def read_text(self, path: str) -> str:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            return handle.read().decode("utf-8")

    def mtime(self, path: str) -> float:
        return FileSystems.last_updated(path)


BEAM_FILES = BeamStorage()


def read_json(path: str):
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        return json.loads(handle.read().decode("utf-8"))


def remove_tree(path: str) -> None:
    """Deletes a folder and everything under it (on object stores: every object under it)."""
    matched = FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list
    if matched:
        FileSystems.delete([m.path for m in matched])
    if "://" not in path:
        import shutil
        shutil.rmtree(path, ignore_errors=True)
