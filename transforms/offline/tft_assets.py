"""The transform's two assets and the class-table checks.

* `pixelmill_class_table`: the job's append-only class table, one name per line, id = line
  index, applied with `tft.apply_vocabulary` (never a frequency-ordered vocabulary whose ids
  would move between runs);
* `class_frequencies`: rows per label, the file `tft.vocabulary(store_frequency=True)` writes,
  byte for byte (class weights, `tft_summary`).

Both are registered with `tft.annotate_asset` in the transform, so
`TFTransformOutput.vocabulary_by_name` finds them.
"""
from __future__ import annotations

import collections
import os
from typing import Mapping, Sequence

from transforms.offline.class_names import first_class_name_problem, table_text

__all__ = ["CLASS_TABLE_ASSET", "CLASS_FREQUENCIES", "NO_CLASS", "check_class_table",
           "class_frequencies_file", "write_assets"]

CLASS_TABLE_ASSET = "pixelmill_class_table"
CLASS_FREQUENCIES = "class_frequencies"
# TFT's entry of an empty vocabulary (`tensorflow_transform.analyzers`), kept so that the
# frequencies file of a run without any image stays what TFT's vocabulary wrote.
_EMPTY_VOCABULARY_DUMMY = b"49d0cd50-04bb-48c0-bc6f-5b575dce351a"
# The one line of the class-table asset of a run without any class (TF cannot initialize a
# table from an empty file). It holds a control character, so no label (`bad_label`) can
# ever equal it; `tft_summary` reads it back as an empty table.
NO_CLASS = "\x1fno class: no image was accepted"


def check_class_table(names, source: str, allow_empty: bool = False) -> list[str]:
    """The table as a list, checked. Empty only where the job computed it: a run that accepts
    no image (a folder of junk) has no class yet, and still publishes its rejects."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise ValueError(f"{source} must be a list of class names. Received: {names!r}")
    names = list(names)
    if not names and not allow_empty:
        raise ValueError(f"{source} must name at least one class. Received: []")
    found = first_class_name_problem(names)
    if found:
        raise ValueError(f"{source} entries must be valid class names: {found[1]}")
    if len(set(names)) < len(names):
        duplicates = sorted(name for name, n in collections.Counter(names).items() if n > 1)
        raise ValueError(f"{source} lists {duplicates} more than once; ids would be ambiguous.")
    return names


def class_frequencies_file(counts: Mapping[bytes, int]) -> bytes:
    """TFT's vocabulary file with frequencies, byte for byte: "count label" lines, count then
    label bytes descending; no row at all gives TFT's one dummy entry (`tft_summary` reads
    no class from it)."""
    entries = sorted(((n, label) for label, n in counts.items()), reverse=True)
    return b"".join(b"%d %s\n" % entry for entry in entries or [(1, _EMPTY_VOCABULARY_DUMMY)])


def write_assets(folder: str, names: Sequence[str], label_counts: Mapping[bytes, int]
                 ) -> tuple[str, str]:
    """(class-table path, frequencies path), both written into the local `folder` (TF reads
    the table while it traces the transform, and cannot open `s3://`). The SavedModel copies
    them into its `assets/` by file name."""
    content = table_text(names or [NO_CLASS]).encode("utf-8")
    return (_write_asset(folder, CLASS_TABLE_ASSET, content),
            _write_asset(folder, CLASS_FREQUENCIES, class_frequencies_file(label_counts)))


def _write_asset(folder: str, name: str, content: bytes) -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as handle:
        handle.write(content)
    return path
