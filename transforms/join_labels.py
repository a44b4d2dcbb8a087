"""Label and box CSVs joined to the discovered images with a Beam join (CoGroupByKey on the
root-relative path), so no process ever holds the whole label table.

Every CSV row ends accounted for: matched to a discovered image (whatever that image's fate),
or rejected as `bad_csv_row`, `unsafe_path` or `missing_file`. Every image that is still a
candidate leaves with one label, or is rejected as `unlabeled`, `label_conflict` or `bad_box`.
"""
from __future__ import annotations

import dataclasses
import io
import posixpath

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from configs.schema import Config
from transforms import boxes as box_rules
from transforms import labels as label_rules
from transforms.image_record import ImageRecord
from transforms.rejects import BOX_ROW, LABEL_ROW, Reject

__all__ = ["ReadLabelRows", "ReadBoxRows", "JoinLabels", "ROW_REJECTS", "MATCHED",
           "read_csv_header"]

ROW_REJECTS = "row_rejects"
MATCHED = "matched"


def _csv_lines(path: str):
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        yield from io.TextIOWrapper(handle, encoding="utf-8", newline="")


def read_csv_header(path: str) -> str:
    """The first line of a CSV (used to check columns before the job starts)."""
    for line in _csv_lines(path):
        return line
    return ""


class ReadLabelRows(beam.PTransform):
    """CSV paths -> LabelRow or Reject(kind=label_row), one per data row."""

    def __init__(self, config: Config):
        super().__init__()
        self._config = config

    def expand(self, csv_paths):
        labels_config = self._config.labels
        return (csv_paths
                | "SpreadCsvFiles" >> beam.Reshuffle()
                | "ParseLabelCsv" >> beam.FlatMap(
                    lambda path: label_rules.parse_label_csv(
                        path, _csv_lines(path), labels_config)))


class ReadBoxRows(beam.PTransform):
    """Box CSV paths -> BoxRow or Reject(kind=box_row), one per data row."""

    def expand(self, csv_paths):
        return (csv_paths
                | "SpreadBoxFiles" >> beam.Reshuffle()
                | "ParseBoxCsv" >> beam.FlatMap(
                    lambda path: box_rules.parse_box_csv(path, _csv_lines(path))))


class _JoinFn(beam.DoFn):
    def __init__(self, config: Config, folder_labels: bool):
        self._config = config
        self._folder_labels = folder_labels
        self._renames = dict(config.classes.renames)
        self._unlabeled = Metrics.counter("pixelmill", "unlabeled")

    def _rename(self, label: str) -> str:
        return self._renames.get(label, label)

    def process(self, item):
        rel, grouped = item
        images = list(grouped["images"])
        label_rows = sorted(grouped["labels"], key=lambda r: r.source)
        box_rows = sorted(grouped["boxes"], key=lambda r: r.source)
        if not images:
            for row, kind in [(r, LABEL_ROW) for r in label_rows] + [(r, BOX_ROW) for r in box_rows]:
                yield beam.pvalue.TaggedOutput(ROW_REJECTS, Reject(
                    path=row.path, reason="missing_file", kind=kind,
                    detail=f"{row.source}: no image {row.path!r} was discovered under the "
                           f"data root"))
            return
        if label_rows:
            yield beam.pvalue.TaggedOutput(MATCHED, (LABEL_ROW, len(label_rows)))
        if box_rows:
            yield beam.pvalue.TaggedOutput(MATCHED, (BOX_ROW, len(box_rows)))
        for image in images:  # discovery guarantees one image per relative path
            yield self._label(image, label_rows, box_rows)

    def _label(self, image: ImageRecord, label_rows, box_rows) -> ImageRecord:
        if image.reject:
            return image
        if label_rows:
            labels = sorted({self._rename(r.label) for r in label_rows})
            if len(labels) > 1:
                sources = ", ".join(r.source for r in label_rows)
                return image.rejected("label_conflict", f"labels {labels} from {sources}")
            splits = sorted({r.split for r in label_rows if r.split})
            if len(splits) > 1:
                sources = ", ".join(r.source for r in label_rows)
                return image.rejected("label_conflict", f"splits {splits} from {sources}")
            meta = {}
            for row in label_rows:
                for column, value in row.meta:
                    meta.setdefault(column, value)
            image = dataclasses.replace(image, label=labels[0],
                                        split=splits[0] if splits else None,
                                        meta=tuple(sorted(meta.items())))
        elif self._folder_labels and "/" in image.rel:
            folder = posixpath.basename(posixpath.dirname(image.rel))
            image = dataclasses.replace(image, label=self._rename(folder))
        else:
            self._unlabeled.inc()
            why = ("no label CSV row names this image" if not self._folder_labels
                   else "not inside a class folder (<root>/<class>/<image>)")
            return image.rejected("unlabeled", why)
        if box_rows:
            try:
                resolved = box_rules.resolve_boxes(
                    box_rows, image.width, image.height, self._config.boxes)
            except box_rules.BadBox as exc:
                return image.rejected("bad_box", str(exc))
            image = dataclasses.replace(image, boxes=tuple(
                (x0, y0, x1, y1, self._rename(label)) for x0, y0, x1, y1, label in resolved))
        return image


class JoinLabels(beam.PTransform):
    """(images, label rows, box rows) -> labelled ImageRecords, with tagged outputs
    `row_rejects` (missing_file rows) and `matched` ((kind, n) for matched CSV rows)."""

    def __init__(self, config: Config, folder_labels: bool):
        super().__init__()
        self._config = config
        self._folder_labels = folder_labels

    def expand(self, inputs):
        images, label_rows, box_rows = inputs
        keyed = {
            "images": images | "KeyImages" >> beam.Map(lambda r: (r.rel, r)),
            "labels": label_rows | "KeyLabelRows" >> beam.Map(lambda r: (r.path, r)),
            "boxes": box_rows | "KeyBoxRows" >> beam.Map(lambda r: (r.path, r)),
        }
        return (keyed
                | "JoinByPath" >> beam.CoGroupByKey()
                | "ResolveLabels" >> beam.ParDo(
                    _JoinFn(self._config, self._folder_labels)).with_outputs(
                        ROW_REJECTS, MATCHED, main="images"))
