r"""CSV files as records: physical lines in, one `CsvRecord` per data row out, with bounded cost.

Label and box CSVs share this reader. Decisions:

* Line numbers are 1-based physical line numbers of a row's first line, so a quoted field that
  spans lines still points at where its row starts, and blank lines still count.
* Quoting is strict (`csv` `strict=True`): `"a"b` or a quote left open at the end of the file
  is a bad row, not a silently mangled value. A quote left open swallows the lines after it
  into that one bad row; that is what the file says.
* A cell is at most `max_cell_bytes` bytes of raw text (quotes included). Rows are found the
  way `csv.reader` finds them (`_RowScanner` mirrors its quoting states), so an over-long cell,
  even a quoted one spanning millions of lines, is reported once, its row is skipped whole,
  and reading goes on with the next row; only the first `max_cell_bytes` of it are kept.
* Bytes that are not UTF-8 do not stop the file: they are read as lone surrogates
  (`surrogateescape`) and the row holding them is a bad row that shows them as `\xNN`.
* Blank (whitespace-only) rows are skipped; a UTF-8 BOM on the header is dropped.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from typing import BinaryIO, Iterable, Iterator, Sequence

from configs.schema import LabelsConfig
from transforms.offline.paths import printable

__all__ = ["CsvRecord", "read_csv_records", "text_lines", "DEFAULT_MAX_CELL_BYTES"]

DEFAULT_MAX_CELL_BYTES = LabelsConfig.max_cell_bytes  # the config's default, one owner
_MAX_LINE_IN_DETAIL = 200
_BOM = "\ufeff"
_ROW_CELLS = 16  # a row (and a physical line) holds at most this many cells' worth of bytes
_WHOLE_ROW = -1
# Scanner states, as in CPython's _csv.c.
_FIELD_START, _IN_FIELD, _IN_QUOTED, _QUOTE_IN_QUOTED, _BROKEN = range(5)


@dataclasses.dataclass(frozen=True)
class CsvRecord:
    """One data row of a CSV as read, before any meaning is given to it.

    `values` maps each header name to the row's field, or is None when the row does not parse,
    has the wrong number of fields, holds bytes that are not UTF-8 or an over-long cell;
    `problem` then holds the full reject detail.
    """
    line: int
    values: dict | None
    problem: str = ""


def text_lines(handle: BinaryIO, max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES) -> Iterator[str]:
    """The physical lines of a binary stream, line endings kept, decoded as UTF-8 with
    `surrogateescape`. A line longer than `_ROW_CELLS` cells' worth is cut: its first part is
    yielded with a newline and the rest is skipped (its row is then reported as over-long), so
    a file without line breaks never sits in memory whole."""
    text = io.TextIOWrapper(handle, encoding="utf-8", errors="surrogateescape", newline="")
    limit = _ROW_CELLS * max_cell_bytes + 1
    while True:
        line = text.readline(limit)
        if not line:
            return
        if len(line) == limit and not line.endswith(("\n", "\r")):
            while True:  # skip the rest of this physical line
                rest = text.readline(limit)
                if not rest or rest.endswith(("\n", "\r")):
                    break
            line += "\n"
        yield line


class _RowScanner:
    """Tells where `csv.reader(strict=True)` ends a row, line by line, and how long the row's
    longest cell is, without keeping the row's text."""

    def __init__(self, delimiter: str, max_cell_bytes: int):
        self._delimiter = delimiter
        self._max = max_cell_bytes
        self.start_row()

    def start_row(self) -> None:
        self._state = _FIELD_START
        self._cell_bytes = 0
        self._column = 0
        self.overlong_column: int | None = None  # 0-based column of the first over-long cell

    def _add(self, text: str) -> None:
        self._cell_bytes += len(text.encode("utf-8", "surrogateescape"))
        if self._cell_bytes > self._max and self.overlong_column is None:
            self.overlong_column = self._column

    def _next_cell(self) -> None:
        self._column += 1
        self._cell_bytes = 0
        self._state = _FIELD_START

    def feed(self, line: str) -> bool:
        """Takes one physical line; True when the row ends with it."""
        text = line.rstrip("\r\n")
        pos, end = 0, len(text)
        while True:
            state = self._state
            if state == _FIELD_START:
                if pos < end and text[pos] == '"':
                    self._add('"')
                    self._state, pos = _IN_QUOTED, pos + 1
                    continue
                self._state = _IN_FIELD
            elif state == _IN_FIELD:
                cut = text.find(self._delimiter, pos)
                self._add(text[pos:end if cut < 0 else cut])
                if cut < 0:
                    return True
                self._next_cell()
                pos = cut + 1
            elif state == _IN_QUOTED:
                cut = text.find('"', pos)
                if cut < 0:
                    self._add(text[pos:] + "\n")
                    return False
                self._add(text[pos:cut + 1])
                self._state, pos = _QUOTE_IN_QUOTED, cut + 1
            elif state == _QUOTE_IN_QUOTED:
                if pos >= end:
                    return True
                char = text[pos]
                if char == '"':
                    self._add(char)
                    self._state, pos = _IN_QUOTED, pos + 1
                elif char == self._delimiter:
                    self._next_cell()
                    pos += 1
                else:  # strict csv raises here and drops the rest of the line
                    self._state = _BROKEN
                    return True
            else:
                return True


