"""transforms.offline.paths: every unsafe kind refused with its detail, safe paths made canonical."""
import os

import pytest

from transforms.offline.paths import (
    RealPaths,
    UnsafePath,
    escapes_root,
    match_key,
    match_row_path,
    normalize_relative,
    not_a_regular_file,
    relative_to_root,
    unresolvable_links,
)


@pytest.mark.parametrize("raw, expected", [
    ("a/b.jpg", "a/b.jpg"),
    ("a/./b.jpg", "a/b.jpg"),
    ("./a.jpg", "a.jpg"),
    ("a//b.jpg", "a/b.jpg"),
    ("a/b/", "a/b"),
    ("  a/b.jpg \t", "a/b.jpg"),
    ("a/../b.jpg", "b.jpg"),
    ("a/b/../../c.jpg", "c.jpg"),
    ("a\\b.jpg", "a/b.jpg"),
    ("a\\.\\b.jpg", "a/b.jpg"),
    ("a/b:c.jpg", "a/b:c.jpg"),
    ("my photo.jpg", "my photo.jpg"),
    ("..a/b..jpg", "..a/b..jpg"),
    ("ünï/çødé.jpg", "ünï/çødé.jpg"),
])
def test_normalize_relative_makes_safe_paths_canonical(raw, expected):
    assert normalize_relative(raw) == expected


@pytest.mark.parametrize("raw, detail", [
    ("", "empty path: ''"),
    ("   ", "empty path: '   '"),
    ("/x", "absolute path: '/x'"),
    ("/data/imgs/a.jpg", "absolute path: '/data/imgs/a.jpg'"),
    ("C:\\x", "absolute path (Windows drive): 'C:\\\\x'"),
    ("c:/x", "absolute path (Windows drive): 'c:/x'"),
    ("\\\\server\\x", "absolute path: '\\\\\\\\server\\\\x'"),
    ("gs://b/x", "path has a URL scheme 'gs': 'gs://b/x'"),
    ("file:///x", "path has a URL scheme 'file': 'file:///x'"),
    ("http://example.com/x.jpg", "path has a URL scheme 'http': 'http://example.com/x.jpg'"),
    ("data:image/png;base64,AAAA", "path has a URL scheme 'data': 'data:image/png;base64,AAAA'"),
    ("../x", "path escapes the data root: '../x'"),
    ("a/../../x", "path escapes the data root: 'a/../../x'"),
    ("..\\x", "path escapes the data root: '..\\\\x'"),
    ("../root/x.jpg", "path escapes the data root: '../root/x.jpg'"),
    ("a/..", "path names the data root itself, not a file: 'a/..'"),
    (".", "path names the data root itself, not a file: '.'"),
    ("a\x00b.jpg", "path contains a NUL byte: 'a\\x00b.jpg'"),
])
def test_normalize_relative_refuses_unsafe_paths(raw, detail):
    with pytest.raises(UnsafePath) as info:
        normalize_relative(raw)
    assert str(info.value) == detail


def test_unsafe_path_is_a_value_error():
    assert issubclass(UnsafePath, ValueError)


@pytest.mark.parametrize("root, full_path, expected", [
    ("/data/imgs", "/data/imgs/a.jpg", "a.jpg"),
    ("/data/imgs/", "/data/imgs/cats/a.jpg", "cats/a.jpg"),
    ("/data/imgs", "/data/imgs//cats/./a.jpg", "cats/a.jpg"),
    ("/", "/a.jpg", "a.jpg"),
    ("gs://bucket/prefix", "gs://bucket/prefix/cats/a.jpg", "cats/a.jpg"),
    ("gs://bucket/prefix/", "gs://bucket/prefix/a.jpg", "a.jpg"),
    ("gs://bucket", "gs://bucket/a.jpg", "a.jpg"),
])
def test_relative_to_root_gives_the_part_below_the_root(root, full_path, expected):
    assert relative_to_root(root, full_path) == expected


def test_relative_to_root_accepts_a_relative_local_root():
    full_path = os.path.join(os.getcwd(), "imgs", "a.jpg")
    assert relative_to_root("imgs", full_path) == "a.jpg"


