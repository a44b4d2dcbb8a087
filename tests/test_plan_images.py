"""PlanImages as a Beam step: files, discovery rejects, label and box rows and remembered index
rows joined by path; every output checked exactly."""
from __future__ import annotations

import dataclasses

import apache_beam as beam
import pytest

from configs.schema import load_config
from tests.beamutil import assert_outputs, fn_api_pipeline
from transforms.live_view import retirement
from transforms.offline.boxes import BoxRow
from transforms.offline.discover import FileRef
from transforms.offline.image_record import ImageRecord
from transforms.offline.join_labels import (
    KEPT,
    MATCHED,
    REJECTED,
    RETIRED,
    ROW_REJECTS,
    SKIPPED,
    PlanImages,
)
from transforms.offline.labels import LabelRow
from transforms.offline.rejects import BOX_ROW, LABEL_ROW, Reject

CONFIG = load_config(overrides=["classes.renames={dog: canine}"])


def _ref(path: str, file_bytes: int = 10, mtime: float = 1000.0) -> FileRef:
    return FileRef(uri=f"/data/{path}", path=path, file_bytes=file_bytes, mtime=mtime)


def _label(path: str, label: str, line: int, split: str | None = None) -> LabelRow:
    return LabelRow(path=path, label=label, split=split, meta=(), source=f"labels.csv:{line}")


def _prior(path: str, run_id: str, label_key: str, reason: str | None = None,
           file_bytes: int = 10, mtime: float = 1000.0) -> dict:
    """The index columns PlanImages reads from an earlier snapshot's row."""
    return {"path": path, "run_id": run_id, "bytes": file_bytes, "mtime": mtime,
            "label_key": label_key, "reason": reason, "accepted": reason is None,
            "removed": False, "sha256": f"sha-{path}", "split": "train", "label": label_key}


def _plan(pipeline, refs, rejected, labels, boxes, priors, folder_labels=True,
          joined=True, lanes=None) -> dict:
    """PlanImages' outputs by name: `images` and its tagged outputs, the matched rows summed
    per kind (the plan step sends a bundle's sums)."""
    inputs = {tag: pipeline | name >> beam.Create(values) for tag, name, values in (
        ("refs", "Refs", refs), ("rejected", "Rejected", rejected),
        ("labels", "Labels", labels), ("boxes", "Boxes", boxes), ("prior", "Priors", priors))}
    planned = inputs | PlanImages(CONFIG, folder_labels, joined=joined, lanes=lanes)
    return {"images": planned.images,
            MATCHED: planned[MATCHED] | "MatchedPerKind" >> beam.CombinePerKey(sum),
            **{tag: planned[tag] for tag in (REJECTED, SKIPPED, ROW_REJECTS, KEPT, RETIRED)}}


def test_files_get_their_rows_and_a_label_key_from_the_csv_or_the_folder():
    cat_row, box = _label("a/1.jpg", "cat", 2), BoxRow("a/1.jpg", 1, 2, 3, 4, "cat", "boxes.csv:2")
    dog_rows = (_label("b/2.jpg", "dog", 3, "test"), _label("b/2.jpg", "dog", 4))
    with fn_api_pipeline() as pipeline:
        planned = _plan(
            pipeline, [_ref("a/1.jpg"), _ref("b/2.jpg"), _ref("dog/3.jpg"), _ref("loose.jpg")],
            [], [cat_row, dog_rows[1], dog_rows[0]], [box], [])
        assert_outputs(planned, {"images": [
            ImageRecord(uri="/data/a/1.jpg", path="a/1.jpg", file_bytes=10, mtime=1000.0,
                        # boxes add a digest of their rows, so a corrected box is news
                        label_key="cat#boxes:84002d296b98e9b9", label_rows=(cat_row,),
                        box_rows=(box,)),
            # renamed by classes.renames; rows in source order
            ImageRecord(uri="/data/b/2.jpg", path="b/2.jpg", file_bytes=10, mtime=1000.0,
                        label_key="canine|test", label_rows=dog_rows),
            ImageRecord(uri="/data/dog/3.jpg", path="dog/3.jpg", file_bytes=10, mtime=1000.0,
                        label_key="canine"),  # the folder's name, renamed
            ImageRecord(uri="/data/loose.jpg", path="loose.jpg", file_bytes=10, mtime=1000.0),
        ], MATCHED: [(LABEL_ROW, 3), (BOX_ROW, 1)]})


