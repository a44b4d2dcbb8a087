"""Image header sniffing: the real format from magic bytes and the stored size, without decoding.

The job must know an image's dimensions before it decodes anything, so that a 50 KB file
declaring 60000x60000 is `too_large` and never reaches a decoder. Only the bytes that carry the
size are read (a few dozen for PNG, BMP and WebP; the JPEG marker chain up to the first SOF;
every GIF block); no pixels are allocated. The format comes from the magic bytes TensorFlow's
`decode_image` dispatches on, never from the file name.

Sizes are as stored; `orientation` is the EXIF orientation (`transforms.offline.exif`) and
`displayed_size` what a viewer shows. A GIF's size is TensorFlow's canvas (largest frame width
by largest frame height), so a huge frame cannot hide behind a small screen. `jpeg_scans`
counts a JPEG's scans (`limits.max_jpeg_scans`); `total_pixels` is the decoding work over all
frames (`limits.max_total_pixels`: giflib decompresses every frame). An animated WebP is a
`HeaderError`: TensorFlow 2.21's WebP decoder corrupts the heap on one.

Pure Python (`struct` and `re` only), so it runs anywhere the pipeline does, before TensorFlow
loads.
"""
from __future__ import annotations

import dataclasses
import re
import struct

from transforms.offline import exif

__all__ = ["ImageHeader", "HeaderError", "UnknownFormat", "sniff_format", "read_header",
           "jpeg_scans"]

FORMATS = ("jpeg", "png", "gif", "bmp", "webp")

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_GIF_MAGICS = (b"GIF87a", b"GIF89a")
_BMP_MAGIC = b"BM"

# JPEG markers (ITU T.81 table B.1). SOF0..SOF15 carry the frame size, except these three
# codes in the same range, which are DHT, the reserved JPG extension and DAC.
_JPEG_NOT_SOF = (0xC4, 0xC8, 0xCC)
_JPEG_SOF = tuple(m for m in range(0xC0, 0xD0) if m not in _JPEG_NOT_SOF)
_JPEG_TEM = 0x01
_JPEG_RST = tuple(range(0xD0, 0xD8))
_JPEG_SOI = 0xD8
_JPEG_EOI = 0xD9
_JPEG_SOS = 0xDA
# SOS markers after the first scan are found by a regular expression while they are few:
# CPython's `bytes.count` of this two-byte needle runs at ~1.1 GB/s on JPEG data (2.1 ms of a
# 1.8 MB camera photo's inspection), `re` at ~3 GB/s and no slower on a thumbnail. `re` pays
# per match, though (~0.06 us: 5 s for a hostile 160 MiB file of nothing but markers), so past
# `_FEW_SCANS` (far above any photo's ~10 and the default limit, 100) `count` takes over.
_SOS_MARKER = re.compile(b"\xff\xda")
_FEW_SCANS = 1000

# PNG (ISO 15948): width and height are at most 2**31 - 1.
_PNG_MAX_SIDE = 2**31 - 1

# GIF block introducers.
_GIF_EXTENSION = 0x21
_GIF_IMAGE = 0x2C
_GIF_TRAILER = 0x3B

# BMP DIB header sizes: BITMAPCOREHEADER has 16-bit unsigned dims; the OS/2 2.x header (16 or
# 64 bytes), BITMAPINFOHEADER and its V2..V5 successors have signed 32-bit dims.
_BMP_CORE_HEADER = 12
_BMP_INFO_HEADERS = (16, 40, 52, 56, 64, 108, 124)

_VP8_START_CODE = b"\x9d\x01\x2a"
_VP8L_SIGNATURE = 0x2F
_VP8X_ANIMATION = 0x02


class HeaderError(ValueError):
    """The header is malformed, truncated or declares a zero size; the message says which."""


class UnknownFormat(HeaderError):
    """The magic bytes match none of the supported formats."""


