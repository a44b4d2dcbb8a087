"""Label CSVs as pure functions: text lines in, `LabelRow`s and `Reject`s out.

A label CSV names an image (relative to the data root), its class, optionally its split, and any
number of extra columns that ride along into the record as `meta/<column>`:

    path,label,split,patient_id
    cats/001.jpg,cat,train,p17
    "dogs/with, comma.jpg",dog,,p18

A header without the configured path or label column is a user error that stops the job before
any work (`ValueError`). A bad data row is one `Reject(kind="label_row")` and the rest of the
file is still read, so every line of input is accounted for.

Decisions:

* Line numbers are 1-based physical line numbers of a row's first line, so a quoted field that
  spans lines still points at where its row starts, and blank lines still count.
* Quoting is strict (`csv` `strict=True`): `"a"b` or a quote left open at the end of the file
  is a `bad_csv_row`, not a silently mangled value. A quote left open swallows the lines after
  it into that one bad row; that is what the file says.
* `path`, `label` and `split` values are stripped of surrounding whitespace (spreadsheets add
  it); `meta` values are kept verbatim. Header names are stripped too.
* Splits are case-insensitive, with the aliases people use: `training` -> train;
  `val`, `valid`, `eval` (TFX's name), `dev` (NLP's name) -> validation; `testing` -> test.
  Empty -> None (the job assigns a split from the content hash).
"""
from __future__ import annotations

import csv
import dataclasses
from typing import Iterable, Iterator, Sequence

from configs.schema import LabelsConfig
from transforms.offline.classes import class_name_problem
from transforms.offline.paths import UnsafePath, normalize_relative
from transforms.offline.rejects import LABEL_ROW, Reject

__all__ = ["LabelRow", "parse_label_csv", "SPLIT_ALIASES", "CsvRecord", "read_csv_records"]

SPLIT_ALIASES = {
    "train": "train", "training": "train",
    "validation": "validation", "val": "validation", "valid": "validation",
    "eval": "validation", "dev": "validation",
    "test": "test", "testing": "test",
}

_MAX_LINE_IN_DETAIL = 200
_BOM = "\ufeff"


@dataclasses.dataclass(frozen=True)
class LabelRow:
    """One good label CSV row. `path` is canonical (see `transforms.offline.paths`);
    `source` is `"<csv file>:<line number>"`; `meta` is sorted by column name."""
    path: str
    label: str
    split: str | None
    meta: tuple[tuple[str, str], ...]
    source: str


@dataclasses.dataclass(frozen=True)
class CsvRecord:
    """One data row of a CSV as read, before any meaning is given to it.

    `values` maps each header name to the row's field, or is None when the row does not parse
    or has the wrong number of fields; `problem` then holds the full reject detail.
    """
    line: int
    values: dict | None
    problem: str = ""


def read_csv_records(csv_name: str, lines: Iterable[str], delimiter: str,
                     required: Sequence[str]) -> tuple[tuple[str, ...], Iterator[CsvRecord]]:
    """Reads the header of one CSV and returns it with an iterator over its data rows.

    `lines` are the file's physical lines, one per item, with or without their line endings
    (as `open()` or Beam's `ReadFromText` give them). The first non-blank line is the header
    (a UTF-8 BOM on it is dropped). Raises `ValueError` naming the file when there is no
    header, a header name is empty or repeated, or a `required` column is missing.
    Blank (whitespace-only) lines are skipped everywhere.
    """
    consumed: list[str] = []

    def feed() -> Iterator[str]:
        for line in lines:
            consumed.append(line)
            # Without its line ending a multi-line quoted field would lose its newline.
            yield line if line.endswith(("\n", "\r")) else line + "\n"

    reader = csv.reader(feed(), delimiter=delimiter, strict=True)
    header: tuple[str, ...] | None = None
    while header is None:
        start = reader.line_num + 1
        consumed.clear()
        try:
            row = next(reader)
        except StopIteration:
            raise ValueError(f"{csv_name}: the file is empty, expected a header line with "
                             f"columns {tuple(required)}") from None
        except csv.Error as exc:
            raise ValueError(f"{csv_name} line {start}: the header does not parse as CSV: "
                             f"{exc}. Received: {_raw_text(consumed)!r}") from exc
        if _is_blank(consumed):
            continue
        if row and row[0].startswith(_BOM):
            row[0] = row[0][len(_BOM):]
        header = tuple(name.strip() for name in row)
    _check_header(csv_name, header, required)
    return header, _records(csv_name, reader, consumed, header)