def test_without_folder_labels_a_file_without_rows_has_an_empty_label_key():
    with fn_api_pipeline() as pipeline:
        planned = _plan(pipeline, [_ref("dog/3.jpg")], [], [], [], [], folder_labels=False)
        assert_outputs(planned, {"images": [
            ImageRecord(uri="/data/dog/3.jpg", path="dog/3.jpg", file_bytes=10, mtime=1000.0)]})


def test_without_csv_or_archive_each_file_is_planned_alone_with_the_joins_outputs():
    """`joined=False` (a full run labelled by folders): no join by path, and the same outputs
    as the join gives the same files and discovery rejects, a pair of names equal in NFC
    included (the join groups them; each is still its own record)."""
    unsafe = ImageRecord(uri="/data/link.jpg", path="link.jpg", file_bytes=7).rejected(
        "unsafe_path", "symlink resolves outside the data root: /etc/secret")
    refs = [_ref("dog/3.jpg"), _ref("loose.jpg"), _ref("b/caf\u00e9.jpg"),
            _ref("b/cafe\u0301.jpg")]
    expected = {"images": [
        ImageRecord(uri="/data/dog/3.jpg", path="dog/3.jpg", file_bytes=10, mtime=1000.0,
                    label_key="canine"),
        ImageRecord(uri="/data/loose.jpg", path="loose.jpg", file_bytes=10, mtime=1000.0),
        ImageRecord(uri="/data/b/caf\u00e9.jpg", path="b/caf\u00e9.jpg", file_bytes=10,
                    mtime=1000.0, label_key="b"),
        ImageRecord(uri="/data/b/cafe\u0301.jpg", path="b/cafe\u0301.jpg", file_bytes=10,
                    mtime=1000.0, label_key="b"),
    ], REJECTED: [unsafe]}
    for joined in (True, False):
        with fn_api_pipeline() as pipeline:
            assert_outputs(_plan(pipeline, refs, [unsafe], [], [], [], joined=joined),
                           expected)
            names = {t.unique_name for t in
                     pipeline.to_runner_api().components.transforms.values()}
        assert any("JoinByPath" in name for name in names) is joined


def test_rows_naming_no_discovered_file_are_missing_file_and_discovery_rejects_pass_through():
    unsafe = ImageRecord(uri="/data/link.jpg", path="link.jpg", file_bytes=7).rejected(
        "unsafe_path", "symlink resolves outside the data root: /etc/secret")
    label_rows = [_label("gone.jpg", "cat", 5), _label("link.jpg", "cat", 6)]
    box = BoxRow("gone.jpg", 1, 2, 3, 4, "cat", "boxes.csv:9")
    with fn_api_pipeline() as pipeline:
        planned = _plan(pipeline, [], [unsafe], label_rows, [box], [])
        assert_outputs(planned, {ROW_REJECTS: [
            Reject(path="gone.jpg", reason="missing_file", kind=LABEL_ROW,
                   detail="labels.csv:5: no image 'gone.jpg' was discovered under the data root"),
            Reject(path="gone.jpg", reason="missing_file", kind=BOX_ROW,
                   detail="boxes.csv:9: no image 'gone.jpg' was discovered under the data root"),
        ], REJECTED: [unsafe], MATCHED: [(LABEL_ROW, 1)]})