@dataclasses.dataclass(frozen=True)
class ImageHeader:
    """What the header declares. `frames` is 1 except for animations (GIF image descriptors,
    APNG `acTL` frames). `total_pixels` (0: frames x width x height) is the decoding work over
    all frames; it takes no part in equality. `orientation`: the EXIF orientation, 1..8."""
    format: str
    width: int
    height: int
    frames: int = 1
    total_pixels: int = dataclasses.field(default=0, compare=False)
    orientation: int = 1

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(
                f"Unknown image format {self.format!r}. Expected one of {FORMATS}.")
        if self.width < 1 or self.height < 1:
            raise ValueError(
                f"Image size must be positive. Received: width={self.width}, "
                f"height={self.height}.")
        if self.frames < 1:
            raise ValueError(f"frames must be >= 1. Received: frames={self.frames}.")
        if self.orientation not in range(1, 9):
            raise ValueError(f"orientation must be 1..8. Received: orientation="
                             f"{self.orientation}.")
        if not self.total_pixels:
            object.__setattr__(self, "total_pixels", self.frames * self.width * self.height)

    @property
    def pixels(self) -> int:
        """width * height: the number `limits.max_pixels` is compared with."""
        return self.width * self.height

    @property
    def displayed_size(self) -> tuple[int, int]:
        """(width, height) as a viewer shows it: swapped for orientations 5-8."""
        return exif.displayed_size(self.width, self.height, self.orientation)


def sniff_format(data: bytes) -> str | None:
    """The format named by the magic bytes (one of `FORMATS`), or None when none matches."""
    if data.startswith(_JPEG_MAGIC):
        return "jpeg"
    if data.startswith(_PNG_MAGIC):
        return "png"
    if data[:6] in _GIF_MAGICS:
        return "gif"
    if data.startswith(_BMP_MAGIC):
        return "bmp"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def read_header(data: bytes) -> ImageHeader:
    """Reads the format and stored size from the header bytes, without decoding any pixels.

    Raises `UnknownFormat` when the magic bytes match no supported format, and `HeaderError`
    when the header is truncated, malformed or declares a zero width or height.
    """
    data = bytes(data)
    image_format = sniff_format(data)
    if image_format is None:
        if not data:
            raise UnknownFormat("empty data: no magic bytes to identify the format")
        raise UnknownFormat(
            f"magic bytes match no supported format {FORMATS}. "
            f"Received first bytes: {data[:12]!r}")
    width, height, frames, *total = _READERS[image_format](data)
    if width == 0 or height == 0:
        raise HeaderError(f"{image_format}: header declares a zero size {width}x{height}")
    return ImageHeader(format=image_format, width=width, height=height, frames=frames,
                       total_pixels=total[0] if total else 0,
                       orientation=exif.read_orientation(data))


def _unpack(layout: str, data: bytes, offset: int, what: str) -> tuple:
    """struct.unpack_from that reports a short buffer as a truncated header."""
    end = offset + struct.calcsize(layout)
    if end > len(data):
        raise HeaderError(
            f"truncated header: {what} needs bytes {offset}..{end}, data has {len(data)}")
    return struct.unpack_from(layout, data, offset)


def _read_jpeg(data: bytes) -> tuple[int, int, int]:
    """Walks the marker chain from SOI to the first SOF segment.

    Mirrors how libjpeg reads markers: fill bytes (repeated 0xFF) before a marker are skipped,
    as are stray bytes between segments and 0xFF 0x00 pairs (not a marker); RSTn and TEM stand
    alone; every other marker is followed by a big-endian length that counts itself.
    """
    size = len(data)
    pos = 2  # after SOI
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0:
            raise HeaderError(
                f"truncated header: jpeg data ended at byte {size} before any SOF marker")
        pos = ff + 1
        while pos < size and data[pos] == 0xFF:
            pos += 1
        if pos >= size:
            raise HeaderError(
                f"truncated header: jpeg data ended at byte {size} before any SOF marker")
        marker = data[pos]
        pos += 1
        if marker == 0x00 or marker == _JPEG_TEM or marker in _JPEG_RST:
            continue
        if marker == _JPEG_SOI:
            raise HeaderError(f"jpeg: second SOI marker at byte {pos - 2} before any SOF marker")
        if marker == _JPEG_EOI:
            raise HeaderError(f"jpeg: EOI marker at byte {pos - 2} before any SOF marker")
        if marker == _JPEG_SOS:
            raise HeaderError(f"jpeg: SOS marker at byte {pos - 2} before any SOF marker")
        (length,) = _unpack(">H", data, pos, f"jpeg segment 0x{marker:02X} length")
        if length < 2:
            raise HeaderError(
                f"jpeg: segment 0x{marker:02X} at byte {pos - 2} declares length {length}, "
                f"expected >= 2")
        if marker in _JPEG_SOF:
            if length < 8:
                raise HeaderError(
                    f"jpeg: SOF segment 0x{marker:02X} declares length {length}, expected >= 8")
            _, height, width = _unpack(">BHH", data, pos + 2, f"jpeg SOF 0x{marker:02X} size")
            return width, height, 1
        if pos + length > size:
            raise HeaderError(
                f"truncated header: jpeg segment 0x{marker:02X} at byte {pos - 2} declares "
                f"{length} bytes, data has {size - pos}")
        pos += length


