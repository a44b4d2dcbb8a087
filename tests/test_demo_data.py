"""Tests for runners.demo.data: the demo dataset's files and its promised outcomes, checked
against the rules that can be applied directly (TF decode, quality verdict, sizes, hashes), and
the benchmark corpus."""
from __future__ import annotations

import csv
import itertools
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from configs.schema import DedupConfig, LimitsConfig, QualityConfig
from runners.demo import data as demo_data
from tests.tiers import shared_fixture
from transforms.decode import decode_image, pick_jpeg_ratio
from transforms.offline import image_hash, quality

_MAGIC = {b"\xff\xd8\xff": "jpeg", b"\x89PNG\r\n\x1a\n": "png", b"GIF87a": "gif",
          b"GIF89a": "gif", b"BM": "bmp", b"RIFF": "webp"}

# The bad inputs, by name, and what the job must make of each.
_BAD_INPUTS = {
    "cat/bad_box_inverted.jpg": "bad_box",
    "cat/decode_error_truncated.jpg": "decode_error",
    "dog/unknown_format_zero_bytes.jpg": "unknown_format",
    "bird/unknown_format_text.jpg": "unknown_format",
    "fish/low_information_blank.png": "low_information",
    "cat/too_dark.jpg": "too_dark",
    "dog/blurry.jpg": "blurry",
    "cat/duplicate_of_cat_000.jpg": "duplicate",
    "dog/near_duplicate_of_dog_001.jpg": "near_duplicate",
    "fish/unlabeled_no_csv_row.jpg": "unlabeled",
    "bird/unknown_class_zebra.jpg": "unknown_class",
    "dog/png_named_jpg.jpg": "accepted",
    "fish/too_small_16x16.png": "too_small",
}
# Files that reach the quality filter and pass it (they are rejected later, or not at all).
_PASS_QUALITY = ("accepted", "bad_box", "duplicate", "near_duplicate", "unlabeled",
                 "unknown_class")


def _format(data: bytes) -> str | None:
    return next((fmt for magic, fmt in _MAGIC.items() if data.startswith(magic)), None)


def _read(dataset, rel: str) -> bytes:
    with open(os.path.join(dataset.root, *rel.split("/")), "rb") as handle:
        return handle.read()


def _analysis_copy(data: bytes, analysis_size: int = QualityConfig().analysis_size):
    """What the offline job measures: DCT-scaled decode, then the small copy."""
    full = decode_image(data).numpy()
    height, width = full.shape[:2]
    ratio = pick_jpeg_ratio(width, height, analysis_size, side="long")
    return full, quality.small_copy(decode_image(data, jpeg_ratio=ratio).numpy(), analysis_size)


def _rows(path: str) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@shared_fixture(scope="module")
def demo(tmp_path_factory):
    return demo_data.generate_demo(str(tmp_path_factory.mktemp("demo")), seed=0)


@shared_fixture(scope="module")
def analysed(demo):
    """rel -> (full decode, analysis copy) for every file the TF decoder accepts."""
    out = {}
    for rel, outcome in demo.expected.items():
        if outcome in _PASS_QUALITY + ("low_information", "too_dark", "blurry", "too_small"):
            out[rel] = _analysis_copy(_read(demo, rel))
    return out


# ---------------------------------------------------------------- layout

def test_demo_layout_paths(demo):
    data_dir = os.path.dirname(demo.labels_csv)
    assert demo.root == os.path.join(data_dir, "images")
    assert demo.classes_txt == os.path.join(data_dir, "classes.txt")
    assert demo.boxes_csv == os.path.join(data_dir, "boxes.csv")


def test_demo_expected_lists_exactly_the_files_on_disk(demo):
    on_disk = {os.path.relpath(os.path.join(folder, name), demo.root).replace(os.sep, "/")
               for folder, _, names in os.walk(demo.root) for name in names}
    assert on_disk == set(demo.expected)


def test_demo_has_twelve_accepted_images_per_class_plus_the_png_named_jpg(demo):
    accepted = sorted(rel for rel, outcome in demo.expected.items() if outcome == "accepted")
    assert len(accepted) == 4 * 12 + 1
    for name in demo_data.DEMO_CLASSES:
        assert sum(rel.startswith(f"{name}/{name}_") for rel in accepted) == 12


def test_demo_has_each_bad_input_with_its_reason(demo):
    assert {rel: demo.expected[rel] for rel in _BAD_INPUTS} == _BAD_INPUTS


def test_demo_classes_txt_lists_the_four_classes(demo):
    with open(demo.classes_txt, encoding="utf-8") as handle:
        assert handle.read() == "cat\ndog\nbird\nfish\n"


