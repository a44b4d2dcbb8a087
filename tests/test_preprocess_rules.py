"""The offline job's rules, each with its own case, on a hand-built dataset (one job run)."""
from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest

from tests.imageutil import photo, write_image
from tests.jobutil import index_rows, read_records, rejects, run_job
from tests.tiers import slow_fixture
from transforms import codec


def _image(seed: int, height: int = 96, width: int = 128) -> np.ndarray:
    return photo(seed, height, width, class_index=seed % 3)


def _save(root, rel: str, array: np.ndarray, fmt: str) -> None:
    write_image(os.path.join(root, rel), array, fmt)


def _png_bomb_header(width: int, height: int) -> bytes:
    """A tiny PNG that declares width x height: a decoder would try to allocate it all."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    body = zlib.compress(b"\x00" * 64)
    idat = b"IDAT" + body
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk +
            struct.pack(">I", zlib.crc32(chunk)) + struct.pack(">I", len(body)) + idat +
            struct.pack(">I", zlib.crc32(idat)) + b"\x00\x00\x00\x00IEND\xaeB`\x82")


@slow_fixture(scope="module")
def dataset(tmp_path_factory):
    base = tmp_path_factory.mktemp("rules")
    root = str(base / "images")
    outside = base / "outside.jpg"
    _save(str(base), "outside.jpg", _image(99), "JPEG")
    _save(root, "a/ok_jpeg.jpg", _image(1), "JPEG")
    _save(root, "a/upper_ext.JPG", _image(2), "JPEG")
    _save(root, "a/ok_gif.gif", _image(3), "GIF")
    _save(root, "a/ok_bmp.bmp", _image(4), "BMP")
    _save(root, "a/ok_webp.webp", _image(5), "WEBP")
    _save(root, "a/ok_png.png", _image(6), "PNG")
    _save(root, "a/conflict.jpg", _image(7), "JPEG")
    _save(root, "a/split_conflict.jpg", _image(8), "JPEG")
    _save(root, "a/explicit_test.jpg", _image(9), "JPEG")
    _save(root, "a/wide.jpg", _image(10, 40, 400), "JPEG")
    _save(root, "a/meta.jpg", _image(11), "JPEG")
    glare = np.random.default_rng(0).integers(231, 256, (96, 128, 1)).astype(np.uint8)
    _save(root, "a/bright.png", np.repeat(glare, 3, axis=2), "PNG")  # textured but glaring
    os.makedirs(os.path.join(root, "b"), exist_ok=True)
    with open(os.path.join(root, "b/bomb.png"), "wb") as handle:
        handle.write(_png_bomb_header(60000, 60000))
    os.symlink(outside, os.path.join(root, "b/link_out.jpg"))
    with open(os.path.join(root, "notes.txt"), "w") as handle:
        handle.write("not an image extension: never discovered")
    labels = base / "labels.csv"
    labels.write_text(
        "path,label,split,source\n"
        "a/ok_jpeg.jpg,cat,,cam1\n"
        "a/upper_ext.JPG,cat,,cam1\n"
        "a/ok_gif.gif,dog,,cam1\n"
        "a/ok_bmp.bmp,dog,,cam1\n"
        "a/ok_webp.webp,cat,,cam1\n"
        "a/ok_png.png,dog,,cam1\n"
        "a/conflict.jpg,cat,,cam1\n"
        "a/split_conflict.jpg,cat,train,cam1\n"
        "a/explicit_test.jpg,dog,test,cam1\n"
        "a/wide.jpg,dog,,cam1\n"
        "a/meta.jpg,cat,,cam7\n"
        "a/bright.png,cat,,cam1\n"
        "b/bomb.png,cat,,cam1\n"
        "b/link_out.jpg,cat,,cam1\n"
        "/etc/passwd,cat,,cam1\n"
        "../outside.jpg,cat,,cam1\n"
        "gs://bucket/x.jpg,cat,,cam1\n"
        "a/too,many,fields,here,now\n")
    labels2 = base / "labels2.csv"
    labels2.write_text(
        "path,label,split,source\n"
        "a/conflict.jpg,dog,,cam2\n"
        "a/split_conflict.jpg,cat,validation,cam2\n"
        "a/ok_jpeg.jpg,cat,,cam1\n")
    snapshot = run_job(root, base / "out", labels=[labels, labels2],
                       sets=["quality.enabled=true"])
    return {"root": root, "snapshot": snapshot, "rows": index_rows(snapshot),
            "rejects": rejects(snapshot), "records": read_records(snapshot)}


def _outcome(dataset, rel):
    row = dataset["rows"][rel]
    return "accepted" if row["accepted"] else row["reason"], row["detail"]


@pytest.mark.parametrize("rel", ["a/ok_jpeg.jpg", "a/ok_gif.gif", "a/ok_bmp.bmp",
                                 "a/ok_webp.webp", "a/ok_png.png"])
def test_each_supported_format_is_accepted_with_its_magic_format(dataset, rel):
    assert _outcome(dataset, rel)[0] == "accepted"
    expected = {"jpg": "jpeg", "gif": "gif", "bmp": "bmp", "webp": "webp", "png": "png"}
    assert dataset["rows"][rel]["format"] == expected[rel.rsplit(".", 1)[1]]


def test_extensions_match_case_insensitively(dataset):
    assert _outcome(dataset, "a/upper_ext.JPG")[0] == "accepted"


def test_files_without_an_image_extension_are_not_discovered(dataset):
    assert "notes.txt" not in dataset["rows"]


def test_header_bomb_is_too_large_without_decoding(dataset):
    reason, detail = _outcome(dataset, "b/bomb.png")
    assert reason == "too_large"
    assert "60000x60000" in detail
    assert dataset["rows"]["b/bomb.png"]["phash"] is None  # never decoded


def test_symlink_out_of_the_root_is_unsafe_and_never_opened(dataset):
    reason, detail = _outcome(dataset, "b/link_out.jpg")
    assert reason == "unsafe_path"
    assert "outside the data root" in detail
    assert dataset["rows"]["b/link_out.jpg"]["sha256"] == ""


@pytest.mark.parametrize("raw", ["/etc/passwd", "../outside.jpg", "gs://bucket/x.jpg"])
def test_unsafe_csv_paths_are_rejected_rows(dataset, raw):
    lines = [r for r in dataset["rejects"] if r["kind"] == "label_row" and r["path"] == raw]
    assert [r["reason"] for r in lines] == ["unsafe_path"]


def test_unparseable_csv_row_names_file_and_line_and_the_rest_is_read(dataset):
    bad = [r for r in dataset["rejects"] if r["reason"] == "bad_csv_row"]
    assert len(bad) == 1
    assert "labels.csv" in bad[0]["detail"] and "line 19" in bad[0]["detail"]


def test_two_labels_for_one_image_is_a_conflict(dataset):
    reason, detail = _outcome(dataset, "a/conflict.jpg")
    assert reason == "label_conflict"
    assert "cat" in detail and "dog" in detail


def test_two_splits_for_one_image_is_a_conflict(dataset):
    assert _outcome(dataset, "a/split_conflict.jpg")[0] == "label_conflict"


def test_repeated_identical_rows_are_not_a_conflict(dataset):
    assert _outcome(dataset, "a/ok_jpeg.jpg")[0] == "accepted"


def test_csv_split_column_is_honoured(dataset):
    assert dataset["rows"]["a/explicit_test.jpg"]["split"] == "test"


def test_extreme_aspect_ratio_is_rejected(dataset):
    reason, detail = _outcome(dataset, "a/wide.jpg")
    assert reason == "bad_aspect_ratio"
    assert "400x40" in detail


def test_glaring_image_is_too_bright(dataset):
    assert _outcome(dataset, "a/bright.png")[0] == "too_bright"


def test_extra_csv_columns_ride_along_as_meta(dataset):
    records = {r[codec.IMAGE_FILENAME].numpy().decode(): r for r in dataset["records"]}
    import tensorflow as tf
    meta = tf.io.parse_single_example(
        codec.encode_example(encoded=b"", image_format="jpeg", height=1, width=1, filename="x",
                             sha256="0", label=0, label_text="x", meta={"source": "s"}),
        codec.feature_spec(meta_columns=("source",)))
    assert meta[codec.META_PREFIX + "source"].numpy() == b"s"
    assert "a/meta.jpg" in records


def test_meta_value_is_in_the_written_record(dataset):
    import tensorflow as tf

    from tests.jobutil import shard_files
    for serialized in tf.data.TFRecordDataset(shard_files(dataset["snapshot"])):
        parsed = tf.io.parse_single_example(serialized, codec.feature_spec(
            meta_columns=("source",)))
        if parsed[codec.IMAGE_FILENAME].numpy() == b"a/meta.jpg":
            assert parsed[codec.META_PREFIX + "source"].numpy() == b"cam7"
            return
    pytest.fail("a/meta.jpg not found in the shards")


def test_every_discovered_file_and_row_is_accounted_for(dataset):
    accounting = dataset["snapshot"].accounting
    assert accounting["ok"]
    assert accounting["images"]["discovered"] == 14
    rows = accounting["label_rows"]
    assert rows == {"total": 21, "matched": 17, "rejected": 4, "ok": True}
