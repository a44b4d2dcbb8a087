"""TFT analysis: exact pixel-weighted mean/std, class frequencies and weights, size quantiles,
the fixed class ids, and the transform's image against decode/resize/normalize done by hand.

One analysis (module fixture) over 12 tiny images; the class table comes in as a singleton
PCollection, as inside the offline job.
"""
from __future__ import annotations

import io
import json
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from PIL import Image

from runners.demo.data import photo_like
from tests.beamutil import beam_pipeline
from tests.tiers import slow_fixture
from transforms import codec
from transforms.decode import decode_for_model, decode_image, pick_jpeg_ratio
from transforms.offline import tft_analysis as ta
from transforms.offline import tft_graph as tg
from transforms.offline.image_record import ImageRecord
from transforms.offline.index_table import make_row
from transforms.offline.outputs import WriteJson
from transforms.offline.tft_assets import class_frequencies_file

CLASS_TABLE = ["cat", "dog", "bird", "fish"]       # fish: in the table, no image
LABELS = ["cat"] * 6 + ["dog"] * 4 + ["bird"] * 2
WIDTHS = [32, 33, 35, 36, 38, 40, 41, 42, 44, 45, 47, 48]
HEIGHTS = [48, 34, 45, 39, 32, 46, 37, 43, 33, 47, 40, 36]
UNMEASURED = 11          # this image has no channel moments: no pixel weight
IMAGE_SIZE = (16, 20)
QUANTILE_BUCKETS = 4


def _encode(pixels: np.ndarray, index: int) -> tuple[bytes, str]:
    """JPEG for even indices, PNG for odd ones, grey PNG for index 3."""
    buffer = io.BytesIO()
    if index % 2 == 0:
        Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
        return buffer.getvalue(), "jpeg"
    image = Image.fromarray(pixels)
    if index == 3:
        image = image.convert("L")
    image.save(buffer, "PNG")
    return buffer.getvalue(), "png"


def _moments(encoded: bytes) -> tuple:
    pixels = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"), np.float64) / 255.0
    means = pixels.reshape(-1, 3).mean(axis=0)
    square_means = (pixels.reshape(-1, 3) ** 2).mean(axis=0)
    return tuple(float(v) for v in means) + tuple(float(v) for v in square_means)


@slow_fixture(scope="module")
def analyzed(tmp_path_factory):
    rng = np.random.default_rng(7)
    records, encoded_images = [], []
    for index, (label, width, height) in enumerate(zip(LABELS, WIDTHS, HEIGHTS)):
        pixels = photo_like(rng, height, width, CLASS_TABLE.index(label))
        encoded, image_format = _encode(pixels, index)
        moments = () if index == UNMEASURED else _moments(encoded)
        records.append(ImageRecord(
            uri=f"/data/{index}.img", path=f"{index}.img", file_bytes=len(encoded),
            sha256=f"{index:064x}", format=image_format, width=width, height=height, moments=moments, label=label,
            label_id=CLASS_TABLE.index(label), split="train"))
        encoded_images.append(encoded)
    output_dir = str(tmp_path_factory.mktemp("transform"))
    job_summary_path = os.path.join(str(tmp_path_factory.mktemp("summary")), "summary.json")
    with beam_pipeline() as pipeline:
        class_table = pipeline | "ClassTable" >> beam.Create([list(CLASS_TABLE)])
        _ = (pipeline
             | "Accepted" >> beam.Create(records)
             | "Analyze" >> ta.AnalyzeAndWriteTransform(
                 output_dir, class_table, IMAGE_SIZE,
                 size_quantiles=QUANTILE_BUCKETS)
             | "WriteSummary" >> WriteJson(job_summary_path))
    return {"dir": output_dir, "records": records, "encoded": encoded_images,
            "summary": tg.tft_summary(output_dir),
            "job_summary": json.load(open(job_summary_path, encoding="utf-8"))}


def _expected_mean_std(records) -> tuple[np.ndarray, np.ndarray]:
    """By hand: per-image float32 sums w*h*mean_c, totals in float64, weighted by w*h."""
    count, sums, square_sums = 0, np.zeros(3), np.zeros(3)
    for record in records:
        if not record.moments:
            continue
        pixels = record.width * record.height
        count += pixels
        sums += np.asarray([pixels * m for m in record.moments[:3]], np.float32)
        square_sums += np.asarray([pixels * m for m in record.moments[3:]], np.float32)
    mean = sums / count
    std = np.sqrt(square_sums / count - mean ** 2)
    return mean.astype(np.float32), std.astype(np.float32)