def test_demo_mixes_jpeg_and_png_of_varied_sizes(demo, analysed):
    formats = {_format(_read(demo, rel)) for rel, o in demo.expected.items() if o == "accepted"}
    assert formats == {"jpeg", "png"}
    sizes = {analysed[rel][0].shape[:2] for rel, o in demo.expected.items() if o == "accepted"}
    assert len(sizes) > 40
    assert min(min(size) for size in sizes) >= 96 and max(max(size) for size in sizes) <= 640


# ---------------------------------------------------------------- labels.csv

def test_demo_labels_csv_columns(demo):
    with open(demo.labels_csv, encoding="utf-8") as handle:
        assert handle.readline() == "path,label,split,source,confidence\n"


def test_demo_every_file_but_the_unlabeled_one_has_one_label_row(demo):
    labelled = [row["path"] for row in _rows(demo.labels_csv)]
    assert len(labelled) == len(set(labelled))
    on_disk_rows = {path for path in labelled if path in demo.expected}
    assert set(demo.expected) - on_disk_rows == {"fish/unlabeled_no_csv_row.jpg"}


def test_demo_labels_match_folders_except_the_unknown_class(demo):
    for row in _rows(demo.labels_csv):
        if row["path"] == "bird/unknown_class_zebra.jpg":
            assert row["label"] == "zebra"
        else:
            assert row["label"] == row["path"].split("/")[0]


def test_demo_csv_expected_rows(demo):
    assert demo.csv_expected == {"bird/unknown_class_zebra.jpg": "unknown_class",
                                 "bird/missing_file_not_on_disk.jpg": "missing_file"}
    assert not os.path.exists(os.path.join(demo.root, "bird", "missing_file_not_on_disk.jpg"))
    with open(demo.classes_txt, encoding="utf-8") as handle:
        assert "zebra" not in handle.read().split()


def test_demo_split_is_mostly_empty_with_a_few_explicit(demo):
    splits = [row["split"] for row in _rows(demo.labels_csv)]
    explicit = [split for split in splits if split]
    assert sorted(explicit) == ["test", "train", "validation"]
    assert all(row["source"] in ("camera", "web") and 0.6 <= float(row["confidence"]) <= 1.0
               for row in _rows(demo.labels_csv))


# ---------------------------------------------------------------- boxes.csv

def test_demo_boxes_are_inside_accepted_images_except_the_inverted_one(demo, analysed):
    rows = _rows(demo.boxes_csv)
    assert list(rows[0]) == ["path", "xmin", "ymin", "xmax", "ymax", "label"]
    inverted = [row for row in rows if int(row["xmin"]) >= int(row["xmax"])]
    assert [row["path"] for row in inverted] == ["cat/bad_box_inverted.jpg"]
    good = [row for row in rows if row not in inverted]
    assert len(good) >= 3
    for row in good:
        assert demo.expected[row["path"]] == "accepted"
        height, width = analysed[row["path"]][0].shape[:2]
        assert 0 <= int(row["xmin"]) < int(row["xmax"]) <= width
        assert 0 <= int(row["ymin"]) < int(row["ymax"]) <= height
        assert row["label"] in demo_data.DEMO_CLASSES


# ---------------------------------------------------------------- outcomes, rule by rule

def test_demo_images_that_should_pass_quality_pass_it_with_the_default_config(demo, analysed):
    config, limits = QualityConfig(), LimitsConfig()
    for rel, outcome in demo.expected.items():
        if outcome in _PASS_QUALITY:
            full, small = analysed[rel]
            assert quality.judge(quality.measure(small), config) is None, rel
            assert min(full.shape[:2]) >= limits.min_side, rel


@pytest.mark.parametrize("rel, reason", [
    ("fish/low_information_blank.png", "low_information"),
    ("cat/too_dark.jpg", "too_dark"),
    ("dog/blurry.jpg", "blurry"),
])
def test_demo_quality_rejects_trip_exactly_their_rule(demo, analysed, rel, reason):
    assert quality.judge(quality.measure(analysed[rel][1]), QualityConfig())[0] == reason


def test_demo_dark_image_is_dark_not_flat(analysed):
    metrics = quality.measure(analysed["cat/too_dark.jpg"][1])
    config = QualityConfig()
    assert metrics["contrast_std"] >= config.min_std + 2
    assert metrics["entropy"] >= config.min_entropy + 1
    assert metrics["brightness_p99"] <= config.dark_p99_max - 4


