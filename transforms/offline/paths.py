"""Path safety: every path the job reads is a canonical relative path under the data root.

Two kinds of paths reach the job, and both end up as the same canonical key (the record's
`image/filename`, and what CSV rows are joined on):

* paths written in a CSV (`normalize_relative`): untrusted text. An absolute path, a URL,
  a NUL byte or a `..` that climbs out of the data root is refused with `UnsafePath` and the
  file is never opened.
* files discovered under the root (`relative_to_root`): the part of the full path below the
  root. A name that is not already canonical (so no CSV row could name it unambiguously) is
  refused the same way.

Only `escapes_root`, `not_a_regular_file` and `unresolvable_links` touch the file system (links
out of the root, FIFOs, dangling links). A CSV path matches a file exactly or in Unicode NFC
(`match_key`, `match_row_path`), never by letter case. The rules for backslashes, colons,
whitespace and `..`, and why: docs/architecture.md ("Paths in CSVs").
"""
from __future__ import annotations

import errno
import functools
import os
import re
import stat
import unicodedata

__all__ = ["UnsafePath", "normalize_relative", "relative_to_root", "escapes_root", "RealPaths",
           "printable", "not_a_regular_file", "unresolvable_links", "match_key",
           "match_row_path"]

# Beam FileSystems' own rule for a scheme-qualified path (`gs://`, `s3://`, `file://`).
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")
_DRIVE = re.compile(r"^[A-Za-z]:")
_FIRST_SEGMENT_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*):")


class UnsafePath(ValueError):
    """A path that must not be opened. The message is the reject detail."""


def normalize_relative(path: str) -> str:
    """Returns the canonical relative posix form of a CSV path, or raises `UnsafePath`.

    `" a/./b//c.jpg "` -> `"a/b/c.jpg"`; `"a\\b.jpg"` -> `"a/b.jpg"`; `"a/../b.jpg"` -> `"b.jpg"`.
    Refused: empty, NUL bytes, absolute (`/x`, `C:\\x`, `\\\\server\\x`), a URL scheme
    (`gs://b/x`, `file:///x`), anything that climbs out of the root (`../x`, `a/../../x`), and a
    path that names the root itself (`a/..`).
    """
    if not isinstance(path, str):
        raise UnsafePath(f"path must be text. Received: {path!r} ({type(path).__name__})")
    if "\x00" in path:
        raise UnsafePath(f"path contains a NUL byte: {path!r}")
    text = path.strip().replace("\\", "/")
    if not text:
        raise UnsafePath(f"empty path: {path!r}")
    if text.startswith("/"):
        raise UnsafePath(f"absolute path: {path!r}")
    if _DRIVE.match(text):
        raise UnsafePath(f"absolute path (Windows drive): {path!r}")
    scheme = _FIRST_SEGMENT_SCHEME.match(text)
    if scheme:
        raise UnsafePath(f"path has a URL scheme {scheme.group('scheme')!r}: {path!r}")
    parts: list[str] = []
    for segment in text.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                raise UnsafePath(f"path escapes the data root: {path!r}")
            parts.pop()
            continue
        parts.append(segment)
    if not parts:
        raise UnsafePath(f"path names the data root itself, not a file: {path!r}")
    return "/".join(parts)


