"""One nightly run at a time per output folder: an exclusive lock file, `OUTPUT/.lock`.

Taking it is atomic: `O_CREAT | O_EXCL` on a local disk, a create-if-absent precondition
(`if_generation_match=0`) on Google Cloud Storage; on other file systems it is best effort
(check, write, read back). The file says who holds it (host, pid,
run_id, time). A lock left by a run that was killed is taken over when its process is gone
(same host) or when it is older than `stale_after_s`.
"""
from __future__ import annotations

import json
import os
import socket
import time

from apache_beam.io.filesystems import FileSystems

__all__ = ["LockHeld", "RunLock", "LOCK_NAME"]

LOCK_NAME = ".lock"


class LockHeld(RuntimeError):
    """Another run holds the lock; the message says which."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Context manager: `with RunLock(output_dir, run_id): ...` or LockHeld."""

    def __init__(self, output_dir: str, run_id: str, stale_after_s: float = 12 * 3600):
        self._path = FileSystems.join(output_dir, LOCK_NAME)
        self._output_dir = output_dir
        self._stale_after_s = stale_after_s
        self._owner = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": run_id,
                       "since": time.time()}

    @property
    def path(self) -> str:
        return self._path

    def _try_create(self) -> bool:
        data = json.dumps(self._owner, sort_keys=True, allow_nan=False).encode("utf-8")
        if self._path.startswith("gs://"):
            from google.api_core import exceptions
            from google.cloud import storage
            bucket, _, name = self._path[len("gs://"):].partition("/")
            blob = storage.Client().bucket(bucket).blob(name)
            try:
                blob.upload_from_string(data, if_generation_match=0)
            except exceptions.PreconditionFailed:
                return False
            return True
        if "://" in self._path:
            return self._try_create_best_effort(data)
        os.makedirs(self._output_dir, exist_ok=True)
        try:
            handle = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        return True

    def _try_create_best_effort(self, data: bytes) -> bool:
        """Other file systems offer no create-if-absent through Beam: check, write, read back.
        Two runs starting within the same instant could both pass; document your scheduler
        so they don't."""
        if FileSystems.exists(self._path):
            return False
        with FileSystems.create(self._path) as handle:
            handle.write(data)
        return self._holder().get("run_id") == self._owner["run_id"]

    def _holder(self) -> dict:
        try:
            with FileSystems.open(self._path, compression_type="uncompressed") as handle:
                return json.loads(handle.read().decode("utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def _is_stale(self, holder: dict) -> bool:
        if time.time() - float(holder.get("since", 0)) > self._stale_after_s:
            return True
        same_host = holder.get("host") == self._owner["host"]
        return same_host and "pid" in holder and not _pid_alive(int(holder["pid"]))

    def __enter__(self):
        if self._try_create():
            return self
        holder = self._holder()
        if holder and self._is_stale(holder):
            FileSystems.delete([self._path])
            if self._try_create():
                return self
            holder = self._holder()
        raise LockHeld(
            f"another pixelmill run holds {self._path} (run {holder.get('run_id', '?')}, "
            f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(float(holder.get('since', 0))))}"
            f"); this run exits without publishing")

    def __exit__(self, *exc_info):
        if self._holder().get("run_id") == self._owner["run_id"]:
            FileSystems.delete([self._path])
        return False