def test_transform_files_written(analyzed):
    assert os.path.isfile(os.path.join(analyzed["dir"], "transform_fn", "saved_model.pb"))
    assert os.path.isfile(os.path.join(analyzed["dir"], "transformed_metadata", "schema.pbtxt"))
    spec = tft.TFTransformOutput(analyzed["dir"]).transformed_feature_spec()
    assert spec[ta.IMAGE] == tf.io.FixedLenFeature([16, 20, 3], tf.float32)
    assert spec[ta.LABEL] == tf.io.FixedLenFeature([], tf.int64)


def test_the_jobs_summary_is_what_the_written_transform_says(analyzed):
    # stats.json takes the summary from the analysis (`job_summary`), not from loading the
    # transform back: every number, bit for bit, and the classes, counts and weights.
    assert analyzed["job_summary"] == analyzed["summary"]
    assert analyzed["summary"]["pixel_stats"]["images"] == len(LABELS) - 1  # one unmeasured


def test_pixel_mean_std_weighted_by_pixel_count(analyzed):
    mean, std = _expected_mean_std(analyzed["records"])
    stats = analyzed["summary"]["pixel_stats"]
    np.testing.assert_allclose(stats["mean"], mean, rtol=1e-6)
    np.testing.assert_allclose(stats["std"], std, rtol=1e-6)
    measured = [r for r in analyzed["records"] if r.moments]
    assert stats["images"] == 11
    assert stats["pixel_count"] == sum(r.width * r.height for r in measured)
    assert (stats["scale"], stats["weighting"]) == ("0-1", "pixels")


def test_pixel_mean_is_not_the_unweighted_mean_of_images(analyzed):
    # The weighting matters on this data: a plain average of per-image means is different.
    plain = np.mean([r.moments[:3] for r in analyzed["records"] if r.moments], axis=0)
    assert np.max(np.abs(np.asarray(analyzed["summary"]["pixel_stats"]["mean"]) - plain)) > 1e-4


def test_read_normalization_returns_the_transform_numbers(analyzed):
    mean, std = tg.read_normalization(analyzed["dir"])
    assert mean == analyzed["summary"]["pixel_stats"]["mean"]
    assert std == analyzed["summary"]["pixel_stats"]["std"]


def test_class_frequencies_and_balanced_weights(analyzed):
    summary = analyzed["summary"]
    assert summary["images"] == 12
    assert summary["classes"] == [
        {"id": 0, "name": "cat", "count": 6, "weight": pytest.approx(12 / (3 * 6))},
        {"id": 1, "name": "dog", "count": 4, "weight": pytest.approx(12 / (3 * 4))},
        {"id": 2, "name": "bird", "count": 2, "weight": pytest.approx(12 / (3 * 2))},
        {"id": 3, "name": "fish", "count": 0, "weight": None},
    ]
    assert summary["class_weights_by_id"] == [pytest.approx(2 / 3), pytest.approx(1.0),
                                              pytest.approx(2.0), None]
    assert summary["labels_outside_table"] == {}


def test_labels_outside_the_table_are_counted_apart_and_weigh_nothing():
    from transforms.offline import tft_outputs as to
    constants = {to.STATS_IMAGES: [5], to.STATS_MEASURED: [5], to.STATS_PIXELS: [50],
                 to.STATS_PIXEL_MEAN: [0.5] * 3, to.STATS_PIXEL_STD: [0.25] * 3,
                 to.STATS_WIDTH_QUANTILES: [4.0], to.STATS_HEIGHT_QUANTILES: [3.0]}
    summary = to.summary_of(constants, ["cat", "dog", "cow"],
                            {"zebra": 1, "dog": 2, "ant": 1, "cat": 1})
    assert summary["labels_outside_table"] == {"ant": 1, "zebra": 1}
    assert [(c["name"], c["count"], c["weight"]) for c in summary["classes"]] == [
        ("cat", 1, 5 / 2), ("dog", 2, 5 / 4), ("cow", 0, None)]


