"""Amazon S3 (and S3-compatible servers) through boto3, for what Beam's S3 file system does not
cover: the training reader's small files and shard downloads (`tf.io.gfile` has no `s3://` in
TensorFlow 2.21), the run lock's conditional writes (`runners.locking.s3_lock`), empty objects
(`create_file`), and reads, writes, existence checks and listings through one shared client
per process (`read_object`, `open_object`, `create_file`, `object_exists`, `match_objects`):
Beam's S3 file system builds a new boto3 session and client for every open, exists and list,
~110-180 ms of CPU each (botocore parses its service models again), which was half the CPU of
a small job on `s3://` (173 clients, measured 2026-12-02).

Settings are Beam's S3 option names (`s3_endpoint_url`, `s3_region_name`, `s3_access_key_id`,
...); whatever is None comes from the standard AWS chain (environment such as AWS_REGION and
AWS_ENDPOINT_URL, ~/.aws, instance roles), as boto3 does. A job's runner passes its options
once (`set_options`, as Beam's `FileSystems.set_options`); the training reader uses the chain.
Errors a user meets leave as one line naming the path (`S3Error`, `describe_error`).
"""
from __future__ import annotations

import datetime
import functools
import io
import os
import re

from transforms.local_paths import is_local

__all__ = ["S3Error", "S3Storage", "S3_FILES", "is_s3", "split_url", "set_options", "client",
           "describe_error", "check_bucket", "create_file", "read_object", "open_object",
           "object_exists", "match_objects", "beam_io"]

_SETTINGS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token", "s3_endpoint_url",
             "s3_region_name", "s3_api_version", "s3_verify", "s3_disable_ssl")
_options: tuple = ()
# (PipelineOptions, its settings): the last options `_beam_settings` read, and what it read
_read_from: tuple = (None, ())


class S3Error(RuntimeError):
    """An S3 request failed for a reason the user must fix; the message is one line."""


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