@pytest.mark.parametrize("root, full_path, detail", [
    ("/data/imgs", "/data/imgs2/a.jpg",
     "not under the data root '/data/imgs': '/data/imgs2/a.jpg'"),
    ("/data/imgs", "/data/imgs/../x.jpg",
     "not under the data root '/data/imgs': '/data/imgs/../x.jpg'"),
    ("/data/imgs", "/data/imgs", "not under the data root '/data/imgs': '/data/imgs'"),
    ("gs://bucket/prefix", "gs://bucket/prefix2/a.jpg",
     "not under the data root 'gs://bucket/prefix': 'gs://bucket/prefix2/a.jpg'"),
    ("gs://bucket/prefix", "s3://bucket/prefix/a.jpg",
     "not under the data root 'gs://bucket/prefix': 's3://bucket/prefix/a.jpg'"),
    ("/data", "gs://data/a.jpg", "not under the data root '/data': 'gs://data/a.jpg'"),
    ("gs://data", "/data/a.jpg", "not under the data root 'gs://data': '/data/a.jpg'"),
])
def test_relative_to_root_refuses_files_outside_the_root(root, full_path, detail):
    with pytest.raises(UnsafePath) as info:
        relative_to_root(root, full_path)
    assert str(info.value) == detail


@pytest.mark.parametrize("root, full_path, detail", [
    ("gs://b/p", "gs://b/p/a//x.jpg",
     "file name is not a canonical relative path ('a//x.jpg' would be read as 'a/x.jpg'), "
     "so no CSV row could name it: 'gs://b/p/a//x.jpg'"),
    ("/d", "/d/a\\b.jpg",
     "file name is not a canonical relative path ('a\\\\b.jpg' would be read as 'a/b.jpg'), "
     "so no CSV row could name it: '/d/a\\\\b.jpg'"),
    ("/d", "/d/ a.jpg",
     "file name is not a canonical relative path (' a.jpg' would be read as 'a.jpg'), "
     "so no CSV row could name it: '/d/ a.jpg'"),
    ("gs://b/p", "gs://b/p/../x.jpg",
     "file name cannot be named safely below the data root (path escapes the data root: "
     "'../x.jpg'): 'gs://b/p/../x.jpg'"),
])
def test_relative_to_root_refuses_names_a_csv_could_not_name(root, full_path, detail):
    with pytest.raises(UnsafePath) as info:
        relative_to_root(root, full_path)
    assert str(info.value) == detail


@pytest.fixture
def data_root(tmp_path):
    """A data root with one real image file, and a secret file next to (outside) the root."""
    root = tmp_path / "root"
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "a.jpg").write_bytes(b"\xff\xd8")
    secret = tmp_path / "secret.txt"
    secret.write_text("not an image")
    return root, secret


def test_escapes_root_flags_a_symlink_to_a_file_outside(data_root):
    root, secret = data_root
    link = root / "cats" / "b.jpg"
    link.symlink_to(secret)
    assert escapes_root(str(root), str(link)) == (
        f"symlink resolves outside the data root: {os.path.realpath(secret)}")


def test_escapes_root_flags_a_symlinked_folder_pointing_outside(data_root, tmp_path):
    root, _ = data_root
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "c.jpg").write_bytes(b"\xff\xd8")
    (root / "dogs").symlink_to(outside, target_is_directory=True)
    assert escapes_root(str(root), str(root / "dogs" / "c.jpg")) == (
        f"symlink resolves outside the data root: {os.path.realpath(outside / 'c.jpg')}")


def test_escapes_root_accepts_a_symlink_that_stays_inside(data_root):
    root, _ = data_root
    link = root / "alias.jpg"
    link.symlink_to(root / "cats" / "a.jpg")
    assert escapes_root(str(root), str(link)) is None


def test_escapes_root_accepts_a_plain_file(data_root):
    root, _ = data_root
    assert escapes_root(str(root), str(root / "cats" / "a.jpg")) is None


def test_escapes_root_accepts_files_under_a_symlinked_root(data_root, tmp_path):
    root, _ = data_root
    root_link = tmp_path / "root_link"
    root_link.symlink_to(root, target_is_directory=True)
    assert escapes_root(str(root_link), str(root_link / "cats" / "a.jpg")) is None


def test_escapes_root_flags_a_link_into_a_sibling_whose_name_starts_with_the_roots(
        data_root, tmp_path):
    """`root2` starts with `root`'s name but is not below it: the link escapes."""
    root, _ = data_root
    sibling = tmp_path / "root2"
    sibling.mkdir()
    (sibling / "d.jpg").write_bytes(b"\xff\xd8")
    (root / "cats" / "d.jpg").symlink_to(sibling / "d.jpg")
    assert escapes_root(str(root), str(root / "cats" / "d.jpg")) == (
        f"symlink resolves outside the data root: {os.path.realpath(sibling / 'd.jpg')}")


def test_escapes_root_accepts_every_file_below_the_file_systems_root(data_root):
    root, secret = data_root
    assert escapes_root("/", str(secret)) is None
    assert escapes_root("/", str(root / "cats" / "a.jpg")) is None


def test_escapes_root_flags_a_plain_path_outside(data_root):
    root, secret = data_root
    assert escapes_root(str(root), str(secret)) == (
        f"path is outside the data root: {os.path.realpath(secret)}")