def printable(path: str) -> str:
    """`path` as valid Unicode text, for reject lines and the index.

    A local file name that is not valid UTF-8 reaches Python with its bad bytes as lone
    surrogates (`surrogateescape`), which no UTF-8 output (Beam's coders, JSON lines, Parquet)
    can carry; they are shown as `\\xNN` escapes instead. Valid text is returned unchanged.
    """
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that did not come from a byte
        return path.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def relative_to_root(root: str, full_path: str) -> str:
    """Returns the canonical relative path of a discovered file below `root`, or raises.

    `root` is local (`/data/imgs`, `/data/imgs/`, `data/imgs`) or scheme-qualified
    (`gs://bucket/prefix`). Local paths are compared after lexical normalization
    (`os.path.abspath`: `//`, `.` and `..` collapsed; symlinks are `escapes_root`'s job);
    object-store paths are compared as the literal strings they are (`a//b` and `a/b` are two
    different objects there). Raises `UnsafePath` when `full_path` is not strictly below
    `root`, when the part below it is not canonical (see `normalize_relative`), or when the
    name is not valid UTF-8 (see `printable`), because a CSV could then not name the file
    unambiguously.
    """
    shown = printable(full_path)
    if shown != full_path:
        raise UnsafePath(f"file name is not valid UTF-8 (the bytes that are not are shown as "
                         f"\\xNN), so no CSV row or record could name it: {shown}")
    root_url = _URL.match(root)
    file_url = _URL.match(full_path)
    if root_url or file_url:
        if not (root_url and file_url):
            raise UnsafePath(f"not under the data root {root!r}: {full_path!r}")
        below_scheme = root[root_url.end():].rstrip("/")
        prefix = root[:root_url.end()] + (below_scheme + "/" if below_scheme else "")
        candidate = full_path
    else:
        base = _absolute_root(root) if root.startswith("/") else os.path.abspath(root)
        prefix = base if base.endswith("/") else base + "/"
        candidate = os.path.abspath(full_path)
    if not candidate.startswith(prefix) or candidate == prefix:
        raise UnsafePath(f"not under the data root {root!r}: {full_path!r}")
    relative = candidate[len(prefix):]
    try:
        canonical = normalize_relative(relative)
    except UnsafePath as exc:
        raise UnsafePath(f"file name cannot be named safely below the data root "
                         f"({exc}): {full_path!r}") from exc
    if canonical != relative:
        raise UnsafePath(
            f"file name is not a canonical relative path ({relative!r} would be read as "
            f"{canonical!r}), so no CSV row could name it: {full_path!r}")
    return relative


@functools.lru_cache(maxsize=64)
def _absolute_root(root: str) -> str:
    """`os.path.abspath` of an absolute root, made once per root, not once per file below it
    (an absolute path's does not depend on the working folder)."""
    return os.path.abspath(root)


def _inside(folder: str, path: str) -> bool:
    """Whether `path` is `folder` or below it, both absolute and normalized (real paths): what
    `os.path.commonpath([folder, path]) == folder` says, without splitting both into parts
    (~3 us a file)."""
    return path == folder or path.startswith(folder if folder.endswith("/") else folder + "/")


class RealPaths:
    """`os.path.realpath` of many files, each folder resolved once: realpath walks every
    component of a path (an `lstat` each), which was most of the launcher's discovery cost
    per file on small images. A file that is no link resolves to its folder's real path
    joined with its name, as realpath gives it; a link, or a path holding `..` (which
    realpath applies after the links before it), is resolved in full."""

    _MAX_FOLDERS = 4096  # folders remembered (then forgotten all at once)

    def __init__(self):
        self._folders: dict = {}

    def folder(self, path: str) -> str:
        """`os.path.realpath(path)`, remembered."""
        real = self._folders.get(path)
        if real is None:
            if len(self._folders) >= self._MAX_FOLDERS:
                self._folders.clear()
            real = self._folders[path] = os.path.realpath(path)
        return real

    def file(self, path: str) -> str:
        """`os.path.realpath(path)`."""
        if ".." in path.split("/"):
            return os.path.realpath(path)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.realpath(path)
        except OSError:
            pass  # realpath keeps a name that does not exist as it is
        folder, name = os.path.split(os.path.abspath(path))
        return os.path.join(self.folder(folder), name)


