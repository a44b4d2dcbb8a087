"""TensorFlow Transform analysis of the accepted images, and the exported transform.

`AnalyzeAndWriteTransform` analyzes the accepted records in one combine
(`transforms.offline.tft_totals`): the rows per label (asset `class_frequencies`: class weights,
`tft_summary`), the exact per-channel pixel mean and std weighted by pixel count (from each
record's measured moments: no image is decoded a second time, no pixel is shipped through
TFT), and width/height quantiles. One step then writes the transform with these numbers and
the class table as constants and assets (`transforms.offline.tft_write`: TFT's own tracing and
saving, outside Beam). `transform_fn/` is written next to the shards; its `preprocessing_fn`
maps `image/encoded` to the model's input with the training reader's own decoder (upright,
resized, normalized) and `image/class/text` to the id in the job's append-only class table
(asset `pixelmill_class_table`, never a frequency-ordered vocabulary whose ids would move
between runs; -1 outside it).

The analyzed constants are outputs too (`stats/*`), so stats.json, the training reader and the
serving graph read the same numbers. Analysis-only raw features (`analysis/*`) feed the
combine and nothing a model consumes; a serving client feeds only `image/encoded`.
Design notes (the formulas, why the transform is written outside TFT's Beam analysis):
docs/architecture.md, "TFT analysis".
"""
from __future__ import annotations

import contextlib
import functools
import math
import tempfile
from typing import Callable, Mapping, Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

from configs.online import image_size_pair
from transforms import codec
from transforms.decode import decode_for_model
from transforms.offline import progress
from transforms.offline.image_record import ImageRecord
from transforms.offline.tft_assets import (
    CLASS_FREQUENCIES,
    CLASS_TABLE_ASSET,
    NO_CLASS,
    check_class_table,
    write_assets,
)
from transforms.offline.tft_totals import (
    CHANNEL_SQSUM,
    CHANNEL_SUM,
    HEIGHT,
    PIXEL_COUNT,
    WIDTH,
    Analyzed,
    Totals,
    TotalsFn,
)
from transforms.offline.tft_write import write_transform

__all__ = [
    "PIXEL_COUNT", "CHANNEL_SUM", "CHANNEL_SQSUM", "WIDTH", "HEIGHT", "ANALYSIS_FEATURES",
    "RAW_FEATURE_SPEC", "IMAGE", "LABEL", "STATS_PREFIX", "CLASS_TABLE_ASSET",
    "CLASS_FREQUENCIES", "DEFAULT_SIZE_QUANTILES",
    "raw_metadata", "raw_features", "make_preprocessing_fn", "write_analyzed_transform",
    "AnalyzeAndWriteTransform", "tft_summary", "job_summary", "read_normalization",
]

# Raw features that exist only to feed the analysis (PIXEL_COUNT, CHANNEL_SUM, CHANNEL_SQSUM,
# WIDTH, HEIGHT: defined with the combine that reads them, `tft_totals`).
ANALYSIS_FEATURES = (PIXEL_COUNT, CHANNEL_SUM, CHANNEL_SQSUM, WIDTH, HEIGHT)

RAW_FEATURE_SPEC = {
    codec.IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string),
    codec.CLASS_TEXT: tf.io.FixedLenFeature([], tf.string),
    PIXEL_COUNT: tf.io.FixedLenFeature([], tf.int64),
    CHANNEL_SUM: tf.io.FixedLenFeature([3], tf.float32),
    CHANNEL_SQSUM: tf.io.FixedLenFeature([3], tf.float32),
    WIDTH: tf.io.FixedLenFeature([], tf.int64),
    HEIGHT: tf.io.FixedLenFeature([], tf.int64),
}

# What the model consumes.
IMAGE = "image"
LABEL = "label"
# The analyzed constants, broadcast to every row (read back by tft_summary).
STATS_PREFIX = "stats/"
_PIXEL_MEAN = STATS_PREFIX + "pixel_mean"          # float32 [3]: what the graph subtracts
_PIXEL_STD = STATS_PREFIX + "pixel_std"            # float32 [3]: what the graph divides by
_IMAGES = STATS_PREFIX + "images"                  # int64 [1]: rows analyzed
_MEASURED = STATS_PREFIX + "measured_images"       # int64 [1]: rows with a pixel count > 0
_PIXELS = STATS_PREFIX + "pixel_count"             # int64 [1]: sum of w*h over measured rows
_WIDTH_QUANTILES = STATS_PREFIX + "width_quantiles"
_HEIGHT_QUANTILES = STATS_PREFIX + "height_quantiles"

