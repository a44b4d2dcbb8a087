"""The class table: names to ids, stable forever.

`OUTPUT/classes.txt` (one name per line, id = line index) is append-only across runs: existing
names keep their ids, new names get the next ids (sorted among themselves, so a run is
deterministic), a class that disappears keeps its id, and renames come only from the explicit
`classes.renames` mapping (the id stays with the new name). A frozen table (`classes.frozen`
or a `--classes` file) takes no new names: their images are rejected as `unknown_class`.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from apache_beam.io.filesystems import FileSystems

__all__ = ["parse_class_table", "read_class_table", "write_class_table", "apply_renames",
           "extend_class_table"]


def parse_class_table(text: str, source: str) -> list[str]:
    """Names, one per line (blank lines and surrounding whitespace ignored); duplicates are an
    error because ids would be ambiguous."""
    names = [line.strip() for line in text.splitlines() if line.strip()]
    seen = set()
    for name in names:
        if name in seen:
            raise ValueError(f"Class table {source} lists {name!r} twice; ids must be unique.")
        seen.add(name)
    return names


def read_class_table(path: str) -> list[str]:
    """The table at `path`, or [] when the file does not exist (first run)."""
    if not FileSystems.exists(path):
        return []
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        return parse_class_table(handle.read().decode("utf-8"), path)


def write_class_table(path: str, names: Sequence[str]) -> None:
    with FileSystems.create(path) as handle:
        handle.write("".join(f"{name}\n" for name in names).encode("utf-8"))


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
