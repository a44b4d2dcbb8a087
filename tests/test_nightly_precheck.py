"""Nightly's quick look (`runners.jobs.nightly_precheck`): it says "nothing new" only when the job
would, and any news (a new or changed file, new labels, a new reject) runs the job."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runners.jobs import nightly
from runners.jobs.nightly_precheck import quick_look
from runners.jobs.preprocess import parse_options, resolve_job
from tests.imageutil import photo_bytes
from tests.tiers import slow_fixture
from transforms import snapshot_layout as layout
from transforms.offline.discover import FileRef
from transforms.offline.join_labels import unchanged_since
from transforms.reporting.history import read_history

QUICK = "the job did not run"


class Folder:
    """A data folder with labels, boxes and an output folder, changed between nights."""

    def __init__(self, base):
        self.base = base
        self.root = base / "images"
        self.labels = base / "labels.csv"
        self.boxes = base / "boxes.csv"
        self.out = base / "out"

    def argv(self, *extra):
        """Paths relative to the folder (run inside it): a reject line of a CSV row names its
        CSV, and a copy of the folder must name the same one."""
        return ["--data_root", "images", "--labels", "labels.csv", "--boxes", "boxes.csv",
                "--output_dir", "out", "--set", "decode.isolation=inline",
                "--set", "transform.enabled=false", "--set", "report.thumbnails_per_reason=0",
                *extra]

    def night(self, *extra):
        with contextlib.chdir(self.base):
            return nightly.run(self.argv(*extra))

    def look(self, max_files=None):
        """quick_look's answer for the folder as it is now (None: the job must run)."""
        with contextlib.chdir(self.base):
            options, job_options, run_id, output_dir = parse_options(self.argv())
            job, _ = resolve_job(job_options, layout.staging_dir(output_dir, run_id))
            run_ids = [s.run_id for s in layout.committed_snapshots(output_dir)]
            _, reported, _ = read_history([layout.snapshot_dir(output_dir, r)
                                           for r in run_ids])
            return quick_look(job, output_dir, run_ids, reported, max_files)

    def append(self, path, line):
        with open(path, "a") as handle:
            handle.write(line)


@slow_fixture(scope="module")
def first_night(tmp_path_factory):
    """A folder after its first night: images (one unlabelled), a bad CSV row, a row naming
    no file, a bad box row and a symlink out of the root (rejected at discovery)."""
    folder = Folder(tmp_path_factory.mktemp("precheck") / "world")
    folder.root.mkdir(parents=True)
    rows = []
    for i in range(3):
        for name, index in (("cat", 0), ("dog", 1)):
            (folder.root / f"{name}{i}.jpg").write_bytes(photo_bytes(10 * i + index, 72, 96,
                                                                     index))
            rows.append(f"{name}{i}.jpg,{name}\n")
    (folder.root / "nolabel.jpg").write_bytes(photo_bytes(99, 72, 96))
    outside = folder.base / "outside.jpg"
    outside.write_bytes(photo_bytes(98, 72, 96))
    os.symlink(outside, folder.root / "escape.jpg")
    folder.labels.write_text("path,label\n" + "".join(rows) + "gone.jpg,cat\n,cat\n")
    folder.boxes.write_text("path,xmin,ymin,xmax,ymax,label\n"
                            "cat0.jpg,1,1,20,20,cat\ncat1.jpg,5,5,abc,9,cat\n")
    result = folder.night()
    assert result.snapshot is not None and QUICK not in result.message
    return folder


@pytest.fixture
def folder(first_night, tmp_path):
    """A copy of the first night's folder (file times kept) for one test to change."""
    base = tmp_path / "world"
    shutil.copytree(first_night.base, base, symlinks=True)
    return Folder(base)


def test_an_unchanged_folder_is_nothing_new_without_the_job(folder):
    result = folder.night()
    assert result.snapshot is None and result.exit_code == 0
    assert QUICK in result.message
    assert "7 images unchanged, 1 rejected again as before" in result.message


def test_the_job_agrees_with_the_quick_look(folder):
    quick = folder.night()
    full = folder.night("--always_run_job")
    assert full.snapshot is None and QUICK not in full.message
    assert quick.message.split("; nothing published")[0] == full.message.split(
        "; nothing published")[0]


def test_a_new_file_runs_the_job(folder):
    (folder.root / "new.jpg").write_bytes(photo_bytes(50, 72, 96))
    assert folder.look() is None


def test_a_touched_file_runs_the_job(folder):
    path = folder.root / "cat1.jpg"
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 60))
    assert folder.look() is None