DEFAULT_SIZE_QUANTILES = 10


def raw_metadata() -> tft.DatasetMetadata:
    """The raw schema TFT analyzes (`RAW_FEATURE_SPEC`)."""
    return tft.DatasetMetadata.from_feature_spec(RAW_FEATURE_SPEC)


def _moments_of(width, height, moments: Sequence) -> tuple[int, list, list]:
    """(pixel_count, sums, square sums); a zero weight when the moments were not measured."""
    values = list(moments or ())
    if len(values) != 6 or any(v is None or not math.isfinite(float(v)) for v in values):
        return 0, [0.0] * 3, [0.0] * 3
    count = int(width) * int(height)
    return count, [count * float(v) for v in values[:3]], [count * float(v) for v in values[3:]]


def raw_features(item: ImageRecord | Mapping) -> dict:
    """The raw features TFT analyzes for one accepted image, from an `ImageRecord` or an index
    row (`transforms.offline.index_table.make_row`, e.g. read back from `index.parquet`).

    `image/encoded` is empty: analysis never decodes (see the module docstring). An image
    whose channel moments were not measured gets pixel count 0: it counts in the vocabulary and
    the size quantiles but adds nothing to the pixel mean/std.
    """
    progress.enter("TFT")
    if isinstance(item, ImageRecord):
        rel, accepted = item.path, item.reject is None
        label, width, height, moments = item.label, item.width, item.height, item.moments
    elif isinstance(item, Mapping):
        rel, accepted = item.get("path"), item.get("accepted")
        label, width, height = item.get("label"), item.get("width"), item.get("height")
        moments = [item.get(name) for name in ("mean_r", "mean_g", "mean_b",
                                                 "sqmean_r", "sqmean_g", "sqmean_b")]
    else:
        raise ValueError(
            f"Expected an ImageRecord or an index row (dict). Received: {type(item).__name__}")
    if not accepted:
        raise ValueError(f"Only accepted images are analyzed. Received: {rel!r} (rejected)")
    if not label or width is None or height is None:
        raise ValueError(
            f"An accepted image needs a label, a width and a height. Received: {rel!r} with "
            f"label={label!r}, width={width!r}, height={height!r}")
    count, sums, square_sums = _moments_of(width, height, moments)
    return {
        codec.IMAGE_ENCODED: b"",
        codec.CLASS_TEXT: label.encode("utf-8"),
        PIXEL_COUNT: count,
        CHANNEL_SUM: np.asarray(sums, np.float32),
        CHANNEL_SQSUM: np.asarray(square_sums, np.float32),
        WIDTH: int(width),
        HEIGHT: int(height),
    }


def _lookup_class_ids(names: tf.Tensor, table_path) -> tuple[tf.Tensor, tf.Tensor]:
    """(class id or -1 per name, table size): TFT's default lookup, but with an anonymous
    table. TF names a file-backed table after its file path, which for this asset is TFT's
    temporary folder of the run (a fresh uuid under the run's staging folder), so every
    `saved_model.pb` differed; anonymous, it is byte-identical for identical inputs, and two
    snapshots' transforms loaded in one process cannot share a table by name.

    Built in the init scope when the path is known (as TFT's own lookup does), so the table
    is initialized once, not on every call."""
    known = isinstance(table_path, str) or (isinstance(table_path, tf.Tensor)
                                            and not tf.is_symbolic_tensor(table_path))
    with contextlib.ExitStack() as stack:
        if tf.inside_function() and known:
            stack.enter_context(tf.init_scope())
        initializer = tf.lookup.TextFileInitializer(
            table_path, key_dtype=tf.string, key_index=tf.lookup.TextFileIndex.WHOLE_LINE,
            value_dtype=tf.int64, value_index=tf.lookup.TextFileIndex.LINE_NUMBER)
        table = tf.lookup.StaticHashTable(initializer, default_value=-1,
                                          experimental_is_anonymous=True)
        size = table.size()
    return table.lookup(names), size


