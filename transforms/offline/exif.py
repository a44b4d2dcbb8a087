"""The EXIF orientation tag (0x0112) of encoded image bytes, in pure Python (`struct` only).

What an image viewer (and `PIL.ImageOps.exif_transpose`) applies: orientation 1 is as stored,
2-8 are the flips and quarter turns of the EXIF/TIFF specification; 5-8 swap width and height.
The offline header sniffing reads it here, before TensorFlow loads; the graph-side twin
(`transforms.orientation.read_orientation`) reads the same bytes the same way, so the record's
`image/orientation` and what the serving graph reads from `image/encoded` always agree.

Only the first `EXIF_HEAD` bytes are looked at, never the whole file, and the block is found
by one search (what the graph can do fast, without a loop over markers):
* JPEG: the first `Exif\\0\\0` in the head, when it opens an APP1 segment (`FF E1`, length).
  The Exif standard puts that segment right after SOI (after APP0 in JFIF files); entropy-coded
  data cannot hold an `FF E1` pair (FF is stuffed), so the scan itself never matches;
* PNG: the first `eXIf` chunk, when it comes before the first IDAT (as the PNG extensions
  require).
Other formats, a missing or malformed EXIF block and a tag outside 1..8 give 1.
"""
from __future__ import annotations

import struct

__all__ = ["EXIF_HEAD", "ORIENTATION_TAG", "SWAPS_SIZE", "read_orientation",
           "displayed_size"]

EXIF_HEAD = 65536        # bytes of the file an EXIF block is looked for in
ORIENTATION_TAG = 0x0112
SWAPS_SIZE = (5, 6, 7, 8)  # orientations that transpose: displayed width = stored height

_EXIF_SIGNATURE = b"Exif\x00\x00"
_TIFF_MAGIC = 42
# TIFF field types an orientation may be stored as: BYTE, SHORT, LONG (a count of 1).
_TIFF_VALUE_LAYOUT = {1: "B", 3: "H", 4: "I"}


def read_orientation(data: bytes) -> int:
    """The EXIF orientation (1..8) of JPEG or PNG bytes; 1 when there is none or it is
    malformed. Never raises: orientation is a display hint, not a validity rule."""
    head = bytes(data[:EXIF_HEAD])
    if head.startswith(b"\xff\xd8"):
        block = _jpeg_exif(head)
    elif head.startswith(b"\x89PNG\r\n\x1a\n"):
        block = _png_exif(head)
    else:
        block = None
    if block is None:
        return 1
    start, end = block
    return _tiff_orientation(head[start:end])


def displayed_size(width: int, height: int, orientation: int) -> tuple[int, int]:
    """(width, height) as a viewer shows an image stored as `width` x `height`."""
    return (height, width) if orientation in SWAPS_SIZE else (width, height)


def _jpeg_exif(head: bytes) -> tuple[int, int] | None:
    """(start, end) of the TIFF block of the APP1 segment opened by the first `Exif\\0\\0`."""
    at = head.find(_EXIF_SIGNATURE)
    if at < 4 or head[at - 4:at - 2] != b"\xff\xe1":
        return None
    (length,) = struct.unpack_from(">H", head, at - 2)
    return at + 6, min(at - 2 + length, len(head))


def _png_exif(head: bytes) -> tuple[int, int] | None:
    """(start, end) of the first `eXIf` chunk's data, when it comes before the first IDAT."""
    at, idat = head.find(b"eXIf"), head.find(b"IDAT")
    if at < 12 or 0 <= idat < at:
        return None
    (length,) = struct.unpack_from(">I", head, at - 4)
    return at + 4, min(at + 4 + length, len(head))


def _tiff_orientation(tiff: bytes) -> int:
    """Tag 0x0112 of IFD0 of a TIFF block (byte order `II` or `MM`), 1 when absent or
    outside 1..8. The first entry with the tag counts; entries past the block are ignored."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    order = "<" if tiff[:2] == b"II" else ">"
    magic, ifd = struct.unpack_from(order + "HI", tiff, 2)
    if magic != _TIFF_MAGIC or ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    for entry in range(ifd + 2, min(ifd + 2 + 12 * count, len(tiff) - 11), 12):
        tag, kind, values = struct.unpack_from(order + "HHI", tiff, entry)
        if tag != ORIENTATION_TAG:
            continue
        layout = _TIFF_VALUE_LAYOUT.get(kind)
        if layout is None or values != 1:
            return 1
        (value,) = struct.unpack_from(order + layout, tiff, entry + 8)
        return value if 1 <= value <= 8 else 1
    return 1