def test_a_changed_size_runs_the_job(folder):
    path = folder.root / "dog2.jpg"
    stat = path.stat()
    path.write_bytes(path.read_bytes() + b"\0")
    os.utime(path, (stat.st_atime, stat.st_mtime))
    assert folder.look() is None


def test_new_labels_for_a_known_file_run_the_job(folder):
    folder.append(folder.labels, "nolabel.jpg,dog\n")
    assert folder.look() is None


def test_a_changed_label_runs_the_job(folder):
    text = folder.labels.read_text().replace("cat2.jpg,cat", "cat2.jpg,dog")
    folder.labels.write_text(text)
    assert folder.look() is None


def test_a_new_bad_csv_row_runs_the_job(folder):
    folder.append(folder.labels, "x.jpg,\x00bad\n")
    assert folder.look() is None


def test_a_new_row_naming_no_file_runs_the_job(folder):
    folder.append(folder.labels, "also_gone.jpg,cat\n")
    assert folder.look() is None


def test_a_new_bad_box_row_runs_the_job(folder):
    folder.append(folder.boxes, "dog0.jpg,1,1,0,nan,dog\n")
    assert folder.look() is None


def test_a_new_discovery_reject_runs_the_job(folder):
    os.symlink(folder.base / "outside.jpg", folder.root / "escape2.jpg")
    assert folder.look() is None


def test_a_removed_reject_is_still_nothing_new(folder):
    (folder.root / "escape.jpg").unlink()
    assert "7 images unchanged, 0 rejected again as before" in folder.look()


def test_an_unreadable_index_leaves_the_decision_to_the_job(folder):
    run_id = layout.read_latest(str(folder.out))
    (folder.out / layout.SNAPSHOTS / run_id / layout.INDEX).write_bytes(b"not parquet")
    assert folder.look() is None


def test_files_once_unreadable_or_crashing_the_decoder_are_looked_at_again():
    ref = FileRef(uri="/r/a.jpg", path="a.jpg", file_bytes=10, mtime=5.0)
    prior = {"bytes": 10, "mtime": 5.0, "label_key": "cat", "reason": None}
    assert unchanged_since(ref, prior, "cat")
    assert not unchanged_since(ref, prior, "dog")
    for reason in ("unreadable", "decoder_crash"):
        assert not unchanged_since(ref, dict(prior, reason=reason), "cat")
    assert unchanged_since(ref, dict(prior, reason="blurry"), "cat")
    assert not unchanged_since(ref, None, "cat")


def test_no_history_runs_the_job(tmp_path):
    folder = Folder(tmp_path)
    folder.root.mkdir()
    (folder.root / "a.jpg").write_bytes(photo_bytes(1, 72, 96))
    folder.labels.write_text("path,label\na.jpg,cat\n")
    folder.boxes.write_text("path,xmin,ymin,xmax,ymax,label\n")
    assert folder.look() is None


@pytest.mark.slow
def test_the_nightly_command_imports_no_tensorflow_until_it_runs_the_job():
    code = ("import sys, runners.cli, runners.jobs.nightly; "
            "print(sorted(m for m in ('tensorflow', 'tensorflow_transform') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.stdout.strip() == "[]"


def test_an_index_written_before_reason_replaced_outcome_is_read(folder):
    path = folder.out / layout.SNAPSHOTS / layout.read_latest(str(folder.out)) / layout.INDEX
    rows = pq.read_table(path).to_pylist()

    def write_old(outcome_of):
        table = pq.read_table(path)
        outcome = [outcome_of(row) for row in rows]
        pq.write_table(table.drop_columns(["reason"]).append_column("outcome", pa.array(outcome)),
                       path.with_suffix(".old"))

    write_old(lambda row: row["split"] if row["accepted"] else row["reason"])
    os.replace(path, path.with_suffix(".new"))
    os.replace(path.with_suffix(".old"), path)
    assert "7 images unchanged, 1 rejected again as before" in folder.look()
    os.replace(path.with_suffix(".new"), path)
    # An old row whose outcome says the decoder crashed: that file is looked at again.
    write_old(lambda row: "decoder_crash" if row["path"] == "nolabel.jpg" else (
        row["split"] if row["accepted"] else row["reason"]))
    os.replace(path.with_suffix(".old"), path)
    assert folder.look() is None


def test_a_listing_over_the_limit_is_left_to_the_job(folder):
    assert folder.look(max_files=8) is not None   # 8 files: 7 images and the symlink
    assert folder.look(max_files=7) is None
    result = folder.night("--quick_look_max_files", "0")
    assert result.snapshot is None and QUICK not in result.message