def _per_row(batch_anchor: tf.Tensor, value: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
    """`value` (any shape) as `dtype`, flattened and repeated once per row of the batch:
    [batch, n]."""
    flat = tf.reshape(tf.cast(value, dtype), [1, -1])
    return tf.tile(flat, [tf.shape(batch_anchor)[0], 1])


@functools.lru_cache(maxsize=None)
def _model_decoder(size: tuple[int, int], orientation) -> Callable:
    """`decode_for_model` of a batch of images [N] -> [N, height, width, 3], as a
    `tf.function` traced once per process and (size, orientation). TFT traces
    `preprocessing_fn` five times per job (analysis, schema, saved models); traced inside
    each, the decoder with its graph-side EXIF reader and the `map_fn` loop around it were most
    of every trace. Here each trace adds one call op."""
    def decode_batch(encoded):
        return tf.map_fn(lambda contents: decode_for_model(contents, size, orientation=orientation),
                         encoded, fn_output_signature=tf.TensorSpec([*size, 3], tf.float32))
    return tf.function(decode_batch, input_signature=[tf.TensorSpec([None], tf.string)],
                       autograph=False)


def _checked_arguments(image_size, size_quantiles) -> tuple[int, int]:
    size = image_size_pair(image_size)
    if (isinstance(size_quantiles, bool) or not isinstance(size_quantiles, int)
            or not 2 <= size_quantiles <= 1000):
        raise ValueError(
            f"size_quantiles must be an int in [2, 1000]. Received: size_quantiles="
            f"{size_quantiles!r}")
    return size


def make_preprocessing_fn(table_path: str, frequencies_path: str, analyzed: Analyzed,
                          image_size, exif_orientation: bool = True) -> Callable:
    """The transform's `preprocessing_fn`, its analysis already done (it holds no analyzer).

    Args:
      table_path, frequencies_path: the two asset files (`tft_assets.write_assets`).
      analyzed: the analyzed numbers (`Totals.analyzed`).
      image_size: the model's input size, an int (square) or (height, width).
      exif_orientation: `decode.exif_orientation`: the graph turns images upright by the
        orientation it reads from `image/encoded`; False decodes them as stored.

    The numbers and paths are constants made before tracing, which are what TFT bound in
    place of its analyzers' outputs (so the traced graph is the one TFT's analysis gave).
    """
    size = image_size_pair(image_size)
    if not isinstance(analyzed, Analyzed):
        raise ValueError(f"analyzed must be a tft_totals.Analyzed (Totals.analyzed). "
                         f"Received: {type(analyzed).__name__}")
    orientation = None if exif_orientation else 1
    with tf.init_scope():
        table, frequencies = tf.constant(table_path), tf.constant(frequencies_path)
        counts, mean, std, quantiles = (tf.constant(analyzed.counts, tf.int64),
                                        tf.constant(analyzed.mean, tf.float32),
                                        tf.constant(analyzed.std, tf.float32),
                                        tf.constant(analyzed.quantiles, tf.float32))

    def preprocessing_fn(inputs: dict) -> dict:
        encoded, text = inputs[codec.IMAGE_ENCODED], inputs[codec.CLASS_TEXT]
        for path in (table, frequencies):  # what TFT does with an analyzer's asset output
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS, path)
        tft.annotate_asset(CLASS_FREQUENCIES, CLASS_FREQUENCIES)
        tft.annotate_asset(CLASS_TABLE_ASSET, CLASS_TABLE_ASSET)
        label = tft.apply_vocabulary(text, table, lookup_fn=_lookup_class_ids, name="label")

        image = (_model_decoder(size, orientation)(encoded) - mean) / std
        return {
            IMAGE: image,
            LABEL: label,
            _PIXEL_MEAN: _per_row(encoded, mean),
            _PIXEL_STD: _per_row(encoded, std),
            _IMAGES: _per_row(encoded, counts[0], tf.int64),
            _MEASURED: _per_row(encoded, counts[1], tf.int64),
            _PIXELS: _per_row(encoded, counts[2], tf.int64),
            _WIDTH_QUANTILES: _per_row(encoded, quantiles[0]),
            _HEIGHT_QUANTILES: _per_row(encoded, quantiles[1]),
        }

    return preprocessing_fn


_ASSET_MAP = {CLASS_FREQUENCIES: CLASS_FREQUENCIES, CLASS_TABLE_ASSET: CLASS_TABLE_ASSET}