def test_class_frequencies_file_is_the_one_tft_vocabulary_writes(analyzed):
    """The frequencies asset is `tft.vocabulary(store_frequency=True)`'s file byte for byte:
    count descending, ties by label bytes descending, one dummy entry for no row."""
    path = os.path.join(analyzed["dir"], "transform_fn", "assets", ta.CLASS_FREQUENCIES)
    with open(path, "rb") as handle:
        assert handle.read() == b"6 cat\n4 dog\n2 bird\n"
    counts = {"b": 3, "a": 3, "c": 1, "\u00e9t\u00e9": 2, "z z": 3}
    encoded = {label.encode("utf-8"): n for label, n in counts.items()}
    assert class_frequencies_file(encoded) == "3 z z\n3 b\n3 a\n2 \u00e9t\u00e9\n1 c\n".encode()
    assert class_frequencies_file({}) == b"1 49d0cd50-04bb-48c0-bc6f-5b575dce351a\n"

    def with_tft(labels):
        def preprocessing_fn(inputs):
            tft.vocabulary(inputs["s"], vocab_filename="v", store_frequency=True)
            return {"s": inputs["s"]}
        temp = str(analyzed["dir"]) + f"_tft_vocabulary_{len(labels)}"
        metadata = tft.DatasetMetadata.from_feature_spec({"s": tf.io.FixedLenFeature([], tf.string)})
        with beam_pipeline() as pipeline:
            rows = pipeline | beam.Create([{"s": label.encode("utf-8")} for label in labels],
                                          reshuffle=False)
            with tft_beam.Context(temp_dir=temp + "/tmp"):
                _ = ((rows, metadata) | tft_beam.AnalyzeDataset(preprocessing_fn)
                     | tft_beam.WriteTransformFn(temp))
        with open(tft.TFTransformOutput(temp).vocabulary_file_by_name("v"), "rb") as handle:
            return handle.read()

    labels = [label for label, n in counts.items() for _ in range(n)]
    assert with_tft(labels) == class_frequencies_file(encoded)


def test_size_quantiles_are_order_statistics(analyzed):
    quantiles = analyzed["summary"]["size_quantiles"]
    assert quantiles["num_buckets"] == QUANTILE_BUCKETS
    # 12 values, 4 buckets: boundaries at sorted positions 3, 6 and 9.
    assert quantiles["width"] == [float(sorted(WIDTHS)[i]) for i in (3, 6, 9)]
    assert quantiles["height"] == [float(sorted(HEIGHTS)[i]) for i in (3, 6, 9)]


def test_class_ids_come_from_the_fixed_table(analyzed):
    output = tft.TFTransformOutput(analyzed["dir"])
    assert [n.decode() for n in output.vocabulary_by_name(ta.CLASS_TABLE_ASSET)] == CLASS_TABLE
    png = analyzed["encoded"][1]
    texts = [b"bird", b"fish", b"cat", b"zebra", b"dog"]
    transformed = output.transform_features_layer()({
        codec.IMAGE_ENCODED: tf.constant([png] * len(texts)),
        codec.CLASS_TEXT: tf.constant(texts)})
    # A frequency-ordered vocabulary would give cat 0, dog 1, bird 2: bird is 2 here only
    # because the table says so, and fish (no image) keeps 3.
    assert transformed[ta.LABEL].numpy().tolist() == [2, 3, 0, -1, 1]


def test_transform_image_equals_decode_resize_normalize_by_hand(analyzed):
    mean, std = _expected_mean_std(analyzed["records"])
    transformed = tft.TFTransformOutput(analyzed["dir"]).transform_features_layer()(
        {codec.IMAGE_ENCODED: tf.constant(analyzed["encoded"])})
    assert ta.LABEL not in transformed          # no class text fed: no label
    images = transformed[ta.IMAGE].numpy()
    assert images.shape == (12, 16, 20, 3)
    for index, (record, encoded) in enumerate(zip(analyzed["records"], analyzed["encoded"])):
        ratio = pick_jpeg_ratio(record.width, record.height, min(IMAGE_SIZE))
        if record.format == "jpeg":
            assert ratio == 2                   # the DCT-scaled decode is exercised
        decoded = decode_image(tf.constant(encoded), jpeg_ratio=ratio)
        expected = (tf.image.resize(decoded, IMAGE_SIZE).numpy() / 255.0 - mean) / std
        np.testing.assert_allclose(images[index], expected, atol=1e-5, err_msg=record.path)


