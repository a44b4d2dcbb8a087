"""DiscoverImages as a Beam step: real files in a temporary folder, exact FileRefs and rejects."""
from __future__ import annotations

import os

from tests.beamutil import assert_outputs, fn_api_pipeline
from transforms.offline.discover import DiscoverImages, FileRef, root_and_pattern
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
        refs, rejected = pipeline | DiscoverImages([str(root)], EXTENSIONS)
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
        refs, rejected = pipeline | DiscoverImages([str(first), str(second), str(first)],
                                                   EXTENSIONS)
        assert_outputs({"refs": refs, "rejected": rejected}, {
            "refs": [_ref(first, "cat/a.jpg"), _ref(first, "same.jpg")],
            "rejected": [ImageRecord(uri=str(second / "same.jpg"), path=str(second / "same.jpg"),
                                     file_bytes=3).rejected(
                "duplicate", f"same relative path 'same.jpg' as {first / 'same.jpg'} (kept)")]})


def test_a_folder_root_is_searched_recursively_and_a_glob_keeps_its_folder_as_the_base():
    assert root_and_pattern("/data/imgs/") == ("/data/imgs", "/data/imgs/**")
    assert root_and_pattern("/data/imgs/*/x?.jpg") == ("/data/imgs", "/data/imgs/*/x?.jpg")
