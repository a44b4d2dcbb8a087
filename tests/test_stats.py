"""transforms.reporting.stats: exact counts, exact weighted pixel stats, fixed-bin histograms,
deterministic reject examples, order-independent combining (of rows, or of summaries made a
part at a time), finalize_stats and the TFDV proto."""
import json
import math
import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import BeamAssertException

from tests.beamutil import assert_that, fn_api_pipeline, merged_in_parts
from transforms.codec import QUALITY_METRICS
from transforms.offline.index_table import make_row
from transforms.reporting.index_summary import packed_summary
from transforms.reporting.stats import (
    HISTOGRAM_EDGES,
    MergeIndexSummariesFn,
    SummarizeIndexFn,
    finalize_stats,
)
from transforms.reporting.stats_proto import to_statistics_proto


def _accepted(path, split, label, width, height, *, image_format="jpeg", size=1000, boxes=0,
              means=(0.5, 0.5, 0.5), sqmeans=(0.3, 0.3, 0.3), **quality):
    return make_row(
        path=path, sha256="f" * 64, format=image_format, width=width, height=height,
        bytes=size, accepted=True, detail="", label=label, split=split,
        num_boxes=boxes, mean_r=means[0], mean_g=means[1], mean_b=means[2],
        sqmean_r=sqmeans[0], sqmean_g=sqmeans[1], sqmean_b=sqmeans[2],
        **{f"quality_{name}": value for name, value in quality.items()})


def _rejected(path, reason, size=100, **quality):
    return make_row(path=path, sha256="e" * 64, bytes=size, reason=reason, accepted=False,
                    detail="why", **{f"quality_{name}": value for name, value in quality.items()})


# Weights (w*h): 5000, 20000, 2500; sum 27500.
ROWS = [
    _accepted("train/cat1.jpg", "train", "cat", 100, 50, size=1000, boxes=2,
              means=(0.5, 0.25, 0.75), sqmeans=(0.3, 0.1, 0.6), blur_laplacian_var=100.0,
              entropy=7.0),
    _accepted("train/cat2.png", "train", "cat", 200, 100, image_format="png", size=3000,
              means=(0.2, 0.5, 0.5), sqmeans=(0.05, 0.3, 0.3), blur_laplacian_var=300.0,
              entropy=6.0),
    _accepted("val/dog.jpg", "validation", "dog", 50, 50, size=500, boxes=1,
              means=(0.4, 0.0, 1.0), sqmeans=(0.2, 0.0, 1.0), blur_laplacian_var=50.0,
              entropy=5.0),
    _rejected("z.jpg", "decode_error", size=10),
    _rejected("b.jpg", "decode_error", size=10),
    _rejected("y.jpg", "decode_error", size=10),
    _rejected("a.jpg", "decode_error", size=10),
    _rejected("d.jpg", "decode_error", size=10),
    _rejected("c.jpg", "decode_error", size=10),
    _rejected("blur.jpg", "blurry", size=40, blur_laplacian_var=3.0, entropy=4.0),
]

EXPECTED_MEAN = [(5000 * 0.5 + 20000 * 0.2 + 2500 * 0.4) / 27500,
                 (5000 * 0.25 + 20000 * 0.5 + 2500 * 0.0) / 27500,
                 (5000 * 0.75 + 20000 * 0.5 + 2500 * 1.0) / 27500]
EXPECTED_SQUARE_MEAN = [(5000 * 0.3 + 20000 * 0.05 + 2500 * 0.2) / 27500,
                        (5000 * 0.1 + 20000 * 0.3 + 2500 * 0.0) / 27500,
                        (5000 * 0.6 + 20000 * 0.3 + 2500 * 1.0) / 27500]
EXPECTED_STD = [math.sqrt(s - m * m) for s, m in zip(EXPECTED_SQUARE_MEAN, EXPECTED_MEAN)]


def _combine(rows):
    fn = SummarizeIndexFn()
    accumulator = fn.create_accumulator()
    for row in rows:
        accumulator = fn.add_input(accumulator, row)
    return fn.extract_output(accumulator)


def _bins(name, *occupied):
    counts = [0] * (len(HISTOGRAM_EDGES[name]) - 1)
    for index in occupied:
        counts[index] += 1
    return counts


