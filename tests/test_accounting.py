"""Accounting as a Beam step: every count through one combiner, a count of nothing is 0."""
from __future__ import annotations

import json

import apache_beam as beam

from pipelines.phase_outputs import Counted, Inputs, Inspected
from pipelines.preprocess_graph import Accounting
from tests.beamutil import fn_api_pipeline, paths_part
from transforms.offline.rejects import BOX_ROW, IMAGE, LABEL_ROW, Reject


def test_counts_of_every_part_and_zeros_for_empty_ones(tmp_path):
    rejects = [Reject("a.jpg", "blurry", "", IMAGE), Reject("b.jpg", "blurry", "", IMAGE),
               Reject("x.csv:3", "bad_csv_row", "", LABEL_ROW),
               Reject("y.jpg", "missing_file", "", BOX_ROW)]
    with fn_api_pipeline() as pipeline:
        def make(name, items):
            return pipeline | name >> beam.Create(items)
        parts = {
            "refs": make("Refs", ["r1", "r2", "r3"]), "discovery_rejects": make("Disc", ["d"]),
            "accepted_parts": make("Acc", [paths_part("a1", "a2")]),
            "image_rejects": make("ImgRej", ["i1"]),
            "skipped": make("Skip", []), "label_items": make("Labels", ["l"] * 5),
            "box_items": make("Boxes", []), "all_rejects": make("All", rejects),
            "matched": make("Matched", [(LABEL_ROW, 3), (LABEL_ROW, 1)]),
            # the live set: two records live before (one retired earlier, one rejected row)
            "archive_rows": make("Archive", [
                {"accepted": True, "removed": False}, {"accepted": True, "removed": False},
                {"accepted": True, "removed": True}, {"accepted": False, "removed": False}]),
            "kept": make("Kept", ["k"]),
            "retired": make("Retired", [{"reason": "deleted"}]),
            "other_files": make("Other", ["txt", "json", "txt", "(none)"]),
        }
        empty = make("Empty", [])
        inputs = Inputs(**{name: parts.get(name, empty) for name in Inputs._fields})
        inspected = Inspected(**{name: parts.get(name, empty) for name in Inspected._fields})
        counted = Counted(**{name: parts[name] for name in Counted._fields})
        (inputs, inspected, counted) | Accounting(str(tmp_path))
    counts = json.loads((tmp_path / "_work" / "counts.json").read_text())
    assert counts == {
        "images.discovered": 4, "images.accepted": 2, "images.rejected": 1,
        "images.skipped": 0, "label_rows.total": 5, "box_rows.total": 0,
        "label_rows.rejected": 1, "box_rows.rejected": 1, "label_rows.matched": 4,
        "reasons.image.blurry": 2, "reasons.label_row.bad_csv_row": 1,
        "reasons.box_row.missing_file": 1, "live.before": 2, "live.kept": 1, "live.retired": 1,
        "retired.deleted": 1,
        # files that are no images, per extension key (not part of images.discovered)
        "other_files.txt": 2, "other_files.json": 1, "other_files.(none)": 1}
