"""End to end: the offline job on the generated demo dataset (every bad-input kind once).

One run (conftest `demo_snapshot`, with TFT) is read by every test; one more run checks that
another runner mode and isolated decoding give the same bytes."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.jobutil import index_rows, read_records, rejects, run_job, shard_files
from transforms import codec
from transforms.decode import decode_image


@pytest.fixture()
def snapshot(demo_snapshot):
    """The demo's snapshot (conftest: one job run, with TFT, shared by the whole suite)."""
    return demo_snapshot


def test_every_image_reaches_its_expected_outcome(demo, snapshot):
    rows = index_rows(snapshot)
    assert set(rows) == set(demo.expected)
    got = {path: ("accepted" if row["accepted"] else row["reason"]) for path, row in rows.items()}
    assert got == demo.expected


def test_csv_rows_reach_their_expected_outcome(demo, snapshot):
    row_rejects = {r["path"]: r["reason"] for r in rejects(snapshot) if r["kind"] == "label_row"}
    image_rejects = {r["path"]: r["reason"] for r in rejects(snapshot) if r["kind"] == "image"}
    for path, reason in demo.csv_expected.items():
        assert row_rejects.get(path, image_rejects.get(path)) == reason, path


def test_accounting_adds_up_and_is_in_the_manifest(demo, snapshot):
    manifest = json.load(open(os.path.join(snapshot.path, "manifest.json")))
    images = manifest["accounting"]["images"]
    accepted = sum(1 for v in demo.expected.values() if v == "accepted")
    assert images == {"discovered": len(demo.expected), "accepted": accepted,
                      "rejected": len(demo.expected) - accepted, "skipped": 0, "ok": True}
    assert manifest["accounting"]["ok"] is True
    image_reject_lines = [r for r in rejects(snapshot) if r["kind"] == "image"]
    assert len(image_reject_lines) == images["rejected"]
    rows = manifest["accounting"]["label_rows"]
    assert rows["total"] == rows["matched"] + rows["rejected"]


def test_every_accepted_record_decodes_with_the_training_decoder(demo, snapshot):
    records = read_records(snapshot)
    accepted = sorted(p for p, v in demo.expected.items() if v == "accepted")
    assert sorted(r[codec.IMAGE_FILENAME].numpy().decode() for r in records) == accepted
    for record in records:
        image = decode_image(record[codec.IMAGE_ENCODED])
        assert image.shape[0] == int(record[codec.IMAGE_HEIGHT])
        assert image.shape[1] == int(record[codec.IMAGE_WIDTH])
        data = record[codec.IMAGE_ENCODED].numpy()
        assert hashlib.sha256(data).hexdigest() == record[codec.IMAGE_SHA256].numpy().decode()


def test_labels_come_from_the_class_table(demo, snapshot):
    names = open(demo.classes_txt).read().split()
    assert open(os.path.join(os.path.dirname(os.path.dirname(snapshot.path)),
                             "classes.txt")).read().split() == names
    for record in read_records(snapshot):
        assert names[int(record[codec.CLASS_LABEL])] == record[codec.CLASS_TEXT].numpy().decode()


def test_shards_are_named_per_split_and_listed_with_checksums(snapshot):
    manifest = json.load(open(os.path.join(snapshot.path, "manifest.json")))
    listed = {entry["path"]: entry for entry in manifest["files"]}
    for path in shard_files(snapshot):
        rel = os.path.relpath(path, snapshot.path)
        split = rel.split("/")[0]
        assert os.path.basename(rel).startswith(f"images-{split}.tfrecord-")
        data = open(path, "rb").read()
        assert listed[rel]["sha256"] == hashlib.sha256(data).hexdigest()
        assert listed[rel]["bytes"] == len(data)
    for name in ("rejects.jsonl", "index.parquet", "stats.json", "stats.pb", "report.html",
                 "classes.txt"):
        assert name in listed


def test_png_named_jpg_is_recorded_as_png(demo, snapshot):
    rows = index_rows(snapshot)
    pngs_named_jpg = [p for p, v in demo.expected.items()
                      if v == "accepted" and p.endswith(".jpg") and rows[p]["format"] == "png"]
    assert pngs_named_jpg, "the demo has a PNG saved under a .jpg name"


def test_quality_metrics_are_stored_in_records(snapshot):
    rows = index_rows(snapshot)
    for record in read_records(snapshot):
        row = rows[record[codec.IMAGE_FILENAME].numpy().decode()]
        for name in codec.QUALITY_METRICS:
            assert float(record[codec.QUALITY_PREFIX + name]) == pytest.approx(
                row[f"quality_{name}"], abs=1e-3)