def test_summarize_in_beam_pipeline_gives_exact_counts_pixel_stats_and_examples():
    def check(outputs):
        if len(outputs) != 1:
            raise BeamAssertException(f"expected one summary, got {len(outputs)}")
        stats = outputs[0]
        expected = {
            "images": {"discovered": 10, "accepted": 3, "rejected": 7},
            "by_split": {"train": 2, "validation": 1, "test": 0},
            "by_reason": {"decode_error": 6, "blurry": 1},
            "reject_examples": {"decode_error": ["a.jpg", "b.jpg", "c.jpg", "d.jpg", "y.jpg"],
                                "blurry": ["blur.jpg"]},
        }
        for key, value in expected.items():
            if stats[key] != value:
                raise BeamAssertException(f"{key}: expected {value}, got {stats[key]}")
        if stats["size"]["width"]["histogram"]["counts"] != _bins("width", 1, 2, 3):
            raise BeamAssertException(f"width histogram: {stats['size']['width']['histogram']}")
        for channel in range(3):
            for key, expected_values in (("mean", EXPECTED_MEAN), ("std", EXPECTED_STD)):
                got = stats["pixel_stats"][key][channel]
                if abs(got - expected_values[channel]) > 1e-9:
                    raise BeamAssertException(
                        f"pixel {key}[{channel}]: expected {expected_values[channel]}, got {got}")

    with fn_api_pipeline() as pipeline:
        summary = (pipeline
                   | beam.Create(ROWS, reshuffle=False)
                   | beam.CombineGlobally(SummarizeIndexFn()))
        assert_that(summary, check)


def test_image_counts_and_bytes():
    stats = _combine(ROWS)
    assert stats["images"] == {"discovered": 10, "accepted": 3, "rejected": 7}
    assert stats["bytes"] == {"discovered": 1000 + 3000 + 500 + 6 * 10 + 40,
                              "accepted": 4500}


def test_by_split_always_has_the_three_splits():
    stats = _combine([ROWS[0]])
    assert stats["by_split"] == {"train": 1, "validation": 0, "test": 0}
    assert stats["by_split_class"] == {"train": {"cat": 1}, "validation": {}, "test": {}}


def test_by_split_class_counts():
    stats = _combine(ROWS)
    assert stats["by_split_class"] == {"train": {"cat": 2}, "validation": {"dog": 1}, "test": {}}


def test_accepted_row_without_label_counts_as_none_class():
    stats = _combine([_accepted("x.jpg", "test", None, 64, 64)])
    assert stats["by_split_class"]["test"] == {"(none)": 1}


def test_reject_examples_keep_five_smallest_paths_in_order():
    stats = _combine(ROWS)
    assert stats["reject_examples"]["decode_error"] == ["a.jpg", "b.jpg", "c.jpg", "d.jpg",
                                                        "y.jpg"]
    assert stats["by_reason"] == {"blurry": 1, "decode_error": 6}


def test_formats_and_boxes_count_accepted_only():
    stats = _combine(ROWS)
    assert stats["formats"] == {"jpeg": 2, "png": 1}
    assert stats["boxes"] == {"images_with_boxes": 2, "boxes": 3}


def test_size_summary_is_exact():
    width = _combine(ROWS)["size"]["width"]
    assert (width["count"], width["min"], width["max"]) == (3, 50, 200)
    assert width["mean"] == pytest.approx(350 / 3, abs=1e-12)
    assert width["std"] == pytest.approx(math.sqrt((100**2 + 200**2 + 50**2) / 3 - (350 / 3)**2),
                                         abs=1e-12)
    assert width["histogram"] == {"edges": list(HISTOGRAM_EDGES["width"]),
                                  "counts": _bins("width", 1, 2, 3)}


def test_megapixels_summary():
    megapixels = _combine(ROWS)["size"]["megapixels"]
    assert (megapixels["min"], megapixels["max"]) == (0.0025, 0.02)
    # edges 0, 0.01, 0.05, ...: 0.005 and 0.0025 in bin 0, 0.02 in bin 1
    assert megapixels["histogram"]["counts"] == _bins("megapixels", 0, 0, 1)


