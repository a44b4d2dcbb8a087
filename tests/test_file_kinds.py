"""transforms.offline.file_kinds: the format named for each unsupported image, the count keys
of other files, and the line the summary and the report show."""
import pytest

from transforms.offline.file_kinds import (
    describe_other_files,
    other_file_key,
    other_files_from_counts,
    sniff_unsupported,
    unsupported_detail,
)

DECODES = "the decoder reads JPEG, PNG, GIF, BMP and WebP only: convert it"


@pytest.mark.parametrize("head, expected", [
    (b"II*\0rest", "TIFF"), (b"MM\0*rest", "TIFF"),
    (b"\0\0\0\x18ftypheic\0\0", "HEIF/HEIC"), (b"\0\0\0\x18ftypmif1\0\0", "HEIF/HEIC"),
    (b"\0\0\0\x1cftypavif\0\0", "AVIF"), (b"\xff\x0a\xfa", "JPEG XL"),
    (b"\0\0\0\x0cJXL \r\n\x87\n", "JPEG XL"), (b"\xef\xbb\xbf  <svg width='1'>", "SVG"),
    (b"<?xml version='1.0'?><svg>", "SVG"), (b"<?xml version='1.0'?><html>", None),
    (b"8BPS\0\1", "Photoshop PSD"), (b"FUJIFILMCCD-RAW 0201", "camera RAW (Fujifilm)"),
    (b"IIRO\x08\0", "camera RAW (Olympus)"), (b"\xff\xd8\xff\xe0", "jpeg"), (b"hello", None),
])
def test_sniff_unsupported_names_the_format_from_the_first_bytes(head, expected):
    assert sniff_unsupported(head) == expected


@pytest.mark.parametrize("extension, head, error, expected", [
    ("heic", b"\0\0\0\x18ftypheic", "",
     f"HEIF/HEIC image (.heic, confirmed by its bytes); {DECODES}"),
    ("dng", b"II*\0", "", f"camera RAW (DNG) image (.dng, confirmed by its bytes); {DECODES}"),
    ("tif", b"\0\0\0\x18ftypavif", "",
     f"TIFF image (by its extension .tif; its bytes say AVIF); {DECODES}"),
    ("jxl", b"", "", f"JPEG XL image (by its extension .jxl; its bytes match no known "
                     f"signature); {DECODES}"),
    ("psd", None, "Permission denied",
     f"Photoshop PSD image (by its extension .psd; its first bytes could not be read "
     f"(Permission denied)); {DECODES}"),
    ("heic", b"\x89PNG\r\n\x1a\n", "", "extension .heic (HEIF/HEIC) but the bytes are PNG: "
                                       "rename it, or add 'heic' to discovery.extensions"),
])
def test_unsupported_detail(extension, head, error, expected):
    assert unsupported_detail(extension, head, error) == expected


@pytest.mark.parametrize("path, key", [
    ("a/notes.TXT", "txt"), ("README", "(none)"), (".DS_Store", "(none)"),
    ("a.b/c", "(none)"), ("x.tar.gz", "gz"), ("x.has space", "(other)"),
    ("x." + "e" * 17, "(other)"), ("x.", "(none)"),
])
def test_other_file_key(path, key):
    assert other_file_key(path) == key


def test_the_counts_and_the_line_people_read():
    counts = {"images.discovered": 4, "other_files.txt": 12, "other_files.json": 3,
              "other_files.(none)": 3, "other_files.(other)": 1, "other_files.csv": 0}
    other = other_files_from_counts(counts)
    assert other == {"(none)": 3, "(other)": 1, "json": 3, "txt": 12}
    assert describe_other_files(other) == (
        "12 .txt, 3 with no extension, 3 .json, 1 with an odd extension")
    assert describe_other_files(other, limit=2) == (
        "12 .txt, 3 with no extension, 4 of 2 other extensions")
    assert describe_other_files({}) == ""
