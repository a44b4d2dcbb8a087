"""Tests for transforms.offline.image_header: format from magic bytes, stored size without decoding.

Real files are made in memory with PIL; the cases PIL cannot write (bombs, odd markers, BMP
core headers, GIF frames outside the screen) are built byte by byte.
"""
from __future__ import annotations

import ast
import io
import pathlib
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from transforms.offline import image_header
from transforms.offline.image_header import (
    HeaderError,
    ImageHeader,
    UnknownFormat,
    read_header,
    sniff_format,
)

WIDTH, HEIGHT = 37, 23  # odd and unequal, so swapped or off-by-one dims show


def _noise(mode: str, size=(WIDTH, HEIGHT), seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4}.get(mode, 1)
    shape = (size[1], size[0], channels) if channels > 1 else (size[1], size[0])
    pixels = rng.integers(0, 256, size=shape, dtype=np.uint8)
    return Image.fromarray(pixels, "L" if channels == 1 else mode)


def _save(image: Image.Image, image_format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, **options)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------- builders

def _jpeg_segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def _jpeg_sof0(width: int, height: int) -> bytes:
    components = b"".join(bytes([i, 0x11, 0]) for i in (1, 2, 3))
    return _jpeg_segment(0xC0, struct.pack(">BHHB", 8, height, width, 3) + components)


_JPEG_SOI = b"\xff\xd8"
_JPEG_APP0 = _jpeg_segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
_JPEG_DQT = _jpeg_segment(0xDB, b"\x00" + bytes(range(1, 65)))
_JPEG_DHT = _jpeg_segment(0xC4, b"\x00" + bytes([1] + [0] * 15) + b"\x00")
_JPEG_SOS = _jpeg_segment(0xDA, b"\x03\x01\x00\x02\x00\x03\x00\x00\x3f\x00")
_JPEG_EOI = b"\xff\xd9"


def _jpeg(width: int, height: int, before_sof: bytes = b"") -> bytes:
    """A syntactically complete baseline JPEG whose SOF0 declares width x height."""
    return (_JPEG_SOI + _JPEG_APP0 + _JPEG_DQT + before_sof + _jpeg_sof0(width, height)
            + _JPEG_DHT + _JPEG_SOS + b"\x00" * 16 + _JPEG_EOI)


def _png_chunk(chunk_type: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(chunk_type + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + chunk_type + payload + struct.pack(">I", crc)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_ihdr(width: int, height: int) -> bytes:
    return _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))


def _png(width: int, height: int) -> bytes:
    """Signature, IHDR (8-bit RGB), one tiny IDAT, IEND: a complete PNG header chain."""
    return (_PNG_SIGNATURE + _png_ihdr(width, height)
            + _png_chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00"))
            + _png_chunk(b"IEND", b""))


_GIF_LZW_1PX = b"\x02\x02\x44\x01\x00"  # min code size 2, one sub-block, terminator


def _gif_frame(left: int, top: int, width: int, height: int, local_colors: int = 0) -> bytes:
    packed = 0
    table = b""
    if local_colors:
        bits = local_colors.bit_length() - 2  # 2 ** (bits + 1) == local_colors
        packed = 0x80 | bits
        table = bytes(3 * local_colors)
    return (b"\x2c" + struct.pack("<HHHHB", left, top, width, height, packed) + table
            + _GIF_LZW_1PX)


_GIF_GRAPHIC_CONTROL = b"\x21\xf9\x04\x00\x0a\x00\x00\x00"
_GIF_NETSCAPE_LOOP = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
_GIF_COMMENT = b"\x21\xfe\x05hello\x03abc\x00"  # two sub-blocks


def _gif(screen_width: int, screen_height: int, *blocks: bytes, trailer: bool = True) -> bytes:
    """GIF89a with a 2-colour global table, then the given blocks and (optionally) a trailer."""
    screen = struct.pack("<HHBBB", screen_width, screen_height, 0x80, 0, 0) + bytes(6)
    return b"GIF89a" + screen + b"".join(blocks) + (b"\x3b" if trailer else b"")