def write_analyzed_transform(output_dir: str, class_table: Sequence[str], totals: Totals,
                             image_size, size_quantiles: int = DEFAULT_SIZE_QUANTILES,
                             exif_orientation: bool = True) -> dict:
    """Writes the transform of `totals` and `class_table` (names in id order; empty when
    the job accepted no image) into `output_dir` (any file system Beam knows:
    `tft_write.write_transform`), made in a local temporary folder with its assets; returns
    its `job_summary`."""
    if not isinstance(totals, Totals):
        raise ValueError(f"totals must be a tft_totals.Totals (TotalsFn's output). "
                         f"Received: {type(totals).__name__}")
    names = check_class_table(class_table, "class_table", allow_empty=True)
    _checked_arguments(image_size, size_quantiles)
    analyzed = totals.analyzed(size_quantiles)
    with tempfile.TemporaryDirectory(prefix="pixelmill-transform-") as scratch:
        table_path, frequencies_path = write_assets(scratch, names, totals.label_counts)
        preprocessing_fn = make_preprocessing_fn(table_path, frequencies_path, analyzed,
                                                 image_size, exif_orientation)
        write_transform(preprocessing_fn, _input_specs(), _ASSET_MAP, output_dir, scratch)
    return job_summary(totals, names, analyzed)


@functools.cache
def _input_specs() -> dict:
    """The type specs TFT traced `preprocessing_fn` with: those of `RAW_FEATURE_SPEC` read
    as TFT's Arrow source reads them."""
    source = tfxio.TFExampleBeamRecord("inmem", ["pixelmill"], raw_metadata().schema)
    return tfxio.TensorAdapter(source.TensorAdapterConfig()).OriginalTypeSpecs()


class AnalyzeAndWriteTransform(beam.PTransform):
    """Accepted images -> `output_dir/transform_fn/` + `output_dir/transformed_metadata/`.

    Input: accepted `ImageRecord`s (or accepted index rows, see `raw_features`). `class_table`
    is the list of class names in id order, or the job's singleton PCollection of it. Returns
    the one-element PCollection of the transform's summary (`job_summary`: what `tft_summary`
    reads back from the written transform), which exists once the transform is written.
    Writing survives retried bundles (`transforms.offline.tft_write`).

    TFT's `AnalyzeDataset` is not used: with every number from the combine, it was handed no
    row and still added ~45 steps and a second SavedModel to every job (docs/benchmarks.md,
    eleventh round); its own in-place path writes the same transform in one step.
    """

    def __init__(self, output_dir: str, class_table, image_size,
                 size_quantiles: int = DEFAULT_SIZE_QUANTILES, exif_orientation: bool = True):
        super().__init__()
        _checked_arguments(image_size, size_quantiles)
        if not isinstance(class_table, beam.PCollection):
            class_table = check_class_table(class_table, "class_table")
        self._output_dir = output_dir
        self._class_table = class_table
        self._arguments = (image_size, size_quantiles, exif_orientation)

    def expand(self, accepted):
        totals = (accepted
                  | "RawFeatures" >> beam.Map(raw_features)
                  | "Totals" >> beam.CombineGlobally(TotalsFn()))
        class_table = self._class_table
        if isinstance(class_table, beam.PCollection):
            class_table = beam.pvalue.AsSingleton(class_table)
        output_dir, arguments = self._output_dir, self._arguments
        return totals | "WriteTransform" >> beam.Map(
            lambda totals_, names: write_analyzed_transform(output_dir, names, totals_, *arguments),
            class_table)


def _constant(transformed: Mapping, key: str) -> list:
    """Row 0 of a `stats/*` output as Python numbers (int for int64 outputs)."""
    return np.asarray(transformed[key])[0].tolist()


def _analyzed_constants(output: tft.TFTransformOutput, transform_output_dir: str) -> dict:
    """The `stats/*` outputs, computed by running the transform on one 1x1 PNG."""
    probe = tf.io.encode_png(tf.zeros([1, 1, 3], tf.uint8))
    transformed = output.transform_raw_features({codec.IMAGE_ENCODED: tf.reshape(probe, [1])})
    missing = sorted({_PIXEL_MEAN, _PIXEL_STD, _IMAGES, _MEASURED, _PIXELS, _WIDTH_QUANTILES,
                      _HEIGHT_QUANTILES} - set(transformed))
    if missing:
        raise ValueError(
            f"{transform_output_dir} is not a pixelmill transform: outputs {missing} are "
            f"missing. Received outputs: {sorted(transformed)}")
    return {key: _constant(transformed, key) for key in transformed if key.startswith(STATS_PREFIX)}


def _class_counts(output: tft.TFTransformOutput) -> dict:
    counts = {}
    for line in output.vocabulary_by_name(CLASS_FREQUENCIES):
        frequency, _, name = line.decode("utf-8").partition(" ")
        counts[name] = int(frequency)
    return counts