def test_boxes_are_stored_normalized(demo, snapshot):
    with_boxes = [r for r in read_records(snapshot)
                  if tf.size(tf.sparse.to_dense(r[codec.BBOX_XMIN])) > 0]
    assert with_boxes
    for record in with_boxes:
        for key in (codec.BBOX_XMIN, codec.BBOX_YMIN, codec.BBOX_XMAX, codec.BBOX_YMAX):
            values = tf.sparse.to_dense(record[key]).numpy()
            assert np.all((values >= 0) & (values <= 1))


def test_report_and_stats_are_written(snapshot):
    html = open(os.path.join(snapshot.path, "report.html")).read()
    assert "<svg" in html and "decode_error" in html
    stats = json.load(open(os.path.join(snapshot.path, "stats.json")))
    assert stats["images"]["accepted"] == snapshot.accounting["images"]["accepted"]


def test_rerun_in_two_worker_processes_with_isolated_decoding_gives_identical_outputs(
        demo, snapshot, tmp_path):
    """Same inputs, another runner mode (two local worker processes), decoding in isolating
    child processes instead of inline, no TFT: byte-identical shards and rejects ledger."""
    again = run_job(demo.root, tmp_path, labels=[demo.labels_csv], classes=demo.classes_txt,
                    boxes=[demo.boxes_csv], isolation="subprocess",
                    extra=["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert again.accounting == snapshot.accounting
    first = {os.path.relpath(p, snapshot.path): open(p, "rb").read()
             for p in shard_files(snapshot)}
    second = {os.path.relpath(p, again.path): open(p, "rb").read() for p in shard_files(again)}
    assert first == second
    for name in ("rejects.jsonl", "classes.txt"):
        assert open(os.path.join(again.path, name), "rb").read() == open(
            os.path.join(snapshot.path, name), "rb").read()


def test_tft_transform_is_written_and_agrees_with_the_stats(snapshot):
    assert os.path.isdir(os.path.join(snapshot.path, "transform_fn"))
    assert os.path.isdir(os.path.join(snapshot.path, "transformed_metadata"))
    stats = json.load(open(os.path.join(snapshot.path, "stats.json")))
    transform = stats["transform"]
    assert transform["images"] == stats["images"]["accepted"]
    np.testing.assert_allclose(transform["pixel_stats"]["mean"], stats["pixel_stats"]["mean"],
                               atol=1e-6)
    np.testing.assert_allclose(transform["pixel_stats"]["std"], stats["pixel_stats"]["std"],
                               atol=1e-6)
    counts = {c["name"]: c["count"] for c in transform["classes"]}
    totals = {}
    for per_class in stats["by_split_class"].values():
        for name, n in per_class.items():
            totals[name] = totals.get(name, 0) + n
    assert {k: v for k, v in counts.items() if v} == totals


def _freeze_counts_at_run(monkeypatch, images, count: int) -> list:
    """Writes `count` photos under `images/cat` and returns the list that gets
    `gc.get_freeze_count()` at each `beam.Pipeline.run`."""
    import gc

    import apache_beam as beam

    from tests.imageutil import photo_bytes, write_bytes
    for i in range(count):
        write_bytes(images / "cat" / f"{i}.jpg", photo_bytes(i))
    frozen_at_run = []
    run = beam.Pipeline.run
    monkeypatch.setattr(beam.Pipeline, "run",
                        lambda self, *a, **k: frozen_at_run.append(gc.get_freeze_count())
                        or run(self, *a, **k))
    return frozen_at_run


@pytest.mark.slow
def test_the_run_freezes_what_was_built_and_unfreezes_after(tmp_path, monkeypatch):
    """`preprocess.execute` freezes the imported modules and the graph for the run (full
    collections skip them) and unfreezes at the end: a process running jobs one after
    another keeps nothing frozen."""
    import gc
    frozen_at_run = _freeze_counts_at_run(monkeypatch, tmp_path / "images", 2)
    assert gc.get_freeze_count() == 0
    run_job(str(tmp_path / "images"), tmp_path / "out")
    assert len(frozen_at_run) == 1 and frozen_at_run[0] > 100_000
    assert gc.get_freeze_count() == 0


@pytest.mark.slow
def test_a_run_leaves_a_callers_freeze_as_it_was(tmp_path, monkeypatch):
    """A library user froze objects before calling the job (a pre-fork server): Python can
    only unfreeze everything, so the run freezes nothing over them and unfreezes nothing."""
    import gc
    frozen_at_run = _freeze_counts_at_run(monkeypatch, tmp_path / "images", 1)
    kept = [[] for _ in range(100)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()  # falls as frozen objects are freed; never rises here
        run_job(str(tmp_path / "images"), tmp_path / "out")
        assert len(frozen_at_run) == 1 and frozen_at_run[0] <= frozen
        assert gc.get_freeze_count() <= frozen
        # still frozen: a frozen object is in none of the collector's generations
        assert not any(obj is kept for obj in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(obj is kept for obj in gc.get_objects())
