"""Nightly incremental runs: a three-night simulation, kill injection and the run lock."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from pipelines import snapshot as snapshot_module
from runners.jobs import nightly
from runners.locking import run_lock
from tests.imageutil import encode, photo
from tests.jobutil import index_rows
from tests.tiers import slow_fixture
from transforms import codec
from transforms import snapshot_layout as layout


def _jpeg(seed: int, class_index: int, quality: int = 92, scale: float = 1.0) -> bytes:
    pixels = photo(seed, 120, 160, class_index)
    if scale != 1.0:
        pixels = np.asarray(Image.fromarray(pixels).resize((int(160 * scale), int(120 * scale)),
                                                           Image.BILINEAR))
    return encode(pixels, "JPEG", quality)


class World:
    """The data folder a nightly job watches, changed night by night."""

    def __init__(self, base, rows=()):
        self.base = base
        self.root = base / "images"
        self.labels = base / "labels.csv"
        self.out = base / "out"
        self.rows = list(rows)
        self.root.mkdir(parents=True, exist_ok=True)

    def copy(self, base) -> "World":
        """The same folder, labels and output (file times kept) at `base`."""
        shutil.copytree(self.base, base)
        return World(base, self.rows)

    def add(self, rel, data, label=None):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if label:
            self.rows.append((rel, label))
        self.labels.write_text("path,label\n" + "".join(f"{p},{l}\n" for p, l in self.rows))

    def night(self, *extra, tft: bool = False):
        """One nightly run (inline decoding; the TFT analysis only when `tft`)."""
        argv = ["--data_root", str(self.root), "--labels", str(self.labels),
                "--output_dir", str(self.out), "--set", "decode.isolation=inline",
                "--set", f"transform.enabled={'true' if tft else 'false'}",
                "--set", "report.thumbnails_per_reason=0", *extra]
        return nightly.run(argv)


def _night1(world):
    for i in range(6):
        world.add(f"cat/{i}.jpg", _jpeg(100 + i, 0), "cat")
        world.add(f"dog/{i}.jpg", _jpeg(200 + i, 1), "dog")
    world.add("later/a.jpg", _jpeg(300, 0))  # unlabeled tonight
    world.add("later/b.jpg", _jpeg(301, 1))  # unlabeled tonight


def _night2(world):
    for i in range(6):
        world.add(f"bird/{i}.jpg", _jpeg(400 + i, 2), "bird")
    world.rows += [("later/a.jpg", "cat"), ("later/b.jpg", "dog")]  # labels arrive
    world.add("cat/0.jpg", _jpeg(500, 0))                           # content changed in place
    world.add("copies/exact.jpg", (world.root / "dog/1.jpg").read_bytes(), "dog")
    world.add("copies/near.jpg", _jpeg(102, 0, quality=80, scale=0.95), "cat")  # ~ cat/2.jpg


def _shas(snapshot):
    files = glob.glob(os.path.join(snapshot.path, "*", "*.tfrecord-*"))
    return [tf.io.parse_single_example(s, codec.feature_spec())[codec.IMAGE_SHA256]
            .numpy().decode() for s in tf.data.TFRecordDataset(files)]


@slow_fixture(scope="module")
def night_one(tmp_path_factory):
    """(world, result) after the first night, shared: a test copies the world to go on."""
    world = World(tmp_path_factory.mktemp("night_one") / "world")
    _night1(world)
    return world, world.night()


@slow_fixture(scope="module")
def three_nights(night_one, tmp_path_factory):
    """Nights two (with the TFT analysis over the archive and tonight) and three on a copy of
    night one; both with --fail_on_drift, which only changes the exit code."""
    world = night_one[0].copy(tmp_path_factory.mktemp("nightly") / "world")
    first = night_one[1]
    classes_after_1 = (world.out / "classes.txt").read_text().split()
    _night2(world)
    second = world.night("--fail_on_drift", tft=True)
    classes_after_2 = (world.out / "classes.txt").read_text().split()
    third = world.night("--fail_on_drift")
    return world, first, second, third, classes_after_1, classes_after_2


def test_class_ids_are_stable_and_new_classes_are_appended(three_nights):
    *_, classes_after_1, classes_after_2 = three_nights
    assert classes_after_1 == ["cat", "dog"]
    assert classes_after_2 == ["cat", "dog", "bird"]


def test_night_one_accounts_for_every_input(three_nights):
    _, first, *_ = three_nights
    images = first.snapshot.accounting["images"]
    assert images == {"discovered": 14, "accepted": 12, "rejected": 2, "skipped": 0, "ok": True}
    assert first.drift["checked"] is False


def test_night_two_processes_only_what_is_new(three_nights):
    _, _, second, *_ = three_nights
    images = second.snapshot.accounting["images"]
    # 22 files: 6 birds + 2 newly labelled + 1 changed + 2 copies are new work; 11 unchanged.
    assert images == {"discovered": 22, "accepted": 9, "rejected": 2, "skipped": 11,
                      "ok": True}
    rows = index_rows(second.snapshot)
    assert sorted(rows) == sorted(
        [f"bird/{i}.jpg" for i in range(6)]
        + ["later/a.jpg", "later/b.jpg", "cat/0.jpg", "copies/exact.jpg", "copies/near.jpg"])


def test_night_two_rejects_copies_of_archived_images(three_nights):
    _, first, second, *_ = three_nights
    rows = index_rows(second.snapshot)
    assert rows["copies/exact.jpg"]["reason"] == "duplicate"
    assert "'dog/1.jpg'" in rows["copies/exact.jpg"]["detail"]
    assert first.run_id in rows["copies/exact.jpg"]["detail"]
    assert rows["copies/near.jpg"]["reason"] == "near_duplicate"
    assert "'cat/2.jpg'" in rows["copies/near.jpg"]["detail"]


def test_changed_content_and_new_labels_are_accepted(three_nights):
    _, _, second, *_ = three_nights
    rows = index_rows(second.snapshot)
    assert rows["cat/0.jpg"]["accepted"] and rows["later/a.jpg"]["label"] == "cat"
    assert rows["later/b.jpg"]["accepted"] and rows["later/b.jpg"]["label"] == "dog"


def test_no_image_is_in_two_snapshots(three_nights):
    _, first, second, *_ = three_nights
    shas = _shas(first.snapshot) + _shas(second.snapshot)
    assert len(shas) == len(set(shas)) == 21


def test_drift_is_flagged_on_night_two(three_nights):
    _, _, second, *_ = three_nights
    assert second.drift["checked"] and second.drift["drifted"]
    classes = [c for c in second.drift["checks"] if c["name"] == "class_distribution"][0]
    assert classes["drifted"] and classes["detail"]["worst_class"] == "bird"
    stats = json.load(open(os.path.join(second.snapshot.path, "stats.json")))
    assert stats["cumulative"]["images"]["accepted"] == 21
    # the transform covers the live set: the archive less cat/0.jpg's replaced record, + tonight
    assert stats["transform"]["images"] == 20
    manifest = json.load(open(os.path.join(second.snapshot.path, "manifest.json")))
    assert manifest["drift"]["drifted"] is True
    report = open(os.path.join(second.snapshot.path, "report.html")).read()
    assert "Tonight and the archive" in report and "class_distribution" in report


def test_night_three_publishes_nothing(three_nights):
    world, _, second, third, *_ = three_nights
    assert third.snapshot is None and third.exit_code == 0
    assert "nothing new" in third.message
    assert layout.read_latest(str(world.out)) == second.run_id
    assert [s.run_id for s in layout.committed_snapshots(str(world.out))] == sorted(
        [three_nights[1].run_id, second.run_id])
    assert not glob.glob(str(world.out / ".staging" / "*"))


def test_fail_on_drift_gives_a_nonzero_exit(three_nights):
    _, _, second, *_ = three_nights
    assert second.drift["drifted"] and second.exit_code == nightly.EXIT_DRIFT


def test_run_killed_before_the_manifest_leaves_nothing_and_the_redo_takes_its_lock_over(
        night_one, tmp_path, monkeypatch):
    """The killed run's lock is left behind, as a killed process leaves it: the redo takes
    the lock of the dead run over."""
    world, first = night_one[0].copy(tmp_path / "world"), night_one[1]
    _night2(world)
    real_write_json = snapshot_module._write_json

    def killed_at_manifest(path, data):
        if path.endswith("manifest.json"):
            raise KeyboardInterrupt("killed after the shards, before the manifest")
        real_write_json(path, data)

    monkeypatch.setattr(snapshot_module, "_write_json", killed_at_manifest)
    with pytest.raises(KeyboardInterrupt):
        world.night()
    monkeypatch.setattr(snapshot_module, "_write_json", real_write_json)
    assert [s.run_id for s in layout.committed_snapshots(str(world.out))] == [first.run_id]
    assert layout.read_latest(str(world.out)) == first.run_id
    dead = subprocess.Popen(["true"])
    dead.wait()
    _hold_lock(world.out, dead.pid)
    redo = world.night()
    assert not (world.out / ".lock").exists()
    assert redo.snapshot.accounting["images"]["accepted"] == 9
    assert [s.run_id for s in layout.committed_snapshots(str(world.out))] == sorted(
        [first.run_id, redo.run_id])
    assert sorted(os.listdir(world.out / "snapshots")) == sorted([first.run_id, redo.run_id])


def _hold_lock(out, pid):
    out.mkdir(parents=True, exist_ok=True)
    (out / ".lock").write_text(json.dumps({**run_lock.machine_identity(), "pid": pid,
                                           "run_id": "other-run", "since": time.time()}))


def test_second_overlapping_run_exits_with_the_lock_message(tmp_path, capsys):
    world = World(tmp_path)
    _night1(world)
    sleeper = subprocess.Popen(["sleep", "60"])  # the other run, still alive
    try:
        _hold_lock(world.out, sleeper.pid)
        code = nightly.main(["--data_root", str(world.root), "--labels", str(world.labels),
                             "--output_dir", str(world.out)])
    finally:
        sleeper.kill()
    assert code == nightly.EXIT_LOCKED
    err = capsys.readouterr().err
    assert "another pixelmill run holds" in err and "other-run" in err
    assert layout.read_latest(str(world.out)) is None

