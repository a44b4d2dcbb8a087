"""The output layout's one owner: shard names and their parsing, committed/latest selection, the
one Snapshot type, and the same answers through tf.io.gfile (the reader) and Beam (the job)."""
from __future__ import annotations

import os
import time

import pytest

from pipelines.snapshot import BEAM_FILES
from tests.fake_snapshot import write_synthetic_snapshot
from transforms import snapshot_layout as layout


@pytest.mark.parametrize("compression,suffix", [("none", ""), ("gzip", ".gz")])
def test_shard_name_round_trips_through_the_parser(compression, suffix):
    rel = layout.shard_name("images", "train", 3, 8, compression)
    assert rel == f"train/images-train.tfrecord-00003-of-00008{suffix}"
    assert layout.parse_shard_name(f"gs://b/out/snapshots/r/{rel}", "images", "train") == (
        3, 8, compression == "gzip")
    assert layout.tfrecord_compression(rel) == ("GZIP" if suffix else "")


@pytest.mark.parametrize("filename", [
    "images-validation.tfrecord-00000-of-00001",   # another split
    "photos-train.tfrecord-00000-of-00001",        # another name
    "images-train.tfrecord-00000-of-00001.tmp",    # a temporary file
    "images-train.tfrecord-0-of",                  # not a series
])
def test_other_files_are_not_shards(filename):
    assert layout.parse_shard_name(filename, "images", "train") is None


def test_snapshot_equality_is_run_id_and_path():
    published = layout.Snapshot("r1", "/out/snapshots/r1", accounting={"ok": True}, stats={},
                                manifest={"run_id": "r1"})
    assert published == layout.Snapshot("r1", "/out/snapshots/r1")
    assert published != layout.Snapshot("r2", "/out/snapshots/r2")
    assert hash(published) == hash(layout.Snapshot("r1", "/out/snapshots/r1"))


def test_paths_follow_the_layout():
    assert layout.snapshot_dir("gs://b/out/", "r1") == "gs://b/out/snapshots/r1"
    assert layout.staging_dir("/out", "r1") == "/out/.staging/r1"
    assert layout.work_file("/out/.staging/r1", "counts.json") == (
        "/out/.staging/r1/_work/counts.json")
    assert sorted([layout.new_run_id(), "20000101T000000000000Z"])[0] == "20000101T000000000000Z"


@pytest.fixture()
def two_runs(tmp_path):
    """run1 and run2 committed (run2's manifest newer), run3 uncommitted, LATEST -> run1."""
    root = str(tmp_path)
    for run_id, commit in (("run1", True), ("run2", True), ("run3", False)):
        write_synthetic_snapshot(root, counts={"train": 2}, image_size=8, num_shards=1,
                                 run_id=run_id, commit=commit)
    old = time.time() - 100
    os.utime(f"{root}/snapshots/run1/manifest.json", (old, old))
    with open(f"{root}/LATEST", "w") as handle:
        handle.write("run1\n")
    return root


@pytest.mark.parametrize("storage", [layout.GFILE, BEAM_FILES], ids=["gfile", "beam"])
def test_committed_and_latest_agree_through_both_file_apis(two_runs, storage):
    committed = layout.committed_snapshots(two_runs, storage)
    assert committed == [layout.Snapshot("run1", f"{two_runs}/snapshots/run1"),
                         layout.Snapshot("run2", f"{two_runs}/snapshots/run2")]
    assert layout.read_latest(two_runs, storage) == "run1"
    assert layout.latest_snapshot(two_runs, storage).run_id == "run1"
    with open(f"{two_runs}/LATEST", "w") as handle:
        handle.write("run3\n")  # uncommitted: the newest manifest wins
    assert layout.latest_snapshot(two_runs, storage).run_id == "run2"
    os.remove(f"{two_runs}/LATEST")
    assert layout.read_latest(two_runs, storage) is None
    assert layout.latest_snapshot(two_runs, storage).run_id == "run2"


def test_nothing_committed(tmp_path):
    assert layout.committed_snapshots(str(tmp_path)) == []
    assert layout.read_latest(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="No committed snapshot"):
        layout.latest_snapshot(str(tmp_path))


def test_list_split_shards_skips_a_snapshot_without_the_split(tmp_path):
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 2}, image_size=8, num_shards=1,
                             run_id="run1")
    write_synthetic_snapshot(root, counts={"validation": 2}, image_size=8, num_shards=1,
                             run_id="run2")
    both = layout.committed_snapshots(root)
    files = layout.list_split_shards(both, "validation")
    assert [f.rsplit("/", 3)[-3] for f in files] == ["run2"]
    with pytest.raises(FileNotFoundError, match="No shards for split 'test' in the 2 selected"):
        layout.list_split_shards(both, "test")
    with pytest.raises(FileNotFoundError, match="No shards for split 'validation' in snapshot "
                                                "'run1'"):
        layout.list_split_shards(both[:1], "validation")
