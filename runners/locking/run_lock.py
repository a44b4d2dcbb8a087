"""One run at a time per output folder: an exclusive lock file, `OUTPUT/.lock`, with a heartbeat.

Taking it is an atomic create-if-absent on a local disk, GCS and S3
(`runners.locking.s3_lock`), best effort elsewhere; the file says who holds it (host, pid,
run_id, since, boot id, pid namespace).
A thread refreshes its heartbeat every `heartbeat_s`; a run whose lock was taken over finds out
there (`LockLost` from `RunLock.check`, which the runners call before publishing).

A lock is taken over when its heartbeat is older than `stale_after_s`, or when its process is
provably gone (same host, boot and pid namespace, and no such pid). Taking over is
compare-and-delete, so two runs that both judged the lock stale cannot both win. How each file
system does it: docs/architecture.md ("The run lock").

`note_blocked` / `clear_blocked` count the runs a lock turned away in a row (`.lock_blocked`),
so that a lock that never goes away becomes an error instead of an endless skip.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import socket
import threading
import time
import uuid

from apache_beam.io.filesystems import FileSystems

from runners.errors import LockHeld
from transforms import file_changes, file_reads
from transforms.s3_storage import create_file
from transforms.snapshot_layout import LOCK, LOCK_BLOCKED

__all__ = ["LockHeld", "LockLost", "RunLock", "LOCK_NAME", "BLOCKED_NAME", "machine_identity",
           "note_blocked", "clear_blocked"]

_LOG = logging.getLogger(__name__)
LOCK_NAME = LOCK  # the names are the layout's
BLOCKED_NAME = LOCK_BLOCKED
_MIN_HEARTBEAT_S = 0.05


class LockLost(RuntimeError):
    """This run's lock was taken over or removed while it ran: it must not publish."""


def _read_first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def machine_identity() -> dict:
    """Where a pid means something: host name, boot id and pid namespace of this process."""
    try:
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pid_ns = None
    return {"host": socket.gethostname(),
            "boot_id": _read_first_line("/proc/sys/kernel/random/boot_id") or None,
            "pid_ns": pid_ns}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


@dataclasses.dataclass(frozen=True)
class _Seen:
    """One observation of the lock: its bytes, what compare-and-delete compares, and the
    time of its last heartbeat (seconds since the epoch)."""
    data: bytes
    token: object
    updated: float


class _LocalStore:
    def __init__(self, path: str):
        self.path = path

    def create(self, data: bytes) -> bool:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:
            handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        return True

    @staticmethod
    def _observe(path: str) -> _Seen | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
                stat = os.fstat(handle.fileno())
        except FileNotFoundError:
            return None
        return _Seen(data, (stat.st_dev, stat.st_ino, stat.st_mtime_ns, data), stat.st_mtime)

    def read(self) -> _Seen | None:
        return self._observe(self.path)

    def delete_if(self, seen: _Seen) -> bool:
        moved = f"{self.path}.takeover-{uuid.uuid4().hex}"
        try:
            os.rename(self.path, moved)  # atomic: only one run can move this file away
        except FileNotFoundError:
            return False
        now = self._observe(moved)
        if now is not None and now.token == seen.token:
            os.unlink(moved)
            return True
        try:  # a fresh lock (another run's): put it back where it was
            os.link(moved, self.path)
        except FileExistsError:
            _LOG.error("could not restore %s: a third run created it meanwhile", self.path)
        os.unlink(moved)
        return False

    def refresh(self, data: bytes) -> bool:
        for _ in range(3):  # a takeover attempt that is put back moves the file for an instant
            seen = self.read()
            if seen is not None:
                if seen.data != data:
                    return False
                os.utime(self.path)
                return True
            time.sleep(0.05)
        return False


