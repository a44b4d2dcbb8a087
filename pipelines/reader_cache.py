"""The training reader's local copy of remote snapshots: `make_dataset(..., cache_dir=...)`.

TensorFlow 2.21 cannot open `s3://` (its S3 file system moved to tensorflow-io), so a snapshot on
S3 is read from a local copy of the files the reader needs (one split's shards, and the TFT
transform and stats.json for normalization). Each file is downloaded once, in parallel, checked
against its manifest entry (`bytes`, `sha256`), and only then renamed into place; later epochs
and later runs reuse it. The copy keeps the remote path, so a shard still sits at
`.../snapshots/<run_id>/<split>/<file>` (the live view names records by that run_id):

    <cache_dir>/<bucket>/<key prefix>/snapshots/<run_id>/<split>/<shard>

A snapshot never changes once committed, so a file present with its listed size is reused
without hashing it again. `gs://` snapshots may use the cache too (through `tf.io.gfile`).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import os
import secrets
from typing import Callable, Sequence

from transforms.snapshot_layout import DALI_INDEX_DIR, GFILE, STATS, TRANSFORM_FN, Snapshot

__all__ = ["DEFAULT_CACHE_DIR", "cache_dir_for", "cached_snapshots", "reader_files"]

_LOG = logging.getLogger(__name__)
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "pixelmill", "snapshots")
_PARALLEL = 8
_METADATA = "transformed_metadata"


def cache_dir_for(output_dir: str, cache_dir: str | None) -> str | None:
    """Where remote snapshots are copied: `cache_dir`, or for `s3://` (which only the cache can
    read) `DEFAULT_CACHE_DIR`; None to read in place (local paths, gs:// without a cache)."""
    if "://" not in output_dir:
        return None
    if cache_dir is None and output_dir.startswith("s3://"):
        return os.path.expanduser(DEFAULT_CACHE_DIR)
    return os.path.expanduser(cache_dir) if cache_dir else None


def reader_files(split: str) -> Callable[[str], bool]:
    """The files of a snapshot (paths relative to it) that reading `split` needs: its shards
    and the normalization numbers (the TFT transform, stats.json)."""
    def wanted(rel: str) -> bool:
        if rel == STATS or rel.startswith((f"{TRANSFORM_FN}/", f"{_METADATA}/")):
            return True
        return rel.startswith(f"{split}/") and f"/{DALI_INDEX_DIR}/" not in rel
    return wanted


def _local_path(cache_dir: str, url: str) -> str:
    scheme, _, rest = url.partition("://")
    parts = [part for part in rest.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise ValueError(f"Cannot cache {url!r}: '.' and '..' are not allowed in its path.")
    return os.path.join(cache_dir, *([scheme] if scheme != "s3" else []), *parts)


def _download(url: str, local: str) -> None:
    if url.startswith("s3://"):
        from transforms.s3_storage import S3_FILES
        S3_FILES.download(url, local)
        return
    import tensorflow as tf
    tf.io.gfile.copy(url, local, overwrite=True)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url: str, local: str, entry: dict) -> bool:
    """Makes `local` a checked copy of `url`; True when it was downloaded now."""
    size = entry.get("bytes")
    if os.path.isfile(local) and (size is None or os.path.getsize(local) == size):
        return False
    os.makedirs(os.path.dirname(local), exist_ok=True)
    temporary = f"{local}.part-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        _download(url, temporary)
        got_size, got_sha = os.path.getsize(temporary), _sha256(temporary)
        if (size is not None and got_size != size) or (
                entry.get("sha256") and got_sha != entry["sha256"]):
            raise ValueError(
                f"{url} does not match its manifest entry: expected {size} bytes, sha256 "
                f"{entry.get('sha256')}. Received: {got_size} bytes, sha256 {got_sha}. "
                f"`pixelmill verify` checks the snapshot.")
        os.replace(temporary, local)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return True


def cached_snapshots(snapshots: Sequence[Snapshot], cache_dir: str,
                     wanted: Callable[[str], bool]) -> list[Snapshot]:
    """The snapshots at their local copies under `cache_dir`, each holding the manifest-listed
    files `wanted` selects (downloaded and checked first where missing). The returned
    snapshots carry their manifests; the local folders hold only the wanted files."""
    jobs = []
    local_snapshots = []
    for snapshot in snapshots:
        if snapshot.manifest is None:
            raise ValueError(f"Cannot cache {snapshot.path}: its manifest was not read.")
        local_dir = _local_path(cache_dir, snapshot.path)
        entries = [entry for entry in snapshot.manifest.get("files", []) if wanted(entry["path"])]
        if STATS not in {entry["path"] for entry in entries} and GFILE.exists(
                f"{snapshot.path}/{STATS}"):  # unlisted (older manifests): copied unchecked
            entries.append({"path": STATS})
        for entry in entries:
            jobs.append((f"{snapshot.path}/{entry['path']}",
                         os.path.join(local_dir, *entry["path"].split("/")), entry))
        local_snapshots.append(dataclasses.replace(snapshot, path=local_dir))
    with concurrent.futures.ThreadPoolExecutor(_PARALLEL) as pool:
        fetched = list(pool.map(lambda job: _fetch(*job), jobs))
    if any(fetched):
        _LOG.info("cached %d of %d snapshot files under %s", sum(fetched), len(jobs), cache_dir)
    return local_snapshots