def _read_png(data: bytes) -> tuple[int, int, int]:
    """IHDR must be the first chunk (13 bytes of data); width and height are big-endian. An
    animated PNG's `acTL` (before the first IDAT) gives its frame count."""
    length, chunk_type = _unpack(">I4s", data, 8, "png first chunk header")
    if chunk_type != b"IHDR":
        raise HeaderError(f"png: first chunk is {chunk_type!r}, expected b'IHDR'")
    if length != 13:
        raise HeaderError(f"png: IHDR declares length {length}, expected 13")
    width, height = _unpack(">II", data, 16, "png IHDR size")
    _unpack("5B", data, 24, "png IHDR data")
    if width > _PNG_MAX_SIDE or height > _PNG_MAX_SIDE:
        raise HeaderError(
            f"png: size {width}x{height} exceeds the PNG limit of {_PNG_MAX_SIDE} per side")
    return width, height, max(1, _png_frames(data))


def _png_frames(data: bytes) -> int:
    """`acTL`'s num_frames, or 0 when the chunks before the first IDAT hold none."""
    pos = 33  # signature (8) + IHDR chunk (4 + 4 + 13 + 4)
    while pos + 8 <= len(data):
        length, chunk_type = struct.unpack_from(">I4s", data, pos)
        if chunk_type == b"acTL" and pos + 12 <= len(data):
            return struct.unpack_from(">I", data, pos + 8)[0]
        if chunk_type in (b"IDAT", b"IEND"):
            return 0
        pos += 12 + length
    return 0


def _gif_color_table_size(packed: int) -> int:
    """Bytes of the colour table a GIF packed-fields byte announces (0 when absent)."""
    return 3 << ((packed & 0x07) + 1) if packed & 0x80 else 0


def _skip_gif_sub_blocks(data: bytes, pos: int) -> int | None:
    """Position after a sub-block chain's zero terminator, or None if the data ends first."""
    size = len(data)
    while pos < size:
        block_size = data[pos]
        pos += 1
        if block_size == 0:
            return pos
        pos += block_size
    return None


def _read_gif(data: bytes) -> tuple[int, int, int, int]:
    """Logical screen, then every block; size is the largest frame width by the largest frame
    height (TensorFlow's canvas), total the sum of the frames' areas.

    A stream that is truncated (or holds an unknown block) after at least one image descriptor
    reports what was seen: giflib keeps the complete frames and the decoder judges the data.
    Before any image descriptor that is a HeaderError.
    """
    size = len(data)
    _, _, packed = _unpack("<HHB", data, 6, "gif logical screen descriptor")
    _unpack("2B", data, 11, "gif logical screen descriptor")
    pos = 13 + _gif_color_table_size(packed)
    frames = width = height = total = 0
    while True:
        if pos >= size:
            if frames == 0:
                raise HeaderError(
                    f"truncated header: gif data ended at byte {size} before any image "
                    f"descriptor")
            break
        block = data[pos]
        if block == _GIF_TRAILER:
            if frames == 0:
                raise HeaderError(f"gif: trailer at byte {pos} before any image descriptor")
            break
        if block == _GIF_EXTENSION:
            next_pos = _skip_gif_sub_blocks(data, pos + 2)  # introducer, label
        elif block == _GIF_IMAGE:
            if pos + 10 > size and frames > 0:
                break
            _, _, frame_width, frame_height, frame_packed = _unpack(
                "<HHHHB", data, pos + 1, "gif image descriptor")
            frames += 1
            width = max(width, frame_width)
            height = max(height, frame_height)
            total += frame_width * frame_height
            # descriptor, colour table, LZW minimum code size, then the data sub-blocks
            next_pos = _skip_gif_sub_blocks(
                data, pos + 10 + _gif_color_table_size(frame_packed) + 1)
        elif frames == 0:
            raise HeaderError(
                f"gif: unknown block 0x{block:02X} at byte {pos} before any image descriptor")
        else:
            break
        if next_pos is None:
            pos = size
        else:
            pos = next_pos
    return width, height, frames, total