def test_demo_blurry_image_is_only_blurry(analysed):
    config = dict(dark_p99_max=None, bright_p01_min=None, min_std=None, min_entropy=None)
    others_off = QualityConfig(**config, blur_fine_min=None, blur_ratio_min=None)
    metrics = quality.measure(analysed["dog/blurry.jpg"][1])
    assert quality.judge(metrics, others_off) is None
    assert quality.judge(metrics, QualityConfig(**config))[0] == "blurry"


def test_demo_truncated_jpeg_is_a_jpeg_the_decoder_rejects(demo):
    data = _read(demo, "cat/decode_error_truncated.jpg")
    assert _format(data) == "jpeg" and not data.endswith(b"\xff\xd9")
    with pytest.raises(tf.errors.InvalidArgumentError):
        decode_image(data)


def test_demo_unknown_format_files_have_no_known_magic(demo):
    assert _read(demo, "dog/unknown_format_zero_bytes.jpg") == b""
    assert _format(_read(demo, "bird/unknown_format_text.jpg")) is None


def test_demo_png_named_jpg_is_png_by_magic_bytes(demo, analysed):
    assert _format(_read(demo, "dog/png_named_jpg.jpg")) == "png"
    assert analysed["dog/png_named_jpg.jpg"][0].ndim == 3


def test_demo_tiny_image_is_below_min_side(analysed):
    assert analysed["fish/too_small_16x16.png"][0].shape == (16, 16, 3)
    assert 16 < LimitsConfig().min_side


def test_demo_exact_duplicate_is_the_same_bytes_under_a_higher_path(demo):
    assert _read(demo, "cat/duplicate_of_cat_000.jpg") == _read(demo, "cat/cat_000.jpg")
    assert "cat/cat_000.jpg" < "cat/duplicate_of_cat_000.jpg"
    assert demo.expected["cat/cat_000.jpg"] == "accepted"


def test_demo_near_duplicate_is_close_in_phash_smaller_and_higher_path(demo, analysed):
    original, near = "dog/dog_001.jpg", "dog/near_duplicate_of_dog_001.jpg"
    assert _read(demo, original) != _read(demo, near)
    distance = image_hash.hamming(quality.perceptual_hash(analysed[original][1]),
                               quality.perceptual_hash(analysed[near][1]))
    assert distance <= DedupConfig().max_hamming
    assert analysed[near][0].size < analysed[original][0].size and original < near


def test_demo_no_other_pair_is_a_near_duplicate(demo, analysed):
    hashes = {rel: quality.perceptual_hash(analysed[rel][1])
              for rel, outcome in demo.expected.items()
              if outcome in _PASS_QUALITY and outcome not in ("duplicate", "near_duplicate")}
    distances = {(a, b): image_hash.hamming(hashes[a], hashes[b])
                 for a, b in itertools.combinations(sorted(hashes), 2)}
    assert min(distances.values()) > 10


def test_demo_same_seed_same_bytes_other_seed_other_images(tmp_path):
    first = demo_data.generate_demo(str(tmp_path / "a"), seed=5, images_per_class=4)
    second = demo_data.generate_demo(str(tmp_path / "b"), seed=5, images_per_class=4)
    third = demo_data.generate_demo(str(tmp_path / "c"), seed=6, images_per_class=4)
    assert first.expected == second.expected == third.expected
    for rel in first.expected:
        assert _read(first, rel) == _read(second, rel), rel
    assert _read(first, "cat/cat_000.jpg") != _read(third, "cat/cat_000.jpg")
    with open(first.labels_csv, "rb") as a, open(second.labels_csv, "rb") as b:
        assert a.read() == b.read()


def test_demo_needs_at_least_four_images_per_class(tmp_path):
    with pytest.raises(ValueError, match="images_per_class=3"):
        demo_data.generate_demo(str(tmp_path), images_per_class=3)


# ---------------------------------------------------------------- photo_like

@pytest.mark.parametrize("height, width, class_index", [
    (96, 96, 0), (240, 500, 1), (640, 200, 2), (400, 400, 3), (300, 300, 11)])
def test_photo_like_is_sharp_bright_enough_and_varied(height, width, class_index):
    image = demo_data.photo_like(np.random.default_rng(class_index), height, width, class_index)
    assert image.shape == (height, width, 3) and image.dtype == np.uint8
    metrics = quality.measure(quality.small_copy(image, 256))
    assert quality.judge(metrics, QualityConfig()) is None
    assert metrics["entropy"] > 6.0
    assert metrics["blur_fine_share"] > 2 * QualityConfig().blur_fine_min


def test_photo_like_same_seed_same_image():
    first = demo_data.photo_like(np.random.default_rng(3), 50, 70, 2)
    second = demo_data.photo_like(np.random.default_rng(3), 50, 70, 2)
    np.testing.assert_array_equal(first, second)