def test_quality_counts_accepted_and_quality_all_counts_every_decoded_image():
    stats = _combine(ROWS)
    assert stats["quality"]["blur_laplacian_var"]["count"] == 3
    assert stats["quality"]["blur_laplacian_var"]["min"] == 50.0
    assert stats["quality_all"]["blur_laplacian_var"]["count"] == 4
    assert stats["quality_all"]["blur_laplacian_var"]["min"] == 3.0
    # edges 0, 5, 10, 25, 50, 100, 250, 500: 3 -> 0, 50 -> 4, 100 -> 5, 300 -> 6
    assert stats["quality_all"]["blur_laplacian_var"]["histogram"]["counts"] == _bins(
        "blur_laplacian_var", 0, 4, 5, 6)
    assert stats["quality"]["blur_laplacian_var"]["histogram"]["counts"] == _bins(
        "blur_laplacian_var", 4, 5, 6)


def test_metric_never_measured_has_empty_summary():
    summary = _combine(ROWS)["quality"]["brightness_mean"]
    assert summary == {
        "count": 0, "min": None, "max": None, "mean": None, "std": None, "zeros": 0,
        "non_finite": 0, "histogram": {"edges": list(HISTOGRAM_EDGES["brightness_mean"]),
                                       "counts": _bins("brightness_mean")}}


def test_histogram_puts_out_of_range_values_in_end_bins_and_right_edge_in_last_bin():
    rows = [_accepted(f"{v}.jpg", "train", "c", 64, 64, brightness_mean=v)
            for v in (-5.0, 0.0, 15.999, 16.0, 256.0, 1000.0)]
    counts = _combine(rows)["quality"]["brightness_mean"]["histogram"]["counts"]
    assert counts == _bins("brightness_mean", 0, 0, 0, 1, 15, 15)


def test_non_finite_metric_is_counted_apart():
    rows = [_accepted("a.jpg", "train", "c", 64, 64, entropy=float("nan")),
            _accepted("b.jpg", "train", "c", 64, 64, entropy=0.0)]
    entropy = _combine(rows)["quality"]["entropy"]
    assert (entropy["count"], entropy["non_finite"], entropy["zeros"]) == (1, 1, 1)
    assert entropy["mean"] == 0.0


def test_pixel_stats_are_weighted_by_original_pixels():
    pixel = _combine(ROWS)["pixel_stats"]
    assert pixel["mean"] == pytest.approx(EXPECTED_MEAN, abs=1e-9)
    assert pixel["std"] == pytest.approx(EXPECTED_STD, abs=1e-9)
    assert (pixel["scale"], pixel["weighting"], pixel["images"]) == ("0-1", "pixels", 3)


def test_pixel_stats_of_flat_images_never_go_negative():
    rows = [_accepted("a.jpg", "train", "c", 64, 64, means=(0.1, 0.1, 0.1),
                      sqmeans=(0.1 * 0.1 * (1 - 1e-15),) * 3)]
    assert _combine(rows)["pixel_stats"]["std"] == [0.0, 0.0, 0.0]


def test_pixel_stats_without_accepted_images_are_none():
    pixel = _combine([ROWS[-1]])["pixel_stats"]
    assert pixel["mean"] == [None, None, None]
    assert pixel["images"] == 0


def test_unknown_reject_reason_is_an_error():
    with pytest.raises(ValueError, match="Unknown reject reason.*reason='fuzzy'"):
        _combine([_rejected("x.jpg", "fuzzy")])


def test_accepted_row_without_split_is_an_error():
    row = make_row(path="x.jpg", accepted=True, split="", width=8, height=8)
    with pytest.raises(ValueError, match="names no split"):
        _combine([row])


def test_combining_in_different_orders_gives_identical_output():
    # Values whose float sum depends on order: (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3).
    rows = list(ROWS) + [
        _accepted(f"t{i}.jpg", "test", f"class{i % 3}", 64 + i, 64, brightness_mean=value,
                  means=(value, 0.2, 0.3), sqmeans=(value * value + 0.01, 0.05, 0.1))
        for i, value in enumerate((0.1, 0.2, 0.3, 1e16, -1e16, 0.7))]
    fn = SummarizeIndexFn()

    def partial(chunk):
        accumulator = fn.create_accumulator()
        for row in chunk:
            accumulator = fn.add_input(accumulator, row)
        return pickle.loads(pickle.dumps(accumulator))  # as Beam ships it between workers

    forward = fn.extract_output(fn.merge_accumulators(
        [partial(rows[:5]), partial(rows[5:11]), partial(rows[11:])]))
    order = np.random.default_rng(7).permutation(len(rows))
    shuffled = [rows[i] for i in order]
    backward = fn.extract_output(fn.merge_accumulators(
        [partial(shuffled[9:]), partial(shuffled[:2]), fn.create_accumulator(),
         partial(shuffled[2:9])]))
    assert forward == backward
    assert json.dumps(forward) == json.dumps(backward)
    assert forward == _combine(rows)


