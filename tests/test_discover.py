"""DiscoverImages as a Beam step: real files in a temporary folder, exact FileRefs and rejects."""
from __future__ import annotations

import os

from tests.beamutil import assert_outputs, fn_api_pipeline
from transforms.offline.discover import DiscoverImages, FileRef, list_images, root_and_pattern
from transforms.offline.image_record import ImageRecord

EXTENSIONS = ("jpg", "png")


def _write(path, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def _ref(root, rel: str) -> FileRef:
    uri = os.path.join(str(root), rel)
    return FileRef(uri=uri, path=rel, file_bytes=os.path.getsize(uri),
                   mtime=os.path.getmtime(uri))


def test_image_files_by_extension_case_insensitively_and_links_out_of_the_root(tmp_path):
    root = tmp_path / "images"
    _write(root / "cat" / "a.jpg", b"a" * 3)
    _write(root / "cat" / "deep" / "b.PNG", b"b" * 5)
    _write(root / "notes.txt", b"not an image extension")
    outside = _write(tmp_path / "secret.jpg", b"s" * 7)
    os.symlink(outside, root / "link.jpg")
    with fn_api_pipeline() as pipeline:
        refs, rejected, _ = pipeline | DiscoverImages([str(root)], EXTENSIONS)
        assert_outputs({"refs": refs, "rejected": rejected}, {
            "refs": [_ref(root, "cat/a.jpg"), _ref(root, "cat/deep/b.PNG")],
            "rejected": [ImageRecord(uri=str(root / "link.jpg"), path="link.jpg",
                                     file_bytes=7).rejected(
                "unsafe_path", f"symlink resolves outside the data root: {outside}")]})


def test_overlapping_roots_count_a_file_once_and_a_shared_relative_path_keeps_one(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    _write(first / "cat" / "a.jpg", b"1")
    _write(first / "same.jpg", b"22")
    _write(second / "same.jpg", b"333")
    with fn_api_pipeline() as pipeline:  # `first` listed twice: its files are matched twice
        refs, rejected, _ = pipeline | DiscoverImages([str(first), str(second), str(first)],
                                                      EXTENSIONS)
        assert_outputs({"refs": refs, "rejected": rejected}, {
            "refs": [_ref(first, "cat/a.jpg"), _ref(first, "same.jpg")],
            "rejected": [ImageRecord(uri=str(second / "same.jpg"), path=str(second / "same.jpg"),
                                     file_bytes=3).rejected(
                "duplicate", f"same relative path 'same.jpg' as {first / 'same.jpg'} (kept)")]})


def test_a_folder_root_is_searched_recursively_and_a_glob_keeps_its_folder_as_the_base():
    assert root_and_pattern("/data/imgs/") == ("/data/imgs", "/data/imgs/**")
    assert root_and_pattern("/data/imgs/*/x?.jpg") == ("/data/imgs", "/data/imgs/*/x?.jpg")


def _mixed_folder(root):
    """A folder as people have it: one image, images the decoder cannot read, other files and
    links that resolve to nothing. Returns (refs, rejected, other files' extension keys)."""
    _write(root / "a.jpg", b"a")
    _write(root / "phone" / "IMG_1.HEIC", b"\0\0\0\x18ftypheic" + b"\0" * 12)
    _write(root / "scan.tif", b"II*\0" + b"\0" * 8)
    _write(root / "renamed.tiff", b"\xff\xd8\xff\xe0" + b"\0" * 8)
    _write(root / "logo.svg", b'<?xml version="1.0"?>\n<svg xmlns="x"/>')
    _write(root / "raw" / "DSC_1.NEF", b"MM\0*" + b"\0" * 8)
    _write(root / "odd.avif", b"not really")
    for name in ("notes.txt", "NOTES.TXT", "meta.json", "README", ".DS_Store"):
        _write(root / name, b"x")
    os.symlink(root / "loop.jpg", root / "loop.jpg")
    os.symlink(root / "nowhere.png", root / "dangling.png")
    os.symlink(root / "nowhere.txt", root / "dangling.txt")  # no image: counted as .txt
    os.symlink(root / "phone", root / "phone_link")  # a link to a folder: not followed

    def rejected(rel, size, reason, detail):
        return ImageRecord(uri=str(root / rel), path=rel, file_bytes=size).rejected(reason,
                                                                                   detail)
    decodes = "the decoder reads JPEG, PNG, GIF, BMP and WebP only: convert it"
    return [_ref(root, "a.jpg")], [
        rejected("phone/IMG_1.HEIC", 24, "unsupported_format",
                 f"HEIF/HEIC image (.heic, confirmed by its bytes); {decodes}"),
        rejected("scan.tif", 12, "unsupported_format",
                 f"TIFF image (.tif, confirmed by its bytes); {decodes}"),
        rejected("renamed.tiff", 12, "unsupported_format",
                 "extension .tiff (TIFF) but the bytes are JPEG: rename it, or add 'tiff' to "
                 "discovery.extensions"),
        rejected("logo.svg", 38, "unsupported_format",
                 f"SVG image (.svg, confirmed by its bytes); {decodes}"),
        rejected("raw/DSC_1.NEF", 12, "unsupported_format",
                 f"camera RAW (Nikon) image (.nef, confirmed by its bytes); {decodes}"),
        rejected("odd.avif", 10, "unsupported_format",
                 f"AVIF image (by its extension .avif; its bytes match no known signature); "
                 f"{decodes}"),
        rejected("loop.jpg", 0, "unreadable",
                 f"symlink cannot be resolved: it loops (-> {str(root / 'loop.jpg')!r}: Too "
                 f"many levels of symbolic links); never opened"),
        rejected("dangling.png", 0, "unreadable",
                 f"symlink cannot be resolved: its target {str(root / 'nowhere.png')!r} cannot "
                 f"be reached (No such file or directory); never opened"),
    ], ["txt", "txt", "txt", "json", "(none)", "(none)"]


def test_unsupported_images_and_unresolvable_links_are_rejected_and_other_files_counted(
        tmp_path):
    root = tmp_path / "images"
    refs, rejected, other = _mixed_folder(root)
    with fn_api_pipeline() as pipeline:
        found = pipeline | DiscoverImages([str(root)], EXTENSIONS)
        assert_outputs({"refs": found.refs, "rejected": found.rejected,
                        "other": found.other_files},
                       {"refs": refs, "rejected": rejected, "other": other})


def test_the_quick_listing_finds_what_the_job_finds(tmp_path):
    root = tmp_path / "images"
    refs, rejected, other = _mixed_folder(root)
    listing = list_images([str(root)], EXTENSIONS, None)
    assert listing.refs == refs
    assert sorted(listing.rejected, key=lambda r: r.path) == sorted(rejected,
                                                                    key=lambda r: r.path)
    assert listing.other_files == {"(none)": 2, "json": 1, "txt": 3}


def test_a_configured_extension_is_read_even_when_the_decoder_cannot_read_it(tmp_path):
    root = tmp_path / "images"
    _write(root / "scan.tif", b"II*\0")
    listing = list_images([str(root)], ("jpg", "tif"), None)
    assert listing.refs == [_ref(root, "scan.tif")] and listing.rejected == []


def test_a_glob_root_lists_only_the_unresolvable_links_it_matches(tmp_path):
    root = tmp_path / "images"
    os.makedirs(root / "cats")
    os.symlink(root / "x", root / "cats" / "gone.jpg")
    os.symlink(root / "y", root / "gone.jpg")
    listing = list_images([str(root / "cats" / "*.jpg")], EXTENSIONS, None)
    assert [r.uri for r in listing.rejected] == [str(root / "cats" / "gone.jpg")]


def test_a_link_listed_by_both_listings_is_listed_once_as_the_dangling_link(tmp_path,
                                                                          monkeypatch):
    """Beam's match drops a link that resolves to nothing and `unresolved_listing` finds it;
    when its target appears between the two listings both hold it: it is listed once, as the
    dangling link (size 0), and every other file once."""
    from apache_beam.io.filesystem import FileMetadata

    from transforms.offline import discover
    root = tmp_path / "images"
    _write(root / "a.jpg", b"\xff\xd8")
    os.symlink(root / "missing", root / "late.jpg")
    base, pattern = root_and_pattern(str(root))
    raced = [FileMetadata(str(root / "a.jpg"), 2), FileMetadata(str(root / "late.jpg"), 9)]
    monkeypatch.setattr(discover.file_reads, "match", lambda _pattern: raced)
    listed = discover.list_root(base, pattern)
    assert sorted((m.path, m.size_in_bytes) for m in listed) == [
        (str(root / "a.jpg"), 2), (str(root / "late.jpg"), 0)]
