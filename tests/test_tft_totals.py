"""The combine the TFT transform is analyzed from (`transforms.offline.tft_totals`): the same
totals however the records are split and merged, exact sums, and `tft.quantiles`' boundaries."""
from __future__ import annotations

import fractions

import numpy as np
import pytest
from tensorflow_transform import analyzers

from tests.beamutil import merged_in_parts
from transforms.offline import tft_analysis as ta
from transforms.offline import tft_graph as tg
from transforms.offline.tft_analysis import TotalsFn
from transforms.offline.tft_totals import Totals, quantile_boundaries


def _features(label: bytes, width: int, height: int, sums, square_sums, count=None) -> dict:
    return {ta.codec.CLASS_TEXT: label, ta.WIDTH: width, ta.HEIGHT: height,
            ta.PIXEL_COUNT: width * height if count is None else count,
            ta.CHANNEL_SUM: np.asarray(sums, np.float32),
            ta.CHANNEL_SQSUM: np.asarray(square_sums, np.float32)}


def _rows(n: int, seed: int = 3) -> list:
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(n):
        width, height = int(rng.integers(8, 400)), int(rng.integers(8, 400))
        means = rng.random(3)
        rows.append(_features(b"cat" if index % 3 else b"dog", width, height,
                              width * height * means, width * height * means ** 2,
                              count=0 if index % 7 == 0 else None))
    return rows


def test_totals_count_rows_measured_rows_pixels_labels_and_sizes():
    rows = [_features(b"cat", 2, 3, [1, 2, 3], [4, 5, 6]),
            _features(b"dog", 4, 5, [0.5, 0.25, 0.125], [1, 1, 1], count=0),
            _features(b"cat", 2, 7, [1, 1, 1], [2, 2, 2])]
    totals = merged_in_parts(TotalsFn(), rows)
    assert (totals.images, totals.measured, totals.pixels) == (3, 2, 6 + 14)
    assert totals.label_counts == {b"cat": 2, b"dog": 1}
    assert totals.widths == {2: 2, 4: 1} and totals.heights == {3: 1, 5: 1, 7: 1}
    assert totals.vector().tolist() == [3, 2, 20, 2.5, 3.25, 4.125, 7, 8, 9]


def test_split_and_merged_in_any_order_the_vector_is_the_same():
    rows = _rows(400)
    whole = merged_in_parts(TotalsFn(), rows)
    for cuts in [(1,), (57, 58, 300), tuple(range(10, 400, 10))]:
        parts = merged_in_parts(TotalsFn(), rows[::-1], cuts)
        assert parts.vector().tobytes() == whole.vector().tobytes()
        assert parts.quantiles(10).tobytes() == whole.quantiles(10).tobytes()
        assert parts.label_counts == whole.label_counts


def test_channel_sums_are_exact_and_rounded_once():
    # 2**53 then ones: a float64 running sum rounds each 2**53 + 1 back to 2**53.
    rows = [_features(b"cat", 1, 1, [2.0 ** 53, 1.0, 0.5], [1, 1, 1])]
    rows += [_features(b"cat", 1, 1, [1.0, 2.0 ** -30, 0.1], [1, 1, 1]) for _ in range(1000)]
    naive = np.zeros(3)
    for row in rows:
        naive += row[ta.CHANNEL_SUM].astype(np.float64)
    vector = merged_in_parts(TotalsFn(), rows).vector()
    exact = [sum(fractions.Fraction(float(row[ta.CHANNEL_SUM][c])) for row in rows)
             for c in range(3)]
    assert vector[3:6].tolist() == [float(value) for value in exact]
    assert vector[3] == 2.0 ** 53 + 1000 != naive[0]


def test_quantiles_are_tfts_fed_in_batches():
    rng = np.random.default_rng(11)
    values = rng.integers(16, 5000, size=6000)
    combiner = analyzers.QuantilesCombiner(10, 0.001, np.float32)
    accumulator = combiner.create_accumulator()
    for batch in np.array_split(values.astype(np.float32), 13):
        accumulator = combiner.add_input(accumulator, [batch])
    expected = combiner.extract_output(accumulator)[0]
    counts = {int(v): int(n) for v, n in zip(*np.unique(values, return_counts=True))}
    assert quantile_boundaries(counts, 10).tolist() == expected.tolist()


def test_no_row_gives_zeros_as_tft_did():
    totals = Totals()
    assert totals.vector().tolist() == [0.0] * 9
    assert totals.quantiles(4).tolist() == [[0.0] * 3, [0.0] * 3]


