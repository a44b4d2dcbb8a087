"""Bounding-box CSVs as pure functions: rows in, normalized boxes (or a reason) out.

The box CSV has one row per box, in pixel or normalized coordinates (`boxes.coordinates`):

    path,xmin,ymin,xmax,ymax,label
    cats/001.jpg,10,20,110,220,cat

Extra columns are allowed and ignored. A row that does not parse is a `Reject(kind="box_row")`;
a box that is geometrically wrong for its image (`resolve_boxes`) raises `BadBox`, which the
job turns into a `bad_box` reject of the image, since a half-boxed image would teach the
detector that an object is background.

Decisions: an inverted or zero-size box (`xmax <= xmin` or `ymax <= ymin`) is always bad
(clipping cannot guess what was meant). A box reaching outside the image by more than 1e-6 (in
normalized units) is bad under `on_bad_box: reject` and clipped to the image under `clip`;
within that tolerance it is clipped silently (rounding in whoever wrote the CSV). Coordinates
must be finite numbers; `nan` and `inf` are `bad_csv_row`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Iterator, Sequence

from configs.schema import BoxesConfig
from transforms.offline.csv_records import DEFAULT_MAX_CELL_BYTES, CsvRecord, read_csv_records
from transforms.offline.labels import checked_path_and_label
from transforms.offline.rejects import BOX_ROW, Reject

__all__ = ["BoxRow", "BadBox", "BOX_COLUMNS", "parse_box_csv", "resolve_boxes"]

BOX_COLUMNS = ("path", "xmin", "ymin", "xmax", "ymax", "label")
_COORDINATES = ("xmin", "ymin", "xmax", "ymax")
_TOLERANCE = 1e-6


@dataclasses.dataclass(frozen=True)
class BoxRow:
    """One parsed box CSV row, coordinates as written (pixel or normalized).
    `path` is canonical; `source` is `"<csv file>:<line number>"`."""
    path: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    label: str
    source: str


class BadBox(ValueError):
    """A box that cannot be used for its image. The message is the reject detail."""


def parse_box_csv(csv_name: str, lines: Iterable[str],
                  max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES) -> Iterator[BoxRow | Reject]:
    """Yields a `BoxRow` or a `Reject(kind="box_row")` for every data row of one box CSV.

    `bad_csv_row` (path `"<csv_name>:<line>"`): does not parse, wrong number of fields, empty
    path or label, a coordinate that is not a finite number. `unsafe_path` (path = the raw
    value): see `transforms.offline.paths.normalize_relative`. Raises `ValueError` (on first use) when
    the header lacks one of `BOX_COLUMNS`. Comma-delimited; line numbers as in
    `transforms.offline.csv_records` (cells of at most `max_cell_bytes`).
    """
    _, records = read_csv_records(csv_name, lines, ",", BOX_COLUMNS, max_cell_bytes)
    for record in records:
        yield _box_row(csv_name, record)


def _box_row(csv_name: str, record: CsvRecord) -> BoxRow | Reject:
    where = f"{csv_name}:{record.line}"

    def bad_row(detail: str) -> Reject:
        return Reject(path=where, reason="bad_csv_row", detail=detail, kind=BOX_ROW)

    if record.values is None:
        return bad_row(record.problem)
    values = record.values
    raw_path = values["path"]
    label = values["label"].strip()
    for column, value in (("path", raw_path.strip()), ("label", label)):
        if not value:
            return bad_row(f"{csv_name} line {record.line}: empty value in column {column!r}")
    coordinates = {}
    for column in _COORDINATES:
        text = values[column].strip()
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            return bad_row(f"{csv_name} line {record.line}: {column} is not a finite number. "
                           f"Received: {column}={values[column]!r}")
        coordinates[column] = number
    path = checked_path_and_label(raw_path, label, csv_name, record.line, BOX_ROW)
    if isinstance(path, Reject):
        return path
    return BoxRow(path=path, label=label, source=where, **coordinates)


def resolve_boxes(rows: Sequence[BoxRow], width: int, height: int,
                  config: BoxesConfig) -> list[tuple[float, float, float, float, str]]:
    """Returns one image's boxes as `(xmin, ymin, xmax, ymax, label)` normalized to [0, 1].

    Pixel coordinates are divided by `width`/`height` when `config.coordinates == "pixel"`.
    Sorted by coordinates, then label, so the record does not depend on CSV row order.
    Raises `BadBox` (naming the row's source and coordinates) for the first bad box: inverted
    or empty, outside the image under `on_bad_box: reject`, or nothing left after clipping.
    """
    for name, size in (("width", width), ("height", height)):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"image {name} must be a positive int. Received: {name}={size!r}")
    resolved = []
    for row in rows:
        resolved.append(_resolve_one(row, width, height, config))
    return sorted(resolved)


def _resolve_one(row: BoxRow, width: int, height: int,
                 config: BoxesConfig) -> tuple[float, float, float, float, str]:
    described = (f"box at {row.source} ({config.coordinates} xmin={row.xmin:g}, "
                 f"ymin={row.ymin:g}, xmax={row.xmax:g}, ymax={row.ymax:g}, "
                 f"label={row.label!r}; image {width}x{height})")
    if row.xmax <= row.xmin or row.ymax <= row.ymin:
        raise BadBox(f"inverted or empty {described}: xmax must exceed xmin and ymax must "
                     f"exceed ymin")
    if config.coordinates == "pixel":
        box = (row.xmin / width, row.ymin / height, row.xmax / width, row.ymax / height)
    else:
        box = (row.xmin, row.ymin, row.xmax, row.ymax)
    outside = any(v < -_TOLERANCE or v > 1.0 + _TOLERANCE for v in box)
    if outside and config.on_bad_box == "reject":
        raise BadBox(f"{described} reaches outside the image")
    xmin, ymin, xmax, ymax = (min(max(v, 0.0), 1.0) for v in box)
    if xmax <= xmin or ymax <= ymin:
        raise BadBox(f"{described} has no area inside the image after clipping")
    return (xmin, ymin, xmax, ymax, row.label)
