"""The run lock's store on Amazon S3 (`runners.locking.run_lock`): compare-and-swap without a
rename.

S3's conditional writes make every step atomic: PutObject with `If-None-Match: *` creates the
lock only when there is none; `If-Match: <ETag>` replaces (heartbeat, takeover) or deletes
(release) only the very version this run read or wrote. Of two runs that both judged a lock
stale, the first replacement wins and the second gets 412 Precondition Failed.
"""
from __future__ import annotations

from typing import NamedTuple

from transforms import s3_storage

__all__ = ["S3LockStore", "Observed"]

_LOST = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404")


class Observed(NamedTuple):
    """One read of the lock, as `runners.locking.run_lock` compares it: bytes, ETag,
    LastModified."""
    data: bytes
    token: str
    updated: float


class S3LockStore:
    """`runners.locking.run_lock`'s store protocol (create, read, delete_if, refresh) plus
    `take_over`, on one `s3://` object."""

    def __init__(self, path: str):
        self.path = path
        self._bucket, self._key = s3_storage.split_url(path)
        self._etag = None

    def _request(self, method: str, **kwargs):
        """The response, or None when a condition did not hold (someone else's version)."""
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return getattr(s3_storage.client(), method)(Bucket=self._bucket, Key=self._key,
                                                        **kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _LOST:
                return None
            line = s3_storage.describe_error(exc, self.path)
            if line is None:
                raise
            raise s3_storage.S3Error(line) from exc
        except BotoCoreError as exc:
            line = s3_storage.describe_error(exc, self.path)
            if line is None:
                raise
            raise s3_storage.S3Error(line) from exc

    def _put(self, data: bytes, **condition) -> bool:
        response = self._request("put_object", Body=data, **condition)
        if response is None:
            return False
        self._etag = response["ETag"]
        return True

    def create(self, data: bytes) -> bool:
        return self._put(data, IfNoneMatch="*")

    def read(self):
        response = self._request("get_object")
        if response is None:
            return None
        return Observed(response["Body"].read(), response["ETag"],
                     response["LastModified"].timestamp())

    def take_over(self, seen, data: bytes) -> bool:
        """Replaces the lock `seen` by `data` if it is still that version: True when this run
        holds the lock now."""
        return self._put(data, IfMatch=seen.token)

    def delete_if(self, seen) -> bool:
        """Deletes the lock if it is still `seen`. A store without conditional deletes (501
        NotImplemented; AWS has them) gets read, compare, delete: a takeover in between is
        possible only for a lock already stale."""
        from botocore.exceptions import ClientError
        try:
            return self._request("delete_object", IfMatch=seen.token) is not None
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NotImplemented":
                raise
        now = self.read()
        if now is None or now.token != seen.token:
            return False
        s3_storage.client().delete_object(Bucket=self._bucket, Key=self._key)
        return True

    def refresh(self, data: bytes) -> bool:
        return self._etag is not None and self._put(data, IfMatch=self._etag)
