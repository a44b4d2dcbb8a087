"""What a listed file is, by its name: an image to read, an image the job cannot decode, or
another file, counted per extension.

Files whose extension is in `discovery.extensions` are read (their real format comes from
their magic bytes later). Of the others, an extension in `UNSUPPORTED` names an image format
the shared decoder cannot read (TIFF, HEIC, RAW, ...): such a file is discovered and rejected
as `unsupported_format`, naming the format from its extension and from its first bytes, so a
folder of HEIC photos is never "0 discovered". Every other file is counted per extension
(`other_files.<ext>` in the job's counts, `other_files` in stats.json) and shown as
"skipped: 12 .txt, 3 .json". A configured extension is always read, even one listed here.
"""
from __future__ import annotations

import posixpath
import re

from transforms.offline.image_header import sniff_format

__all__ = ["UNSUPPORTED", "extension_of", "other_file_key", "unsupported_detail",
           "sniff_unsupported", "OTHER_FILES", "HEAD_BYTES", "other_files_from_counts",
           "describe_other_files", "NO_EXTENSION"]

OTHER_FILES = "other_files"  # the prefix of the counts' keys
NO_EXTENSION = "(none)"
_ODD_EXTENSION = "(other)"
_PLAIN_EXTENSION = re.compile(r"^[a-z0-9_+-]{1,16}$")
HEAD_BYTES = 64  # enough for every signature below

_RAW = "camera RAW"
UNSUPPORTED = {
    "tif": "TIFF", "tiff": "TIFF",
    "heic": "HEIF/HEIC", "heif": "HEIF/HEIC", "hif": "HEIF/HEIC",
    "avif": "AVIF", "jxl": "JPEG XL",
    "jp2": "JPEG 2000", "j2k": "JPEG 2000", "jpf": "JPEG 2000", "jpx": "JPEG 2000",
    "svg": "SVG", "svgz": "SVG",
    "psd": "Photoshop PSD", "psb": "Photoshop PSD",
    "ico": "ICO", "cur": "ICO", "icns": "Apple ICNS",
    "tga": "TGA", "exr": "OpenEXR", "hdr": "Radiance HDR",
    "pbm": "Netpbm", "pgm": "Netpbm", "ppm": "Netpbm", "pnm": "Netpbm", "pcx": "PCX",
    "xcf": "GIMP XCF",
    **{ext: f"{_RAW} ({maker})" for ext, maker in (
        ("cr2", "Canon"), ("cr3", "Canon"), ("crw", "Canon"), ("nef", "Nikon"),
        ("nrw", "Nikon"), ("arw", "Sony"), ("srf", "Sony"), ("sr2", "Sony"), ("dng", "DNG"),
        ("raf", "Fujifilm"), ("orf", "Olympus"), ("rw2", "Panasonic"), ("pef", "Pentax"),
        ("srw", "Samsung"), ("x3f", "Sigma"), ("3fr", "Hasselblad"), ("iiq", "Phase One"),
        ("erf", "Epson"), ("kdc", "Kodak"), ("mrw", "Minolta"), ("rwl", "Leica"))},
}
# ISO base media brands (bytes 8..12 after `ftyp`).
_BRANDS = {b"heic": "HEIF/HEIC", b"heix": "HEIF/HEIC", b"hevc": "HEIF/HEIC",
           b"heim": "HEIF/HEIC", b"heis": "HEIF/HEIC", b"mif1": "HEIF/HEIC",
           b"msf1": "HEIF/HEIC", b"avif": "AVIF", b"avis": "AVIF", b"crx ": f"{_RAW} (Canon)",
           b"jxl ": "JPEG XL"}
