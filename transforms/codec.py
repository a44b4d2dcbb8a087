"""The record contract: the one place that encodes and parses pixelmill's tf.train.Example.

Keys follow the TF Object Detection API / TF-Slim image conventions (see DESIGN.md), so other
readers understand the shards too. The offline writer calls `encode_example`; the online reader
calls `parse_example`; nothing else declares feature keys.

Every record carries every key: an image without boxes has empty box lists, and the writer
gives every record of a snapshot the same `meta/` columns (empty strings where a CSV row had
none), so readers that batch raw features (DALI, TFDS, a fixed `parse_example` spec) see one
structure. `image/orientation` is the EXIF orientation of the stored bytes (1..8, 1 when
none); `image/height` and `image/width` are the size as decoded, so the displayed size when
`decode.exif_orientation` is on. Shards written before the key parse it as 0 ("not recorded":
the reader then reads it from the bytes). `label_offset` shifts the stored class ids (1 for
detection models that reserve 0 for background); `parse_example` takes it off again.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import tensorflow as tf

from transforms.offline import quality_rules

__all__ = [
    "IMAGE_ENCODED", "IMAGE_FORMAT", "IMAGE_HEIGHT", "IMAGE_WIDTH", "IMAGE_CHANNELS",
    "IMAGE_ORIENTATION", "IMAGE_FILENAME", "IMAGE_SHA256", "IMAGE_SOURCE_ID", "CLASS_LABEL",
    "CLASS_TEXT",
    "BBOX_XMIN", "BBOX_YMIN", "BBOX_XMAX", "BBOX_YMAX", "BOX_CLASS_LABEL", "BOX_CLASS_TEXT",
    "QUALITY_PREFIX", "META_PREFIX", "QUALITY_METRICS",
    "BOX_KEYS", "source_id", "feature_spec", "encode_example", "parse_example",
]

IMAGE_ENCODED = "image/encoded"
IMAGE_FORMAT = "image/format"
IMAGE_HEIGHT = "image/height"
IMAGE_WIDTH = "image/width"
IMAGE_CHANNELS = "image/channels"
IMAGE_ORIENTATION = "image/orientation"
IMAGE_FILENAME = "image/filename"
IMAGE_SHA256 = "image/key/sha256"
IMAGE_SOURCE_ID = "image/source_id"
CLASS_LABEL = "image/class/label"
CLASS_TEXT = "image/class/text"
BBOX_XMIN = "image/object/bbox/xmin"
BBOX_YMIN = "image/object/bbox/ymin"
BBOX_XMAX = "image/object/bbox/xmax"
BBOX_YMAX = "image/object/bbox/ymax"
BOX_CLASS_LABEL = "image/object/class/label"
BOX_CLASS_TEXT = "image/object/class/text"
QUALITY_PREFIX = "quality/"
META_PREFIX = "meta/"

# The metrics the quality filter measures; each is stored as `quality/<name>`. Owned by the
# quality rule table.
QUALITY_METRICS = quality_rules.metric_names()

_BOX_KEYS = (BBOX_XMIN, BBOX_YMIN, BBOX_XMAX, BBOX_YMAX)
# Every per-box list, in the order DALI/TFDS users declare them.
BOX_KEYS = (*_BOX_KEYS, BOX_CLASS_LABEL, BOX_CLASS_TEXT)


def source_id(sha256: str) -> str:
    """`image/source_id`: the first 63 bits of the sha256 as a decimal string.

    Decimal, not the hex digest, because the TF Model Garden's detection parsers turn the
    source id into an int64 image id (`tf.strings.to_number(..., tf.int64)` in
    `dataloaders/utils.process_source_id`) and fail on hex; 63 bits keep it a positive int64.
    The full hash stays in `image/key/sha256`.
    """
    try:
        return str(int(sha256[:16], 16) >> max(0, 4 * len(sha256[:16]) - 63))
    except ValueError:
        raise ValueError(f"sha256 must be a hex digest. Received: sha256={sha256!r}") from None


def _bytes(values: Sequence[bytes]) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def _ints(values: Sequence[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _floats(values: Sequence[float]) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


def encode_example(*, encoded: bytes, image_format: str, height: int, width: int,
                   filename: str, sha256: str, label: int, label_text: str,
                   channels: int = 3, orientation: int = 1,
                   boxes: Sequence[Sequence[float]] = (), box_labels: Sequence[int] = (),
                   box_texts: Sequence[str] = (),
                   quality: Mapping[str, float] | None = None,
                   meta: Mapping[str, str] | None = None, label_offset: int = 0) -> bytes:
    """Serializes one accepted image. Boxes are (xmin, ymin, xmax, ymax) normalized to [0, 1].

    `label` and `box_labels` are class-table ids; `label_offset` is added to both as they are
    stored. The output is deterministic: tf.train.Example serializes map entries in sorted key
    order.
    """
    if isinstance(orientation, bool) or orientation not in range(1, 9):
        raise ValueError(f"orientation must be an EXIF orientation 1..8. Received: "
                         f"orientation={orientation!r}")
    if not (len(boxes) == len(box_labels) == len(box_texts)):
        raise ValueError(
            f"boxes, box_labels and box_texts must have the same length. Received: "
            f"{len(boxes)}, {len(box_labels)}, {len(box_texts)}")
    feature = {
        IMAGE_ENCODED: _bytes([encoded]),
        IMAGE_FORMAT: _bytes([image_format.encode()]),
        IMAGE_HEIGHT: _ints([height]),
        IMAGE_WIDTH: _ints([width]),
        IMAGE_CHANNELS: _ints([channels]),
        IMAGE_ORIENTATION: _ints([orientation]),
        IMAGE_FILENAME: _bytes([filename.encode()]),
        IMAGE_SHA256: _bytes([sha256.encode()]),
        IMAGE_SOURCE_ID: _bytes([source_id(sha256).encode()]),
        CLASS_LABEL: _ints([label + label_offset]),
        CLASS_TEXT: _bytes([label_text.encode()]),
    }
    for index, key in enumerate(_BOX_KEYS):
        feature[key] = _floats([box[index] for box in boxes])
    feature[BOX_CLASS_LABEL] = _ints([box_label + label_offset for box_label in box_labels])
    feature[BOX_CLASS_TEXT] = _bytes([t.encode() for t in box_texts])
    for name, value in sorted((quality or {}).items()):
        feature[QUALITY_PREFIX + name] = _floats([value])
    for name, value in sorted((meta or {}).items()):
        feature[META_PREFIX + name] = _bytes([str(value).encode()])
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def feature_spec(with_boxes: bool = True, quality: bool = False,
                 meta_columns: Sequence[str] = ()) -> dict:
    """The parsing spec of the contract. Box features parse as variable-length (sparse) lists;
    images without boxes parse to empty lists, so one spec reads every shard."""
    spec = {
        IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string),
        IMAGE_FORMAT: tf.io.FixedLenFeature([], tf.string),
        IMAGE_HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        IMAGE_WIDTH: tf.io.FixedLenFeature([], tf.int64),
        IMAGE_CHANNELS: tf.io.FixedLenFeature([], tf.int64, default_value=3),
        IMAGE_ORIENTATION: tf.io.FixedLenFeature([], tf.int64, default_value=0),
        IMAGE_FILENAME: tf.io.FixedLenFeature([], tf.string),
        IMAGE_SHA256: tf.io.FixedLenFeature([], tf.string),
        IMAGE_SOURCE_ID: tf.io.FixedLenFeature([], tf.string, default_value=""),
        CLASS_LABEL: tf.io.FixedLenFeature([], tf.int64),
        CLASS_TEXT: tf.io.FixedLenFeature([], tf.string),
    }
    if with_boxes:
        for key in _BOX_KEYS:
            spec[key] = tf.io.VarLenFeature(tf.float32)
        spec[BOX_CLASS_LABEL] = tf.io.VarLenFeature(tf.int64)
        spec[BOX_CLASS_TEXT] = tf.io.VarLenFeature(tf.string)
    if quality:
        for name in QUALITY_METRICS:
            spec[QUALITY_PREFIX + name] = tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
    for column in meta_columns:
        spec[META_PREFIX + column] = tf.io.FixedLenFeature([], tf.string, default_value="")
    return spec


def parse_example(serialized: tf.Tensor, with_boxes: bool = True, quality: bool = False,
                  meta_columns: Sequence[str] = (), label_offset: int = 0) -> dict:
    """Parses one serialized Example (graph-friendly; use inside `tf.data.Dataset.map`).

    Box coordinates come back dense, shape [num_boxes], as `image/object/bbox/*`. Class ids
    come back as class-table ids: `label_offset` (the snapshot's `output.label_offset`) is
    subtracted from `image/class/label` and `image/object/class/label`.
    """
    parsed = tf.io.parse_single_example(
        serialized, feature_spec(with_boxes, quality, meta_columns))
    parsed[CLASS_LABEL] = parsed[CLASS_LABEL] - label_offset
    if with_boxes:
        for key in BOX_KEYS:
            parsed[key] = tf.sparse.to_dense(parsed[key])
        parsed[BOX_CLASS_LABEL] = parsed[BOX_CLASS_LABEL] - label_offset
    return parsed
