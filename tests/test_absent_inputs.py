"""A kind of input a run was not given (a label CSV, a box CSV, an archive) builds no steps:
`ReadInputs` gives None for it, and the planning join and the accounting do without it."""
from __future__ import annotations

import dataclasses
import json

import apache_beam as beam
from apache_beam.testing.util import equal_to

from configs.schema import load_config
from pipelines.job import PreprocessJob
from pipelines.phase_outputs import Counted, Inputs, Inspected
from pipelines.preprocess_graph import Accounting, InspectAndLabel, ReadInputs
from tests.beamutil import assert_that, fn_api_pipeline, paths_part
from transforms.offline.gather import JoinByKey

JOB = PreprocessJob(data_roots=("/data",), label_csvs=(), box_csvs=(), class_table=(),
                    frozen_classes=False, staging_dir="/out/.staging/r", config=load_config())
_CSV_AND_ARCHIVE_FIELDS = ("label_items", "label_rows", "label_rejects", "box_items",
                           "box_rows", "box_rejects", "archive_rows")


def _read_inputs(job, inspect: bool = False) -> tuple[Inputs, list[str]]:
    pipeline = beam.Pipeline()
    inputs = pipeline | "ReadInputs" >> ReadInputs(job)
    if inspect:
        inputs.pvalues() | "InspectAndLabel" >> InspectAndLabel(job)
    labels = []

    class Labels(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            labels.append(node.full_label)

    pipeline.visit(Labels())
    return inputs, labels


def test_a_folder_labelled_full_run_builds_no_csv_or_archive_steps():
    inputs, labels = _read_inputs(JOB)
    assert all(getattr(inputs, name) is None for name in _CSV_AND_ARCHIVE_FIELDS)
    assert all(label.startswith("ReadInputs/DiscoverImages/") for label in labels), labels


def test_a_run_with_labels_builds_their_steps_and_none_for_boxes_or_archive():
    inputs, labels = _read_inputs(dataclasses.replace(JOB, label_csvs=("/data/labels.csv",)))
    present = {name for name in _CSV_AND_ARCHIVE_FIELDS if getattr(inputs, name) is not None}
    assert present == {"label_items", "label_rows", "label_rejects"}
    assert {label.split("/")[1] for label in labels} == {
        "DiscoverImages", "LabelCsvPaths", "LabelCsvPathsValues", "ReadLabelRows",
        "SplitLabelRows"}


def test_only_a_run_with_an_archive_looks_for_the_records_an_image_replaces():
    archive = (("r0", "/out/snapshots/r0/index.parquet"),)
    for job, looks in ((JOB, False), (dataclasses.replace(JOB, archive=archive), True)):
        _inputs, labels = _read_inputs(job, inspect=True)
        assert ("InspectAndLabel/RetireReplaced" in labels) is looks, job.archive


def test_accounting_counts_an_absent_input_as_nothing(tmp_path):
    with fn_api_pipeline() as pipeline:
        def make(name, items):
            return pipeline | name >> beam.Create(items)
        empty = make("Empty", [])
        present = {"refs": make("Refs", ["r1", "r2"]),
                   "accepted_parts": make("Acc", [paths_part("a")])}
        inputs = Inputs(**{name: None if name in _CSV_AND_ARCHIVE_FIELDS
                           else present.get(name, empty) for name in Inputs._fields})
        inspected = Inspected(**{name: empty for name in Inspected._fields})
        counted = Counted(**{name: present.get(name, empty) for name in Counted._fields})
        (inputs.pvalues(), inspected, counted) | Accounting(str(tmp_path))
    counts = json.loads((tmp_path / "_work" / "counts.json").read_text())
    assert {key: counts[key] for key in ("images.discovered", "images.accepted",
                                         "label_rows.total", "box_rows.total",
                                         "live.before")} == {
        "images.discovered": 2, "images.accepted": 1, "label_rows.total": 0,
        "box_rows.total": 0, "live.before": 0}


def test_a_join_tag_without_an_input_has_empty_lists():
    with fn_api_pipeline() as pipeline:
        refs = pipeline | "Refs" >> beam.Create([("a", 1), ("b", 2)])
        joined = {"refs": refs} | JoinByKey(tags=("refs", "labels"))
        assert_that(joined, equal_to([("a", {"refs": [1], "labels": []}),
                                      ("b", {"refs": [2], "labels": []})]))
