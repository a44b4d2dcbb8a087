"""What a nightly run reads of the archive: one summary.json per earlier snapshot (its drift
view and the fingerprints of the rejects it reported first), never an earlier ledger or
stats.json; a snapshot without a summary is read from its stats.json and ledger."""
from __future__ import annotations

import json
import os

import pytest
from apache_beam.io.filesystems import FileSystems

from runners.jobs import nightly
from tests.imageutil import write_photo
from transforms import file_reads
from transforms import snapshot_layout as layout
from transforms.reporting import history


def _world(tmp_path):
    root = tmp_path / "images"
    rows = []
    for i in range(4):
        write_photo(root / "cat" / f"{i}.jpg", 700 + i, class_index=0)
        write_photo(root / "dog" / f"{i}.jpg", 800 + i, class_index=1)
        rows += [f"cat/{i}.jpg,cat", f"dog/{i}.jpg,dog"]
    rows.append("gone.jpg,cat")  # a row rejected every night (missing_file)
    (tmp_path / "labels.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return ["--data_root", str(root), "--labels", str(tmp_path / "labels.csv"),
            "--output_dir", str(tmp_path / "out"), "--set", "decode.isolation=inline",
            "--set", "transform.enabled=false", "--set", "report.thumbnails_per_reason=0"]


def _opened_during(monkeypatch, run):
    """The paths opened for reading while `run()` ran (the job's workers run in-process):
    through `file_reads.open_file` (every read of `read_bytes`; a local path never reaches
    Beam) or Beam's FileSystems directly."""
    opened = []

    def recording(original):
        def record(path, *args, **kwargs):
            opened.append(path)
            return original(path, *args, **kwargs)
        return record

    monkeypatch.setattr(file_reads, "open_file", recording(file_reads.open_file))
    monkeypatch.setattr(FileSystems, "open", staticmethod(recording(FileSystems.open)))
    result = run()
    monkeypatch.undo()
    return result, opened


@pytest.mark.parametrize("old_style", [False, True])
@pytest.mark.slow
def test_a_nothing_new_night_reads_one_summary_per_snapshot(tmp_path, monkeypatch, old_style):
    argv = _world(tmp_path)
    first = nightly.run(argv)
    assert first.snapshot is not None
    summary = json.loads((tmp_path / "out" / "snapshots" / first.run_id / layout.SUMMARY)
                         .read_text())
    assert history.fingerprint(("label_row", "gone.jpg", "missing_file", "")) in summary[
        "reported_rejects"]
    assert summary["stats"]["images"]["accepted"] == 8
    if old_style:  # a snapshot published before summaries: read from its ledger and stats
        folder = tmp_path / "out" / "snapshots" / first.run_id
        os.remove(folder / layout.SUMMARY)
        manifest = json.loads((folder / layout.MANIFEST).read_text())
        manifest["files"] = [f for f in manifest["files"] if f["path"] != layout.SUMMARY]
        (folder / layout.MANIFEST).write_text(json.dumps(manifest))
    second, opened = _opened_during(monkeypatch, lambda: nightly.run(argv))
    assert second.snapshot is None and "nothing new" in second.message
    archived = [p for p in opened if f"/snapshots/{first.run_id}/" in p]
    names = sorted(os.path.basename(p) for p in archived)
    expected = ["rejects.jsonl", "stats.json"] if old_style else ["summary.json"]
    assert sorted(n for n in names if n != layout.INDEX and n != layout.MANIFEST) == expected