def _rows(lines: Iterable[str], delimiter: str, max_cell_bytes: int):
    """(first line number, kept lines, over-long column or None) per row, blank rows too.
    Column `_WHOLE_ROW` marks a row longer than `_ROW_CELLS` cells' worth in all."""
    scanner = _RowScanner(delimiter, max_cell_bytes)
    kept: list[str] = []
    kept_chars, start, fresh = 0, 1, True
    for number, line in enumerate(lines, start=1):
        if fresh:
            start, fresh = number, False
        if scanner.overlong_column is None:
            kept.append(line)
            kept_chars += len(line)
            if kept_chars > _ROW_CELLS * max_cell_bytes:
                scanner.overlong_column = _WHOLE_ROW
        if scanner.feed(line):
            yield start, kept, scanner.overlong_column
            scanner.start_row()
            kept, kept_chars, fresh = [], 0, True
    if not fresh:  # a quote left open at the end of the file
        yield start, kept, scanner.overlong_column


def _parse(kept: list[str], delimiter: str) -> list[str]:
    """One row from its lines; csv.Error when it does not parse."""
    ended = [line if line.endswith(("\n", "\r")) else line + "\n" for line in kept]
    reader = csv.reader(iter(ended), delimiter=delimiter, strict=True)
    row = next(reader, None)
    if row is None:  # csv ran out of lines inside a quoted field
        raise csv.Error("unexpected end of data")
    return row


def read_csv_records(csv_name: str, lines: Iterable[str], delimiter: str,
                     required: Sequence[str], max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES
                     ) -> tuple[tuple[str, ...], Iterator[CsvRecord]]:
    """Reads the header of one CSV and returns it with an iterator over its data rows.

    `lines` are the file's physical lines, one per item, with or without their line endings
    (as `text_lines`, `open()` or Beam's `ReadFromText` give them). The first non-blank row is
    the header. Raises `ValueError` naming the file when there is no header, the header does
    not parse, is not UTF-8, has an over-long cell, an empty or repeated name, or lacks a
    `required` column.
    """
    if max_cell_bytes > csv.field_size_limit():  # csv's own cap (131072 chars by default)
        csv.field_size_limit(max_cell_bytes)
    rows = _rows(lines, delimiter, max_cell_bytes)
    for start, kept, overlong in rows:
        if _is_blank(kept) and overlong is None:
            continue
        where = f"{csv_name} line {start}"
        if overlong is not None:
            raise ValueError(f"{where}: the header is too long: a cell over {max_cell_bytes} "
                             f"bytes or a row over {_ROW_CELLS} x that (labels.max_cell_bytes)")
        try:
            row = _parse(kept, delimiter)
        except csv.Error as exc:
            raise ValueError(f"{where}: the header does not parse as CSV: {exc}. Received: "
                             f"{printable(_raw_text(kept))!r}") from exc
        if any(printable(name) != name for name in row):
            raise ValueError(f"{where}: the header is not valid UTF-8. Received: "
                             f"{printable(_raw_text(kept))!r}")
        if row and row[0].startswith(_BOM):
            row[0] = row[0][len(_BOM):]
        header = tuple(name.strip() for name in row)
        _check_header(csv_name, header, required)
        return header, _records(csv_name, rows, delimiter, header, max_cell_bytes)
    raise ValueError(f"{csv_name}: the file is empty, expected a header line with "
                     f"columns {tuple(required)}")


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


def _records(csv_name: str, rows, delimiter: str, header: tuple[str, ...],
             max_cell_bytes: int) -> Iterator[CsvRecord]:
    for start, kept, overlong in rows:
        if _is_blank(kept) and overlong is None:
            continue
        where = f"{csv_name} line {start}"
        shown = _shorten(printable(_raw_text(kept)))
        if overlong is not None:
            yield CsvRecord(start, None, f"{where}: {_overlong_text(overlong, header)} "
                                         f"{max_cell_bytes} bytes (labels.max_cell_bytes); "
                                         f"the row is skipped: '{shown}'")
            continue
        try:
            row = _parse(kept, delimiter)
        except csv.Error as exc:
            yield CsvRecord(start, None, f"{where}: not valid CSV ({exc}): '{shown}'")
            continue
        if len(row) != len(header):
            yield CsvRecord(start, None, f"{where}: expected {len(header)} fields, got "
                                         f"{len(row)}: '{shown}'")
            continue
        bad = [name for name, value in zip(header, row) if printable(value) != value]
        if bad:
            yield CsvRecord(start, None, f"{where}: column {bad[0]!r} is not valid UTF-8 (the "
                                         f"bytes that are not are shown as \\xNN): '{shown}'")
            continue
        yield CsvRecord(start, dict(zip(header, row)))


def _overlong_text(column: int, header: tuple[str, ...]) -> str:
    if column == _WHOLE_ROW:
        return f"the row is longer than {_ROW_CELLS} x"
    name = header[column] if column < len(header) else f"#{column + 1}"
    return f"the cell in column {name!r} is longer than"


def _is_blank(kept: list[str]) -> bool:
    return all(not line.strip() for line in kept)


def _raw_text(kept: list[str]) -> str:
    return "\n".join(line.rstrip("\r\n") for line in kept)


def _shorten(text: str) -> str:
    if len(text) <= _MAX_LINE_IN_DETAIL:
        return text
    return text[:_MAX_LINE_IN_DETAIL - 3] + "..."
