"""TFDV-style statistics in TFX's layout: `Split-<split>/FeatureStats.pb`, one
DatasetFeatureStatisticsList per split with one dataset, every feature of the records."""
from __future__ import annotations

import itertools
import json
import os
import pickle
import statistics

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import statistics_pb2

from tests.jobutil import read_records, shard_files
from transforms import codec
from transforms.reporting.feature_stats import FeatureStatsFn, record_features, to_statistics_list
from transforms.snapshot_layout import feature_stats_name

_FEATURE = statistics_pb2.FeatureNameStatistics
HEIGHTS = [10, 11, 11, 13, 17, 20, 40]


def _example(index: int, height: int) -> bytes:
    boxes = [(0.1 * k, 0.1, 0.5, 0.5) for k in range(index % 3)]
    return codec.encode_example(
        encoded=b"\xff\xd8" + bytes(10 * index), image_format="jpeg", height=height, width=8,
        filename=f"a/{index}.jpg", sha256=f"{index:064x}", label=index % 2,
        label_text=("cat", "dog")[index % 2], boxes=boxes, box_labels=[0] * len(boxes),
        box_texts=["cat"] * len(boxes), quality={"brightness_mean": 0.5 * index},
        meta={"source": "web" if index < 5 else "cam"})


def _combine(parts) -> statistics_pb2.DatasetFeatureStatistics:
    """The combiner run the way a runner may: accumulators per part, pickled, then merged."""
    fn = FeatureStatsFn()
    accumulators = []
    for part in parts:
        accumulator = fn.create_accumulator()
        for index in part:
            accumulator = fn.add_input(accumulator, record_features(_example(index,
                                                                             HEIGHTS[index])))
        accumulators.append(pickle.loads(pickle.dumps(accumulator)))
    return fn.extract_output(fn.merge_accumulators(accumulators))


def _feature(dataset, key: str):
    (found,) = [f for f in dataset.features if f.path.step == [key]]
    return found


def test_numeric_feature_has_exact_moments_median_and_both_histograms():
    height = _feature(_combine([range(7)]), codec.IMAGE_HEIGHT)
    assert height.type == _FEATURE.INT
    numbers = height.num_stats
    assert numbers.mean == pytest.approx(np.mean(HEIGHTS))
    assert numbers.std_dev == pytest.approx(np.std(HEIGHTS))
    assert (numbers.min, numbers.median, numbers.max) == (10, statistics.median(HEIGHTS), 40)
    assert numbers.common_stats.num_non_missing == 7
    standard, quantiles = numbers.histograms
    assert standard.type == statistics_pb2.Histogram.STANDARD
    # edges 10, 13, ..., 40: [10, 13) holds 10, 11, 11; then 13; 17; 20; and 40 in the last
    assert [b.sample_count for b in standard.buckets] == [3, 1, 1, 1, 0, 0, 0, 0, 0, 1]
    assert (standard.buckets[0].low_value, standard.buckets[-1].high_value) == (10, 40)
    assert quantiles.type == statistics_pb2.Histogram.QUANTILES
    assert len(quantiles.buckets) == 10
    assert sum(b.sample_count for b in quantiles.buckets) == pytest.approx(7)
    assert quantiles.buckets[0].low_value == 10 and quantiles.buckets[-1].high_value == 40


def test_strings_bytes_and_lists():
    dataset = _combine([range(7)])
    source = _feature(dataset, "meta/source")
    assert source.type == _FEATURE.STRING
    assert [(v.value, v.frequency) for v in source.string_stats.top_values] == [("web", 5),
                                                                              ("cam", 2)]
    assert source.string_stats.unique == 2 and source.string_stats.avg_length == 3
    image = _feature(dataset, codec.IMAGE_ENCODED)
    assert image.type == _FEATURE.BYTES  # not UTF-8: only lengths and a count of distinct values
    assert image.bytes_stats.unique == 7
    assert (image.bytes_stats.min_num_bytes, image.bytes_stats.max_num_bytes) == (2, 62)
    xmin = _feature(dataset, codec.BBOX_XMIN).num_stats.common_stats
    assert (xmin.num_non_missing, xmin.min_num_values, xmin.max_num_values,
            xmin.tot_num_values) == (7, 0, 2, 6)


def test_statistics_do_not_depend_on_how_the_work_was_split():
    whole = _combine([range(7)]).SerializeToString(deterministic=True)
    for cut in itertools.combinations(range(1, 7), 2):
        parts = [range(0, cut[0]), range(cut[0], cut[1]), range(cut[1], 7)]
        assert _combine(parts).SerializeToString(deterministic=True) == whole


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_statistics_do_not_depend_on_how_distinct_values_are_batched(batch, monkeypatch):
    whole = _combine([range(7)]).SerializeToString(deterministic=True)
    monkeypatch.setattr("transforms.reporting.feature_stats._KMV_BATCH", batch)
    assert _combine([range(7)]).SerializeToString(deterministic=True) == whole
    assert _combine([range(3), range(3, 7)]).SerializeToString(deterministic=True) == whole


def test_to_statistics_list_holds_one_named_dataset():
    listed = to_statistics_list("validation", _combine([range(3)]))
    assert [d.name for d in listed.datasets] == ["validation"]
    assert listed.datasets[0].num_examples == 3


def test_snapshot_has_tfx_layout_statistics_for_every_feature(demo_snapshot):
    manifest = json.load(open(os.path.join(demo_snapshot.path, "manifest.json")))
    listed = {entry["path"] for entry in manifest["files"]}
    keys = set()
    for serialized in tf.data.TFRecordDataset(shard_files(demo_snapshot)).as_numpy_iterator():
        keys |= set(tf.train.Example.FromString(serialized).features.feature)
    records = read_records(demo_snapshot)
    for split, count in manifest["splits"].items():
        path = feature_stats_name(split)
        assert path == f"Split-{split}/FeatureStats.pb" and path in listed
        with open(os.path.join(demo_snapshot.path, path), "rb") as handle:
            stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(handle.read())
        (dataset,) = stats.datasets
        assert dataset.name == split and dataset.num_examples == count
        assert {f.path.step[0] for f in dataset.features} == keys
        for feature in dataset.features:
            common = getattr(feature, feature.WhichOneof("stats")).common_stats
            assert (common.num_non_missing, common.num_missing) == (count, 0)
    train = statistics_pb2.DatasetFeatureStatisticsList.FromString(open(os.path.join(
        demo_snapshot.path, feature_stats_name("train")), "rb").read()).datasets[0]
    widths = [int(r[codec.IMAGE_WIDTH]) for r in records
              if r[codec.IMAGE_FILENAME].numpy().decode() in _train_files(demo_snapshot)]
    width = _feature(train, codec.IMAGE_WIDTH).num_stats
    assert (width.min, width.max) == (min(widths), max(widths))
    assert width.mean == pytest.approx(np.mean(widths))
    assert width.median == sorted(widths)[len(widths) // 2]


def _train_files(snapshot) -> set:
    names = set()
    for path in shard_files(snapshot):
        if os.path.relpath(path, snapshot.path).startswith("train/"):
            for serialized in tf.data.TFRecordDataset(path).as_numpy_iterator():
                example = tf.train.Example.FromString(serialized)
                names.add(example.features.feature[codec.IMAGE_FILENAME].bytes_list.value[0]
                          .decode())
    return names