_SIGNATURES = ((b"FUJIFILMCCD-RAW", f"{_RAW} (Fujifilm)"), (b"IIRO", f"{_RAW} (Olympus)"),
               (b"IIRS", f"{_RAW} (Olympus)"), (b"IIU\x00", f"{_RAW} (Panasonic)"),
               (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"8BPS", "Photoshop PSD"),
               (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "JPEG 2000"),
               (b"\xff\x4f\xff\x51", "JPEG 2000"),
               (b"\x00\x00\x00\x0cJXL \r\n\x87\n", "JPEG XL"), (b"\xff\x0a", "JPEG XL"),
               (b"\x00\x00\x01\x00", "ICO"), (b"icns", "Apple ICNS"),
               (b"\x76\x2f\x31\x01", "OpenEXR"), (b"gimp xcf", "GIMP XCF"),
               (b"\x1f\x8b", "gzip"))
_DECODABLE = "JPEG, PNG, GIF, BMP and WebP"


def extension_of(path: str) -> str:
    """The lower-case extension without its dot ('' for none; `.bashrc` has none)."""
    return posixpath.splitext(posixpath.basename(path))[1].lower().lstrip(".")


def other_file_key(path: str) -> str:
    """The count key of a file that is no image: its extension, `(none)`, or `(other)` for an
    extension that is not 1-16 plain characters (so odd names cannot flood the counts)."""
    extension = extension_of(path)
    if not extension:
        return NO_EXTENSION
    return extension if _PLAIN_EXTENSION.match(extension) else _ODD_EXTENSION


def sniff_unsupported(head: bytes) -> str | None:
    """The format named by a file's first bytes: a decodable one (`jpeg`, ...), one of the
    unsupported formats above, or None when none is recognised."""
    decodable = sniff_format(head)
    if decodable:
        return decodable
    if head[4:8] == b"ftyp" and head[8:12] in _BRANDS:
        return _BRANDS[head[8:12]]
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return name
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith(b"<svg") or (text.startswith(b"<?xml") and b"<svg" in head.lower()):
        return "SVG"
    return None


def unsupported_detail(extension: str, head: bytes | None, read_error: str = "") -> str:
    """The `unsupported_format` detail of a file with this extension (one of `UNSUPPORTED`),
    from its first bytes (None when they could not be read: `read_error` says why)."""
    named = UNSUPPORTED[extension]
    sniffed = sniff_unsupported(head) if head else None
    if sniffed in ("jpeg", "png", "gif", "bmp", "webp"):
        return (f"extension .{extension} ({named}) but the bytes are {sniffed.upper()}: "
                f"rename it, or add '{extension}' to discovery.extensions")
    if head is None:
        evidence = (f"by its extension .{extension}; its first bytes could not be read "
                    f"({read_error})")
    elif sniffed is None:
        evidence = f"by its extension .{extension}; its bytes match no known signature"
    elif sniffed == named or (sniffed == "TIFF" and named.startswith(_RAW)) or (
            sniffed == "gzip" and extension == "svgz"):
        evidence = f".{extension}, confirmed by its bytes"
    else:
        evidence = f"by its extension .{extension}; its bytes say {sniffed}"
    return f"{named} image ({evidence}); the decoder reads {_DECODABLE} only: convert it"


def other_files_from_counts(counts: dict) -> dict:
    """{extension key: count} from the job's counts (keys `other_files.<key>`), sorted."""
    prefix = OTHER_FILES + "."
    return {key[len(prefix):]: int(value) for key, value in sorted(counts.items())
            if key.startswith(prefix) and value}


def describe_other_files(other_files: dict, limit: int = 8) -> str:
    """'12 .txt, 3 .json, 1 with no extension' (most first, then by name; past `limit`
    extensions the rest are summed), or '' when there are none."""
    ranked = sorted(other_files.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{count} " + ("with no extension" if key == NO_EXTENSION
                            else "with an odd extension" if key == _ODD_EXTENSION else f".{key}")
             for key, count in ranked[:limit]]
    rest = ranked[limit:]
    if rest:
        parts.append(f"{sum(count for _, count in rest)} of {len(rest)} other extensions")
    return ", ".join(parts)