def escapes_root(root: str, full_path: str, real_paths: RealPaths | None = None
                 ) -> str | None:
    """Returns a reject detail when a local file resolves (via symlinks) outside the root.

    Both paths are resolved with `os.path.realpath` (or `real_paths`, which gives the same
    and remembers folders), which follows links without opening the file. Returns None when
    the file stays inside the root, and for scheme-qualified paths (`gs://...`), where there
    are no symlinks.
    """
    if _URL.match(root) or _URL.match(full_path):
        return None
    if real_paths is None:
        real_root, real_file = os.path.realpath(root), os.path.realpath(full_path)
    else:
        real_root, real_file = real_paths.folder(root), real_paths.file(full_path)
    if _inside(real_root, real_file):
        return None
    if real_file != os.path.abspath(full_path):
        return f"symlink resolves outside the data root: {real_file}"
    return f"path is outside the data root: {real_file}"


def not_a_regular_file(full_path: str) -> str | None:
    """Returns a reject detail when a local path is not a regular file (after symlinks): a
    FIFO would block whoever opens it, a device or socket is no image. None for regular
    files and for scheme-qualified paths (object stores hold only objects)."""
    if _URL.match(full_path):
        return None
    try:
        mode = os.stat(full_path).st_mode
    except OSError as exc:
        return _unresolved(full_path, exc)
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    kind = next((name for test, name in kinds if test(mode)), "of an unknown kind")
    return f"not a regular file ({kind}); never opened"


def _unresolved(full_path: str, exc: OSError) -> str:
    """The reject detail of a path that `os.stat` cannot follow."""
    try:
        target = os.readlink(full_path)
    except OSError:
        return f"not a regular file: it cannot be examined ({exc.strerror or exc})"
    if exc.errno == errno.ELOOP:
        return (f"symlink cannot be resolved: it loops (-> {printable(target)!r}: "
                f"{exc.strerror}); never opened")
    return (f"symlink cannot be resolved: its target {printable(target)!r} cannot be reached "
            f"({exc.strerror or exc}); never opened")


def unresolvable_links(folder: str):
    """Full paths of the symlinks below a local `folder` that resolve to nothing (dangling,
    or a loop), in the form Beam's local listing gives its files (`os.path.join` of the walk).

    Beam's `LocalFileSystem` walks the same tree (`os.walk`, links to folders not followed)
    and silently drops every entry whose size it cannot read; these are those entries. Only
    links are examined (their type comes with the listing), so no file is opened or stat'ed.
    A folder that cannot be listed is skipped, as the listing skips it."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.is_symlink():
            if not os.path.exists(entry.path):
                yield entry.path
        elif entry.is_dir(follow_symlinks=False):
            yield from unresolvable_links(entry.path)


def match_key(path: str) -> str:
    """What a CSV path and a discovered path are grouped by before they are compared: NFC,
    case-folded. Paths with one key may still differ (see `match_row_path`)."""
    return unicodedata.normalize("NFC", path).casefold()


def match_row_path(row_path: str, discovered) -> tuple[str | None, str]:
    """(the discovered path a CSV row names, or None; and when None, why, for the
    `missing_file` detail: '' or a sentence naming the near misses). `discovered`: the
    discovered paths with the row's `match_key`.

    The exact path wins; else the one discovered path equal in NFC. Two discovered paths
    equal in NFC (two files on Linux whose names differ only by normalization) and neither
    exact: the row names neither (the detail names both). Letter case never matches."""
    discovered = sorted(set(discovered))
    if row_path in discovered:
        return row_path, ""
    nfc = unicodedata.normalize("NFC", row_path)
    same = [path for path in discovered if unicodedata.normalize("NFC", path) == nfc]
    if len(same) == 1:
        return same[0], ""
    if same:
        names = " and ".join(repr(path) for path in same)
        return None, (f"{names} differ from it only by Unicode normalization, so it names "
                      f"neither: name one exactly")
    if not discovered:
        return None, ""
    names = ", ".join(repr(path) for path in discovered[:3])
    how = ("only in case" if all(path.casefold() == row_path.casefold() for path in discovered)
           else "only in case and Unicode normalization")
    return None, f"{names} {'differs' if len(discovered) == 1 else 'differ'} {how}"
