"""An S3-compatible server for the tests: moto's, in a thread of the test process, on a free
port of 127.0.0.1, with fake credentials; never the network."""
from __future__ import annotations

import contextlib
import logging
import os

import pytest

REGION = "us-east-1"


class LocalS3:
    """A running local S3 server: its `endpoint`, the Beam flags that reach it, a boto3
    `client`, and helpers to upload and list."""

    def __init__(self, endpoint: str):
        import boto3
        self.endpoint = endpoint
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                                   aws_access_key_id="testing",
                                   aws_secret_access_key="testing")

    @property
    def flags(self) -> list[str]:
        return [f"--s3_endpoint_url={self.endpoint}", f"--s3_region_name={REGION}"]

    def bucket(self, name: str) -> str:
        """A fresh (emptied) bucket named `name`; returns `s3://name`."""
        with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
            self.client.create_bucket(Bucket=name)
        for key in self.keys(name):
            self.client.delete_object(Bucket=name, Key=key)
        return f"s3://{name}"

    def upload_tree(self, folder, url: str) -> None:
        """Every file under local `folder` to `url/<relative path>`."""
        bucket, _, prefix = url[len("s3://"):].partition("/")
        for base, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(base, name)
                rel = os.path.relpath(path, folder).replace(os.sep, "/")
                self.client.upload_file(path, bucket, "/".join(p for p in (prefix, rel) if p))

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                     Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def read(self, url: str) -> bytes:
        bucket, _, key = url[len("s3://"):].partition("/")
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture(scope="session")
def local_s3():
    """The session's local S3 server, with AWS_* set to fake credentials, its region and its
    endpoint (what boto3 and the training reader read); all undone at the end."""
    from moto.server import ThreadedMotoServer

    from transforms import s3_storage
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        patch.setenv("AWS_REGION", REGION)
        patch.setenv("AWS_ENDPOINT_URL", endpoint)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        s3_storage.set_options(None)
        try:
            yield LocalS3(endpoint)
        finally:
            s3_storage.set_options(None)
            server.stop()
