"""Discovery: every file under the data roots, through Beam's file APIs (local or gs://).

A root is a folder (searched recursively) or a glob. Files are read when their extension is in
`discovery.extensions` (case-insensitively); the real format is decided later from magic bytes.
An image the decoder cannot read by its extension (`file_kinds.UNSUPPORTED`: TIFF, HEIC, RAW,
...) is rejected as `unsupported_format`; every other file is counted per extension
(`Discovered.other_files`). A local file that resolves outside its root through a symlink is
rejected as `unsafe_path`, anything but a regular file (a FIFO, a device, a link that resolves
to nothing, which Beam's local listing drops and `paths.unresolvable_links` finds again) as
`unreadable`, and a file listed bigger than `limits.max_file_bytes` as `too_large`; none of them
is ever opened (an unsupported image only for its first bytes, to name its format).
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing

import apache_beam as beam
from apache_beam.io.filesystem import FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import file_reads
from transforms.file_reads import read_bytes
from transforms.local_paths import is_local
from transforms.offline import file_kinds, paths, progress
from transforms.offline.beam_steps import LeanDoFn, Map
from transforms.offline.gather import once
from transforms.offline.image_record import ImageRecord

__all__ = ["FileRef", "DiscoverImages", "Discovered", "Listing", "root_and_pattern",
           "UNSAFE_TAG", "classify_file", "one_per_rel_path", "list_images", "TooManyFiles",
           "unresolved_listing", "list_root"]

UNSAFE_TAG = "unsafe"
_OTHER_TAG = "other"
_GLOB_CHARS = "*?["


@dataclasses.dataclass(frozen=True)
class FileRef:
    """A discovered file: `uri` (full path or URL) for reading, `path` (root-relative, posix)
    as its identity, `file_bytes` its size."""
    uri: str
    path: str
    file_bytes: int
    mtime: float | None = None


def root_and_pattern(root: str) -> tuple[str, str]:
    """('gs://b/imgs', 'gs://b/imgs/**') for a folder; a glob keeps its non-glob prefix as root."""
    if any(c in root for c in _GLOB_CHARS):
        cut = min(root.index(c) for c in _GLOB_CHARS if c in root)
        base = root[:cut].rsplit("/", 1)[0] if "/" in root[:cut] else ""
        return base, root
    base = root.rstrip("/") or "/"
    return base, FileSystems.join(base, "**")


def _refusal(metadata, max_file_bytes: int | None) -> tuple[str, str] | None:
    """(reason, detail) for a file that is never opened: not a regular file (`unreadable`)
    or bigger than `limits.max_file_bytes` by its listed size (`too_large`)."""
    irregular = paths.not_a_regular_file(metadata.path)
    if irregular:
        return "unreadable", irregular
    size = int(metadata.size_in_bytes)
    if max_file_bytes is not None and size > max_file_bytes:
        return "too_large", (f"{size} bytes, more than limits.max_file_bytes="
                             f"{max_file_bytes}; never opened")
    return None


def _head(uri: str) -> tuple[bytes | None, str]:
    """(the first bytes of a file, or None and why they could not be read)."""
    try:
        return read_bytes(uri, file_kinds.HEAD_BYTES), ""
    except (OSError, ValueError) as exc:  # Beam wraps remote errors in IOError (OSError)
        return None, getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def unresolved_listing(base: str, pattern: str) -> list:
    """FileMetadata (size 0) of the links under a local root that resolve to nothing and match
    its pattern: the files Beam's local listing drops (`paths.unresolvable_links`). None for
    object stores, which have no links."""
    if not is_local(base) or not os.path.isdir(base):
        return []
    wanted = re.compile(FileSystem.translate_pattern(pattern))
    return [FileMetadata(path, 0) for path in paths.unresolvable_links(base)
            if wanted.match(path)]


def list_root(base: str, pattern: str) -> list:
    """FileMetadata of every file a root lists: Beam's match of its pattern
    (`file_reads.match`) and the links it drops (`unresolved_listing`), each path once (a link
    in both, its target made between the two listings, counts as the dangling link). No
    index of the whole listing is built: it can hold millions of files."""
    links = unresolved_listing(base, pattern)
    dangling = {metadata.path for metadata in links}
    return [metadata for metadata in file_reads.match(pattern)
            if metadata.path not in dangling] + links


def classify_file(root: str, metadata, extensions: tuple, max_file_bytes: int | None,
                  real_paths: paths.RealPaths | None = None) -> FileRef | ImageRecord | str:
    """One listed file under `root`: a FileRef to read, a rejected ImageRecord for a file that
    must never be opened (or whose format the decoder cannot read), or, for a file that is no
    image, its extension key (`file_kinds.other_file_key`). `real_paths`: resolves links for
    `paths.escapes_root`, remembering folders across calls."""
    extension = file_kinds.extension_of(metadata.path)
    if extension not in extensions and extension not in file_kinds.UNSUPPORTED:
        return file_kinds.other_file_key(paths.printable(metadata.path))
    size = int(metadata.size_in_bytes)
    try:
        rel = paths.relative_to_root(root, metadata.path)
    except paths.UnsafePath as exc:
        shown = paths.printable(metadata.path)  # the raw name may not even be UTF-8
        return ImageRecord(uri=shown, path=shown, file_bytes=size).rejected("unsafe_path",
                                                                            str(exc))
    escape = paths.escapes_root(root, metadata.path, real_paths)
    if escape:
        return ImageRecord(uri=metadata.path, path=rel, file_bytes=size).rejected(
            "unsafe_path", escape)
    refusal = _refusal(metadata, max_file_bytes)
    if refusal:
        return ImageRecord(uri=metadata.path, path=rel, file_bytes=size).rejected(*refusal)
    if extension not in extensions:
        return ImageRecord(uri=metadata.path, path=rel, file_bytes=size).rejected(
            "unsupported_format", file_kinds.unsupported_detail(extension,
                                                                *_head(metadata.path)))
    return FileRef(uri=metadata.path, path=rel, file_bytes=size,
                   mtime=getattr(metadata, "last_updated_in_seconds", None))


def one_per_rel_path(rel: str, refs) -> tuple[FileRef, list[ImageRecord]]:
    """The file kept for a root-relative path and the others rejected as `duplicate` (two
    roots holding different files at the same relative path): the lowest full path is kept."""
    unique = sorted({ref.uri: ref for ref in refs}.values(), key=lambda r: r.uri)
    return unique[0], [
        ImageRecord(uri=other.uri, path=other.uri, file_bytes=other.file_bytes).rejected(
            "duplicate", f"same relative path {rel!r} as {unique[0].uri} (kept)")
        for other in unique[1:]]


class TooManyFiles(RuntimeError):
    """The listing holds more files than the caller of `list_images` wants in memory."""


class Listing(typing.NamedTuple):
    """What `list_images` finds: FileRefs to read, rejected ImageRecords, and the count of
    the other files per extension key (as `DiscoverImages` counts them)."""
    refs: list
    rejected: list
    other_files: dict


def list_images(roots, extensions: tuple, max_file_bytes: int | None,
                max_files: int | None = None) -> Listing:
    """What `DiscoverImages` finds, in one process without a pipeline. For a quick look at a
    listing (nightly's pre-check), not for big jobs: raises `TooManyFiles` once more than
    `max_files` files are listed."""
    by_path, rejected, other, listed = {}, [], {}, 0
    extensions = tuple(extensions)
    real_paths = paths.RealPaths()
    for root in roots:
        base, pattern = root_and_pattern(root)
        for metadata in list_root(base, pattern):
            listed += 1
            if max_files is not None and listed > max_files:
                raise TooManyFiles(f"more than {max_files} files under {list(roots)}")
            found = classify_file(base, metadata, extensions, max_file_bytes, real_paths)
            if isinstance(found, FileRef):
                by_path.setdefault(found.path, []).append(found)
            elif isinstance(found, str):
                other[found] = other.get(found, 0) + 1
            else:
                rejected.append(found)
    refs = []
    for rel, group in sorted(by_path.items()):
        kept, others = one_per_rel_path(rel, group)
        refs.append(kept)
        rejected.extend(others)
    return Listing(refs, rejected, dict(sorted(other.items())))


# Output type declared (what Beam infers anyway: Any), so that building the graph does not
# disassemble `process` and everything it calls (tens of ms per DoFn and job).
@beam.typehints.with_output_types(typing.Any)
class _ClassifyFileFn(LeanDoFn):
    """Keeps image files by extension; splits off files that must never be opened (or cannot
    be decoded) and the extension keys of the files that are no images."""

    def __init__(self, root: str, extensions: tuple, max_file_bytes: int | None,
                 only_root: bool = False):
        self._root = root
        self._extensions = tuple(extensions)
        self._max_file_bytes = max_file_bytes
        self._only_root = only_root  # its FileRefs are the discovered ones (no other root)
        self._skipped = Metrics.counter("pixelmill", "skipped_not_image_extension")
        self._discovered = Metrics.counter("pixelmill", "discovered")

    def start_bundle(self):
        self._real_paths = paths.RealPaths()  # folders' real paths, for this bundle

    def process(self, metadata):
        progress.enter("discovering")
        progress.add("listed")
        found = classify_file(self._root, metadata, self._extensions, self._max_file_bytes,
                              self._real_paths)
        if isinstance(found, str):
            self._skipped.inc()
            yield beam.pvalue.TaggedOutput(_OTHER_TAG, found)
        elif isinstance(found, FileRef):
            if self._only_root:
                self._discovered.inc()
                progress.add("discovered")
            yield found
        else:
            yield beam.pvalue.TaggedOutput(UNSAFE_TAG, found)


class _ListAndClassifyFn(_ClassifyFileFn):
    """Lists a root (`list_root`: Beam's match, and the links it drops) and classifies each
    file it finds, in one step: a listed file is not first an element of a listing step's
    output (Beam's local runner spends a few us on each element of each step)."""

    def __init__(self, root: str, pattern: str, extensions: tuple,
                 max_file_bytes: int | None, only_root: bool = False):
        super().__init__(root, extensions, max_file_bytes, only_root)
        self._pattern = pattern

    def process(self, _):
        for metadata in list_root(self._root, self._pattern):
            yield from super().process(metadata)


class Discovered(typing.NamedTuple):
    """DiscoverImages' outputs: `refs` (a FileRef per image file, grouped by path),
    `rejected` (an ImageRecord per file rejected unopened), `other_files` (the extension key
    of every file that is no image)."""
    refs: beam.PCollection
    rejected: beam.PCollection
    other_files: beam.PCollection


class DiscoverImages(beam.PTransform):
    """roots -> `Discovered`. A local root is also walked for the links that resolve to
    nothing, which Beam's match drops (`unresolved_listing`)."""

    def __init__(self, roots: list[str], extensions: tuple, max_file_bytes: int | None = None):
        super().__init__()
        self._roots = list(roots)
        self._extensions = tuple(extensions)
        self._max_file_bytes = max_file_bytes

    def expand(self, pbegin):
        refs, unsafe, other = [], [], []
        only_root = len(self._roots) == 1
        for index, root in enumerate(self._roots):
            base, pattern = root_and_pattern(root)
            # One step lists the root and classifies what it lists (no Flatten of Beam's match
            # and the dropped links: it would copy every listed file once more on Beam's local
            # runner; no listing step whose every file is an element).
            found = (once(pbegin.pipeline, f"Once{index}")
                     | f"Classify{index}" >> beam.ParDo(
                         _ListAndClassifyFn(base, pattern, self._extensions,
                                            self._max_file_bytes, only_root)
                     ).with_outputs(UNSAFE_TAG, _OTHER_TAG, main="ok"))
            refs.append(found.ok)
            unsafe.append(found[UNSAFE_TAG])
            other.append(found[_OTHER_TAG])
        if only_root:
            # A root lists each path once, so its relative paths are distinct already: no
            # grouping (it would shuffle every ref once more); PlanImages' join spreads them.
            return Discovered(refs[0], unsafe[0], other[0])
        grouped = (
            refs
            | "FlattenRefs" >> beam.Flatten()
            | "KeyByRelPath" >> Map(lambda ref: (ref.path, ref))
            | "GroupByRelPath" >> beam.GroupByKey()
            | "OnePerRelPath" >> beam.ParDo(_OnePerRelPathFn()).with_outputs(
                UNSAFE_TAG, main="ok"))
        rejected = (unsafe + [grouped[UNSAFE_TAG]]) | "FlattenRejected" >> beam.Flatten()
        # No Reshuffle: GroupByRelPath spread the refs already, and every consumer keys them
        # for its own shuffle (PlanImages' join); one would only copy every ref once more.
        return Discovered(grouped.ok, rejected, other | "FlattenOtherFiles" >> beam.Flatten())


class _OnePerRelPathFn(LeanDoFn):
    """A file matched by two overlapping roots counts once; two different files that share a
    root-relative path (two roots) cannot both be addressed by a CSV: the lowest full path is
    kept and the others are rejected as `duplicate` naming it."""

    def __init__(self):
        self._discovered = Metrics.counter("pixelmill", "discovered")

    def process(self, item):
        rel, refs = item
        kept, others = one_per_rel_path(rel, refs)
        self._discovered.inc(1 + len(others))
        progress.add("discovered", 1 + len(others))
        yield kept
        for other in others:
            yield beam.pvalue.TaggedOutput(UNSAFE_TAG, other)
