"""Files that are no decodable images, links that resolve to nothing and names in another
Unicode normalization, through the whole job and nightly's quick look: each is counted once,
with its reason, and a night with nothing new stays quiet."""
from __future__ import annotations

import json
import os
import shutil

from runners.jobs.summary import format_summary
from tests.imageutil import photo_bytes
from tests.test_nightly_precheck import QUICK, Folder
from tests.tiers import slow_fixture
from transforms import snapshot_layout as layout

NFC, NFD = "caf\u00e9.jpg", "cafe\u0301.jpg"
HEIC = b"\0\0\0\x18ftypheic" + b"\0" * 20


@slow_fixture(scope="module")
def first_night(tmp_path_factory):
    """Two labelled photos, one whose name is NFD on disk and NFC in the CSV, a HEIC photo, a
    self-looping link, two other files and a row that misses a file only by letter case."""
    folder = Folder(tmp_path_factory.mktemp("discover") / "world")
    folder.root.mkdir(parents=True)
    for index, name in enumerate(("cat0.jpg", "dog0.jpg", NFD)):
        (folder.root / name).write_bytes(photo_bytes(40 + index, 72, 96, index))
    (folder.root / "phone.heic").write_bytes(HEIC)
    (folder.root / "notes.txt").write_text("not an image")
    (folder.root / "meta.json").write_text("{}")
    os.symlink("loop.jpg", folder.root / "loop.jpg")
    folder.labels.write_text(f"path,label\ncat0.jpg,cat\ndog0.jpg,dog\n{NFC},cat\nDog0.JPG,dog\n")
    folder.boxes.write_text("path,xmin,ymin,xmax,ymax,label\n")
    result = folder.night()
    assert result.snapshot is not None and QUICK not in result.message
    return folder, result.snapshot


def _snapshot_file(folder, name):
    return folder.out / layout.SNAPSHOTS / layout.read_latest(str(folder.out)) / name


def test_every_file_is_counted_once_with_its_reason(first_night):
    folder, snapshot = first_night
    rejects = [json.loads(line) for line in
               _snapshot_file(folder, layout.REJECTS).read_text().splitlines()]
    assert sorted((r["kind"], r["path"], r["reason"], r["detail"]) for r in rejects) == [
        ("image", "loop.jpg", "unreadable",
         "symlink cannot be resolved: it loops (-> 'loop.jpg': Too many levels of symbolic "
         "links); never opened"),
        ("image", "phone.heic", "unsupported_format",
         "HEIF/HEIC image (.heic, confirmed by its bytes); the decoder reads JPEG, PNG, GIF, "
         "BMP and WebP only: convert it"),
        ("label_row", "Dog0.JPG", "missing_file",
         "labels.csv:5: no image 'Dog0.JPG' was discovered under the data root; 'dog0.jpg' "
         "differs only in case")]
    stats = json.loads(_snapshot_file(folder, layout.STATS).read_text())
    assert stats["other_files"] == {"json": 1, "txt": 1}
    assert stats["accounting"]["images"] == {"discovered": 5, "accepted": 3, "rejected": 2,
                                             "skipped": 0, "ok": True}
    assert stats["accounting"]["label_rows"] == {"total": 4, "matched": 3, "rejected": 1,
                                                 "ok": True}
    assert "skipped (not images): 1 .json, 1 .txt" in format_summary(snapshot)
    assert "skipped (not images): 1 .json, 1 .txt" in _snapshot_file(
        folder, layout.REPORT).read_text()


def test_a_name_in_another_normalization_keeps_its_on_disk_path_and_its_csv_label(first_night):
    import pyarrow.parquet as pq
    folder, _ = first_night
    rows = {row["path"]: row for row in pq.read_table(
        _snapshot_file(folder, layout.INDEX)).to_pylist()}
    assert NFC not in rows
    assert (rows[NFD]["label"], rows[NFD]["reason"]) == ("cat", None)


def _copy(first_night, tmp_path) -> Folder:
    base = tmp_path / "world"
    shutil.copytree(first_night[0].base, base, symlinks=True)
    return Folder(base)


def test_an_unchanged_night_is_nothing_new(first_night, tmp_path):
    folder = _copy(first_night, tmp_path)
    assert "3 images unchanged, 2 rejected again as before" in folder.look()


def test_new_files_that_are_no_images_are_no_news(first_night, tmp_path):
    folder = _copy(first_night, tmp_path)
    (folder.root / "more_notes.txt").write_text("x")
    (folder.root / "LICENSE").write_text("x")
    assert "3 images unchanged, 2 rejected again as before" in folder.look()


def test_a_new_unsupported_image_runs_the_job(first_night, tmp_path):
    folder = _copy(first_night, tmp_path)
    (folder.root / "scan.TIFF").write_bytes(b"II*\0" + b"\0" * 8)
    assert folder.look() is None


def test_a_new_dangling_link_runs_the_job(first_night, tmp_path):
    folder = _copy(first_night, tmp_path)
    os.symlink("nowhere.png", folder.root / "gone.png")
    assert folder.look() is None
