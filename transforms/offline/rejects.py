"""The rejects ledger: a fixed, documented vocabulary of reasons, and the record of one reject.

Every discovered input (image file, label CSV row, box CSV row) ends either accepted or as
exactly one `Reject`. The vocabulary is closed: the README documents each code, and a reason
outside it is a programming error. The quality rules' reasons come from their table
(`quality_rules.REASON_MEANINGS`). Steps that treat several reasons alike read the group from
the table (`REASONS.not_decoded`, ...), never a list of their own.
"""
from __future__ import annotations

import dataclasses
import json

from transforms.offline.quality_rules import REASON_MEANINGS

__all__ = ["REASONS", "ReasonTable", "Reject", "IMAGE", "LABEL_ROW", "BOX_ROW", "KINDS"]

IMAGE = "image"
LABEL_ROW = "label_row"
BOX_ROW = "box_row"
KINDS = (IMAGE, LABEL_ROW, BOX_ROW)



class ReasonTable(dict):
    """reason -> meaning, and the named groups of reasons that steps treat alike (frozensets
    of the table's own reasons; a group naming a reason outside it is a ValueError)."""

    def __init__(self, meanings: dict, *, not_decoded, retried, no_thumbnail, quality):
        super().__init__(meanings)
        # Given at or before the decode: such an image never decoded successfully.
        self.not_decoded = self._group("not_decoded", not_decoded)
        # Worth another try on a rerun although the file did not change.
        self.retried = self._group("retried", retried)
        # No thumbnail in the report: never opened (unsafe, too large, unreadable), crashed or
        # hung the decoder (even isolated, again the timeout), a row, or undecodable.
        self.no_thumbnail = self._group("no_thumbnail", no_thumbnail)
        # Given by a quality rule (`quality_rules.RULES`).
        self.quality = self._group("quality", quality)

    def _group(self, name: str, reasons) -> frozenset:
        unknown = sorted(set(reasons) - set(self))
        if unknown:
            raise ValueError(f"Reason group {name!r} names unknown reasons {unknown}. Expected "
                             f"reasons of the table: {tuple(self)}.")
        return frozenset(reasons)


REASONS = ReasonTable({
    "unsafe_path": "path is absolute, has a scheme, escapes the data root, or is not valid "
                   "UTF-8 (shown escaped; never opened)",
    "unreadable": "the file could not be read, or is not a regular file (never opened)",
    "unknown_format": "magic bytes are not JPEG, PNG, GIF, BMP or WebP",
    "unsupported_format": "an image format the decoder cannot read, by its extension (TIFF, "
                          "HEIC/HEIF, AVIF, JPEG XL, SVG, camera RAW, PSD, ...; the format "
                          "and what its first bytes say in detail)",
    "bad_header": "the header is malformed, declares no size, or is an animated WebP (the "
                  "decoder corrupts memory on those)",
    "too_large": "more pixels than limits.max_pixels or, over all frames, "
                 "limits.max_total_pixels (from the header, not decoded), a side above "
                 "limits.max_side, more bytes than limits.max_file_bytes (never opened), "
                 "or more JPEG scans than limits.max_jpeg_scans (never decoded)",
    "decode_error": "the TensorFlow decoder rejected the data (corrupt or truncated)",
    "decoder_crash": "the decoder crashed or hung on this file (isolated; the job went on)",
    "too_small": "a side below limits.min_side",
    "bad_aspect_ratio": "max(w/h, h/w) above limits.max_aspect_ratio",
    **REASON_MEANINGS,  # the quality rules' reasons, owned by their table
    "unlabeled": "no label: no CSV row names the image (or no folder label)",
    "label_conflict": "the CSV rows name two or more different labels (or splits) for the image",
    "unknown_class": "the label is not in the class table",
    "bad_box": "a box is inverted, outside the image, or has an unknown class",
    "duplicate": "same sha256 as an image kept under another path (named in detail)",
    "near_duplicate": "perceptual hash within dedup.max_hamming of a kept image (named in detail)",
    "missing_file": "a CSV row names a file that was not discovered under the data root (a "
                    "file that differs only in case or Unicode normalization is named in "
                    "detail)",
    "bad_csv_row": "a CSV line that does not parse (file and line number in detail)",
    "forgotten": "`pixelmill forget` named this path or content; not brought back while its "
                 "source exists (unless --allow_forgotten)",
    "bad_label": "the label (CSV cell or class folder) is not one line of printable text: a "
                 "control or line-breaking character (named in detail) or bytes that are not "
                 "UTF-8",
}, not_decoded=("unreadable", "unknown_format", "bad_header", "decode_error", "decoder_crash"),
    retried=("unreadable", "decoder_crash"),
    no_thumbnail=("unsafe_path", "too_large", "decoder_crash", "unreadable", "missing_file",
                  "bad_csv_row", "unsupported_format"),
    quality=tuple(REASON_MEANINGS))


@dataclasses.dataclass(frozen=True)
class Reject:
    """One line of rejects.jsonl. `sha256` is empty when the input was never read."""
    path: str
    reason: str
    detail: str
    kind: str = IMAGE
    sha256: str = ""

    def __post_init__(self):
        if self.reason not in REASONS:
            raise ValueError(
                f"Unknown reject reason {self.reason!r}. Expected one of {tuple(REASONS)}.")
        if self.kind not in KINDS:
            raise ValueError(f"Unknown reject kind {self.kind!r}. Expected one of {KINDS}.")

    def __reduce__(self):
        """Pickled as its field values in order, without their names (fewer shuffled bytes)."""
        return Reject, tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, allow_nan=False)
