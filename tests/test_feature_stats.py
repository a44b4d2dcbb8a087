"""TFDV-style statistics in TFX's layout: `Split-<split>/FeatureStats.pb`, one
DatasetFeatureStatisticsList per split with one dataset, every feature of the records."""
from __future__ import annotations

import itertools
import json
import math
import os
import pickle
import statistics
import types

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl import sketches

from tests.beamutil import beam_pipeline, merged_in_parts
from tests.jobutil import read_records, shard_files
from transforms import codec
from transforms.reporting.feature_stats import (
    FeatureStatsFn,
    record_features,
    summarize_features,
    to_statistics_list,
)
from transforms.reporting.misra_gries import MisraGries
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
            accumulator = fn.add_input(
                accumulator, (record_features(_example(index, HEIGHTS[index])),))
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
    monkeypatch.setattr("transforms.reporting.feature_sketches._KMV_BATCH", batch)
    assert _combine([range(7)]).SerializeToString(deterministic=True) == whole
    assert _combine([range(3), range(3, 7)]).SerializeToString(deterministic=True) == whole


class _LoggedSketch:
    """A tfx_bsl sketch that records every call it gets (values added, sketches merged)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def AddValues(self, values):  # noqa: N802 (tfx_bsl's name)
        self.calls.append(("add", values.to_pylist()))
        self.inner.AddValues(values)

    def Merge(self, other):  # noqa: N802
        self.calls.append(("merge", other.calls))
        self.inner.Merge(other.inner)

    def __getattr__(self, name):
        if name in ("inner", "calls") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)


_LOGGED_SKETCHES = types.SimpleNamespace(**{
    name: (lambda make: lambda *args: _LoggedSketch(make(*args)))(getattr(sketches, name))
    for name in ("QuantilesSketch", "KmvSketch")})


class _LoggedMisraGries(MisraGries):
    """The top-values sketch, recording its calls as `_LoggedSketch` does."""

    def __init__(self, num_buckets):
        super().__init__(num_buckets)
        self.calls = []

    def add_values(self, values):
        self.calls.append(("add", list(values)))
        super().add_values(values)

    def merge(self, other):
        self.calls.append(("merge", other.calls))
        super().merge(other)


def _odd_records(count: int) -> list:
    """`record_features` tuples with lists of every length, NaN, infinities, -0.0, int64
    extremes, strings mixed with digests (non-UTF-8 and long values) and a key some lack."""
    odd = (math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 1e150, 0.1, -2.5)
    records = []
    for i in range(count):
        features = [
            ("f/list", "float_list", tuple(odd[(i + k) % len(odd)] if k % 2 else i / 7 + k
                                           for k in range(i % 6))),
            ("i/value", "int64_list", ((2**63 - 1, -2**63, 2**53 + 1, 0, i)[i % 5],)),
            ("s/text", "bytes_list", tuple(
                (b"w%d" % (i % 9), b"\xff\xfe%d" % (i % 4), b"x" * 1500, b"z")[:i % 5])),
        ]
        if i % 4:
            features.append(("s/sometimes", "bytes_list", (b"v%d" % (i % 13),)))
        records.append(summarize_features(sorted(features)))
    return records


def _combine_logged(records, cuts, batch_sizes=None):
    """(serialized statistics, every sketch's calls by key) of records, one per element or in
    elements of `batch_sizes` records (a shard's, as the writer hands them over), the elements
    cut into parts at cuts, each part pickled, then merged."""
    items, start = [], 0
    for size in batch_sizes or [1] * len(records):
        items.append(tuple(records[start:start + size]))
        start += size
    assert start == len(records)
    fn = FeatureStatsFn()
    merged = merged_in_parts(fn, items, cuts)
    dataset = fn.extract_output(merged)
    calls = {(key, name): getattr(getattr(feature, name), "sketch", getattr(feature, name)).calls
             for key, feature in merged.features.items()
             for name in ("num_values_quantiles", "quantiles", "kmv", "top")
             if getattr(feature, name) is not None}
    return dataset.SerializeToString(deterministic=True), calls


def _log_small_sketches(monkeypatch, record_batch: int) -> None:
    """Logged sketches with small buffers, so that batches cut across flushes; records reach
    them `record_batch` at a time."""
    monkeypatch.setattr("transforms.reporting.feature_sketches.sketches", _LOGGED_SKETCHES)
    monkeypatch.setattr("transforms.reporting.feature_sketches.MisraGries", _LoggedMisraGries)
    monkeypatch.setattr("transforms.reporting.feature_sketches._FLUSH", 7)
    monkeypatch.setattr("transforms.reporting.feature_sketches._KMV_BATCH", 5)
    monkeypatch.setattr("transforms.reporting.feature_sketches._RECORD_BATCH", record_batch)


@pytest.mark.parametrize("cuts", [(), (2, 3, 21, 40)])
def test_batched_records_pickled_and_merged_mid_batch_feed_the_sketches_as_one_by_one(
        cuts, monkeypatch):
    # Records wait in the accumulator and are added a batch at a time; a batch of 1 is adding
    # them one by one. Small sketch buffers make batches cut across flushes; cuts fall inside
    # batches, and each part is pickled before merging.
    records = _odd_records(60)
    _log_small_sketches(monkeypatch, record_batch=1)
    one_by_one = _combine_logged(records, ())
    one_by_one_cut = _combine_logged(records, cuts)
    monkeypatch.setattr("transforms.reporting.feature_sketches._RECORD_BATCH", 8)
    batched = _combine_logged(records, cuts)
    assert batched[1] == one_by_one_cut[1]  # the same values, in the same calls, per sketch
    assert batched[0] == one_by_one[0]
    assert any(len(calls) > 3 for calls in batched[1].values())


def test_records_handed_over_a_shard_at_a_time_feed_the_sketches_as_one_by_one(monkeypatch):
    # Batches of any size, their ends falling anywhere against `_RECORD_BATCH` and the sketch
    # buffers, give the statistics and sketch calls of records added one by one.
    records = _odd_records(60)
    _log_small_sketches(monkeypatch, record_batch=8)
    one_by_one = _combine_logged(records, ())
    in_shards = _combine_logged(records, (), batch_sizes=(1, 5, 13, 2, 9, 30))
    in_shards_cut = _combine_logged(records, (2, 4), batch_sizes=(7, 7, 7, 7, 32))
    assert in_shards == one_by_one
    assert in_shards_cut[0] == one_by_one[0]
    assert any(len(calls) > 3 for calls in in_shards[1].values())


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


def _many_distinct_shards(shards: int = 6, per_shard: int = 700) -> list:
    """Shards of `record_features`-like records with more distinct class names and paths than
    the sketches keep exactly (Misra-Gries: 1,000 buckets), so the order they come in shows."""
    import random
    rng = random.Random(0)
    return [tuple((("image/class/text", "bytes_list", (b"class%05d" % rng.randrange(3000),)),
                   ("image/height", "int64_list", (rng.randrange(50, 500),)),
                   ("image/path", "bytes_list", (b"p/%06d.jpg" % (shard * per_shard + i),)))
                  for i in range(per_shard))
            for shard in range(shards)]


def _folded(records) -> bytes:
    """A shard's records as the shard writer hands them over: folded alone, pickled."""
    from transforms.reporting.feature_sketches import shard_accumulator
    return pickle.dumps(shard_accumulator(records))


def _written_in_order(shards, order, cut: int) -> bytes:
    """`WriteFeatureStatistics`' steps run the way a runner may: shards handed over in
    `order`, each block's merged (`_merged_block`), the blocks added to the split's combine in
    reverse and its accumulator cut in two at `cut`, pickled, merged."""
    from transforms.reporting import feature_stats_files as fs
    by_block: dict = {}
    for index in order:
        (_split, block), item = fs._by_block(("train", (index, _folded(shards[index]))))
        by_block.setdefault(block, []).append(item)
    blocks = [fs._merged_block((("train", block), items))[1]
              for block, items in reversed(by_block.items())]
    per_split = fs._BlocksInOrder()
    parts = []
    for part in (blocks[:cut], blocks[cut:]):
        accumulator = per_split.create_accumulator()
        for item in part:
            accumulator = per_split.add_input(accumulator, item)
        parts.append(pickle.loads(pickle.dumps(accumulator)))
    return per_split.extract_output(per_split.merge_accumulators(parts)).SerializeToString(
        deterministic=True)


def test_the_same_shards_give_the_same_statistics_whatever_order_they_were_written_in(
        monkeypatch):
    monkeypatch.setattr("transforms.reporting.feature_stats_files._SHARDS_PER_BLOCK", 2)
    shards = _many_distinct_shards()
    fn = FeatureStatsFn()

    def streamed(order):  # one accumulator fed the shards as they finish: order shows
        accumulator = fn.create_accumulator()
        for index in order:
            accumulator = fn.add_input(accumulator, shards[index])
        return fn.extract_output(accumulator).SerializeToString(deterministic=True)

    assert streamed(range(6)) != streamed([5, 4, 3, 2, 1, 0])
    written = {_written_in_order(shards, order, cut)
               for order, cut in ((range(6), 1), ([5, 4, 3, 2, 1, 0], 0),
                                  ([1, 0, 3, 2, 5, 4], 1), ([4, 2, 0, 5, 3, 1], 0))}
    assert len(written) == 1


def test_a_split_of_one_shard_has_the_statistics_of_its_records_in_order():
    (shard,) = _many_distinct_shards(shards=1)
    fn = FeatureStatsFn()
    expected = fn.extract_output(fn.add_input(fn.create_accumulator(), shard))
    assert _written_in_order([shard], [0], 0) == expected.SerializeToString(deterministic=True)


def test_a_shard_or_block_handed_over_twice_is_an_error():
    from transforms.reporting import feature_stats_files as fs
    (shard,) = _many_distinct_shards(shards=1, per_shard=3)
    with pytest.raises(ValueError, match="Statistics part 0 was handed over twice"):
        fs._in_order([(0, _folded(shard)), (1, _folded(shard)), (0, _folded(shard))])
    per_split = fs._BlocksInOrder()
    first = per_split.add_input(per_split.create_accumulator(), (0, _folded(shard)))
    again = per_split.add_input(per_split.create_accumulator(), (0, _folded(shard)))
    with pytest.raises(ValueError, match="Statistics part 0 was handed over twice"):
        per_split.extract_output(per_split.merge_accumulators([first, again]))


def test_write_feature_statistics_writes_each_splits_merged_statistics(tmp_path, monkeypatch):
    import apache_beam as beam

    from transforms.reporting import feature_stats_files as fs
    monkeypatch.setattr(fs, "_SHARDS_PER_BLOCK", 2)
    shards = _many_distinct_shards(shards=3, per_shard=40)
    items = [("train", (index, _folded(shards[index]))) for index in (2, 0, 1)] + [
        ("test", (0, _folded(shards[0][:5])))]
    with beam_pipeline() as pipeline:
        _ = (pipeline | beam.Create(items, reshuffle=False)
             | fs.WriteFeatureStatistics(str(tmp_path)))
    for split, expected in (("train", _written_in_order(shards, [0, 1, 2], 0)),
                            ("test", _written_in_order([shards[0][:5]], [0], 0))):
        with open(tmp_path / feature_stats_name(split), "rb") as handle:
            (dataset,) = statistics_pb2.DatasetFeatureStatisticsList.FromString(
                handle.read()).datasets
        assert dataset.name == split
        dataset.name = ""
        assert dataset.SerializeToString(deterministic=True) == expected
