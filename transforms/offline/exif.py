"""The EXIF orientation tag (0x0112) of encoded image bytes, in pure Python (`struct` only).

What an image viewer (and `PIL.ImageOps.exif_transpose`) applies: orientation 1 is as stored,
2-8 are the flips and quarter turns of the EXIF/TIFF specification; 5-8 swap width and height.
The offline header sniffing reads it here, before TensorFlow loads; the graph-side twin
(`transforms.orientation.read_orientation`) reads the same bytes the same way, so the record's
`image/orientation` and what the serving graph reads from `image/encoded` always agree.

Only the first `EXIF_HEAD` bytes are looked at, never the whole file:
* JPEG: the first APP1 segment that starts with `Exif\\0\\0`, found by walking the marker
  chain from SOI (it stops at SOS, EOI or anything that is not a marker);
* PNG: an `eXIf` chunk before the first IDAT (where the PNG extensions put it).
Other formats, a missing or malformed EXIF block and a tag outside 1..8 give 1.
"""
from __future__ import annotations

import struct

__all__ = ["EXIF_HEAD", "MAX_STEPS", "ORIENTATION_TAG", "SWAPS_SIZE", "read_orientation",
           "displayed_size"]

EXIF_HEAD = 65536        # bytes of the file an EXIF block is looked for in
MAX_STEPS = 256          # markers (JPEG) or chunks (PNG) walked before giving up
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
    """(start, end) of the TIFF block of the first `Exif` APP1 segment before SOS."""
    size, pos = len(head), 2
    for _ in range(MAX_STEPS):
        if pos + 4 > size or head[pos] != 0xFF:
            return None
        marker = head[pos + 1]
        if marker == 0xFF:                               # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:     # TEM, RSTn, SOI: no length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):                       # EOI, SOS: no EXIF before the scan
            return None
        (length,) = struct.unpack_from(">H", head, pos + 2)
        if marker == 0xE1 and head[pos + 4:pos + 10] == _EXIF_SIGNATURE:
            return pos + 10, min(pos + 2 + length, size)
        if length < 2:
            return None
        pos += 2 + length
    return None


def _png_exif(head: bytes) -> tuple[int, int] | None:
    """(start, end) of the `eXIf` chunk's data, when it comes before the first IDAT."""
    size, pos = len(head), 8
    for _ in range(MAX_STEPS):
        if pos + 8 > size:
            return None
        length, chunk = struct.unpack_from(">I4s", head, pos)
        if chunk == b"eXIf":
            return pos + 8, min(pos + 8 + length, size)
        if chunk in (b"IDAT", b"IEND"):
            return None
        pos += 12 + length
    return None


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
