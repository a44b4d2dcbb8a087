"""Label CSVs as pure functions: text lines in, `LabelRow`s and `Reject`s out.

A label CSV names an image (relative to the data root), its class, optionally its split, and any
number of extra columns that ride along into the record as `meta/<column>`:

    path,label,split,patient_id
    cats/001.jpg,cat,train,p17
    "dogs/with, comma.jpg",dog,,p18

A header without the configured path or label column is a user error that stops the job before
any work (`ValueError`). A bad data row is one `Reject(kind="label_row")` and the rest of the
file is still read, so every line of input is accounted for.

Decisions (how rows are found, bad bytes and over-long cells: `transforms.offline.csv_records`):

* `path`, `label` and `split` values are stripped of surrounding whitespace (spreadsheets add
  it); `meta` values are kept verbatim. Header names are stripped too.
* Splits are case-insensitive, with the aliases people use: `training` -> train;
  `val`, `valid`, `eval` (TFX's name), `dev` (NLP's name) -> validation; `testing` -> test.
  Empty -> None (the job assigns a split from the content hash).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

from configs.schema import LabelsConfig
from transforms.offline.class_names import class_name_problem
from transforms.offline.csv_records import CsvRecord, read_csv_records
from transforms.offline.paths import UnsafePath, normalize_relative
from transforms.offline.rejects import LABEL_ROW, Reject

__all__ = ["LabelRow", "parse_label_csv", "SPLIT_ALIASES", "checked_path_and_label"]

SPLIT_ALIASES = {
    "train": "train", "training": "train",
    "validation": "validation", "val": "validation", "valid": "validation",
    "eval": "validation", "dev": "validation",
    "test": "test", "testing": "test",
}


@dataclasses.dataclass(frozen=True)
class LabelRow:
    """One good label CSV row. `path` is canonical (see `transforms.offline.paths`);
    `source` is `"<csv file>:<line number>"`; `meta` is sorted by column name."""
    path: str
    label: str
    split: str | None
    meta: tuple[tuple[str, str], ...]
    source: str


def parse_label_csv(csv_name: str, lines: Iterable[str],
                    config: LabelsConfig) -> Iterator[LabelRow | Reject]:
    """Yields a `LabelRow` or a `Reject(kind="label_row")` for every data row of one CSV.

    `bad_csv_row` (path `"<csv_name>:<line>"`): does not parse, wrong number of fields, a
    cell over `config.max_cell_bytes`, bytes that are not UTF-8, empty path or label, unknown
    split. `unsafe_path` (path = the raw CSV value): see
    `transforms.offline.paths.normalize_relative`. `bad_label` (path = the image's canonical
    path): the label is not a valid class name (`transforms.offline.class_names.class_name_problem`).
    Raises `ValueError` (on first use) when the header
    lacks `config.path_column` or `config.label_column`; the split column is optional.
    """
    header, records = read_csv_records(
        csv_name, lines, config.delimiter, (config.path_column, config.label_column),
        config.max_cell_bytes)
    has_split = config.split_column in header
    special = {config.path_column, config.label_column, config.split_column}
    meta_columns = sorted(name for name in header if name not in special)
    for record in records:
        yield _label_row(csv_name, record, config, has_split, meta_columns)


def checked_path_and_label(raw_path: str, label: str, csv_name: str, line: int,
                           kind: str) -> str | Reject:
    """A CSV row's image path, normalized relative to the data root, or the row's Reject
    (`kind`: label or box row) when the path is unsafe or the label is not a valid class
    name. Label and box CSVs apply the same two checks in the same order."""
    try:
        path = normalize_relative(raw_path)
    except UnsafePath as exc:
        return Reject(path=raw_path, reason="unsafe_path",
                      detail=f"{exc} ({csv_name} line {line})", kind=kind)
    problem = class_name_problem(label)
    if problem:
        return Reject(path=path, reason="bad_label", kind=kind,
                      detail=f"{csv_name} line {line}: the label {problem}")
    return path


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
    path = checked_path_and_label(raw_path, label, csv_name, record.line, LABEL_ROW)
    if isinstance(path, Reject):
        return path
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
