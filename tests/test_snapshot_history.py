"""A snapshot's summary.json: the drift view gives the same drift check and cumulative totals
as the whole stats.json; read_history reads summaries, and stats.json + rejects.jsonl only for
snapshots published before summaries existed."""
from __future__ import annotations

import json
import os

import pytest

from configs.schema import load_config
from transforms import snapshot_layout as layout
from transforms.reporting import history
from transforms.reporting.drift import check_drift, cumulative_stats, drift_view


def _stats(accepted: int, cats: int, shift: int) -> dict:
    edges = [0, 1, 2, 3, 4]
    return {"images": {"accepted": accepted, "rejected": 2, "discovered": accepted + 2},
            "by_split": {"train": accepted}, "by_split_class": {"train": {
                "cat": cats, "dog": accepted - cats}},
            "by_reason": {"blurry": 2}, "reject_examples": {"blurry": ["a.jpg", "b.jpg"]},
            "quality": {"brightness_p01": {"count": accepted, "mean": 1.5, "histogram": {
                "edges": edges, "counts": [shift, 4, 1, 0]}},
                "entropy": {"count": 0, "histogram": {"edges": edges, "counts": []}}},
            "pixel_stats": {"mean": [0.1, 0.2, 0.3]}, "size": {"width": {"count": accepted}}}


def test_drift_and_cumulative_totals_are_the_same_from_the_views():
    earlier = [_stats(10, 5, 0), _stats(12, 6, 3), _stats(9, 1, 9)]
    tonight = _stats(3, 3, 5)
    config = load_config().drift
    views = [drift_view(s) for s in earlier]
    assert check_drift(tonight, views, config) == check_drift(tonight, earlier, config)
    assert cumulative_stats(views + [tonight]) == cumulative_stats(earlier + [tonight])
    assert "reject_examples" not in views[0] and "pixel_stats" not in views[0]


class _Recording(layout.GfileStorage):
    def __init__(self):
        self.read = []

    def read_text(self, path):
        self.read.append(os.path.basename(path))
        return super().read_text(path)


def test_history_reads_summaries_and_falls_back_to_old_snapshots(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir()
    old.mkdir()
    keys = [("image", "a.jpg", "blurry", "ab" * 32), ("label_row", "x.jpg", "missing_file", "")]
    (new / layout.SUMMARY).write_text(json.dumps(history.snapshot_summary(_stats(4, 2, 1),
                                                                          keys[:1])))
    (old / layout.STATS).write_text(json.dumps(_stats(5, 1, 2)))
    (old / layout.REJECTS).write_text(json.dumps(
        {"kind": "label_row", "path": "x.jpg", "reason": "missing_file", "sha256": "",
         "detail": "labels.csv:3: no image"}) + "\n")
    storage = _Recording()
    views, reported, old_style = history.read_history([str(old), str(new)], storage)
    assert views == [drift_view(_stats(5, 1, 2)), drift_view(_stats(4, 2, 1))]
    assert reported == {history.fingerprint(key) for key in keys} and old_style == [str(old)]
    assert sorted(storage.read) == ["rejects.jsonl", "stats.json", "summary.json"]


def test_a_summary_of_another_version_is_an_error(tmp_path):
    (tmp_path / layout.SUMMARY).write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError, match="summary version 99 is not one this pixelmill reads"):
        history.read_history([str(tmp_path)])
