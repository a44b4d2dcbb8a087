"""Runs, locks, retries and exits (issue 9): a run with nothing to accept still publishes its
rejects; failed and killed runs leave nothing behind; run ids are safe; exits are honest."""
from __future__ import annotations

import json
import os

import pytest

from pipelines.training_input import make_dataset
from tests.jobutil import rejects, run_job

FAST = ["decode.isolation=inline", "transform.enabled=false"]


def junk_folder(root):
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "a.jpg").write_bytes(b"junk")
    (root / "b.png").write_bytes(b"more junk")
    return root


# Case 4: a run that accepts no image.

def test_a_run_that_accepts_nothing_publishes_its_rejects_report_and_transform(tmp_path):
    out = tmp_path / "out"
    snapshot = run_job(junk_folder(tmp_path / "images"), out,
                       sets=["decode.isolation=inline", "transform.enabled=true"])
    assert snapshot.accounting["images"] == {"discovered": 2, "accepted": 0, "rejected": 2,
                                             "skipped": 0, "ok": True}
    assert sorted(r["reason"] for r in rejects(snapshot)) == ["unknown_format"] * 2
    for name in ("index.parquet", "stats.json", "stats.pb", "report.html", "manifest.json",
                 "transform_fn/saved_model.pb"):
        assert os.path.exists(os.path.join(snapshot.path, name)), name
    transform = json.load(open(os.path.join(snapshot.path, "stats.json")))["transform"]
    assert (transform["images"], transform["classes"], transform["labels_outside_table"]) == (
        0, [], {})
    assert (out / "LATEST").read_text().strip() == snapshot.run_id
    assert (out / "classes.txt").read_text() == ""
    with pytest.raises(FileNotFoundError, match="No shards for split 'train'"):
        make_dataset(str(out), split="train", batch_size=2)
