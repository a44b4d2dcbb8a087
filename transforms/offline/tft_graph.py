"""The transform's TensorFlow side: the `preprocessing_fn` made from the analyzed numbers, the
written transform, and what is read back from one (`tft_summary`, `read_normalization`).

Imported where TensorFlow runs anyway: the isolated child that writes a job's transform
(`tft_analysis.AnalyzeAndWriteTransform`), the training reader, serving and the tests. The
job's launcher never imports it: it needs no TensorFlow of its own (its decoders and this
writer run in children whose forkserver imported TensorFlow alongside the launcher's start),
which takes TensorFlow's ~3 s import off the critical path of every job (docs/benchmarks.md,
twelfth round). The combine and the Beam step are in `tft_analysis`, the outputs' names and
the summary in `tft_outputs`.
"""
from __future__ import annotations

import contextlib
import functools
import tempfile
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.coders import example_coder
from tfx_bsl.tfxio import tensor_adapter, tensor_representation_util

from configs.online import image_size_pair
from transforms import codec
from transforms.decode import decode_for_model
from transforms.offline.tft_assets import (
    CLASS_FREQUENCIES,
    CLASS_TABLE_ASSET,
    NO_CLASS,
    check_class_table,
    write_assets,
)
from transforms.offline.tft_outputs import (
    DEFAULT_SIZE_QUANTILES,
    IMAGE,
    LABEL,
    STATS_HEIGHT_QUANTILES,
    STATS_IMAGES,
    STATS_MEASURED,
    STATS_PIXEL_MEAN,
    STATS_PIXEL_STD,
    STATS_PIXELS,
    STATS_PREFIX,
    STATS_WIDTH_QUANTILES,
    checked_arguments,
    job_summary,
    summary_of,
)
from transforms.offline.tft_totals import (
    CHANNEL_SQSUM,
    CHANNEL_SUM,
    HEIGHT,
    PIXEL_COUNT,
    WIDTH,
    Analyzed,
    Totals,
)
from transforms.offline.tft_write import write_transform

__all__ = ["RAW_FEATURE_SPEC", "raw_metadata", "make_preprocessing_fn",
           "write_analyzed_transform", "warm_up", "tft_summary", "read_normalization"]

RAW_FEATURE_SPEC = {
    codec.IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string),
    codec.CLASS_TEXT: tf.io.FixedLenFeature([], tf.string),
    PIXEL_COUNT: tf.io.FixedLenFeature([], tf.int64),
    CHANNEL_SUM: tf.io.FixedLenFeature([3], tf.float32),
    CHANNEL_SQSUM: tf.io.FixedLenFeature([3], tf.float32),
    WIDTH: tf.io.FixedLenFeature([], tf.int64),
    HEIGHT: tf.io.FixedLenFeature([], tf.int64),
}


def raw_metadata() -> tft.DatasetMetadata:
    """The raw schema TFT analyzes (`RAW_FEATURE_SPEC`)."""
    return tft.DatasetMetadata.from_feature_spec(RAW_FEATURE_SPEC)


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
            STATS_PIXEL_MEAN: _per_row(encoded, mean),
            STATS_PIXEL_STD: _per_row(encoded, std),
            STATS_IMAGES: _per_row(encoded, counts[0], tf.int64),
            STATS_MEASURED: _per_row(encoded, counts[1], tf.int64),
            STATS_PIXELS: _per_row(encoded, counts[2], tf.int64),
            STATS_WIDTH_QUANTILES: _per_row(encoded, quantiles[0]),
            STATS_HEIGHT_QUANTILES: _per_row(encoded, quantiles[1]),
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
    checked_arguments(image_size, size_quantiles)
    analyzed = totals.analyzed(size_quantiles)
    with tempfile.TemporaryDirectory(prefix="pixelmill-transform-") as scratch:
        table_path, frequencies_path = write_assets(scratch, names, totals.label_counts)
        preprocessing_fn = make_preprocessing_fn(table_path, frequencies_path, analyzed,
                                                 image_size, exif_orientation)
        write_transform(preprocessing_fn, _input_specs(), _ASSET_MAP, output_dir, scratch)
    return job_summary(totals, names, analyzed)


def warm_up(image_size, exif_orientation: bool = True) -> None:
    """Traces now what writing a transform for `image_size` will trace whatever the analyzed
    numbers: the batch decoder (most of a write's tracing) and the input specs. A writing child
    started with the job does it while the job runs, so the write after the job's last combine
    is shorter. The written files do not change (`tft_write` names functions by their order)."""
    orientation = None if exif_orientation else 1
    _model_decoder(image_size_pair(image_size), orientation).get_concrete_function()
    _input_specs()


@functools.cache
def _input_specs() -> dict:
    """The type specs TFT traced `preprocessing_fn` with: those of `RAW_FEATURE_SPEC` read
    as TFT's Arrow source of tf.Examples (tfx_bsl's `TFExampleBeamRecord`) reads them, from
    the two calls that source makes (its Arrow schema, its tensor representations) without
    its Beam half: the writing child imports no Beam (`tft_child`)."""
    schema = raw_metadata().schema
    arrow_schema = example_coder.ExamplesToRecordBatchDecoder(
        schema.SerializeToString()).ArrowSchema()
    representations = tensor_representation_util.InferTensorRepresentationsFromMixedSchema(
        schema)
    config = tensor_adapter.TensorAdapterConfig(arrow_schema, representations)
    return tensor_adapter.TensorAdapter(config).OriginalTypeSpecs()


def _constant(transformed: Mapping, key: str) -> list:
    """Row 0 of a `stats/*` output as Python numbers (int for int64 outputs)."""
    return np.asarray(transformed[key])[0].tolist()


def _analyzed_constants(output: tft.TFTransformOutput, transform_output_dir: str) -> dict:
    """The `stats/*` outputs, computed by running the transform on one 1x1 PNG."""
    probe = tf.io.encode_png(tf.zeros([1, 1, 3], tf.uint8))
    transformed = output.transform_raw_features({codec.IMAGE_ENCODED: tf.reshape(probe, [1])})
    missing = sorted({STATS_PIXEL_MEAN, STATS_PIXEL_STD, STATS_IMAGES, STATS_MEASURED,
                      STATS_PIXELS, STATS_WIDTH_QUANTILES, STATS_HEIGHT_QUANTILES}
                     - set(transformed))
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
    images = constants[STATS_IMAGES][0]
    # An empty dataset's vocabulary holds TFT's one dummy entry, not a label.
    return summary_of(constants, [] if table == [NO_CLASS] else table,
                    _class_counts(output) if images else {})


def read_normalization(transform_output_dir: str) -> tuple[list[float], list[float]]:
    """Per-channel (mean, std) on the [0, 1] scale that the transform normalizes with; the
    training reader uses these so training and serving see the same numbers."""
    stats = tft_summary(transform_output_dir)["pixel_stats"]
    if stats["mean"] is None:
        raise ValueError(
            f"The transform in {transform_output_dir} was analyzed without any measured image; "
            f"it has no normalization. Received: pixel_stats={stats!r}")
    return stats["mean"], stats["std"]