def _odd_rows(count: int) -> list:
    """Rows with every kind of value a column can hold: None, NaN, infinities, -0.0, ints,
    subnormals, huge values; accepted in four splits and rejected."""
    odd = (None, math.nan, math.inf, -math.inf, 0.0, -0.0, 0, 3, 1e17, 5e-324, -1.5, 0.1)
    rows = []
    for i in range(count):
        quality = {name: odd[(i + k) % len(odd)] if (i + k) % 3 == 0 else (i * 7 + k) / 9
                   for k, name in enumerate(QUALITY_METRICS)}
        width, height = (None, 0, 64, 4000)[i % 4], (48, None, 480)[i % 3]
        if i % 5 == 0:
            rows.append(_rejected(f"r{i % 11}.jpg", ("decode_error", "blurry")[i % 2],
                                  size=None if i % 3 else 7, **quality))
        else:
            rows.append(_accepted(
                f"a{i}.jpg", ("train", "validation", "test", "extra")[i % 4],
                (None, "cat", "dog")[i % 3], width, height, boxes=i % 3, size=i,
                image_format=("jpeg", "", None)[i % 3],
                means=(odd[i % len(odd)] if i % 4 == 0 else 0.5, 0.25, i / 97),
                sqmeans=(0.3, odd[(i + 1) % len(odd)] if i % 6 == 0 else 0.1, i / 89), **quality))
    return rows


@pytest.mark.parametrize("cuts", [(), (3, 5, 6, 21, 40)])
def test_batched_rows_pickled_and_merged_mid_batch_give_the_one_by_one_result(cuts, monkeypatch):
    # Rows wait in the accumulator and are added a batch at a time; a batch of 1 is adding
    # them one by one. Cuts fall inside batches of 4, and each part is pickled before merging.
    rows = _odd_rows(50)
    monkeypatch.setattr("transforms.reporting.stats._ROW_BATCH", 1)
    one_by_one = _combine(rows)
    monkeypatch.setattr("transforms.reporting.stats._ROW_BATCH", 4)
    fn = SummarizeIndexFn()
    batched = fn.extract_output(merged_in_parts(fn, rows, cuts))
    assert json.dumps(batched) == json.dumps(one_by_one)
    assert one_by_one["quality_all"][QUALITY_METRICS[0]]["non_finite"] > 0


@pytest.mark.parametrize("cuts", [(), (1, 7, 8, 30)])
def test_summaries_made_a_part_at_a_time_merge_into_the_one_by_one_result(cuts, monkeypatch):
    # What the job does: each shard's writer summarizes its rows (`packed_summary`), the
    # rejected rows are summarized a batch at a time, and the summaries are merged, in any
    # order, with parts merged mid-way pickled as a runner ships them.
    rows = _odd_rows(50)
    monkeypatch.setattr("transforms.reporting.stats._ROW_BATCH", 1)
    one_by_one = _combine(rows)
    bounds = list(zip((0, *cuts), (*cuts, len(rows))))
    packed = [packed_summary(rows[start:end]) for start, end in bounds][::-1]
    fn = MergeIndexSummariesFn()
    merged = fn.extract_output(merged_in_parts(fn, packed, (1,)))
    assert json.dumps(merged) == json.dumps(one_by_one)
    assert fn.extract_output(fn.create_accumulator()) == _combine([])


def test_a_parts_summary_checks_its_rows():
    with pytest.raises(ValueError, match="Unknown reject reason"):
        packed_summary([ROWS[0], _rejected("x.jpg", "not_a_reason")])


def test_exact_sum_makes_mean_correctly_rounded():
    rows = [_accepted(f"{v}.jpg", "train", "c", 64, 64, brightness_mean=v)
            for v in (0.3, 0.2, 0.1)]
    assert _combine(rows)["quality"]["brightness_mean"]["mean"] == 0.2


def test_output_keys_are_sorted_at_every_level():
    stats = _combine(ROWS)
    assert list(stats) == sorted(stats)
    assert list(stats["by_split"]) == ["test", "train", "validation"]
    assert list(stats["size"]["width"]) == sorted(stats["size"]["width"])