class _GcsStore:
    """Generation preconditions make create, refresh and delete compare-and-swap."""

    def __init__(self, path: str):
        from google.cloud import storage
        self.path = path
        bucket, _, name = path[len("gs://"):].partition("/")
        self._bucket = storage.Client().bucket(bucket)
        self._name = name
        self._generation = None

    def create(self, data: bytes) -> bool:
        from google.api_core import exceptions
        blob = self._bucket.blob(self._name)
        try:
            blob.upload_from_string(data, if_generation_match=0)
        except exceptions.PreconditionFailed:
            return False
        self._generation = blob.generation
        return True

    def read(self) -> _Seen | None:
        from google.api_core import exceptions
        blob = self._bucket.get_blob(self._name)
        if blob is None:
            return None
        try:
            data = blob.download_as_bytes(if_generation_match=blob.generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return None
        return _Seen(data, blob.generation, blob.updated.timestamp())

    def delete_if(self, seen: _Seen) -> bool:
        from google.api_core import exceptions
        try:
            self._bucket.delete_blob(self._name, if_generation_match=seen.token)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return False
        return True

    def refresh(self, data: bytes) -> bool:
        from google.api_core import exceptions
        blob = self._bucket.blob(self._name)
        try:
            blob.upload_from_string(data, if_generation_match=self._generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return False
        self._generation = blob.generation
        return True


class _BestEffortStore:
    """Other file systems offer no create-if-absent or compare-and-delete through Beam: check,
    write, read back. Two runs starting within the same instant could both pass; schedule
    them so they don't."""

    def __init__(self, path: str):
        self.path = path

    def create(self, data: bytes) -> bool:
        if file_reads.exists(self.path):
            return False
        self._write(data)
        seen = self.read()
        return seen is not None and seen.data == data

    def _write(self, data: bytes) -> None:
        with create_file(self.path) as handle:
            handle.write(data)

    def read(self) -> _Seen | None:
        try:
            with file_reads.open_file(self.path) as handle:
                data = handle.read()
            updated = FileSystems.last_updated(self.path)
        except (OSError, IOError):
            return None
        return _Seen(data, (data, updated), updated)

    def delete_if(self, seen: _Seen) -> bool:
        now = self.read()
        if now is None or now.token != seen.token:
            return False
        FileSystems.delete([self.path])
        return True

    def refresh(self, data: bytes) -> bool:
        seen = self.read()
        if seen is None or seen.data != data:
            return False
        self._write(data)
        return True


def _store_for(path: str):
    if path.startswith("gs://"):
        return _GcsStore(path)
    if path.startswith("s3://"):
        from runners.locking.s3_lock import S3LockStore
        return S3LockStore(path)
    if "://" in path:
        return _BestEffortStore(path)
    return _LocalStore(path)


class RunLock:
    """Context manager: `with RunLock(output_dir, run_id) as lock: ...; lock.check()`, or
    LockHeld. See the module docstring for heartbeat and takeover."""

    def __init__(self, output_dir: str, run_id: str, stale_after_s: float = 12 * 3600,
                 heartbeat_s: float = 60.0):
        for name, value in (("stale_after_s", stale_after_s), ("heartbeat_s", heartbeat_s)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a number of seconds > 0. Received: "
                                 f"{name}={value!r}")
        self._path = FileSystems.join(output_dir, LOCK_NAME)
        self._stale_after_s = float(stale_after_s)
        # Four beats per stale period, but never a busy loop: at least _MIN_HEARTBEAT_S apart.
        self._heartbeat_s = max(min(float(heartbeat_s), self._stale_after_s / 4),
                                _MIN_HEARTBEAT_S)
        self._owner = {**machine_identity(), "pid": os.getpid(), "run_id": run_id,
                       "since": time.time()}
        self._data = json.dumps(self._owner, sort_keys=True, allow_nan=False).encode("utf-8")
        self._store = _store_for(self._path)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: str | None = None

    @property
    def path(self) -> str:
        return self._path

    def _stale_reason(self, seen: _Seen) -> str | None:
        """Why the observed lock may be taken over, or None while its run may be alive."""
        age = time.time() - seen.updated
        if age > self._stale_after_s:
            return f"no heartbeat for {age:.0f} s (stale after {self._stale_after_s:.0f} s)"
        holder = _parse(seen.data)
        mine = machine_identity()
        same_machine = all(holder.get(key) == mine[key] and mine[key] is not None
                           for key in ("host", "boot_id", "pid_ns"))
        pid = holder.get("pid")
        if same_machine and isinstance(pid, int) and not _pid_alive(pid):
            return f"its process {pid} on this machine is gone"
        return None

    def __enter__(self):
        seen = None
        for _ in range(3):
            if self._store.create(self._data):
                self._start_heartbeat()
                return self
            seen = self._store.read()
            if seen is None:
                continue  # it went away in between: try again
            reason = self._stale_reason(seen)
            if reason is None:
                break
            _LOG.warning("taking over %s (%s): %s", self._path, _describe(seen), reason)
            if self._take_over(seen):
                self._start_heartbeat()
                return self
        raise LockHeld(f"another pixelmill run holds {self._path} "
                       f"({_describe(seen) if seen else 'just taken'}); this run exits "
                       f"without publishing")

    def _take_over(self, seen: _Seen) -> bool:
        """Replaces the stale lock `seen` by this run's: True when this run holds it now. S3
        swaps it in place (`If-Match`); the others delete it compare-and-delete and create it.
        False: another run took it over first."""
        swap = getattr(self._store, "take_over", None)
        if swap is not None:
            return swap(seen, self._data)
        return self._store.delete_if(seen) and self._store.create(self._data)

    def _start_heartbeat(self) -> None:
        def beat():
            while not self._stop.wait(self._heartbeat_s):
                if not self._store.refresh(self._data):
                    self._lost = f"{self._path} no longer holds this run's lock"
                    _LOG.error("%s; the run will not publish", self._lost)
                    return
        self._thread = threading.Thread(target=beat, name="pixelmill-lock-heartbeat",
                                        daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raises LockLost when the lock was taken over or removed while this run held it."""
        if self._lost is None and not self._store.refresh(self._data):
            self._lost = f"{self._path} no longer holds this run's lock"
        if self._lost is not None:
            raise LockLost(f"{self._lost}; nothing was published")

    def __exit__(self, *exc_info):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        seen = self._store.read()
        if seen is not None and seen.data == self._data:
            self._store.delete_if(seen)
        return False


def _parse(data: bytes) -> dict:
    try:
        holder = json.loads(data.decode("utf-8") or "{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(seen: _Seen) -> str:
    holder = _parse(seen.data)
    if not holder:
        return f"an unreadable lock, {len(seen.data)} bytes"
    since = holder.get("since")
    when = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
            if isinstance(since, (int, float)) else "?")
    beat = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seen.updated))
    return (f"run {holder.get('run_id', '?')}, pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, since {when}, last heartbeat {beat}")


def note_blocked(output_dir: str, message: str) -> int:
    """Counts one more run turned away by the lock; returns how many in a row."""
    path = FileSystems.join(output_dir, BLOCKED_NAME)
    count = 0
    if file_reads.exists(path):
        try:
            with file_reads.open_file(path) as handle:
                count = int(_parse(handle.read()).get("count", 0))
        except (OSError, ValueError, TypeError):
            count = 0
    record = {"count": count + 1, "last": time.time(), "message": message}
    with create_file(path) as handle:
        handle.write(json.dumps(record, sort_keys=True).encode("utf-8"))
    return count + 1


def clear_blocked(output_dir: str) -> None:
    """A run got the lock: the count of runs turned away starts again."""
    path = FileSystems.join(output_dir, BLOCKED_NAME)
    if file_reads.exists(path):
        file_changes.delete([path])
