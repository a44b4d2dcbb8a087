"""The index table's columns and names: `path` is root-relative, `reason` holds only reject
reasons (the split is in `split`), and an index written by an older version (with `outcome`)
is still read back by nightly."""
from __future__ import annotations

import hashlib
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runners.jobs import nightly
from tests.imageutil import photo_bytes
from tests.jobutil import index_rows
from transforms.offline.image_record import ImageRecord
from transforms.offline.index_table import INDEX_COLUMNS, record_row, upgrade_row


def test_record_row_names_root_relative_path_file_bytes_and_reason():
    record = ImageRecord(uri="/data/root/cat/a.jpg", path="cat/a.jpg", file_bytes=1234,
                         split="train", label="cat", label_id=0)
    row = record_row(record, shard="train/images-train.tfrecord-00000-of-00001")
    assert (row["path"], row["bytes"], row["reason"], row["split"]) == (
        "cat/a.jpg", 1234, None, "train")
    rejected = record_row(record.rejected("blurry", "blur 3 < 25"))
    assert (rejected["path"], rejected["reason"], rejected["split"], rejected["accepted"]) == (
        "cat/a.jpg", "blurry", None, False)
    assert "outcome" not in INDEX_COLUMNS and "reason" in INDEX_COLUMNS


def test_upgrade_row_maps_the_old_outcome_column():
    old_accepted = {"path": "a.jpg", "outcome": "train", "accepted": True, "split": "train"}
    old_rejected = {"path": "b.jpg", "outcome": "blurry", "accepted": False, "split": None}
    assert upgrade_row(old_accepted) == {"path": "a.jpg", "reason": None, "accepted": True,
                                         "split": "train", "center_phash": None,
                                         "orientation": None}
    assert upgrade_row(old_rejected) == {"path": "b.jpg", "reason": "blurry", "accepted": False,
                                         "split": None, "center_phash": None,
                                         "orientation": None}
    current = {"path": "c.jpg", "reason": "unlabeled", "accepted": False, "split": None,
               "center_phash": "00000000ffffffff", "orientation": 1}
    assert upgrade_row(current) == current


def test_an_index_from_before_center_phash_reads_with_none_there():
    old = {"path": "d.jpg", "reason": None, "accepted": True, "split": "train",
           "phash": "0123456789abcdef"}
    assert upgrade_row(old) == {**old, "center_phash": None, "orientation": None}


def _jpeg(seed: int, class_index: int) -> bytes:
    return photo_bytes(seed, 96, 128, class_index)


def _downgrade_index(snapshot_path: str) -> None:
    """Rewrites an index.parquet the way the version before `reason` wrote it: an `outcome`
    column in its place holding the split when accepted, else the reject reason."""
    path = os.path.join(snapshot_path, "index.parquet")
    table = pq.read_table(path)
    outcome = [split if accepted else reason for split, accepted, reason in zip(
        table.column("split").to_pylist(), table.column("accepted").to_pylist(),
        table.column("reason").to_pylist())]
    position = table.schema.get_field_index("reason")
    table = table.remove_column(position).add_column(
        position, pa.field("outcome", pa.string()), pa.array(outcome, pa.string()))
    pq.write_table(table, path)


@pytest.mark.slow
def test_nightly_reads_an_index_written_before_reason_replaced_outcome(tmp_path):
    root, out = tmp_path / "images", tmp_path / "out"
    labels = tmp_path / "labels.csv"
    rows = []
    for i in range(3):
        for name, class_index in (("cat", 0), ("dog", 1)):
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name / f"{i}.jpg").write_bytes(_jpeg(10 * class_index + i, class_index))
            rows.append(f"{name}/{i}.jpg,{name}\n")
    (root / "loose.jpg").write_bytes(_jpeg(99, 0))  # no label: rejected as unlabeled
    labels.write_text("path,label\n" + "".join(rows))
    argv = ["--data_root", str(root), "--labels", str(labels), "--output_dir", str(out),
            "--set", "decode.isolation=inline", "--set", "transform.enabled=false",
            "--set", "report.thumbnails_per_reason=0"]
    first = nightly.run(argv)
    assert first.snapshot.accounting["images"]["accepted"] == 6
    _downgrade_index(first.snapshot.path)

    (root / "cat" / "new.jpg").write_bytes(_jpeg(50, 0))
    labels.write_text("path,label\n" + "".join(rows) + "cat/new.jpg,cat\n")
    second = nightly.run(argv)

    images = second.snapshot.accounting["images"]
    # The 7 files of night one (one of them the unlabeled reject) are remembered as unchanged.
    assert images == {"discovered": 8, "accepted": 1, "rejected": 0, "skipped": 7, "ok": True}
    row = index_rows(second.snapshot)["cat/new.jpg"]
    assert (row["reason"], row["accepted"]) == (None, True)
    # the split is the sha256 rule's (tests/test_splits.py), with the default 0.8 / 0.1 / 0.1
    sha = hashlib.sha256((root / "cat" / "new.jpg").read_bytes()).hexdigest()
    fraction = int(sha[:16], 16) / 2 ** 64
    assert row["split"] == ("train" if fraction < 0.8 else
                            "validation" if fraction < 0.9 else "test")
