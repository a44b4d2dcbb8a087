"""The TFT analyzers of the transform: the class assets and the analyzed numbers.

`analyze_job`, called inside `preprocessing_fn`, adds two `tft.experimental.ptransform_analyzer`s
(one for the assets, one for the numbers: TFT cannot mix the two in one analyzer) whose values
come from the job's own combine over the accepted records
(`transforms.offline.tft_totals`), not from rows fed through TFT: TFT is handed no row and only
writes the transform. It gives

* the path of `pixelmill_class_table` (the job's append-only class table, a list or the job's
  singleton PCollection of it: one name per line, id = line index), for `tft.apply_vocabulary`;
* `class_frequencies` (rows per label, the file `tft.vocabulary(store_frequency=True)` writes,
  byte for byte), written and registered alongside;
* the analyzed numbers (`tft_totals.Analyzed`: counts, pixel mean and std, size quantiles),
  which TFT bakes into the transform as constants.

Both assets are registered with `tft.annotate_asset`, so `TFTransformOutput.vocabulary_by_name`
finds them. Fed every record, TFT encoded each one as a tf.Example, ran a saved model over the
batches and packed six analyzers: about 1.4 s of CPU per job, most of it graph building, and
launcher time per record (docs/benchmarks.md, seventh round).
"""
from __future__ import annotations

import collections
import hashlib
from typing import Mapping, Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems

from transforms.offline.class_names import class_name_problem

__all__ = ["CLASS_TABLE_ASSET", "CLASS_FREQUENCIES", "NO_CLASS", "analyze_job",
           "check_class_table", "class_frequencies_file"]

CLASS_TABLE_ASSET = "pixelmill_class_table"
CLASS_FREQUENCIES = "class_frequencies"
# Content of the class-table asset before analysis has produced the real one (TFT builds the
# graph once with it); never in an exported transform.
_TABLE_BEFORE_ANALYSIS = b"__class_table_before_analysis__"
_FREQUENCIES_BEFORE_ANALYSIS = b"0 __class_frequencies_before_analysis__"
# TFT's entry of an empty vocabulary (`tensorflow_transform.analyzers`), kept so that the
# frequencies file of a run without any image stays what TFT's vocabulary wrote.
_EMPTY_VOCABULARY_DUMMY = b"49d0cd50-04bb-48c0-bc6f-5b575dce351a"
# The one line of the class-table asset of a run without any class (TF cannot initialize a
# table from an empty file). It holds a control character, so no label (`bad_label`) can
# ever equal it; `tft_summary` reads it back as an empty table.
NO_CLASS = "\x1fno class: no image was accepted"