def _bmp(width: int, height: int, dib_header_size: int, with_pixels: bool = True) -> bytes:
    """A 24-bit uncompressed BMP with the given DIB header size and (signed) height.

    `with_pixels=False` leaves the pixel array out: a header-only file for huge or bad sizes.
    """
    row = (3 * abs(width) + 3) // 4 * 4
    pixels = bytes(row * abs(height)) if with_pixels else b""
    if dib_header_size == 12:
        dib = struct.pack("<IHHHH", 12, width, height, 1, 24)
    else:
        dib = struct.pack("<IiiHHIIiiII", dib_header_size, width, height, 1, 24, 0,
                          len(pixels), 2835, 2835, 0, 0)
        dib += bytes(dib_header_size - len(dib))
    offset = 14 + len(dib)
    file_header = b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset)
    return file_header + dib + pixels


def _riff_webp(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _vp8l(width: int, height: int, version: int = 0, signature: int = 0x2F) -> bytes:
    bits = (width - 1) | ((height - 1) << 14) | (version << 29)
    return _riff_webp(b"VP8L", struct.pack("<BI", signature, bits) + bytes(8))


def _vp8x(width: int, height: int) -> bytes:
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return _riff_webp(b"VP8X", b"\x00\x00\x00\x00" + canvas)


# ------------------------------------------------------------------------- the module itself

def test_module_imports_only_struct_re_and_dataclasses():
    source = pathlib.Path(image_header.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported == {"__future__", "dataclasses", "re", "struct", "transforms.offline"}
    # ... and its EXIF reader (`from transforms.offline import exif`) is pure struct too.
    exif_source = pathlib.Path(image_header.exif.__file__).read_text()
    exif_imports = {node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    for node in ast.walk(ast.parse(exif_source))
                    if isinstance(node, (ast.Import, ast.ImportFrom))}
    assert exif_imports == {"__future__", "struct"}


def test_public_surface_is_exactly_the_documented_api():
    assert image_header.__all__ == [
        "ImageHeader", "HeaderError", "UnknownFormat", "sniff_format", "read_header",
        "jpeg_scans"]
    assert image_header.FORMATS == ("jpeg", "png", "gif", "bmp", "webp")


def test_unknown_format_is_a_header_error_is_a_value_error():
    assert issubclass(UnknownFormat, HeaderError)
    assert issubclass(HeaderError, ValueError)


def test_image_header_pixels_is_width_times_height():
    assert ImageHeader("png", 60000, 40000, 1).pixels == 2_400_000_000


def test_image_header_is_frozen():
    header = ImageHeader("png", 3, 2, 1)
    with pytest.raises(AttributeError):
        header.width = 5


def test_image_header_rejects_unknown_format_name():
    with pytest.raises(ValueError, match=r"Unknown image format 'tiff'.*Expected one of"):
        ImageHeader("tiff", 3, 2, 1)


def test_image_header_rejects_zero_width():
    with pytest.raises(ValueError, match=r"Received: width=0, height=2"):
        ImageHeader("png", 0, 2, 1)


def test_image_header_rejects_zero_frames():
    with pytest.raises(ValueError, match=r"Received: frames=0"):
        ImageHeader("gif", 3, 2, 0)


# ---------------------------------------------------------------------------- sniff_format

@pytest.mark.parametrize("image_format, data", [
    ("jpeg", _save(_noise("RGB"), "JPEG")),
    ("png", _save(_noise("RGB"), "PNG")),
    ("gif", _save(_noise("L"), "GIF")),
    ("bmp", _save(_noise("RGB"), "BMP")),
    ("webp", _save(_noise("RGB"), "WEBP")),
    ("gif", b"GIF87a"),
])
def test_sniff_format_names_each_format_from_magic_bytes(image_format, data):
    assert sniff_format(data) == image_format


@pytest.mark.parametrize("data", [
    b"",
    b"hello, this is a text file named cat.jpg\n",
    b"II*\x00\x08\x00\x00\x00",    # TIFF
    b"\xff\xd8",                   # JPEG SOI without a following marker
    b"\x89PNG\r\n",                # incomplete PNG signature
    b"GIF88a\x01\x00\x01\x00",     # not a GIF version
    b"RIFF\x10\x00\x00\x00WAVE",   # RIFF but not WebP
])
def test_sniff_format_returns_none_for_unsupported_magic(data):
    assert sniff_format(data) is None


# ------------------------------------------------------------------------ unknown formats

def test_read_header_text_file_is_unknown_format():
    with pytest.raises(UnknownFormat, match=r"magic bytes match no supported format.*b'name"):
        read_header(b"name,label\ncat.jpg,cat\n")


def test_read_header_empty_data_is_unknown_format():
    with pytest.raises(UnknownFormat, match="empty data"):
        read_header(b"")


def test_read_header_accepts_bytearray_and_memoryview():
    data = _png(5, 7)
    assert read_header(bytearray(data)) == ImageHeader("png", 5, 7, 1)
    assert read_header(memoryview(data)) == ImageHeader("png", 5, 7, 1)


# ------------------------------------------------------------------------------------ JPEG

@pytest.mark.parametrize("mode, options, sof_marker", [
    ("RGB", {}, b"\xff\xc0"),
    ("RGB", {"progressive": True}, b"\xff\xc2"),
    ("L", {}, b"\xff\xc0"),
])
def test_read_header_jpeg_from_pil(mode, options, sof_marker):
    data = _save(_noise(mode), "JPEG", quality=90, **options)
    assert sof_marker in data  # the file really uses the SOF type under test
    assert read_header(data) == ImageHeader("jpeg", WIDTH, HEIGHT, 1)


def test_read_header_jpeg_reports_stored_dims_and_the_exif_orientation():
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW on display
    data = _save(_noise("RGB"), "JPEG", exif=exif.tobytes())
    assert b"Exif" in data[:64]
    header = read_header(data)
    assert header == ImageHeader("jpeg", WIDTH, HEIGHT, 1, orientation=6)
    assert header.displayed_size == (HEIGHT, WIDTH)


def test_read_header_jpeg_bomb_header_is_read_without_decoding():
    data = _jpeg(60000, 60000)
    assert len(data) < 400
    assert read_header(data) == ImageHeader("jpeg", 60000, 60000, 1)


def test_read_header_jpeg_skips_fill_bytes_and_standalone_markers():
    # fill 0xFF bytes before markers, then TEM and RST0..RST7 (no length), then the segments
    standalone = b"\xff\xff\xff\x01" + b"".join(bytes([0xFF, m]) for m in range(0xD0, 0xD8))
    data = _JPEG_SOI + standalone + _jpeg(640, 480)[2:].replace(b"\xff\xc0", b"\xff\xff\xc0")
    assert read_header(data) == ImageHeader("jpeg", 640, 480, 1)


def test_read_header_jpeg_skips_stray_bytes_and_stuffed_zero_between_segments():
    data = _jpeg(64, 48, before_sof=b"\x00\x12\xff\x00\x34")
    assert read_header(data) == ImageHeader("jpeg", 64, 48, 1)


@pytest.mark.parametrize("not_sof_marker", [0xC4, 0xC8, 0xCC])
def test_read_header_jpeg_skips_dht_jpg_dac_in_the_sof_range(not_sof_marker):
    # payload shaped like a SOF declaring 9999x7777; it must be skipped, not read
    decoy = _jpeg_segment(not_sof_marker, struct.pack(">BHHB", 8, 7777, 9999, 3) + bytes(9))
    assert read_header(_jpeg(320, 200, before_sof=decoy)) == ImageHeader("jpeg", 320, 200, 1)


@pytest.mark.parametrize("sof_marker", [0xC1, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD,
                                        0xCE, 0xCF])
def test_read_header_jpeg_reads_every_other_sof_type(sof_marker):
    sof = _jpeg_segment(sof_marker, struct.pack(">BHHB", 8, 21, 34, 1) + b"\x01\x11\x00")
    data = _JPEG_SOI + _JPEG_DQT + sof + _JPEG_SOS + _JPEG_EOI
    assert read_header(data) == ImageHeader("jpeg", 34, 21, 1)


def test_read_header_jpeg_uses_the_first_sof():
    data = _jpeg(100, 50, before_sof=_jpeg_sof0(7, 5))
    assert read_header(data) == ImageHeader("jpeg", 7, 5, 1)


def test_read_header_jpeg_sos_before_sof_is_header_error():
    data = _JPEG_SOI + _JPEG_APP0 + _JPEG_SOS + b"\x00" * 8 + _JPEG_EOI
    with pytest.raises(HeaderError, match="SOS marker at byte 20 before any SOF"):
        read_header(data)


def test_read_header_jpeg_eoi_before_sof_is_header_error():
    with pytest.raises(HeaderError, match="EOI marker at byte 20 before any SOF"):
        read_header(_JPEG_SOI + _JPEG_APP0 + _JPEG_EOI)


def test_read_header_jpeg_second_soi_is_header_error():
    with pytest.raises(HeaderError, match="second SOI marker at byte 2"):
        read_header(_JPEG_SOI + _jpeg(8, 8))


def test_read_header_jpeg_segment_length_below_two_is_header_error():
    data = _JPEG_SOI + b"\xff\xe1\x00\x01" + _jpeg(8, 8)[2:]
    with pytest.raises(HeaderError, match="segment 0xE1 at byte 2 declares length 1"):
        read_header(data)


def test_read_header_jpeg_short_sof_segment_is_header_error():
    data = _JPEG_SOI + _jpeg_segment(0xC0, b"\x08\x00\x10\x00\x10") + _JPEG_EOI
    with pytest.raises(HeaderError, match="SOF segment 0xC0 declares length 7, expected >= 8"):
        read_header(data)


def test_read_header_jpeg_zero_height_is_header_error():
    with pytest.raises(HeaderError, match="jpeg: header declares a zero size 640x0"):
        read_header(_jpeg(640, 0))


def test_read_header_jpeg_truncated_inside_a_segment_is_header_error():
    data = _jpeg(640, 480)[:40]  # inside DQT, before SOF
    with pytest.raises(HeaderError,
                       match=r"truncated header: jpeg segment 0xDB at byte 20 declares 67 bytes"):
        read_header(data)


def test_read_header_jpeg_truncated_inside_sof_is_header_error():
    full = _jpeg(640, 480)
    data = full[:full.index(b"\xff\xc0") + 6]
    with pytest.raises(HeaderError, match="truncated header: jpeg SOF 0xC0 size"):
        read_header(data)


def test_read_header_jpeg_magic_only_is_truncated_header():
    with pytest.raises(HeaderError, match="truncated header: jpeg data ended at byte 3"):
        read_header(b"\xff\xd8\xff")


# ------------------------------------------------------------------------------------- PNG

@pytest.mark.parametrize("image", [
    _noise("RGB"),
    _noise("L"),
    Image.fromarray(np.arange(WIDTH * HEIGHT, dtype=np.uint16).reshape(HEIGHT, WIDTH)),
    _noise("RGB").convert("P"),
    _noise("RGBA"),
], ids=["rgb", "gray", "gray16", "palette", "rgba"])
def test_read_header_png_from_pil(image):
    assert read_header(_save(image, "PNG")) == ImageHeader("png", WIDTH, HEIGHT, 1)


def test_read_header_png_16_bit_fixture_really_is_16_bit():
    image = Image.fromarray(np.zeros((HEIGHT, WIDTH), dtype=np.uint16))
    assert image.mode == "I;16"
    assert _save(image, "PNG")[24] == 16  # IHDR bit depth


def test_read_header_png_bomb_header_is_read_without_decoding():
    data = _png(60000, 60000)
    assert len(data) < 100
    assert read_header(data) == ImageHeader("png", 60000, 60000, 1)


def test_read_header_png_first_chunk_not_ihdr_is_header_error():
    data = _PNG_SIGNATURE + _png_chunk(b"tEXt", b"k\x00v") + _png(4, 4)[8:]
    with pytest.raises(HeaderError, match=r"png: first chunk is b'tEXt', expected b'IHDR'"):
        read_header(data)


def test_read_header_png_wrong_ihdr_length_is_header_error():
    data = _PNG_SIGNATURE + _png_chunk(b"IHDR", struct.pack(">II", 4, 4) + b"\x08\x02\x00\x00")
    with pytest.raises(HeaderError, match="png: IHDR declares length 12, expected 13"):
        read_header(data)


def test_read_header_png_side_above_the_png_limit_is_header_error():
    with pytest.raises(HeaderError, match="png: size 2147483648x5 exceeds the PNG limit"):
        read_header(_png(2**31, 5))


def test_read_header_png_zero_width_is_header_error():
    with pytest.raises(HeaderError, match="png: header declares a zero size 0x9"):
        read_header(_png(0, 9))


def test_read_header_png_truncated_in_ihdr_is_header_error():
    data = _save(_noise("RGB"), "PNG")[:22]
    with pytest.raises(HeaderError, match=r"truncated header: png IHDR size needs bytes 16..24"):
        read_header(data)


def test_read_header_png_signature_only_is_truncated_header():
    with pytest.raises(HeaderError, match="truncated header: png first chunk header") as caught:
        read_header(_PNG_SIGNATURE)
    assert caught.type is HeaderError


# ------------------------------------------------------------------------------------- GIF

def test_read_header_gif_single_frame_from_pil():
    assert read_header(_save(_noise("L"), "GIF")) == ImageHeader("gif", WIDTH, HEIGHT, 1)


def test_read_header_gif_animated_from_pil_counts_frames():
    frames = [Image.new("L", (WIDTH, HEIGHT), value) for value in (0, 90, 180)]
    data = _save(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    assert read_header(data) == ImageHeader("gif", WIDTH, HEIGHT, 3)


def test_read_header_gif_frame_larger_than_patched_screen_from_pil():
    data = bytearray(_save(_noise("L"), "GIF"))
    data[6:10] = struct.pack("<HH", 1, 1)  # logical screen now 1x1; the frame stays 37x23
    assert read_header(bytes(data)) == ImageHeader("gif", WIDTH, HEIGHT, 1)


def test_read_header_gif_size_is_the_largest_frame_whatever_its_offset():
    # TensorFlow's canvas: the largest frame width by the largest frame height (issue 9).
    data = _gif(10, 10,
                _GIF_NETSCAPE_LOOP, _GIF_COMMENT,
                _GIF_GRAPHIC_CONTROL, _gif_frame(0, 0, 10, 10),
                _GIF_GRAPHIC_CONTROL, _gif_frame(40000, 3, 20000, 5, local_colors=4),
                _GIF_GRAPHIC_CONTROL, _gif_frame(2, 9, 1, 1))
    header = read_header(data)
    assert header == ImageHeader("gif", 20000, 10, 3)
    assert header.total_pixels == 10 * 10 + 20000 * 5 + 1


def test_read_header_gif_zero_screen_takes_the_frame_size():
    data = _gif(0, 0, _gif_frame(1, 2, 30, 40))
    assert read_header(data) == ImageHeader("gif", 30, 40, 1)


def test_read_header_gif_87a_is_read():
    data = b"GIF87a" + _gif(5, 6, _gif_frame(0, 0, 5, 6))[6:]
    assert read_header(data) == ImageHeader("gif", 5, 6, 1)


def test_read_header_gif_truncated_after_a_frame_reports_what_was_seen():
    data = _gif(10, 10, _gif_frame(0, 0, 10, 10), _gif_frame(0, 0, 50000, 50000))
    data = data[:-4]  # cut inside the second frame's LZW data and drop the trailer
    assert read_header(data) == ImageHeader("gif", 50000, 50000, 2)


def test_read_header_gif_truncated_inside_second_descriptor_reports_first_frame():
    data = _gif(10, 10, _gif_frame(0, 0, 12, 11), _gif_frame(0, 0, 50000, 50000))
    second = len(_gif(10, 10, _gif_frame(0, 0, 12, 11), trailer=False))
    assert read_header(data[:second + 5]) == ImageHeader("gif", 12, 11, 1)


def test_read_header_gif_unknown_block_after_a_frame_reports_what_was_seen():
    data = _gif(10, 10, _gif_frame(0, 0, 10, 20), b"\x99garbage", trailer=False)
    assert read_header(data) == ImageHeader("gif", 10, 20, 1)


def test_read_header_gif_truncated_before_any_descriptor_is_header_error():
    data = _gif(10, 10, _GIF_COMMENT[:-3], trailer=False)
    with pytest.raises(HeaderError,
                       match="truncated header: gif data ended at byte 29 before any image"):
        read_header(data)


def test_read_header_gif_truncated_in_first_descriptor_is_header_error():
    data = _gif(10, 10, _gif_frame(0, 0, 10, 10), trailer=False)[:25]
    with pytest.raises(HeaderError, match="truncated header: gif image descriptor"):
        read_header(data)


def test_read_header_gif_truncated_in_screen_descriptor_is_header_error():
    with pytest.raises(HeaderError, match="truncated header: gif logical screen descriptor"):
        read_header(b"GIF89a\x10\x00\x10\x00")


def test_read_header_gif_trailer_without_frames_is_header_error():
    with pytest.raises(HeaderError, match="gif: trailer at byte 19 before any image descriptor"):
        read_header(_gif(10, 10))


def test_read_header_gif_unknown_block_before_frames_is_header_error():
    with pytest.raises(HeaderError,
                       match="gif: unknown block 0x99 at byte 19 before any image descriptor"):
        read_header(_gif(10, 10, b"\x99", _gif_frame(0, 0, 10, 10)))


def test_read_header_gif_zero_size_is_header_error():
    with pytest.raises(HeaderError, match="gif: header declares a zero size 0x0"):
        read_header(_gif(0, 0, _gif_frame(0, 0, 0, 0)))


# ------------------------------------------------------------------------------------- BMP

def test_read_header_bmp_from_pil_uses_info_header():
    data = _save(_noise("RGB"), "BMP")
    assert struct.unpack_from("<I", data, 14) == (40,)
    assert read_header(data) == ImageHeader("bmp", WIDTH, HEIGHT, 1)


@pytest.mark.parametrize("dib_header_size, height", [
    (12, 5), (40, 5), (40, -5), (108, 5), (124, -5),
])
def test_read_header_bmp_hand_built_agrees_with_pil(dib_header_size, height):
    data = _bmp(7, height, dib_header_size)
    assert Image.open(io.BytesIO(data)).size == (7, 5)  # the bytes are a real BMP
    assert read_header(data) == ImageHeader("bmp", 7, 5, 1)


def test_read_header_bmp_core_header_reads_16_bit_unsigned_dims():
    header = read_header(_bmp(65535, 40000, 12, with_pixels=False))
    assert header == ImageHeader("bmp", 65535, 40000, 1)


def test_read_header_bmp_unsupported_dib_header_size_is_header_error():
    data = bytearray(_bmp(7, 5, 40))
    data[14:18] = struct.pack("<I", 20)
    with pytest.raises(HeaderError, match=r"bmp: unsupported DIB header size 20\. Expected"):
        read_header(bytes(data))


def test_read_header_bmp_negative_width_is_header_error():
    with pytest.raises(HeaderError, match="bmp: negative width -7"):
        read_header(_bmp(-7, 5, 40, with_pixels=False))


def test_read_header_bmp_zero_height_is_header_error():
    with pytest.raises(HeaderError, match="bmp: header declares a zero size 7x0"):
        read_header(_bmp(7, 0, 40))


def test_read_header_bmp_truncated_is_header_error():
    with pytest.raises(HeaderError, match=r"truncated header: bmp DIB header size fields"):
        read_header(_bmp(7, 5, 40)[:24])


# ------------------------------------------------------------------------------------ WebP

@pytest.mark.parametrize("mode, options, first_chunk", [
    ("RGB", {"lossless": False}, b"VP8 "),
    ("RGB", {"lossless": True}, b"VP8L"),
    ("RGBA", {"lossless": False}, b"VP8X"),
], ids=["lossy", "lossless", "alpha"])
def test_read_header_webp_from_pil(mode, options, first_chunk):
    data = _save(_noise(mode), "WEBP", **options)
    assert data[12:16] == first_chunk  # the file really uses the chunk type under test
    assert read_header(data) == ImageHeader("webp", WIDTH, HEIGHT, 1)


def test_read_header_webp_animated_from_pil_is_refused_before_the_decoder():
    # TF 2.21's WebP decoder corrupts the heap on animated WebP (issue 9): never decoded.
    frames = [Image.new("RGB", (WIDTH, HEIGHT), (value, 0, 0)) for value in (0, 120, 240)]
    data = _save(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=50)
    assert data[12:16] == b"VP8X"
    with pytest.raises(HeaderError, match="webp: animated"):
        read_header(data)


def test_read_header_webp_vp8_ignores_scale_bits():
    data = bytearray(_save(_noise("RGB"), "WEBP", lossless=False))
    data[27] |= 0xC0  # top two bits of the 16-bit width field are the horizontal scale
    data[29] |= 0x40
    assert read_header(bytes(data)) == ImageHeader("webp", WIDTH, HEIGHT, 1)


def test_read_header_webp_vp8l_largest_size():
    assert read_header(_vp8l(16384, 16384)) == ImageHeader("webp", 16384, 16384, 1)


def test_read_header_webp_vp8x_24_bit_canvas():
    assert read_header(_vp8x(2**24, 3)) == ImageHeader("webp", 16777216, 3, 1)


def test_read_header_webp_vp8_not_a_key_frame_is_header_error():
    data = bytearray(_save(_noise("RGB"), "WEBP", lossless=False))
    data[20] |= 0x01
    with pytest.raises(HeaderError, match="VP8 bitstream does not start with a key frame"):
        read_header(bytes(data))


def test_read_header_webp_vp8_bad_start_code_is_header_error():
    data = bytearray(_save(_noise("RGB"), "WEBP", lossless=False))
    data[23:26] = b"\x00\x00\x00"
    with pytest.raises(HeaderError, match="VP8 start code is 000000, expected 9d012a"):
        read_header(bytes(data))


def test_read_header_webp_vp8l_bad_signature_is_header_error():
    with pytest.raises(HeaderError, match="VP8L signature is 0x2E, expected 0x2F"):
        read_header(_vp8l(4, 4, signature=0x2E))


def test_read_header_webp_vp8l_nonzero_version_is_header_error():
    with pytest.raises(HeaderError, match="VP8L version is 1, expected 0"):
        read_header(_vp8l(4, 4, version=1))


def test_read_header_webp_unknown_first_chunk_is_header_error():
    with pytest.raises(HeaderError, match=r"webp: first chunk is b'ALPH'"):
        read_header(_riff_webp(b"ALPH", bytes(16)))


def test_read_header_webp_zero_size_vp8_is_header_error():
    data = bytearray(_save(_noise("RGB"), "WEBP", lossless=False))
    data[26:28] = b"\x00\xc0"  # width 0 with scale bits set
    with pytest.raises(HeaderError, match=f"webp: header declares a zero size 0x{HEIGHT}"):
        read_header(bytes(data))


def test_read_header_webp_truncated_is_header_error():
    data = _save(_noise("RGB"), "WEBP", lossless=True)[:22]
    with pytest.raises(HeaderError, match="truncated header: webp VP8L header") as caught:
        read_header(data)
    assert caught.type is HeaderError