def tft_summary(transform_output_dir: str) -> dict:
    """What the analysis found, read back from a written transform, for stats.json and the
    training reader (JSON-able, keys sorted by `json.dumps`).

    * `images`: accepted images analyzed.
    * `classes`: the class table in id order, `{id, name, count, weight}` per class.
      `weight` is the "balanced" class weight `images / (present_classes * count)` (null for a
      class with no image), as Keras' `class_weight` wants it (`class_weights_by_id`).
    * `labels_outside_table`: label counts that the table does not know (normally empty).
    * `pixel_stats`: `{mean, std, scale: "0-1", weighting: "pixels", images, pixel_count}`,
      the numbers the transform normalizes with (null mean/std when no image was measured).
    * `size_quantiles`: `{num_buckets, width: [...], height: [...]}` bucket boundaries (null
      for an empty dataset).
    """
    output = tft.TFTransformOutput(transform_output_dir)
    constants = _analyzed_constants(output, transform_output_dir)
    table = [line.decode("utf-8") for line in output.vocabulary_by_name(CLASS_TABLE_ASSET)]
    images = constants[_IMAGES][0]
    # An empty dataset's vocabulary holds TFT's one dummy entry, not a label.
    return _summary(constants, [] if table == [NO_CLASS] else table,
                    _class_counts(output) if images else {})


def job_summary(totals: Totals, class_table: Sequence[str], analyzed: Analyzed) -> dict:
    """`tft_summary` of the transform that the job writes from `totals` and `class_table`,
    from the same numbers (`analyzed`: `totals.analyzed`) without loading the transform back:
    that load was ~0.4 s of every job, over 1 s in a fresh process (docs/benchmarks.md, eighth
    round). A test holds the two equal."""
    constants = {_IMAGES: analyzed.counts[:1].tolist(), _MEASURED: analyzed.counts[1:2].tolist(),
                 _PIXELS: analyzed.counts[2:].tolist(), _PIXEL_MEAN: analyzed.mean.tolist(),
                 _PIXEL_STD: analyzed.std.tolist(),
                 _WIDTH_QUANTILES: analyzed.quantiles[0].tolist(),
                 _HEIGHT_QUANTILES: analyzed.quantiles[1].tolist()}
    counts = ({label.decode("utf-8"): n for label, n in totals.label_counts.items()}
              if analyzed.counts[0] else {})
    return _summary(constants, list(class_table), counts)


def _summary(constants: Mapping, table: list, counts: Mapping) -> dict:
    """stats.json's `transform` from the `stats/*` constants (Python numbers, as row 0 of
    the transform's outputs), the class table and the rows per label."""
    images = constants[_IMAGES][0]
    present = sum(1 for name in table if counts.get(name, 0) > 0)
    classes, weights_by_id = [], []
    for class_id, name in enumerate(table):
        count = counts.get(name, 0)
        weight = images / (present * count) if count else None
        classes.append({"id": class_id, "name": name, "count": count, "weight": weight})
        weights_by_id.append(weight)
    measured = constants[_MEASURED][0]
    width_quantiles = constants[_WIDTH_QUANTILES]
    return {
        "images": images,
        "classes": classes,
        "class_weights_by_id": weights_by_id,
        "labels_outside_table": {name: n for name, n in sorted(counts.items())
                                 if name not in table},
        "pixel_stats": {
            "mean": constants[_PIXEL_MEAN] if measured else None,
            "std": constants[_PIXEL_STD] if measured else None,
            "scale": "0-1",
            "weighting": "pixels",
            "images": measured,
            "pixel_count": constants[_PIXELS][0],
        },
        "size_quantiles": {
            "num_buckets": len(width_quantiles) + 1,
            "width": width_quantiles if images else None,
            "height": constants[_HEIGHT_QUANTILES] if images else None,
        },
    }


def read_normalization(transform_output_dir: str) -> tuple[list[float], list[float]]:
    """Per-channel (mean, std) on the [0, 1] scale that the transform normalizes with; the
    training reader uses these so training and serving see the same numbers."""
    stats = tft_summary(transform_output_dir)["pixel_stats"]
    if stats["mean"] is None:
        raise ValueError(
            f"The transform in {transform_output_dir} was analyzed without any measured image; "
            f"it has no normalization. Received: pixel_stats={stats!r}")
    return stats["mean"], stats["std"]