def _read_bmp(data: bytes) -> tuple[int, int, int]:
    """The DIB header size picks the layout; a negative height means top-down rows."""
    (header_size,) = _unpack("<I", data, 14, "bmp DIB header size")
    if header_size == _BMP_CORE_HEADER:
        width, height = _unpack("<HH", data, 18, "bmp BITMAPCOREHEADER size")
        return width, height, 1
    if header_size not in _BMP_INFO_HEADERS:
        raise HeaderError(
            f"bmp: unsupported DIB header size {header_size}. Expected one of "
            f"{(_BMP_CORE_HEADER,) + _BMP_INFO_HEADERS}")
    width, height = _unpack("<ii", data, 18, "bmp DIB header size fields")
    if width < 0:
        raise HeaderError(f"bmp: negative width {width}")
    return width, abs(height), 1


def _read_webp(data: bytes) -> tuple[int, int, int]:
    """The first chunk after RIFF....WEBP: VP8 (lossy), VP8L (lossless) or VP8X (extended)."""
    chunk, _ = _unpack("<4sI", data, 12, "webp first chunk header")
    if chunk == b"VP8 ":
        frame_tag, start_code, width, height = _unpack(
            "<3s3sHH", data, 20, "webp VP8 frame header")
        if frame_tag[0] & 0x01:
            raise HeaderError("webp: VP8 bitstream does not start with a key frame")
        if start_code != _VP8_START_CODE:
            raise HeaderError(
                f"webp: VP8 start code is {start_code.hex()}, expected {_VP8_START_CODE.hex()}")
        return width & 0x3FFF, height & 0x3FFF, 1
    if chunk == b"VP8L":
        signature, bits = _unpack("<BI", data, 20, "webp VP8L header")
        if signature != _VP8L_SIGNATURE:
            raise HeaderError(
                f"webp: VP8L signature is 0x{signature:02X}, expected 0x{_VP8L_SIGNATURE:02X}")
        version = bits >> 29
        if version != 0:
            raise HeaderError(f"webp: VP8L version is {version}, expected 0")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 1
    if chunk == b"VP8X":
        flags, *canvas = _unpack("<B3x3s3s", data, 20, "webp VP8X canvas size")
        if flags & _VP8X_ANIMATION:
            raise HeaderError("webp: animated (VP8X animation flag); TensorFlow's WebP decoder "
                              "corrupts memory on animated files, so it is never decoded")
        width_minus_one, height_minus_one = (int.from_bytes(v, "little") for v in canvas)
        return width_minus_one + 1, height_minus_one + 1, 1
    raise HeaderError(f"webp: first chunk is {chunk!r}, expected b'VP8 ', b'VP8L' or b'VP8X'")


_READERS = {
    "jpeg": _read_jpeg,
    "png": _read_png,
    "gif": _read_gif,
    "bmp": _read_bmp,
    "webp": _read_webp,
}


def jpeg_scans(data: bytes) -> int:
    """The number of scans (SOS markers) of a JPEG, from its markers, without decoding.

    The segments before the first scan are walked by their lengths (an APP segment may embed a
    whole thumbnail JPEG, whose markers do not count). After it, every SOS marker is an
    `FF DA` pair: entropy-coded data stuffs each `FF` byte as `FF 00`, so the pair cannot
    occur inside a scan, and marker segments between scans are tables of a few bytes."""
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:                      # fill byte
            pos += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD8:  # standalone markers
            pos += 2
        elif marker == 0xDA:                    # the first scan: count them all from here
            return _count_scans(data, pos)
        elif marker == 0xD9:                    # EOI before any scan
            return 0
        else:
            pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return 0


def _count_scans(data: bytes, pos: int) -> int:
    """`data.count(b"\\xff\\xda", pos)`, by the faster way for the number there is."""
    found = 0
    for found, _ in enumerate(_SOS_MARKER.finditer(data, pos), 1):
        if found > _FEW_SCANS:
            return data.count(b"\xff\xda", pos)
    return found
