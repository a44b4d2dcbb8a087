r"""The class table: names to ids, stable forever.

`OUTPUT/classes.txt` (one name per line, id = line index) is append-only across runs: existing
names keep their ids, new names get the next ids (sorted among themselves, so a run is
deterministic), a class that disappears keeps its id, and renames come only from the explicit
`classes.renames` mapping (the id stays with the new name). A frozen table (`classes.frozen`
or a `--classes` file) takes no new names: their images are rejected as `unknown_class`.

A class name is one line of printable text (`class_names.class_name_problem`: no control
character, U+2028/U+2029 or unpaired surrogate), so a label carrying one is rejected per row
(`bad_label`) and never reaches the table. The file is
written with `\n` after each name and read back by splitting on `\n` only (never
`str.splitlines()`, which also breaks on those characters and would shift every later id);
writing checks every name first.
"""
from __future__ import annotations

import sys
import typing
from typing import Iterable, Mapping, Sequence

import apache_beam as beam
from apache_beam.runners.worker.statecache import CacheAware

from transforms import file_reads
from transforms.file_reads import read_bytes
from transforms.offline.beam_steps import LeanDoFn
from transforms.offline.class_names import first_class_name_problem, table_text
from transforms.offline.gather import Gather
from transforms.offline.per_bundle import DistinctPerBundle
from transforms.s3_storage import create_file

__all__ = ["ClassTable", "ClassNames", "AssignClassIdFn", "record_labels", "parse_class_table",
           "read_class_table", "write_class_table", "class_table_bytes", "apply_renames",
           "extend_class_table"]


def parse_class_table(text: str, source: str) -> list[str]:
    r"""Names, one per `\n`-terminated line (blank lines and surrounding whitespace, including a
    Windows `\r`, ignored); duplicates are an error because ids would be ambiguous."""
    names = [name for name in map(str.strip, text.split("\n")) if name]
    _refuse_repeats(names, source)
    return names


def _refuse_repeats(names: Sequence[str], source: str) -> None:
    """ValueError naming the first name of `names` that repeats an earlier one (one set when
    there is none, the usual case)."""
    if len(set(names)) == len(names):
        return
    seen = set()
    for name in names:
        if name in seen:
            raise ValueError(f"Class table {source} lists {name!r} twice; ids must be unique.")
        seen.add(name)


def read_class_table(path: str) -> list[str]:
    """The table at `path`, or [] when the file does not exist (first run)."""
    if not file_reads.exists(path):
        return []
    return parse_class_table(read_bytes(path).decode("utf-8"), path)


def class_table_bytes(path: str, names: Sequence[str]) -> bytes:
    """The file `write_class_table` writes, one name per line; refuses (ValueError, naming
    `path`) a name that would not read back as itself, or a repeated name."""
    found = first_class_name_problem(names)
    if found:
        raise ValueError(f"Class table {path}: id {found[0]} {found[1]}")
    _refuse_repeats(names, path)
    return table_text(names).encode("utf-8")


def write_class_table(path: str, names: Sequence[str]) -> None:
    """Writes the table (`class_table_bytes`), refusing a bad one before anything is written."""
    data = class_table_bytes(path, names)
    with create_file(path) as handle:
        handle.write(data)


def apply_renames(names: Sequence[str], renames: Mapping[str, str]) -> list[str]:
    """Renames entries in place (ids kept). Renaming onto a name already in the table is an
    error: two ids would share one name."""
    result = list(names)
    for old, new in sorted(renames.items()):
        if old not in result:
            continue
        if new in result:
            raise ValueError(
                f"classes.renames maps {old!r} to {new!r}, but {new!r} already has id "
                f"{result.index(new)}; ids cannot be merged.")
        result[result.index(old)] = new
    return result


def extend_class_table(existing: Sequence[str], labels: Iterable[str], frozen: bool) -> list[str]:
    """The table for this run: `existing` plus, unless frozen, the sorted new labels."""
    if frozen:
        return list(existing)
    known = set(existing)
    return list(existing) + sorted({label for label in labels if label not in known})


def record_labels(record):
    """The class names an ImageRecord uses (its label, its boxes' labels); none for a record
    rejected already (a quality reject names no class)."""
    if record.reject is not None:
        return
    yield record.label
    for box in record.boxes:
        yield box[4]


class ClassNames(list, CacheAware):
    """The run's table as the list of its names, which Beam's side-input cache sizes without
    walking them: `objsize` went through all 21,841 names at each read (~19 ms, three reads a
    run; `CacheAware` is Beam's hook for this). Its weight counts every name's bytes."""

    def get_referents_for_cache(self) -> list:
        return [_Weight(sum(map(sys.getsizeof, self)))]


class _Weight(CacheAware):
    """A size for Beam's cache accounting and nothing to walk."""
    __slots__ = ("_bytes",)

    def __init__(self, size: int):
        self._bytes = size

    def __sizeof__(self) -> int:
        return self._bytes

    def get_referents_for_cache(self) -> list:
        return []


class ClassTable(beam.PTransform):
    """Labelled ImageRecords -> a singleton PCollection, the run's table: `start_table` (ids
    never move) plus, unless `frozen`, the sorted new names the records use. The records get
    their ids from it with `AssignClassIdFn`, which the job runs in the exact dedup's groups
    (`dedup.DropExactDuplicates`): the table is made from these very records, so a step that
    reads it before a shuffle would make Beam's local runner keep every record once more
    until the table is known. `few_bundles`: each bundle's distinct names go straight to the
    one step that extends the table (Beam's local runner, whose workers' bundles are few: a
    shuffle to make them distinct first was one more stage, ~8 ms of every run); otherwise
    (any runner) they are made distinct by a shuffle first."""

    def __init__(self, start_table: Sequence[str], frozen: bool, few_bundles: bool = False):
        super().__init__()
        self._start_table = list(start_table)
        self._frozen = frozen
        self._few_bundles = few_bundles

    def expand(self, labelled):
        start_table, frozen = self._start_table, self._frozen
        names = labelled | "LabelNames" >> DistinctPerBundle(record_labels)
        if not self._few_bundles:
            names = names | "DistinctLabels" >> beam.Distinct()
        return names | "Extend" >> Gather(
            lambda labels: ClassNames(extend_class_table(start_table, labels, frozen)))


@beam.typehints.with_output_types(typing.Any)  # as Beam infers it: no disassembly at build
class AssignClassIdFn(LeanDoFn):
    """Gives a record its class id, or rejects it (`unknown_class`, `bad_box`). The name -> id
    lookup is built once per class table (the side input is the same object for a worker's
    bundles), never per record: its cost must not grow with the table."""

    def __init__(self):
        self._table, self._ids = None, {}

    def process(self, record, table):
        yield self.assign(record, table)

    def assign(self, record, table):
        """The record with its class id, or rejected; what `process` yields, for a step that
        gives ids inside its own work (the exact dedup's groups)."""
        if table is not self._table:
            self._table, self._ids = table, {name: i for i, name in enumerate(table)}
        ids = self._ids
        if record.label not in ids:
            return record.rejected("unknown_class", (
                f"label {record.label!r} is not in the class table ({len(table)} classes: "
                f"{', '.join(table[:20])}{', ...' if len(table) > 20 else ''})"))
        unknown = sorted({box[4] for box in record.boxes if box[4] not in ids})
        if unknown:
            return record.rejected("bad_box", f"box classes {unknown} are not in the class table")
        return record.replace(label_id=ids[record.label])