@pytest.mark.parametrize("lanes", [None, 2])
def test_unchanged_files_are_skipped_and_changed_or_retried_ones_are_inspected_again(lanes):
    names = ["same.jpg", "bigger.jpg", "touched.jpg", "relabelled.jpg", "crashed.jpg"]
    rows = [_label(name, "bird" if name == "relabelled.jpg" else "cat", line)
            for line, name in enumerate(names, start=2)]
    priors = [_prior("same.jpg", "run1", "cat"), _prior("same.jpg", "run2", "cat"),
              _prior("bigger.jpg", "run1", "cat", file_bytes=9),
              _prior("touched.jpg", "run1", "cat", mtime=999.0),
              _prior("relabelled.jpg", "run1", "cat"),
              _prior("crashed.jpg", "run1", "cat", reason="decoder_crash"),
              _prior("gone_since.jpg", "run1", "cat")]
    with fn_api_pipeline() as pipeline:
        planned = _plan(pipeline, [_ref(name) for name in names], [], rows, [], priors,
                        folder_labels=False, lanes=lanes)
        live = {p["path"]: p for p in priors[2:] if p["accepted"]}
        assert_outputs(planned, {
            SKIPPED: [("same.jpg", "run2")], MATCHED: [(LABEL_ROW, 5)],
            # the unchanged file's latest record stays live; an older record of the same path
            # (an archive from before retirements) and the gone file's record are retired
            KEPT: [priors[1]],
            RETIRED: [retirement(priors[0], "replaced",
                                 "superseded by the record of snapshot run2"),
                      retirement(priors[6], "deleted", "the file is no longer under the data "
                                                       "root")],
            "images": [
                ImageRecord(uri=f"/data/{row.path}", path=row.path, file_bytes=10,
                            mtime=1000.0, label_key=row.label, label_rows=(row,),
                            retires=(("run1", row.path, f"sha-{row.path}", "train", "cat",
                                      "cat"),) if row.path in live else ())
                for row in rows[1:]]})


def test_a_row_in_another_unicode_normalization_names_the_file_which_keeps_its_name():
    nfd, nfc = "cafe\u0301/1.jpg", "caf\u00e9/1.jpg"
    row = _label(nfc, "cat", 2)
    prior = _prior(nfd, "run1", "cat")
    with fn_api_pipeline() as pipeline:
        planned = _plan(pipeline, [_ref(nfd)], [], [row], [], [prior], folder_labels=False)
        assert_outputs(planned, {
            SKIPPED: [(nfd, "run1")], MATCHED: [(LABEL_ROW, 1)], KEPT: [prior]})


def test_near_misses_in_case_or_between_two_normalizations_say_so():
    both = ["caf\u00e9\u00e9.jpg", "cafe\u0301e\u0301.jpg"]  # two files, equal in NFC
    rows = [_label("Cat.JPG", "cat", 2), _label("cafe\u0301\u00e9.jpg", "cat", 3),
            _label(both[0], "dog", 4)]
    with fn_api_pipeline() as pipeline:
        planned = _plan(pipeline, [_ref("cat.jpg"), *map(_ref, both)], [], rows, [], [],
                        folder_labels=False)
        assert_outputs(planned, {
            ROW_REJECTS: [
                Reject(path="Cat.JPG", reason="missing_file", kind=LABEL_ROW,
                       detail="labels.csv:2: no image 'Cat.JPG' was discovered under the data "
                              "root; 'cat.jpg' differs only in case"),
                Reject(path=rows[1].path, reason="missing_file", kind=LABEL_ROW,
                       detail=f"labels.csv:3: no image {rows[1].path!r} was discovered under "
                              f"the data root; {both[1]!r} and {both[0]!r} differ from it "
                              f"only by Unicode normalization, so it names neither: name one "
                              f"exactly")],
            MATCHED: [(LABEL_ROW, 1)],  # the exact row
            "images": [
                ImageRecord(uri="/data/cat.jpg", path="cat.jpg", file_bytes=10, mtime=1000.0),
                ImageRecord(uri=f"/data/{both[0]}", path=both[0], file_bytes=10, mtime=1000.0,
                            label_key="canine", label_rows=(rows[2],)),
                ImageRecord(uri=f"/data/{both[1]}", path=both[1], file_bytes=10,
                            mtime=1000.0)]})


def test_a_job_joins_by_path_only_when_it_has_csv_rows_or_an_archive():
    from pipelines.job import PreprocessJob
    job = PreprocessJob(data_roots=("/data",), label_csvs=(), box_csvs=(), class_table=(),
                        frozen_classes=False, staging_dir="/out/.staging/r", config=CONFIG)
    assert not job.joins_by_path  # folder labels, first run: each file planned alone
    for change in ({"label_csvs": ("labels.csv",)}, {"box_csvs": ("boxes.csv",)},
                   {"archive": (("r0", "/out/snapshots/r0/index.parquet"),)}):
        assert dataclasses.replace(job, **change).joins_by_path, change
