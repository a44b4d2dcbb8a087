"""`pixelmill verify` (issue 20): a clean snapshot verifies; a truncated shard, a flipped byte
(in a record's data, in a length field), a missing DALI index, a wrong manifest hash, a broken
gzip shard and accounting that does not add up are each found and named, one line per file."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import types

import pytest

from runners.errors import UsageError
from runners.jobs import verify
from tests.conftest import write_folder_images
from tests.jobutil import run_job
from tests.tiers import slow_fixture
from transforms.offline.tfrecord_framing import frame_record

SHARD = "train/images-train.tfrecord-00000-of-00001"
INDEX = "train/dali_index/images-train.tfrecord-00000-of-00001.idx"


@slow_fixture(scope="module")
def job_output(tmp_path_factory):
    """The real job on the six-image folder corpus, every image in one train shard.
    Read-only: tests corrupt a copy (`corruptible`)."""
    base = tmp_path_factory.mktemp("verify")
    root = write_folder_images(base / "images")
    snapshot = run_job(root, base / "out", sets=[
        "output.num_shards=1", "split.train=1.0", "split.validation=0.0", "split.test=0.0"])
    return types.SimpleNamespace(out=str(base / "out"), run_id=snapshot.run_id)


@pytest.fixture()
def corruptible(job_output, tmp_path):
    out = str(tmp_path / "out")
    shutil.copytree(job_output.out, out)
    snapshot = os.path.join(out, "snapshots", job_output.run_id)
    return types.SimpleNamespace(out=out, snapshot=snapshot, run_id=job_output.run_id,
                                 path=lambda rel: os.path.join(snapshot, rel))


def _verify(capsys, *argv) -> tuple[int, list[str]]:
    code = verify.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def _offsets(index_path) -> list[tuple[int, int]]:
    return [tuple(map(int, line.split())) for line in open(index_path)]


def _flip(path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))


def _manifest_entry(snapshot, rel) -> dict:
    manifest = json.load(open(os.path.join(snapshot, "manifest.json")))
    return next(entry for entry in manifest["files"] if entry["path"] == rel)


def test_a_clean_snapshot_verifies(job_output, capsys):
    code, lines = _verify(capsys, job_output.out)
    files = len(json.load(open(os.path.join(job_output.out, "snapshots", job_output.run_id,
                                            "manifest.json")))["files"])
    assert lines == [f"pixelmill verify: 1 snapshot(s), {files} files: all verified"]
    assert code == 0
    assert _verify(capsys, job_output.out, "--snapshot", job_output.run_id)[0] == 0


def test_a_truncated_shard_is_named(corruptible, capsys):
    shard = corruptible.path(SHARD)
    (offset, size), *_ = _offsets(corruptible.path(INDEX))[-1:]
    full = os.path.getsize(shard)
    with open(shard, "r+b") as handle:
        handle.truncate(full - 10)
    code, lines = _verify(capsys, corruptible.out)
    assert code == 1
    assert lines[:-1] == [
        f"{shard}: record at byte {offset}: truncated: {size - 10} of {size} bytes; "
        f"{full - 10} bytes, manifest.json says {full}"]
    assert lines[-1].endswith(": 1 broken")


def test_a_flipped_byte_in_a_record_is_named(corruptible, capsys):
    shard = corruptible.path(SHARD)
    offset, size = _offsets(corruptible.path(INDEX))[1]
    _flip(shard, offset + 12 + 40)  # inside the second record's data
    digest = hashlib.sha256(open(shard, "rb").read()).hexdigest()
    code, lines = _verify(capsys, corruptible.out)
    assert code == 1
    assert lines[:-1] == [
        f"{shard}: record at byte {offset}: data CRC mismatch; sha256 {digest[:12]}..., "
        f"manifest.json says {_manifest_entry(corruptible.snapshot, SHARD)['sha256'][:12]}..."]


def test_a_flipped_byte_in_a_length_field_is_named(corruptible, capsys):
    shard = corruptible.path(SHARD)
    offset, _ = _offsets(corruptible.path(INDEX))[2]
    _flip(shard, offset + 1)  # the third record's length
    code, lines = _verify(capsys, corruptible.out)
    assert code == 1
    assert len(lines) == 2
    assert lines[0].startswith(f"{shard}: record at byte {offset}: length CRC mismatch; sha256 ")


def test_a_missing_dali_index_is_named(corruptible, capsys):
    os.remove(corruptible.path(INDEX))
    code, lines = _verify(capsys, corruptible.out)
    assert code == 1
    assert lines[:-1] == [f"{corruptible.path(INDEX)}: missing (listed in manifest.json)"]


def test_a_dali_index_that_does_not_match_its_shard_is_named(corruptible, capsys):
    index = corruptible.path(INDEX)
    lines_before = open(index).read().splitlines(keepends=True)
    text = "".join(lines_before[:1] + lines_before[2:])
    with open(index, "w") as handle:
        handle.write(text)
    manifest_path = os.path.join(corruptible.snapshot, "manifest.json")
    manifest = json.load(open(manifest_path))
    for entry in manifest["files"]:
        if entry["path"] == INDEX:  # the manifest agrees with the wrong index: only DALI's check
            entry.update(bytes=len(text), sha256=hashlib.sha256(text.encode()).hexdigest())
    json.dump(manifest, open(manifest_path, "w"))
    code, lines = _verify(capsys, corruptible.out)
    assert lines[:-1] == [f"{index}: does not match the records of {SHARD}: line 2 "
                          f"({len(lines_before) - 1} lines, the shard has {len(lines_before)} "
                          f"records)"]
    assert code == 1


def test_a_wrong_manifest_hash_is_named(corruptible, capsys):
    manifest_path = os.path.join(corruptible.snapshot, "manifest.json")
    manifest = json.load(open(manifest_path))
    entry = next(e for e in manifest["files"] if e["path"] == "stats.json")
    real = entry["sha256"]
    entry["sha256"] = "0" * 64
    json.dump(manifest, open(manifest_path, "w"))
    code, lines = _verify(capsys, corruptible.out)
    assert lines[:-1] == [f"{corruptible.path('stats.json')}: sha256 {real[:12]}..., "
                          f"manifest.json says 000000000000..."]
    assert code == 1


def test_uncommitted_folders_are_warnings_and_errors_when_named(corruptible, capsys):
    broken = os.path.join(corruptible.out, "snapshots", "broken")
    os.makedirs(broken)
    open(os.path.join(broken, "manifest.json"), "w").close()
    killed = os.path.join(corruptible.out, "snapshots", "killed", "train")
    os.makedirs(killed)
    open(os.path.join(killed, "x"), "w").close()
    code, lines = _verify(capsys, corruptible.out)
    assert lines[:2] == [
        f"warning: {broken}/manifest.json: empty: not committed",
        f"warning: {os.path.dirname(killed)}/manifest.json: missing: never committed (a run "
        f"writing, or one that died)"]
    assert code == 0
    code, lines = _verify(capsys, corruptible.out, "--snapshot", "broken")
    assert (code, lines[0]) == (1, f"{broken}/manifest.json: empty: not committed")


def test_bad_usage_is_exit_2(tmp_path, capsys):
    from runners import cli
    assert cli.main(["verify"]) == 2
    assert cli.main(["verify", str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "snapshots").mkdir()
    with pytest.raises(UsageError, match="No snapshot 'r1'"):
        verify.main([str(tmp_path), "--snapshot", "r1"])


# A snapshot made by hand: gzip shards and accounting, without running the job.

def _hand_made(tmp_path, shard: bytes, accounting: dict, splits: dict):
    snapshot = tmp_path / "out" / "snapshots" / "r1"
    (snapshot / "train").mkdir(parents=True)
    rel = "train/images-train.tfrecord-00000-of-00001.gz"
    (snapshot / rel).write_bytes(shard)
    manifest = {"files": [{"path": rel, "bytes": len(shard),
                           "sha256": hashlib.sha256(shard).hexdigest(), "records": 3}],
                "accounting": accounting, "splits": splits}
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    return str(tmp_path / "out"), str(snapshot / rel)


GOOD_ACCOUNTING = {"images": {"discovered": 4, "accepted": 3, "rejected": 1, "skipped": 0,
                              "ok": True}, "ok": True}


def test_a_gzip_shard_is_decompressed_and_checked(tmp_path, capsys):
    records = b"".join(frame_record(b"record %d" % i) for i in range(3))
    out, _ = _hand_made(tmp_path / "good", gzip.compress(records, mtime=0), GOOD_ACCOUNTING,
                        {"train": 3})
    assert _verify(capsys, out) == (0, ["pixelmill verify: 1 snapshot(s), 1 files: "
                                        "all verified"])
    cut = gzip.compress(records, mtime=0)[:-12]
    out, shard = _hand_made(tmp_path / "cut", cut, GOOD_ACCOUNTING, {"train": 3})
    code, lines = _verify(capsys, out)
    assert code == 1
    assert lines[0] == (f"{shard}: gzip stream: Compressed file ended before the "
                        f"end-of-stream marker was reached")


def test_accounting_that_does_not_add_up_is_named(tmp_path, capsys):
    records = b"".join(frame_record(b"record %d" % i) for i in range(3))
    accounting = {"images": {"discovered": 5, "accepted": 3, "rejected": 1, "skipped": 0,
                             "ok": True}, "ok": True}
    out, _ = _hand_made(tmp_path, gzip.compress(records, mtime=0), accounting,
                        {"train": 4, "test": 0})
    code, lines = _verify(capsys, out)
    manifest = os.path.join(out, "snapshots", "r1", "manifest.json")
    assert lines[:-1] == [
        f"{manifest}: accounting.images (ok=True): discovered 5 vs accepted 3 + rejected 1 + "
        f"skipped 0; splits.train is 4, the shards hold 3 records"]
    assert code == 1