def analyze_job(labels: tf.Tensor, class_table, totals, size_quantiles: int
                ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Inside `preprocessing_fn`: (class-table asset path, then `tft_totals.Analyzed`'s
    counts int64 [3], mean float32 [3], std float32 [3] and quantiles float32
    [2, size_quantiles - 1]); see the module docstring. `totals` is the job's singleton
    PCollection of `tft_totals.Totals`; `labels` only anchors the analyzer in TFT's graph."""
    # Two analyzers over the same `totals`: TFT takes every output of an analyzer that has
    # asset outputs for an asset (a None default is written as a file and fails).
    table_path, _ = tft.experimental.ptransform_analyzer(
        [labels], _ClassAssets(class_table, totals), [tf.string, tf.string], [[], []],
        output_asset_default_values=[_TABLE_BEFORE_ANALYSIS, _FREQUENCIES_BEFORE_ANALYSIS],
        name="class_table")
    counts, mean, std, quantiles = tft.experimental.ptransform_analyzer(
        [labels], _Numbers(totals, size_quantiles), [tf.int64, tf.float32, tf.float32, tf.float32],
        [[3], [3], [3], [2, size_quantiles - 1]], name="totals")
    tft.annotate_asset(CLASS_FREQUENCIES, CLASS_FREQUENCIES)
    tft.annotate_asset(CLASS_TABLE_ASSET, CLASS_TABLE_ASSET)
    return table_path, counts, mean, std, quantiles


def check_class_table(names, source: str, allow_empty: bool = False) -> list[str]:
    """The table as a list, checked. Empty only where the job computed it: a run that accepts
    no image (a folder of junk) has no class yet, and still publishes its rejects."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise ValueError(f"{source} must be a list of class names. Received: {names!r}")
    names = list(names)
    if not names and not allow_empty:
        raise ValueError(f"{source} must name at least one class. Received: []")
    for name in names:
        problem = class_name_problem(name)
        if problem:
            raise ValueError(f"{source} entries must be valid class names: {problem}")
    duplicates = sorted(name for name, n in collections.Counter(names).items() if n > 1)
    if duplicates:
        raise ValueError(f"{source} lists {duplicates} more than once; ids would be ambiguous.")
    return names


class _ClassAssets(tft_beam.experimental.PTransformAnalyzer):
    """TFT's (ignored) batches -> (class-table asset path, frequencies asset path), from the
    job's class table and `Totals`."""

    def __init__(self, class_table, totals):
        super().__init__()
        self._class_table = class_table
        self._totals = totals

    def expand(self, batches):
        table = self._class_table
        if not isinstance(table, beam.PCollection):
            table = batches.pipeline | "ClassTableList" >> beam.Create([list(table)])
        base_dir = self.base_temp_dir
        table_path = table | "WriteClassTableAsset" >> beam.Map(_write_class_table_asset, base_dir)
        frequencies_path = self._totals | "WriteClassFrequencies" >> beam.Map(
            lambda t: _write_asset(base_dir, CLASS_FREQUENCIES,
                                   class_frequencies_file(t.label_counts)))
        return table_path, frequencies_path


class _Numbers(beam.PTransform):
    """TFT's (ignored) batches -> (counts, mean, std, quantiles): `Totals.analyzed`."""

    def __init__(self, totals, size_quantiles: int):
        super().__init__()
        self._totals = totals
        self._size_quantiles = size_quantiles

    def expand(self, batches):
        buckets = self._size_quantiles
        outputs = self._totals | "Analyzed" >> beam.FlatMap(
            lambda t: _tagged(t.analyzed(buckets))).with_outputs(*_ANALYZED_FIELDS)
        return tuple(outputs[field] for field in _ANALYZED_FIELDS)


_ANALYZED_FIELDS = ("counts", "mean", "std", "quantiles")


def _tagged(analyzed):
    """`Analyzed`'s fields as tagged outputs, one step for the four of them."""
    return [beam.pvalue.TaggedOutput(field, getattr(analyzed, field))
            for field in _ANALYZED_FIELDS]


def class_frequencies_file(counts: Mapping[bytes, int]) -> bytes:
    """TFT's vocabulary file with frequencies, byte for byte: "count label" lines, count then
    label bytes descending; no row at all gives TFT's one dummy entry (`tft_summary` reads
    no class from it)."""
    entries = sorted(((n, label) for label, n in counts.items()), reverse=True)
    return b"".join(b"%d %s\n" % entry for entry in entries or [(1, _EMPTY_VOCABULARY_DUMMY)])


def _write_class_table_asset(names, base_dir: str) -> np.ndarray:
    names = check_class_table(names, "class_table", allow_empty=True)
    content = "".join(f"{name}\n" for name in names or [NO_CLASS]).encode("utf-8")
    return _write_asset(base_dir, CLASS_TABLE_ASSET, content)


def _write_asset(base_dir: str, name: str, content: bytes) -> np.ndarray:
    """Writes `content` as `name` in a folder of `base_dir` named by its hash; its path."""
    folder = FileSystems.join(base_dir, f"{name}-" + hashlib.sha256(content).hexdigest()[:16])
    if "://" not in folder and not FileSystems.exists(folder):
        FileSystems.mkdirs(folder)
    path = FileSystems.join(folder, name)
    with FileSystems.create(path) as handle:
        handle.write(content)
    return np.array(path.encode("utf-8"), dtype=object)