def test_analyzed_constants_are_the_bits_of_the_graphs_own_arithmetic():
    """`Totals.analyzed` in numpy equals what the transform's graph computed from the totals
    in TensorFlow before (divide_no_nan, variance clipped at 0, float32, a std of 0 -> 1)."""
    import tensorflow as tf

    rows = _rows(500) + [_features(b"flat", 3, 3, [0.0, 4.5, 9.0], [0.0, 2.25, 9.0])]
    for totals in (merged_in_parts(TotalsFn(), rows), merged_in_parts(TotalsFn(), rows[-1:])):
        vector = tf.constant(totals.vector())
        pixels, sums, square_sums = vector[2], vector[3:6], vector[6:9]
        mean = tf.math.divide_no_nan(sums, pixels)
        std = tf.sqrt(tf.maximum(tf.math.divide_no_nan(square_sums, pixels) - mean * mean, 0.0))
        analyzed = totals.analyzed(4)
        assert analyzed.counts.tolist() == tf.cast(vector[:3], tf.int64).numpy().tolist()
        assert analyzed.mean.tobytes() == tf.cast(mean, tf.float32).numpy().tobytes()
        assert analyzed.std.tobytes() == tf.cast(
            tf.where(std > 0.0, std, tf.ones_like(std)), tf.float32).numpy().tobytes()
        assert analyzed.quantiles.tobytes() == totals.quantiles(4).tobytes()
    flat = merged_in_parts(TotalsFn(), rows[-1:]).analyzed(4)
    assert flat.mean.tolist() == [0.0, 0.5, 1.0] and flat.std.tolist() == [1.0, 1.0, 1.0]


def test_no_row_gives_a_mean_of_0_and_a_std_of_1():
    analyzed = Totals().analyzed(4)
    assert analyzed.counts.tolist() == [0, 0, 0]
    assert analyzed.mean.tolist() == [0.0] * 3 and analyzed.std.tolist() == [1.0] * 3


def test_the_transform_is_written_only_from_totals(tmp_path):
    with pytest.raises(ValueError, match="totals must be a tft_totals.Totals"):
        tg.write_analyzed_transform(str(tmp_path / "out"), ["cat"], {"images": 1}, 16)


@pytest.mark.slow
def test_the_records_reach_only_the_combine_and_tft_adds_no_beam_step(tmp_path):
    """The records go to `RecordTotalsFn` alone, and the transform is written by one step that
    reads the totals and the class table: neither TFT's steps that encode and batch rows (about a
    second of every job's fixed cost with its analyzers) nor its `AnalyzeDataset` (~45 steps,
    a second SavedModel) come back."""
    import apache_beam as beam

    pipeline = beam.Pipeline()          # built, never run: the graph is what is checked
    table = pipeline | "ClassTable" >> beam.Create([["cat"]])
    _ = (pipeline | "Records" >> beam.Create([])
         | "Analyze" >> ta.AnalyzeAndWriteTransform(str(tmp_path / "out"), table, 8))
    components = pipeline.to_runner_api().components
    leaves = [t for t in components.transforms.values() if not t.subtransforms]
    inside = sorted({t.unique_name.split("/")[1] for t in leaves
                     if t.unique_name.startswith("Analyze/")})
    assert inside == ["Totals", "WriteTransform"]
    made_by = {pid: t.unique_name.split("/")[0 if not t.unique_name.startswith("Analyze/")
                                             else 1]
               for t in leaves for pid in t.outputs.values()}
    readers = {name: sorted({made_by[pid] for t in leaves
                             if t.unique_name.startswith(f"Analyze/{name}")
                             for pid in t.inputs.values()} - {name})
               for name in inside}
    assert readers == {"Totals": ["Records"], "WriteTransform": ["ClassTable", "Totals"]}


def test_with_beside_the_summary_waits_for_it_and_not_the_write():
    """`beside`: the write starts from the totals, and a step of its own reads the started
    write and `beside` (side inputs: a stage of its own, run once `beside` is complete)."""
    import apache_beam as beam

    pipeline = beam.Pipeline()          # built, never run: the graph is what is checked
    table = pipeline | "ClassTable" >> beam.Create([["cat"]])
    beside = pipeline | "Beside" >> beam.Create([1, 2])
    _ = (pipeline | "Records" >> beam.Create([])
         | "Analyze" >> ta.AnalyzeAndWriteTransform("out", table, 8, beside=beside))
    leaves = [t for t in pipeline.to_runner_api().components.transforms.values()
              if not t.subtransforms]
    made_by = {pid: t.unique_name.split("/")[1 if t.unique_name.startswith("Analyze/") else 0]
               for t in leaves for pid in t.outputs.values()}
    readers = {t.unique_name.split("/")[1]: sorted(made_by[pid] for pid in t.inputs.values())
               for t in leaves if t.unique_name.startswith("Analyze/")
               and t.unique_name.split("/")[1] in ("WriteTransform", "AwaitTransform")}
    assert readers == {"WriteTransform": ["ClassTable", "Totals"],
                       "AwaitTransform": ["Beside", "Once", "WriteTransform"]}