def test_decode_for_model_matches_the_jpeg_scaled_decoder(analyzed):
    record, encoded = analyzed["records"][0], analyzed["encoded"][0]
    image = decode_for_model(tf.constant(encoded), IMAGE_SIZE).numpy()
    scaled = decode_image(tf.constant(encoded), jpeg_ratio=2)
    assert scaled.shape[:2] == (record.height // 2, record.width // 2)
    np.testing.assert_array_equal(image, tf.image.resize(scaled, IMAGE_SIZE).numpy() / 255.0)


def test_raw_features_from_record():
    record = ImageRecord(uri="/d/a.png", path="a.png", file_bytes=10, width=4, height=5,
                         moments=(0.5, 0.25, 0.125, 0.3, 0.1, 0.05), label="dog")
    raw = ta.raw_features(record)
    assert raw[codec.IMAGE_ENCODED] == b""      # analysis never ships or decodes pixels
    assert raw[codec.CLASS_TEXT] == b"dog"
    assert (raw[ta.PIXEL_COUNT], raw[ta.WIDTH], raw[ta.HEIGHT]) == (20, 4, 5)
    np.testing.assert_array_equal(raw[ta.CHANNEL_SUM], np.float32([10.0, 5.0, 2.5]))
    np.testing.assert_array_equal(raw[ta.CHANNEL_SQSUM], np.float32([6.0, 2.0, 1.0]))


def test_raw_features_from_index_row_equal_those_from_record():
    record = ImageRecord(uri="/d/a.png", path="a.png", file_bytes=10, width=4, height=5,
                         moments=(0.5, 0.25, 0.125, 0.3, 0.1, 0.05), label="dog")
    row = make_row(path="a.png", accepted=True, label="dog", width=4, height=5, mean_r=0.5,
                   mean_g=0.25, mean_b=0.125, sqmean_r=0.3, sqmean_g=0.1, sqmean_b=0.05)
    from_row, from_record = ta.raw_features(row), ta.raw_features(record)
    assert sorted(from_row) == sorted(from_record)
    for key in from_row:
        np.testing.assert_array_equal(from_row[key], from_record[key])


def test_raw_features_without_moments_have_no_pixel_weight():
    record = ImageRecord(uri="/d/a.png", path="a.png", file_bytes=10, width=4, height=5, label="dog")
    raw = ta.raw_features(record)
    assert raw[ta.PIXEL_COUNT] == 0
    np.testing.assert_array_equal(raw[ta.CHANNEL_SUM], np.zeros(3, np.float32))


def test_raw_features_refuse_a_rejected_record():
    record = ImageRecord(uri="/d/a.png", path="a.png", file_bytes=10, width=4, height=5,
                         label="dog").rejected("blurry", "too blurry")
    with pytest.raises(ValueError, match="Only accepted images.*'a.png'"):
        ta.raw_features(record)


def test_raw_features_refuse_an_unlabelled_record():
    record = ImageRecord(uri="/d/a.png", path="a.png", file_bytes=10, width=4, height=5)
    with pytest.raises(ValueError, match="needs a label.*label=None"):
        ta.raw_features(record)


def _step(class_table, image_size=16, **options):
    return ta.AnalyzeAndWriteTransform("out", class_table, image_size, **options)


def test_class_table_with_duplicates_is_refused():
    with pytest.raises(ValueError, match=r"lists \['cat'\] more than once"):
        _step(["cat", "dog", "cat"])


def test_empty_class_table_is_refused():
    with pytest.raises(ValueError, match="at least one class"):
        _step([])


def test_bad_image_size_is_refused():
    with pytest.raises(ValueError, match=r"image_size must be.*Received: image_size=\(16, 0\)"):
        _step(["cat"], (16, 0))


def test_bad_size_quantiles_is_refused():
    with pytest.raises(ValueError, match="size_quantiles must be an int in \\[2, 1000\\]"):
        _step(["cat"], size_quantiles=1)


def test_input_specs_are_those_of_tfxs_example_source():
    # The specs the transform is traced with, built without tfx_bsl's Beam source, are the
    # ones that source gives (TFT's own path): the same traced graph, the same bytes.
    from tfx_bsl.public import tfxio
    source = tfxio.TFExampleBeamRecord("inmem", ["pixelmill"], tg.raw_metadata().schema)
    expected = tfxio.TensorAdapter(source.TensorAdapterConfig()).OriginalTypeSpecs()
    assert tg._input_specs() == expected
    assert sorted(expected) == sorted(tg.RAW_FEATURE_SPEC)