@pytest.mark.parametrize("root, full_path", [
    ("gs://bucket/prefix", "gs://bucket/prefix/a.jpg"),
    ("gs://bucket/prefix", "gs://other/a.jpg"),
    ("/data", "gs://bucket/a.jpg"),
])
def test_escapes_root_ignores_object_store_paths(root, full_path):
    assert escapes_root(root, full_path) is None


NFC, NFD = "caf\u00e9.jpg", "cafe\u0301.jpg"


@pytest.mark.parametrize("row, discovered, expected", [
    (NFC, [NFC], (NFC, "")),
    (NFC, [NFD], (NFD, "")),  # the file keeps its on-disk name
    (NFD, [NFC], (NFC, "")),
    (NFD, [NFC, NFD], (NFD, "")),  # the exact name wins
    ("Cafe.JPG", ["cafe.jpg"], (None, "'cafe.jpg' differs only in case")),
    ("CAF\u00c9.jpg", [NFD], (None, f"{NFD!r} differs only in case and Unicode normalization")),
    ("gone.jpg", [], (None, "")),
])
def test_match_row_path_exact_then_nfc_and_names_near_misses(row, discovered, expected):
    assert match_row_path(row, discovered) == expected


def test_two_files_equal_in_nfc_are_named_by_neither_inexact_row():
    mixed = "cafe\u0301\u00e9.jpg"  # NFC: "caf\u00e9\u00e9.jpg"; NFD: two combining accents
    both = ["caf\u00e9\u00e9.jpg", "cafe\u0301e\u0301.jpg"]
    assert match_row_path(mixed, both) == (None, (
        f"{both[1]!r} and {both[0]!r} differ from it only by Unicode normalization, so it "
        f"names neither: name one exactly"))
    assert match_key(mixed) == match_key(both[0]) == match_key(both[1].upper())


def test_unresolvable_links_and_the_detail_of_each(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "ok.jpg").write_bytes(b"x")
    os.symlink(tmp_path / "ok.jpg", tmp_path / "good_link.jpg")
    os.symlink("loop.jpg", tmp_path / "sub" / "loop.jpg")
    os.symlink("nowhere", tmp_path / "gone.jpg")
    os.symlink(tmp_path / "sub", tmp_path / "folder_link")
    assert list(unresolvable_links(str(tmp_path))) == [str(tmp_path / "gone.jpg"),
                                                        str(tmp_path / "sub" / "loop.jpg")]
    assert not_a_regular_file(str(tmp_path / "sub" / "loop.jpg")) == (
        "symlink cannot be resolved: it loops (-> 'loop.jpg': Too many levels of symbolic "
        "links); never opened")
    assert not_a_regular_file(str(tmp_path / "gone.jpg")) == (
        "symlink cannot be resolved: its target 'nowhere' cannot be reached (No such file or "
        "directory); never opened")


def test_real_paths_resolve_as_realpath_does(data_root, tmp_path, monkeypatch):
    """`RealPaths` (folders remembered) gives `os.path.realpath` of plain files, links to files
    and folders inside and outside, chains, dangling links, missing names, `..` after a link
    and relative paths, and `escapes_root` with it gives the same verdicts."""
    root, secret = data_root
    outside = tmp_path / "elsewhere"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "c.jpg").write_bytes(b"\xff\xd8")
    (root / "dogs").symlink_to(outside / "deep", target_is_directory=True)
    (root / "cats" / "out.jpg").symlink_to(secret)
    (root / "cats" / "in.jpg").symlink_to(root / "cats" / "a.jpg")
    (root / "cats" / "chain.jpg").symlink_to(root / "cats" / "in.jpg")
    (root / "cats" / "dangling.jpg").symlink_to(root / "gone.jpg")
    monkeypatch.chdir(root)
    candidates = [str(root / "cats" / "a.jpg"), str(root / "cats" / "out.jpg"),
                  str(root / "cats" / "in.jpg"), str(root / "cats" / "chain.jpg"),
                  str(root / "cats" / "dangling.jpg"), str(root / "cats" / "missing.jpg"),
                  str(root / "dogs" / "c.jpg"), str(root / "dogs" / ".." / "c.jpg"),
                  str(root / "dogs" / ".." / "deep" / "c.jpg"), "cats/a.jpg", "dogs/c.jpg",
                  str(secret)]
    real_paths = RealPaths()
    for _ in range(2):  # the second time from remembered folders
        assert [real_paths.file(path) for path in candidates] == [
            os.path.realpath(path) for path in candidates]
        assert [escapes_root(str(root), path, real_paths) for path in candidates] == [
            escapes_root(str(root), path) for path in candidates]
    assert real_paths.folder(str(root / "dogs")) == os.path.realpath(outside / "deep")