def test_photo_like_rejects_empty_size():
    with pytest.raises(ValueError, match="height=0"):
        demo_data.photo_like(np.random.default_rng(0), 0, 10, 0)


# ---------------------------------------------------------------- corpus

@shared_fixture(scope="module")
def corpus(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("corpus"))
    return directory, demo_data.generate_corpus(directory, 40, seed=1)


def test_corpus_writes_forty_images_in_class_folders(corpus):
    directory, paths = corpus
    assert len(paths) == len(set(paths)) == 40
    assert all(os.path.isfile(path) for path in paths)
    folders = {os.path.basename(os.path.dirname(path)) for path in paths}
    assert folders == set(demo_data.DEMO_CLASSES)


def test_corpus_formats_match_extensions_with_five_percent_png(corpus):
    _, paths = corpus
    formats = []
    for path in paths:
        with open(path, "rb") as handle:
            formats.append(_format(handle.read(8)))
        assert formats[-1] == {".jpg": "jpeg", ".png": "png"}[os.path.splitext(path)[1]]
    assert formats.count("png") == 2 and formats.count("jpeg") == 38


def test_corpus_jpegs_vary_in_quality_and_some_are_progressive(corpus):
    _, paths = corpus
    progressive, qualities = [], set()
    for path in paths:
        with Image.open(path) as image:
            if image.format == "JPEG":
                progressive.append(bool(image.info.get("progressive")))
                qualities.add(image.quantization[0][0])  # DC step: grows as quality drops
    assert 0 < sum(progressive) < len(progressive) / 2
    assert len(qualities) >= 5


def test_corpus_sides_are_between_320_and_1024(corpus):
    _, paths = corpus
    for path in paths:
        with Image.open(path) as image:
            assert all(320 <= side <= 1024 for side in image.size), (path, image.size)


def test_corpus_labels_csv_names_every_image_by_relative_path(corpus):
    directory, paths = corpus
    rows = _rows(os.path.join(directory, "labels.csv"))
    assert [os.path.join(directory, *row["path"].split("/")) for row in rows] == paths
    assert all(row["label"] == row["path"].split("/")[0] for row in rows)


def test_corpus_images_pass_quality_and_are_not_near_duplicates(corpus):
    _, paths = corpus
    hashes = []
    for path in paths[:12]:
        with Image.open(path) as image:
            small = quality.small_copy(np.asarray(image.convert("RGB")), 256)
        assert quality.judge(quality.measure(small), QualityConfig()) is None, path
        hashes.append(quality.perceptual_hash(small))
    assert min(image_hash.hamming(a, b) for a, b in itertools.combinations(hashes, 2)) > 10


@pytest.mark.parametrize("kwargs, message", [
    ({"n_images": -1}, "n_images=-1"),
    ({"n_images": 4, "png_fraction": 1.5}, "png_fraction=1.5"),
])
def test_corpus_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        demo_data.generate_corpus(str(tmp_path), **kwargs)


def test_a_canvas_set_drawn_again_from_the_same_state_is_the_first_draw(monkeypatch):
    """`photo_canvases` keeps a set per generator state: drawing it again returns the same
    pixels, read-only, and leaves the generator where the first draw left it; a set drawn
    with nothing kept (a fresh process) is the same too."""
    monkeypatch.setattr(demo_data, "_CANVAS_SETS", {})
    first_rng, again_rng = np.random.default_rng(5), np.random.default_rng(5)
    first = demo_data.photo_canvases(first_rng, 2, 48)
    again = demo_data.photo_canvases(again_rng, 2, 48)
    assert len(demo_data._CANVAS_SETS) == 1
    assert first_rng.bit_generator.state == again_rng.bit_generator.state
    assert first_rng.random() == again_rng.random()
    monkeypatch.setattr(demo_data, "_CANVAS_SETS", {})
    fresh = demo_data.photo_canvases(np.random.default_rng(5), 2, 48)
    for a, b, c in zip(first, again, fresh, strict=True):
        assert a.shape == (48, 48, 3) and np.array_equal(a, b) and np.array_equal(a, c)
        with pytest.raises(ValueError, match="read-only"):
            b[0, 0, 0] = 0
    other = demo_data.photo_canvases(np.random.default_rng(6), 2, 48)
    assert not np.array_equal(other[0], first[0])


def test_canvas_sets_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(demo_data, "_CANVAS_SETS", {})
    for seed in range(demo_data._CANVAS_SETS_KEPT + 2):
        demo_data.photo_canvases(np.random.default_rng(seed), 1, 16)
    assert len(demo_data._CANVAS_SETS) == demo_data._CANVAS_SETS_KEPT
