r"""What a class name may be: one line of printable text without surrounding whitespace.

`class_name_problem` refuses control characters (NUL, `\v`, `\f`, `\x1c`-`\x1e`, U+0085,
...), U+2028/U+2029 and unpaired surrogates, so a label carrying one is rejected per row
(`bad_label`) and never reaches the class table (`transforms.offline.classes`). Apart from the
table's Beam steps: the label and box rows a record carries into the decoding children
(`image_inspection`) check their labels with it, and unpickling them there imports no Beam.
"""
from __future__ import annotations

import itertools
import operator
import unicodedata

__all__ = ["class_name_problem", "first_class_name_problem", "table_text"]

# Unicode categories a class name must not contain: controls (Cc: NUL, \t, \v, \f, \x1c-\x1f,
# U+0085, ...), line and paragraph separators (Zl, Zp) and surrogates (Cs: a name decoded with
# surrogateescape from bytes that are not UTF-8; it could not even be written).
_FORBIDDEN_CATEGORIES = ("Cc", "Zl", "Zp", "Cs")


def class_name_problem(name) -> str | None:
    """Why `name` cannot be a class name (one line of printable text without surrounding
    whitespace), naming the offending character; None when it can."""
    if not isinstance(name, str) or not name:
        return f"a class name must be non-empty text. Received: {name!r}"
    if name != name.strip():
        return f"a class name must not start or end with whitespace. Received: {ascii(name)}"
    if name.isprintable():  # no character of an "Other" or "Separator" category: none forbidden
        return None
    for char in name:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            what = unicodedata.name(char, "control character")
            return (f"contains U+{ord(char):04X} ({what}); a class name must be one line of "
                    f"printable text. Received: {ascii(name)}")
    return None


def first_class_name_problem(names) -> tuple[int, str] | None:
    """(index, problem) of the first of `names` that cannot be a class name; None when every
    one can. A table that passes (the usual case: 21,841 names in ~1 ms) is checked in a few
    passes in C; name by name only to find what to say."""
    if (all(map(isinstance, names, itertools.repeat(str))) and all(names)
            and "".join(names).isprintable()
            and all(map(operator.eq, map(str.strip, names), names))):
        return None
    for index, name in enumerate(names):
        problem = class_name_problem(name)
        if problem:
            return index, problem
    return None


def table_text(names) -> str:
    r"""The text of a file of class names: each name followed by `\n` (none: empty), what
    classes.txt, the transform's class-table asset and TFDS's label files hold."""
    return "\n".join(names) + "\n" if names else ""
