"""The rejects ledger: a fixed, documented vocabulary of reasons, and the record of one reject.

Every discovered input (image file, label CSV row, box CSV row) ends either accepted or as
exactly one `Reject`. The vocabulary is closed: the README documents each code, and a reason
outside it is a programming error. The quality rules' reasons come from their table
(`quality_rules.REASON_MEANINGS`).
"""
from __future__ import annotations

import dataclasses
import json

from transforms.offline.quality_rules import REASON_MEANINGS

__all__ = ["REASONS", "Reject", "IMAGE", "LABEL_ROW", "BOX_ROW", "KINDS"]

IMAGE = "image"
LABEL_ROW = "label_row"
BOX_ROW = "box_row"
KINDS = (IMAGE, LABEL_ROW, BOX_ROW)

REASONS = {
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
}


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