def split_url(url: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`; raises ValueError for anything else."""
    if not is_s3(url) or not url[len("s3://"):].split("/", 1)[0]:
        raise ValueError(f"Expected an s3://bucket/key path. Received: {url!r}")
    bucket, _, key = url[len("s3://"):].partition("/")
    return bucket, key


def _settings(options: dict | None) -> tuple:
    return tuple(sorted((k, v) for k, v in (options or {}).items()
                        if k in _SETTINGS and v not in (None, False)))


def set_options(options: dict | None) -> None:
    """The S3 settings (Beam's `s3_*` names) every later `client()` in this process uses;
    clients made before (and the credentials they found) are dropped."""
    global _options, _read_from
    _options = _settings(options)
    _read_from = (None, ())
    _client.cache_clear()
    _beam_io.cache_clear()


def client():
    """A boto3 S3 client with the current settings (one per settings, shared: boto3 clients
    are thread-safe). Connection failures are retried twice, not for minutes."""
    return _client(_options)


def _beam_settings() -> tuple:
    """The settings Beam's FileSystems use in this process (a Pipeline's, a worker's runtime
    options, or a decoding child's from its parent: `transforms.beam_filesystems`);
    `set_options`' when Beam has none. A PipelineOptions is read once: `get_all_options`
    builds Beam's whole argument parser (~3.5 ms of CPU, and two warnings in the log about the
    job's own flags), and this runs for every object read, written, listed or checked."""
    global _read_from
    from transforms.beam_filesystems import filesystem_options
    options = filesystem_options()
    if options is None:
        return _options
    if isinstance(options, dict):
        return _settings(options)
    if _read_from[0] is not options:
        _read_from = (options, _settings(options.get_all_options()))
    return _read_from[1]


def _beam_client():
    """The shared client with the settings of Beam's FileSystems in this process, for a read
    or write inside the graph."""
    return _client(_beam_settings())


@functools.lru_cache(maxsize=4)
def _beam_io(options: tuple):
    """Beam's own S3IO (its multipart uploader, listing, copy-then-delete rename, deletes and
    HEADs) over one Beam S3 client per settings, shared between threads: none of those keeps
    state in that client. Never for reads (a Beam client keeps one download's position):
    those use `_beam_client()`."""
    from apache_beam.io.aws import s3io
    from apache_beam.io.aws.clients.s3 import boto3_client
    return s3io.S3IO(client=boto3_client.Client(options=dict(options)))


def beam_io():
    """Beam's S3IO over the shared client, with the settings of Beam's FileSystems in this
    process: for what must behave as Beam's S3 file system does (its copy-then-delete rename,
    deletes, modification times: `transforms.file_changes`, `file_reads.last_updated`)."""
    return _beam_io(_beam_settings())


def _create_object(path: str, kind: str):
    """What Beam's `S3FileSystem.create(path, compression_type=kind)` returns (the same
    uploader, MIME type and compression), made with the shared client."""
    from apache_beam.io.filesystem import CompressedFile, CompressionTypes
    mime_type = CompressionTypes.mime_type(kind, "application/octet-stream")
    raw = _beam_io(_beam_settings()).open(path, "wb", mime_type=mime_type)
    return raw if kind == CompressionTypes.UNCOMPRESSED else CompressedFile(
        raw, compression_type=kind)


class _EmptySafeWriter:
    """`FileSystems.create` for an `s3://` object that may stay empty: Beam uploads in
    multipart parts and a multipart upload of zero parts fails (MalformedXML), so the upload
    starts with the first bytes and an object closed without any is put empty."""

    def __init__(self, path: str, compression_type: str):
        self._path, self._compression_type = path, compression_type  # detected, never AUTO
        self._handle = None

    def _open(self):
        if self._handle is None:
            self._handle = _create_object(self._path, self._compression_type)
        return self._handle

    def write(self, data) -> int:
        return self._open().write(data) if len(data) else 0

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            return
        bucket, key = split_url(self._path)
        _beam_client().put_object(Bucket=bucket, Key=key, Body=b"")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None or self._handle is not None:  # as Beam's own handle does
            self.close()
        return False


def read_object(url: str, limit: int | None = None) -> bytes:
    """The object's bytes (its first `limit` bytes when given) through the shared client with
    the settings of Beam's FileSystems in this process (`transforms.file_reads`). Errors leave
    as Beam's do, as OSError naming `url` (FileNotFoundError for a missing object)."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, key = split_url(url)
    extra = {} if limit is None else {"Range": f"bytes=0-{max(limit, 1) - 1}"}
    try:
        data = _beam_client().get_object(Bucket=bucket, Key=key, **extra)["Body"].read()
    except (BotoCoreError, ClientError) as exc:
        if isinstance(exc, ClientError) and _error_code(exc) == "InvalidRange":
            return b""  # an empty object has no first byte
        raise _as_os_error(exc, url) from exc
    return data if limit is None else data[:limit]


def _error_code(exc) -> str | None:
    return exc.response.get("Error", {}).get("Code")


def _missing(exc) -> bool:
    """Whether a boto3 error says there is no such object (a GET's code, a HEAD's status)."""
    from botocore.exceptions import ClientError
    return isinstance(exc, ClientError) and (
        _error_code(exc) in ("404", "NoSuchKey")
        or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404)


def _as_os_error(exc, url: str) -> OSError:
    """A boto3 error of a read as Beam's file systems raise it: OSError naming `url`,
    FileNotFoundError for a missing object."""
    if _missing(exc):
        return FileNotFoundError(f"{url}: no such object")
    return OSError(describe_error(exc, url) or f"{url}: {exc}")


class _BodyStream(io.RawIOBase):
    """A boto3 response body as a raw stream, so that `io.BufferedReader` gives it lines,
    `read(n)` and text wrapping."""

    def __init__(self, body):
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._body.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


def open_object(url: str):
    """A buffered binary reader of the object, streamed through the shared client (what
    `FileSystems.open(url, compression_type="uncompressed")` gives). Errors leave as
    `read_object`'s."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, key = split_url(url)
    try:
        body = _beam_client().get_object(Bucket=bucket, Key=key)["Body"]
    except (BotoCoreError, ClientError) as exc:
        raise _as_os_error(exc, url) from exc
    return io.BufferedReader(_BodyStream(body), buffer_size=1 << 20)


def _head(url: str) -> dict | None:
    """The object's HEAD response through the shared client; None when there is no such
    object (Beam's `S3IO.exists` semantics: a "folder" is not an object)."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, key = split_url(url)
    try:
        return _beam_client().head_object(Bucket=bucket, Key=key)
    except (BotoCoreError, ClientError) as exc:
        if _missing(exc):
            return None
        raise _as_os_error(exc, url) from exc


def object_exists(url: str) -> bool:
    """`FileSystems.exists(url)` through the shared client: whether the object exists."""
    return _head(url) is not None


def match_objects(pattern: str) -> list:
    """`FileSystems.match([pattern])[0].metadata_list` through the shared client: Beam's
    `FileMetadata` of each object whose URL matches the glob (Beam's syntax: `*` within a
    level, `**` across levels), listed under the pattern's literal prefix, in listing order."""
    from apache_beam.io.filesystem import FileMetadata, FileSystem
    if pattern.endswith("/"):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern).group(0)
    if prefix == pattern:
        head = _head(pattern)
        return [] if head is None else [FileMetadata(
            pattern, head["ContentLength"], head["LastModified"].timestamp())]
    matcher = re.compile(FileSystem.translate_pattern(pattern)).match
    return [FileMetadata(path, size, updated) for path, (size, updated)
            in _beam_io(_beam_settings()).list_files(prefix, with_metadata=True)
            if matcher(path)]


def create_file(path: str, compression_type: str = "auto"):
    """`FileSystems.create(path, compression_type)`; on `s3://` through the shared client
    (Beam's uploader, `_create_object`), and an empty uncompressed file can be written too
    (`_EmptySafeWriter`). An uncompressed local file is created as Beam's LocalFileSystem
    creates it (its folder made, opened "wb"), without importing Beam: the shard writer's child
    processes import no Beam for local outputs (`transforms.offline.shard_writing`)."""
    if compression_type == "uncompressed" and is_local(path):
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        return open(path, "wb")
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    kind = compression_type
    if kind == CompressionTypes.AUTO:
        kind = CompressionTypes.detect_compression_type(path)
    if is_s3(path):
        if kind == CompressionTypes.UNCOMPRESSED:
            return _EmptySafeWriter(path, kind)
        return _create_object(path, kind)
    return FileSystems.create(path, compression_type=compression_type)


@functools.lru_cache(maxsize=4)
def _client(options: tuple):
    import boto3
    from botocore.config import Config
    settings = dict(options)
    return boto3.session.Session().client(
        "s3", region_name=settings.get("s3_region_name"),
        api_version=settings.get("s3_api_version"),
        use_ssl=not settings.get("s3_disable_ssl", False), verify=settings.get("s3_verify"),
        endpoint_url=settings.get("s3_endpoint_url"),
        aws_access_key_id=settings.get("s3_access_key_id"),
        aws_secret_access_key=settings.get("s3_secret_access_key"),
        aws_session_token=settings.get("s3_session_token"),
        config=Config(connect_timeout=10, read_timeout=60,
                      retries={"max_attempts": 3, "mode": "standard"}))


def describe_error(exc: BaseException, url: str) -> str | None:
    """One line for a boto3 error a user can fix (credentials, region, bucket, permission,
    endpoint), naming `url`; None for anything else."""
    from botocore import exceptions as bx
    bucket = url[len("s3://"):].split("/", 1)[0] if is_s3(url) else url
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return (f"{url}: no AWS credentials found. Set AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an instance role.")
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError,
                        bx.ReadTimeoutError, bx.ConnectionClosedError)):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url", "the S3 endpoint")
        return (f"{url}: {endpoint} does not answer. Check --s3_endpoint_url or "
                f"AWS_ENDPOINT_URL, and the network.")
    if not isinstance(exc, bx.ClientError):
        return None
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    meta = exc.response.get("ResponseMetadata", {})
    status = meta.get("HTTPStatusCode")
    region = meta.get("HTTPHeaders", {}).get("x-amz-bucket-region")
    if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "301") or status == 301:
        where = f" It is in region {region}: pass --s3_region_name {region} or set AWS_REGION."
        return (f"{url}: bucket {bucket!r} is in another region than the one configured."
                + (where if region else " Pass --s3_region_name or set AWS_REGION."))
    if code in ("NoSuchBucket",) or (code == "404" and exc.operation_name == "HeadBucket"):
        return f"{url}: bucket {bucket!r} does not exist."
    if code in ("AccessDenied", "403", "AllAccessDisabled"):
        return (f"{url}: access denied to bucket {bucket!r} for the AWS credentials in use "
                f"(needs s3:ListBucket, s3:GetObject, and s3:PutObject/DeleteObject to write).")
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                "InvalidToken"):
        return f"{url}: the AWS credentials in use are not valid ({code})."
    return None


