"""DALI index files: one next to every uncompressed shard, as DALI's `tfrecord2idx` writes them.

NVIDIA DALI's TFRecord reader (`fn.readers.tfrecord(path=[...], index_path=[...], ...)`) needs
one index file per TFRecord file: a text line per record, `"<offset> <size>\\n"`, the record's
byte offset in the file and its whole framed length (8-byte length, 4-byte CRC, the data, 4-byte
CRC), exactly what DALI's `tools/tfrecord2idx` script prints. The shard writer knows both while
it writes, so the index costs no second read of the shard.

Gzip shards get none: DALI reads only uncompressed TFRecords, and offsets into a gzip stream
mean nothing to it (set `output.compression: none` for DALI). Where the index goes is the
layout's (`transforms.snapshot_layout.dali_index_name`).
"""
from __future__ import annotations

__all__ = ["index_line", "IndexBuilder"]


def index_line(offset: int, size: int) -> str:
    """One record's line: `"<offset> <size>\\n"` (decimal, one space)."""
    if offset < 0 or size <= 0:
        raise ValueError(f"A record needs offset >= 0 and size > 0. Received: offset={offset}, "
                         f"size={size}")
    return f"{offset} {size}\n"


class IndexBuilder:
    """Collects the lines of one shard's index as its framed records are written in order."""

    def __init__(self):
        self._offset = 0
        self._lines: list[str] = []

    def add(self, framed_size: int) -> None:
        """Records the next framed record (`framed_size` bytes, written right after the last)."""
        self._lines.append(index_line(self._offset, framed_size))
        self._offset += framed_size

    def text(self) -> bytes:
        """The whole index file."""
        return "".join(self._lines).encode("ascii")
