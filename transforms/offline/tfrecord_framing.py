"""TFRecord framing, written and read: the one owner of the format's bytes.

A record is framed as `uint64 length (little-endian) | uint32 masked crc32c of those 8 bytes |
data | uint32 masked crc32c of data`, as TensorFlow's record writer does. The shard writer
frames with `framed_parts` (`frame_record` for a record in one piece); `pixelmill verify`
walks a shard with `framed_records`, which checks both CRCs and reports the first problem with
its byte offset.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, Iterator

import google_crc32c

__all__ = ["masked_crc", "frame_record", "framed_parts", "framed_records", "FramingError",
           "HEADER_BYTES"]

HEADER_BYTES = 12  # length + its CRC
_FOOTER_BYTES = 4  # the data's CRC


class FramingError(ValueError):
    """A shard's bytes are not well-framed TFRecords at `offset` (in the uncompressed
    stream)."""

    def __init__(self, offset: int, problem: str):
        super().__init__(f"record at byte {offset}: {problem}")
        self.offset = offset
        self.problem = problem


def masked_crc(data: bytes) -> int:
    """TFRecord's masked crc32c of `data`."""
    return _masked(google_crc32c.value(data))


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """TFRecord framing: length, masked crc32c of length, data, masked crc32c of data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack(
        "<I", masked_crc(data))


def framed_parts(parts: list) -> list:
    """`frame_record(b"".join(parts))` as parts (the header, `parts`, the footer), so a record
    whose data comes in parts (`codec.serialized_parts`) is framed without joining them; a
    record in one part is framed in one piece."""
    if len(parts) == 1:
        return [frame_record(parts[0])]
    crc = 0
    for part in parts:
        crc = google_crc32c.extend(crc, part)
    length = struct.pack("<Q", sum(map(len, parts)))
    return [length + struct.pack("<I", masked_crc(length)), *parts,
            struct.pack("<I", _masked(crc))]


def _read(stream: BinaryIO, size: int) -> bytes:
    parts, left = [], size
    while left > 0:
        chunk = stream.read(min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def framed_records(stream: BinaryIO) -> Iterator[tuple[int, int]]:
    """(offset, framed size) of each record of an uncompressed TFRecord stream, in order;
    FramingError at the first truncated record or CRC mismatch. The length's CRC is checked
    before the length is used, so a flipped length byte never makes it read a wrong amount."""
    offset = 0
    while True:
        header = _read(stream, HEADER_BYTES)
        if not header:
            return
        if len(header) < HEADER_BYTES:
            raise FramingError(offset, f"truncated: {len(header)} of the header's "
                                       f"{HEADER_BYTES} bytes")
        if masked_crc(header[:8]) != struct.unpack("<I", header[8:])[0]:
            raise FramingError(offset, "length CRC mismatch")
        (length,) = struct.unpack("<Q", header[:8])
        body = _read(stream, length + _FOOTER_BYTES)
        if len(body) < length + _FOOTER_BYTES:
            raise FramingError(offset, f"truncated: {HEADER_BYTES + len(body)} of "
                                       f"{HEADER_BYTES + length + _FOOTER_BYTES} bytes")
        if masked_crc(body[:length]) != struct.unpack("<I", body[length:])[0]:
            raise FramingError(offset, "data CRC mismatch")
        yield offset, HEADER_BYTES + length + _FOOTER_BYTES
        offset += HEADER_BYTES + length + _FOOTER_BYTES