def _raise_for(exc: BaseException, url: str):
    line = describe_error(exc, url)
    if line is None:
        raise exc
    raise S3Error(line) from exc


def check_bucket(url: str) -> None:
    """Raises S3Error (one line) unless the bucket of `url` exists and these credentials may
    list it: what a job checks before it reads or writes anything."""
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, _ = split_url(url)
    try:
        client().head_bucket(Bucket=bucket)
    except (BotoCoreError, ClientError) as exc:
        _raise_for(exc, url)


def _pattern(glob: str) -> re.Pattern:
    """`*` and `?` within one path level, as `tf.io.gfile.glob`."""
    parts = [{"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char)) for char in glob]
    return re.compile("".join(parts) + r"\Z")


class S3Storage:
    """`transforms.snapshot_layout.Storage` for `s3://` paths through boto3. A "folder" exists
    when some object lies below it. Errors a user can fix raise S3Error."""

    def _call(self, url: str, method: str, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return getattr(client(), method)(**kwargs)
        except (BotoCoreError, ClientError) as exc:
            if _missing(exc):
                raise FileNotFoundError(f"{url}: no such object") from exc
            _raise_for(exc, url)

    def _keys(self, url: str, prefix: str) -> list[tuple[str, dict]]:
        bucket, _ = split_url(url)
        found, token = [], None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = self._call(url, "list_objects_v2", Bucket=bucket, Prefix=prefix, **extra)
            found += [(item["Key"], item) for item in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not token:
                return found

    def glob(self, pattern: str) -> list[str]:
        bucket, key_glob = split_url(pattern)
        prefix = re.split(r"[*?]", key_glob, maxsplit=1)[0]
        matcher = _pattern(key_glob)
        return sorted(f"s3://{bucket}/{key}" for key, _ in self._keys(pattern, prefix)
                      if matcher.match(key))

    def exists(self, path: str) -> bool:
        bucket, key = split_url(path)
        try:
            self._call(path, "head_object", Bucket=bucket, Key=key)
            return True
        except FileNotFoundError:
            page = self._call(path, "list_objects_v2", Bucket=bucket,
                              Prefix=key.rstrip("/") + "/", MaxKeys=1)
            return bool(page.get("KeyCount"))

    def read_bytes(self, path: str) -> bytes:
        bucket, key = split_url(path)
        return self._call(path, "get_object", Bucket=bucket, Key=key)["Body"].read()

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def mtime(self, path: str) -> float:
        bucket, key = split_url(path)
        modified: datetime.datetime = self._call(path, "head_object", Bucket=bucket,
                                                 Key=key)["LastModified"]
        return modified.timestamp()

    def download(self, path: str, local_path: str) -> None:
        """Copies the object to `local_path` (multipart, in parallel parts for large ones)."""
        from boto3.exceptions import S3TransferFailedError
        from botocore.exceptions import BotoCoreError, ClientError
        bucket, key = split_url(path)
        try:
            client().download_file(bucket, key, local_path)
        except (BotoCoreError, ClientError, S3TransferFailedError) as exc:
            _raise_for(exc, path)


S3_FILES = S3Storage()
