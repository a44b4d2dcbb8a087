"""S3 without the job: the reader's storage, the one-line errors and the run lock's
compare-and-swap, against a local S3 server (`tests.s3util`)."""
from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest
from botocore.exceptions import ClientError

from runners.errors import LockHeld, UsageError
from runners.jobs import preprocess
from runners.locking import run_lock
from transforms import s3_storage
from transforms.snapshot_layout import GFILE


def _beam_options(monkeypatch, local_s3, *flags) -> None:
    """Beam's FileSystems with the local server's options (and `flags`), undone at the end."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    FileSystems.set_options(PipelineOptions([*local_s3.flags, *flags]))


def _clients_made(monkeypatch) -> list:
    """A list that every boto3 client made from now on (Beam's or ours) is appended to."""
    import botocore.session
    created = []
    original = botocore.session.Session.create_client
    monkeypatch.setattr(botocore.session.Session, "create_client",
                        lambda self, *a, **k: created.append(a) or original(self, *a, **k))
    return created


def test_storage_reads_globs_and_times(local_s3):
    url = local_s3.bucket("pm-storage")
    for key in ("out/snapshots/1/manifest.json", "out/snapshots/2/manifest.json",
                "out/snapshots/2/train/a.tfrecord", "out/LATEST"):
        local_s3.client.put_object(Bucket="pm-storage", Key=key, Body=key.encode())
    assert GFILE.glob(f"{url}/out/snapshots/*/manifest.json") == [
        f"{url}/out/snapshots/1/manifest.json", f"{url}/out/snapshots/2/manifest.json"]
    assert GFILE.glob(f"{url}/out/snapshots/*/*") == [
        f"{url}/out/snapshots/1/manifest.json", f"{url}/out/snapshots/2/manifest.json"]
    assert GFILE.read_text(f"{url}/out/LATEST") == "out/LATEST"
    assert GFILE.exists(f"{url}/out/snapshots/2/train")  # a "folder": objects below it
    assert not GFILE.exists(f"{url}/out/snapshots/3")
    assert GFILE.mtime(f"{url}/out/LATEST") > time.time() - 3600
    with pytest.raises(FileNotFoundError, match="no such object"):
        GFILE.read_text(f"{url}/out/missing")


def test_file_reads_go_through_one_client_with_beams_settings(local_s3, monkeypatch):
    """`file_reads.read_bytes` on s3:// gives Beam's bytes and errors, and creates no boto3
    client per read (Beam's file system makes one per open: ~110 ms of CPU each)."""
    from apache_beam.io.filesystems import FileSystems

    from transforms.file_reads import read_bytes
    url = local_s3.bucket("pm-reads")
    for key, body in (("a.bin", bytes(range(256)) * 3), ("empty", b"")):
        local_s3.client.put_object(Bucket="pm-reads", Key=key, Body=body)
    _beam_options(monkeypatch, local_s3)
    with FileSystems.open(f"{url}/a.bin", compression_type="uncompressed") as handle:
        beams = handle.read()
    assert read_bytes(f"{url}/a.bin") == beams == bytes(range(256)) * 3
    created = _clients_made(monkeypatch)
    assert [read_bytes(f"{url}/a.bin", limit) for limit in (0, 1, 5, 10_000)] == [
        b"", b"\x00", bytes(range(5)), beams]
    assert read_bytes(f"{url}/empty") == read_bytes(f"{url}/empty", 10) == b""
    with pytest.raises(FileNotFoundError, match="pm-reads/missing: no such object"):
        read_bytes(f"{url}/missing")
    assert created == []


def test_writes_exists_listings_and_streams_give_beams_answers_through_one_client(
        local_s3, monkeypatch):
    """`create_file`, `file_reads.exists`, `match` and `open_file` on s3:// give what Beam's
    FileSystems give (the same object bytes and MIME types, gzip included; the same glob
    answers), and, once the shared clients exist, create no boto3 client per call."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms import file_reads
    url = local_s3.bucket("pm-writes")
    _beam_options(monkeypatch, local_s3)
    s3_storage.set_options(None)  # as the fixture left it, with no client made yet
    lines = b"".join(b"line %d\n" % i for i in range(5000))
    for name in ("a.txt", "a.txt.gz"):  # Beam cannot write an empty object (MalformedXML)
        with FileSystems.create(f"{url}/beam/{name}") as handle:
            handle.write(lines)
    created = _clients_made(monkeypatch)
    for name in ("a.txt", "empty.txt", "a.txt.gz", "x/deep/b.txt"):
        with s3_storage.create_file(f"{url}/ours/{name}") as handle:
            handle.write(b"" if name == "empty.txt" else lines)
        if name == "empty.txt":
            warm = len(created)  # the two shared clients (Beam's uploader, boto3's), made once
    assert local_s3.read(f"{url}/ours/empty.txt") == b""
    for name in ("a.txt", "a.txt.gz"):
        beams = local_s3.client.get_object(Bucket="pm-writes", Key=f"beam/{name}")
        ours = local_s3.client.get_object(Bucket="pm-writes", Key=f"ours/{name}")
        assert ours["Body"].read() == beams["Body"].read(), name
        assert ours["ContentType"] == beams["ContentType"], name
    with file_reads.open_file(f"{url}/ours/a.txt") as handle:
        assert list(handle) == lines.splitlines(keepends=True)
    for path, expected in (("ours/a.txt", True), ("ours/x", False), ("ours/none", False)):
        assert file_reads.exists(f"{url}/{path}") is expected, path
    assert warm == 2 and created[warm:] == []
    monkeypatch.undo()
    FileSystems.set_options(PipelineOptions(local_s3.flags))
    for pattern in ("ours/*", "ours/**", "ours/a.txt", "ours/none", "ours/", "ours/x/*/*.txt",
                    "our?/a.txt*", "nothing/**"):
        beams = [(m.path, m.size_in_bytes) for m in FileSystems.match([f"{url}/{pattern}"])[
            0].metadata_list]
        assert [(m.path, m.size_in_bytes) for m in file_reads.match(f"{url}/{pattern}")] == (
            beams), pattern
        assert FileSystems.exists(f"{url}/{pattern}") == file_reads.exists(f"{url}/{pattern}")


def test_times_renames_and_deletes_give_beams_answers_through_one_client(local_s3, monkeypatch):
    """`file_reads.last_updated`, `file_changes.rename` and `file_changes.delete` on s3:// do
    what Beam's FileSystems do (the same times, the same objects moved and removed, folders
    too; Beam's BeamIOError for what fails), and, once the shared client exists, create no
    boto3 client per call (Beam's file system makes one per call: ~0.1 s of CPU each)."""
    from apache_beam.io.filesystem import BeamIOError
    from apache_beam.io.filesystems import FileSystems

    from transforms import file_changes, file_reads
    url = local_s3.bucket("pm-moves")
    for key in ("a", "b", "c", "d", "dir/x", "dir/sub/y", "keep/z"):
        local_s3.client.put_object(Bucket="pm-moves", Key=key, Body=key.encode())
    _beam_options(monkeypatch, local_s3)
    file_reads.last_updated(f"{url}/a")  # the shared client, made once
    created = _clients_made(monkeypatch)
    for key in ("a", "dir/x"):
        assert file_reads.last_updated(f"{url}/{key}") == pytest.approx(
            FileSystems.last_updated(f"{url}/{key}"))
    before = len(created)  # Beam's calls above made theirs
    file_changes.rename([f"{url}/a", f"{url}/b"], [f"{url}/moved/a", f"{url}/moved/b"])
    file_changes.delete([f"{url}/c", f"{url}/dir/", f"{url}/none"])
    assert created[before:] == []
    assert local_s3.keys("pm-moves") == ["d", "keep/z", "moved/a", "moved/b"]
    assert local_s3.read(f"{url}/moved/a") == b"a"
    for call in (lambda: file_changes.rename([f"{url}/none"], [f"{url}/e"]),
                 lambda: file_changes.rename([f"{url}/d"], []),
                 lambda: file_reads.last_updated(f"{url}/none")):
        with pytest.raises(BeamIOError):
            call()
    assert local_s3.keys("pm-moves") == ["d", "keep/z", "moved/a", "moved/b"]


def test_beams_s3_settings_are_read_once_per_options(local_s3, monkeypatch):
    """The settings of Beam's options are parsed once per PipelineOptions, not per object
    read (`get_all_options`: ~3.5 ms and two log warnings each); new options are read anew."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.file_reads import read_bytes
    url = local_s3.bucket("pm-settings")
    local_s3.client.put_object(Bucket="pm-settings", Key="a", Body=b"a")
    _beam_options(monkeypatch, local_s3, "--job_flag", "x")
    parsed = []
    original = PipelineOptions.get_all_options
    monkeypatch.setattr(PipelineOptions, "get_all_options",
                        lambda self, *a, **k: parsed.append(1) or original(self, *a, **k))
    assert [read_bytes(f"{url}/a") for _ in range(5)] == [b"a"] * 5
    assert len(parsed) == 1
    FileSystems.set_options(PipelineOptions([f"--s3_endpoint_url={local_s3.endpoint}/",
                                             "--s3_region_name=us-east-1"]))
    assert read_bytes(f"{url}/a") == b"a"
    assert len(parsed) == 2
    assert dict(s3_storage._beam_settings())["s3_endpoint_url"] == local_s3.endpoint + "/"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_missing_bucket_is_one_line(local_s3):
    with pytest.raises(s3_storage.S3Error, match=r"bucket 'pm-nowhere' does not exist"):
        s3_storage.check_bucket("s3://pm-nowhere/images")
    with pytest.raises(UsageError, match=r"^s3://pm-nowhere/out: bucket 'pm-nowhere' does not "
                                         r"exist\.$"):
        preprocess.parse_options(["--data_root", "x", "--output_dir", "s3://pm-nowhere/out",
                                  *local_s3.flags])


def test_endpoint_that_does_not_answer(local_s3):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    s3_storage.set_options({"s3_endpoint_url": endpoint})
    try:
        with pytest.raises(s3_storage.S3Error, match=rf"^s3://pm-any/x: .*{endpoint}.* does "
                                                     r"not answer\. Check --s3_endpoint_url"):
            s3_storage.check_bucket("s3://pm-any/x")
    finally:
        s3_storage.set_options(None)


def test_no_credentials(local_s3, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    s3_storage.set_options(None)  # drop the clients that found credentials
    try:
        with pytest.raises(s3_storage.S3Error, match=r"^s3://pm-any/x: no AWS credentials"):
            s3_storage.check_bucket("s3://pm-any/x")
    finally:
        monkeypatch.undo()
        s3_storage.set_options(None)


def test_access_denied_and_wrong_region_lines():
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject")
    assert s3_storage.describe_error(denied, "s3://pm-b/k").startswith(
        "s3://pm-b/k: access denied to bucket 'pm-b'")
    moved = ClientError({"Error": {"Code": "301", "Message": "Moved Permanently"},
                         "ResponseMetadata": {"HTTPStatusCode": 301, "HTTPHeaders": {
                             "x-amz-bucket-region": "eu-west-1"}}}, "HeadBucket")
    assert s3_storage.describe_error(moved, "s3://pm-b/k") == (
        "s3://pm-b/k: bucket 'pm-b' is in another region than the one configured. It is in "
        "region eu-west-1: pass --s3_region_name eu-west-1 or set AWS_REGION.")


def test_access_denied_by_bucket_policy(local_s3):
    url = local_s3.bucket("pm-denied")
    local_s3.client.put_object(Bucket="pm-denied", Key="LATEST", Body=b"1\n")
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::pm-denied/*"}]}
    local_s3.client.put_bucket_policy(Bucket="pm-denied", Policy=json.dumps(policy))
    try:
        with pytest.raises(s3_storage.S3Error, match=r"^s3://pm-denied/LATEST: access denied"):
            GFILE.read_text(f"{url}/LATEST")
    finally:
        local_s3.client.delete_bucket_policy(Bucket="pm-denied")


def test_a_retried_join_removes_every_run_left_on_s3_a_failed_bundles_too(local_s3):
    """On an object store a folder goes when its last object does: a retried join that finds
    its output whole removes every object left under the runs' prefix, the runs no list names
    (a failed bundle's) included."""
    from transforms.offline import outputs
    bucket = local_s3.bucket("pm-join")
    keys = ["staging/runs/run-0", "staging/runs/run-1", "staging/runs/failed-bundle-run",
            "staging/rejects.jsonl"]
    for key in keys:
        local_s3.client.put_object(Bucket="pm-join", Key=key, Body=b"x")
    local_s3.client.delete_object(Bucket="pm-join", Key="staging/runs/run-0")
    runs = [f"{bucket}/staging/runs/run-0", f"{bucket}/staging/runs/run-1"]
    assert outputs.already_joined(runs, f"{bucket}/staging/rejects.jsonl",
                                  f"{bucket}/staging/runs")
    assert local_s3.keys("pm-join") == ["staging/rejects.jsonl"]


def test_lock_create_heartbeat_and_loss(local_s3):
    url = local_s3.bucket("pm-lock") + "/out"
    with run_lock.RunLock(url, "run-a", heartbeat_s=0.05) as lock:
        with pytest.raises(LockHeld, match="run run-a"):
            run_lock.RunLock(url, "run-b").__enter__()
        time.sleep(0.2)  # a few heartbeats: each replaces its own ETag
        lock.check()
        local_s3.client.put_object(Bucket="pm-lock", Key="out/.lock", Body=b"{}")
        with pytest.raises(run_lock.LockLost):
            lock.check()
    assert local_s3.keys("pm-lock") == ["out/.lock"]  # someone else's: left alone
    local_s3.client.delete_object(Bucket="pm-lock", Key="out/.lock")
    with run_lock.RunLock(url, "run-c"):
        assert local_s3.keys("pm-lock") == ["out/.lock"]
    assert local_s3.keys("pm-lock") == []  # released


def _wait_until_older_than(local_s3, bucket: str, key: str, seconds: float) -> None:
    """Returns once the object's S3 time (LastModified, whole seconds) is more than `seconds`
    old by this machine's clock: the age the lock's staleness check computes."""
    written = local_s3.client.head_object(Bucket=bucket, Key=key)["LastModified"].timestamp()
    while time.time() - written <= seconds:
        time.sleep(0.05)


def test_lock_takeover_race_has_one_winner(local_s3):
    """Three races, each over its own output's stale lock; the three locks age together."""
    bucket = local_s3.bucket("pm-race")
    for attempt in range(3):
        stale = json.dumps({"run_id": f"dead-{attempt}", "pid": 1, "host": "elsewhere"})
        local_s3.client.put_object(Bucket="pm-race", Key=f"out{attempt}/.lock",
                                   Body=stale.encode())
    # older than stale_after_s below (S3 times are whole seconds, so a fresh lock may look up
    # to 1 s old: the stale limit stays above that); the last written is the youngest
    _wait_until_older_than(local_s3, "pm-race", "out2/.lock", 2.0 + 0.1)
    for attempt in range(3):
        url = f"{bucket}/out{attempt}"
        start, results = threading.Barrier(4), {}
        locks = {}

        def take(name, url=url, start=start, locks=locks, results=results):
            lock = run_lock.RunLock(url, name, stale_after_s=2.0, heartbeat_s=30)
            start.wait()
            try:
                locks[name] = lock.__enter__()
                results[name] = "won"
            except LockHeld:
                results[name] = "held"
        threads = [threading.Thread(target=take, args=(f"run-{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results.values()) == ["held", "held", "held", "won"], results
        (winner, lock), = locks.items()
        assert json.loads(local_s3.read(f"{url}/.lock"))["run_id"] == winner
        lock.check()
        lock.__exit__(None, None, None)


def test_reader_copies_shards_once_and_reads_the_same_batches(local_s3, tmp_path):
    from configs.schema import load_config
    from pipelines.training_input import make_dataset
    from tests.fake_snapshot import write_synthetic_snapshot
    write_synthetic_snapshot(str(tmp_path / "out"), counts={"train": 12}, run_id="r1")
    local_s3.upload_tree(tmp_path / "out", local_s3.bucket("pm-reader") + "/out")
    config = load_config(overrides=["online.image_size=32"])

    def batches(output_dir, **kwargs):
        return [images.numpy() for images, _ in make_dataset(
            output_dir, batch_size=4, config=config, seed=3, augment=False, **kwargs)]
    cache = tmp_path / "cache"
    expected = batches(str(tmp_path / "out"))
    assert len(expected) == 3
    for a, b in zip(expected, batches("s3://pm-reader/out", cache_dir=str(cache))):
        np.testing.assert_array_equal(a, b)
    shard = cache / "pm-reader/out/snapshots/r1/train/images-train.tfrecord-00000-of-00002"
    stamp = shard.stat().st_mtime_ns
    batches("s3://pm-reader/out", cache_dir=str(cache))
    assert shard.stat().st_mtime_ns == stamp  # reused, not downloaded again
    with pytest.raises(ValueError, match="cache_dir must be a local folder path"):
        make_dataset("s3://pm-reader/out", cache_dir="s3://elsewhere")


def test_a_childs_pending_options_apply_at_its_first_use_past_local_files(monkeypatch,
                                                                          tmp_path):
    """A decoding child gets its parent's FileSystems options pickled: a local read leaves
    them pending (no Beam import needed), the first use of Beam's FileSystems applies them."""
    import pickle

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms import file_reads
    from transforms.beam_filesystems import apply_options_on_first_use
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)  # undone at the end
    apply_options_on_first_use(pickle.dumps(PipelineOptions(["--s3_region_name=eu-west-3"])))
    (tmp_path / "a.bin").write_bytes(b"abc")
    assert file_reads.read_bytes(str(tmp_path / "a.bin")) == b"abc"
    assert FileSystems._pipeline_options is None
    assert [m.path for m in file_reads.match(str(tmp_path / "*.bin"))] == [
        str(tmp_path / "a.bin")]
    assert FileSystems._pipeline_options.get_all_options()["s3_region_name"] == "eu-west-3"


def test_a_childs_pending_options_are_the_settings_of_its_first_s3_use(monkeypatch):
    """The S3 settings are read where every `s3://` use reads them (`s3_storage`), so pending
    options apply there too, whichever call comes first."""
    import pickle

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.beam_filesystems import apply_options_on_first_use
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)  # undone at the end
    apply_options_on_first_use(pickle.dumps(PipelineOptions(["--s3_region_name=eu-west-3"])))
    assert ("s3_region_name", "eu-west-3") in s3_storage._beam_settings()