def test_histogram_edges_cover_every_summarized_value_and_increase():
    assert set(HISTOGRAM_EDGES) == {"width", "height", "megapixels", *QUALITY_METRICS}
    for name, edges in HISTOGRAM_EDGES.items():
        assert all(a < b for a, b in zip(edges, edges[1:])), name


def _accounting(ok=True):
    return {"images": {"discovered": 10, "accepted": 3, "rejected": 7, "ok": ok},
            "label_rows": {"total": 4, "matched": 3, "rejected": 1, "ok": True},
            "box_rows": {"total": 0, "matched": 0, "rejected": 0, "ok": True}, "ok": ok}


def test_finalize_stats_adds_rejects_by_kind_and_accounting():
    summary = _combine(ROWS)
    stats = finalize_stats(summary, {"image": {"decode_error": 6, "blurry": 1},
                                     "label_row": {"unknown_class": 1}}, _accounting())
    assert stats["rejects_by_kind"] == {"image": {"blurry": 1, "decode_error": 6},
                                        "label_row": {"unknown_class": 1}, "box_row": {}}
    assert stats["accounting"] == _accounting()
    assert stats["images"] == summary["images"]
    assert "accounting" not in summary


def test_finalize_stats_rejects_unknown_kind():
    with pytest.raises(ValueError, match="Unknown reject kinds \\['csv_row'\\]"):
        finalize_stats(_combine(ROWS), {"csv_row": {}}, _accounting())


def test_finalize_stats_rejects_unknown_reason():
    with pytest.raises(ValueError, match="Unknown reject reasons \\['fuzzy'\\] for kind 'image'"):
        finalize_stats(_combine(ROWS), {"image": {"fuzzy": 1}}, _accounting())


def test_finalize_stats_requires_boolean_ok():
    with pytest.raises(ValueError, match="boolean 'ok'. Received: 'yes'"):
        finalize_stats(_combine(ROWS), {}, {"ok": "yes"})


def _feature(dataset, name):
    (feature,) = [f for f in dataset.features if list(f.path.step) == [name]]
    return feature


def test_statistics_proto_has_one_dataset_per_split_with_num_examples():
    proto = to_statistics_proto(_combine(ROWS))
    assert [(d.name, d.num_examples) for d in proto.datasets] == [
        ("train", 2), ("validation", 1), ("test", 0)]


def test_statistics_proto_numeric_feature_matches_split():
    train = to_statistics_proto(_combine(ROWS)).datasets[0]
    width = _feature(train, "image/width").num_stats
    assert (width.mean, width.min, width.max, width.std_dev) == (150.0, 100.0, 200.0, 50.0)
    assert width.common_stats.num_non_missing == 2
    assert [b.sample_count for b in width.histograms[0].buckets] == _bins("width", 2, 3)
    blur = _feature(train, "quality/blur_laplacian_var").num_stats
    assert blur.mean == 200.0


def test_statistics_proto_counts_missing_metric_values():
    train = to_statistics_proto(_combine(ROWS)).datasets[0]
    brightness = _feature(train, "quality/brightness_mean").num_stats
    assert (brightness.common_stats.num_non_missing, brightness.common_stats.num_missing) == (0, 2)


def test_statistics_proto_end_buckets_widen_to_observed_range():
    rows = [_accepted("big.jpg", "train", "c", 20000, 64)]
    width = _feature(to_statistics_proto(_combine(rows)).datasets[0], "image/width").num_stats
    assert width.histograms[0].buckets[-1].high_value == 20000.0
    assert width.histograms[0].buckets[-1].sample_count == 1


def test_statistics_proto_label_feature_has_ranked_top_values():
    rows = [_accepted(f"{i}.jpg", "train", label, 64, 64)
            for i, label in enumerate(["dog", "cat", "cat", "bird", "dog", "cat"])]
    label = _feature(to_statistics_proto(_combine(rows)).datasets[0], "image/class/text")
    strings = label.string_stats
    assert [(v.value, v.frequency) for v in strings.top_values] == [
        ("cat", 3.0), ("dog", 2.0), ("bird", 1.0)]
    assert [(b.low_rank, b.label, b.sample_count) for b in strings.rank_histogram.buckets] == [
        (0, "cat", 3.0), (1, "dog", 2.0), (2, "bird", 1.0)]
    assert strings.unique == 3
    assert strings.avg_length == pytest.approx((3 * 3 + 2 * 3 + 4) / 6)