def _check_header(csv_name: str, header: tuple[str, ...], required: Sequence[str]) -> None:
    if any(not name for name in header):
        raise ValueError(f"{csv_name}: the header has an empty column name. "
                         f"Received header: {list(header)}")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise ValueError(f"{csv_name}: the header repeats column names {repeated}. "
                         f"Received header: {list(header)}")
    for column in required:
        if column not in header:
            raise ValueError(
                f"{csv_name}: the header has no column {column!r}. Required columns: "
                f"{list(required)}. Received header: {list(header)}")


def _records(csv_name: str, reader, consumed: list[str],
             header: tuple[str, ...]) -> Iterator[CsvRecord]:
    while True:
        start = reader.line_num + 1
        consumed.clear()
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield CsvRecord(start, None, f"{csv_name} line {start}: not valid CSV ({exc}): "
                                         f"'{_shorten(_raw_text(consumed))}'")
            continue
        if _is_blank(consumed):
            continue
        if len(row) != len(header):
            yield CsvRecord(start, None,
                            f"{csv_name} line {start}: expected {len(header)} fields, got "
                            f"{len(row)}: '{_shorten(_raw_text(consumed))}'")
            continue
        yield CsvRecord(start, dict(zip(header, row)))


def _is_blank(consumed: list[str]) -> bool:
    return all(not line.strip() for line in consumed)


def _raw_text(consumed: list[str]) -> str:
    return "\n".join(line.rstrip("\r\n") for line in consumed)


def _shorten(text: str) -> str:
    if len(text) <= _MAX_LINE_IN_DETAIL:
        return text
    return text[:_MAX_LINE_IN_DETAIL - 3] + "..."


def parse_label_csv(csv_name: str, lines: Iterable[str],
                    config: LabelsConfig) -> Iterator[LabelRow | Reject]:
    """Yields a `LabelRow` or a `Reject(kind="label_row")` for every data row of one CSV.

    `bad_csv_row` (path `"<csv_name>:<line>"`): does not parse, wrong number of fields, empty
    path or label, unknown split. `unsafe_path` (path = the raw CSV value): see
    `transforms.offline.paths.normalize_relative`. `bad_label` (path = the image's canonical
    path): the label is not a valid class name (`transforms.offline.classes.class_name_problem`).
    Raises `ValueError` (on first use) when the header
    lacks `config.path_column` or `config.label_column`; the split column is optional.
    """
    header, records = read_csv_records(
        csv_name, lines, config.delimiter, (config.path_column, config.label_column))
    has_split = config.split_column in header
    special = {config.path_column, config.label_column, config.split_column}
    meta_columns = sorted(name for name in header if name not in special)
    for record in records:
        yield _label_row(csv_name, record, config, has_split, meta_columns)


def _label_row(csv_name: str, record: CsvRecord, config: LabelsConfig, has_split: bool,
               meta_columns: list[str]) -> LabelRow | Reject:
    where = f"{csv_name}:{record.line}"

    def bad_row(detail: str) -> Reject:
        return Reject(path=where, reason="bad_csv_row", detail=detail, kind=LABEL_ROW)

    if record.values is None:
        return bad_row(record.problem)
    values = record.values
    raw_path = values[config.path_column]
    label = values[config.label_column].strip()
    for column, value in ((config.path_column, raw_path.strip()),
                          (config.label_column, label)):
        if not value:
            return bad_row(f"{csv_name} line {record.line}: empty value in column {column!r}")
    try:
        path = normalize_relative(raw_path)
    except UnsafePath as exc:
        return Reject(path=raw_path, reason="unsafe_path",
                      detail=f"{exc} ({csv_name} line {record.line})", kind=LABEL_ROW)
    problem = class_name_problem(label)
    if problem:
        return Reject(path=path, reason="bad_label", kind=LABEL_ROW,
                      detail=f"{csv_name} line {record.line}: the label {problem}")
    split = None
    if has_split:
        raw_split = values[config.split_column].strip()
        if raw_split:
            split = SPLIT_ALIASES.get(raw_split.lower())
            if split is None:
                return bad_row(
                    f"{csv_name} line {record.line}: unknown split {raw_split!r}. Expected one "
                    f"of {tuple(SPLIT_ALIASES)} (any case) or empty. Received: "
                    f"{config.split_column}={raw_split!r}")
    meta = tuple((name, values[name]) for name in meta_columns)
    return LabelRow(path=path, label=label, split=split, meta=meta, source=where)
