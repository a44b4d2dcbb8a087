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

import array
import functools
import operator
import sys
from typing import TYPE_CHECKING, Mapping, Sequence

from transforms.offline import quality_rules

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "IMAGE_ENCODED", "IMAGE_FORMAT", "IMAGE_HEIGHT", "IMAGE_WIDTH", "IMAGE_CHANNELS",
    "IMAGE_ORIENTATION", "IMAGE_FILENAME", "IMAGE_SHA256", "IMAGE_SOURCE_ID", "CLASS_LABEL",
    "CLASS_TEXT",
    "BBOX_XMIN", "BBOX_YMIN", "BBOX_XMAX", "BBOX_YMAX", "BOX_CLASS_LABEL", "BOX_CLASS_TEXT",
    "QUALITY_PREFIX", "META_PREFIX", "QUALITY_METRICS",
    "BOX_KEYS", "source_id", "feature_spec", "encode_example", "example_features",
    "serialize_features", "serialized_parts", "LARGE_VALUE", "parse_example",
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


_BYTES, _FLOATS, _INTS = "bytes_list", "float_list", "int64_list"  # Feature's oneof names
_KIND_TAG = {_BYTES: b"\x0a", _FLOATS: b"\x12", _INTS: b"\x1a"}    # and its fields' tags
_FIELD_1, _FIELD_2 = b"\x0a", b"\x12"                             # length-delimited 1 and 2
_ONE_BYTE = [bytes([value]) for value in range(128)]
_FEATURE_KEY = operator.itemgetter(0)


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    value &= (1 << 64) - 1  # int64 as protobuf stores it: two's complement, 10 bytes if < 0
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _float32(values) -> array.array:
    floats = array.array("f", values)  # rounds like protobuf's float field (1e300 -> inf)
    if sys.byteorder != "little":
        floats.byteswap()
    return floats


# A bytes value this long (image bytes) stays a part of its own in `serialized_parts`: copying
# a camera JPEG into each enclosing message cost ~4 ms of a 2.4 MB record's ~6 ms of writing.
LARGE_VALUE = 1 << 16


def _feature(kind: str, values: tuple) -> bytes:
    """One serialized tf.train.Feature (its oneof set, even to an empty list)."""
    if kind == _BYTES:
        payload = b"".join([_FIELD_1 + _varint(len(value)) + value for value in values])
    elif not values:
        payload = b""
    elif kind == _FLOATS:
        packed = _float32(values).tobytes()
        payload = _FIELD_1 + _varint(len(packed)) + packed
    else:
        packed = b"".join([_varint(value) for value in values])
        payload = _FIELD_1 + _varint(len(packed)) + packed
    return _KIND_TAG[kind] + _varint(len(payload)) + payload


@functools.lru_cache(maxsize=4096)
def _key_field(key: str) -> bytes:
    encoded = key.encode()
    return _FIELD_1 + _varint(len(encoded)) + encoded


def _entry(key: str, feature: bytes, following: int = 0) -> bytes:
    """The features map's entry of `key` whose Feature is `feature` (and `following` more
    bytes, a large value written after it as a part of its own)."""
    feature_length = len(feature) + following
    head = _key_field(key) + _FIELD_2 + _varint(feature_length)
    return _FIELD_1 + _varint(len(head) + feature_length) + head + feature


@functools.lru_cache(maxsize=4096)
def _one_float_head(key: str) -> bytes:
    """The entry of `key` with one float, up to the float's 4 bytes (all of a fixed length)."""
    return _entry(key, _KIND_TAG[_FLOATS] + b"\x06" + _FIELD_1 + b"\x04", 4)


# Entries of features whose values recur from record to record (a format, a size, a class,
# empty box lists: about half of a record's), kept once made: ~1 us each to make, ~0.2 us to
# find. Only small values are kept (`_recurring`), at most `_MAX_ENTRIES`.
_ENTRIES: dict = {}
_MAX_ENTRIES = 4096
_RECURRING_BYTES = 16


def _recurring(kind: str, values) -> bool:
    """Whether a feature's entry is kept once made: small values, given as a tuple of bytes or
    ints (a list or a bytearray, which cannot be a key, is made each time)."""
    if type(values) is not tuple:
        return False
    if kind == _BYTES:
        return not values or (len(values) == 1 and type(values[0]) is bytes
                              and len(values[0]) <= _RECURRING_BYTES)
    return kind == _INTS and len(values) <= 1


def serialized_parts(features: Sequence[tuple]) -> list:
    """`serialize_features(features)` as parts whose join is it: the value of a bytes feature
    with one value of `LARGE_VALUE` bytes or more (the image bytes) is a part of its own, not
    copied into the messages around it; the bytes between such values are joined. A writer
    writes (and checksums) the parts one after another."""
    parts, small = [], []
    for key, kind, values in sorted(features, key=_FEATURE_KEY):
        if kind == _FLOATS and len(values) == 1:
            small.append(_one_float_head(key) + _float32(values).tobytes())
            continue
        if _recurring(kind, values):
            entry = _ENTRIES.get((key, kind, values))
            if entry is None:
                if len(_ENTRIES) >= _MAX_ENTRIES:
                    _ENTRIES.clear()
                entry = _ENTRIES[key, kind, values] = _entry(key, _feature(kind, values))
            small.append(entry)
            continue
        large = (values[0] if kind == _BYTES and len(values) == 1
                 and len(values[0]) >= LARGE_VALUE else b"")
        if large:  # the Feature up to its one value, which follows as a part of its own
            value_field = _FIELD_1 + _varint(len(large))
            feature = _KIND_TAG[kind] + _varint(len(value_field) + len(large)) + value_field
            small.append(_entry(key, feature, len(large)))
            parts += (b"".join(small), large)
            small = []
        else:
            small.append(_entry(key, _feature(kind, values)))
    if small or not parts:
        parts.append(b"".join(small))
    parts[0] = _FIELD_1 + _varint(sum(map(len, parts))) + parts[0]
    return parts


def serialize_features(features: Sequence[tuple]) -> bytes:
    """The serialized tf.train.Example of `example_features`' (key, kind, values), byte for byte
    what `Example.SerializeToString(deterministic=True)` gives (map entries sorted by key);
    written directly because building the proto objects cost ~0.1 ms per record."""
    return b"".join(serialized_parts(features))


def example_features(*, encoded: bytes, image_format: str, height: int, width: int,
                     filename: str, sha256: str, label: int, label_text: str,
                     channels: int = 3, orientation: int = 1,
                     boxes: Sequence[Sequence[float]] = (), box_labels: Sequence[int] = (),
                     box_texts: Sequence[str] = (),
                     quality: Mapping[str, float] | None = None,
                     meta: Mapping[str, str] | None = None, label_offset: int = 0) -> tuple:
    """((key, kind, values), ...) sorted by key: every feature of one accepted image as
    `encode_example` stores it and a parser reads it back (floats rounded to float32; `kind`
    is the Feature's oneof, "bytes_list", "float_list" or "int64_list"). Arguments as
    `encode_example`'s."""
    if isinstance(orientation, bool) or orientation not in range(1, 9):
        raise ValueError(f"orientation must be an EXIF orientation 1..8. Received: "
                         f"orientation={orientation!r}")
    if not (len(boxes) == len(box_labels) == len(box_texts)):
        raise ValueError(
            f"boxes, box_labels and box_texts must have the same length. Received: "
            f"{len(boxes)}, {len(box_labels)}, {len(box_texts)}")
    features = [
        (IMAGE_ENCODED, _BYTES, (encoded,)),
        (IMAGE_FORMAT, _BYTES, (image_format.encode(),)),
        (IMAGE_HEIGHT, _INTS, (int(height),)),
        (IMAGE_WIDTH, _INTS, (int(width),)),
        (IMAGE_CHANNELS, _INTS, (int(channels),)),
        (IMAGE_ORIENTATION, _INTS, (int(orientation),)),
        (IMAGE_FILENAME, _BYTES, (filename.encode(),)),
        (IMAGE_SHA256, _BYTES, (sha256.encode(),)),
        (IMAGE_SOURCE_ID, _BYTES, (source_id(sha256).encode(),)),
        (CLASS_LABEL, _INTS, (int(label + label_offset),)),
        (CLASS_TEXT, _BYTES, (label_text.encode(),)),
    ]
    for index, key in enumerate(_BOX_KEYS):
        features.append((key, _FLOATS, tuple(_float32([box[index] for box in boxes]))))
    features.append((BOX_CLASS_LABEL, _INTS,
                     tuple(int(box_label + label_offset) for box_label in box_labels)))
    features.append((BOX_CLASS_TEXT, _BYTES, tuple(t.encode() for t in box_texts)))
    for name, value in (quality or {}).items():
        features.append((QUALITY_PREFIX + name, _FLOATS, tuple(_float32([value]))))
    for name, value in (meta or {}).items():
        features.append((META_PREFIX + name, _BYTES, (str(value).encode(),)))
    return tuple(sorted(features, key=lambda feature: feature[0]))


def encode_example(**fields) -> bytes:
    """Serializes one accepted image (keyword arguments: `example_features`'). Boxes are
    (xmin, ymin, xmax, ymax) normalized to [0, 1].

    `label` and `box_labels` are class-table ids; `label_offset` is added to both as they are
    stored. The output is deterministic: map entries in sorted key order, as
    `SerializeToString(deterministic=True)` writes them.
    """
    return serialize_features(example_features(**fields))


def feature_spec(with_boxes: bool = True, quality: bool = False,
                 meta_columns: Sequence[str] = ()) -> dict:
    """The parsing spec of the contract. Box features parse as variable-length (sparse) lists;
    images without boxes parse to empty lists, so one spec reads every shard."""
    import tensorflow as tf  # here: the job's launcher encodes records and never imports TF
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
    import tensorflow as tf
    parsed = tf.io.parse_single_example(
        serialized, feature_spec(with_boxes, quality, meta_columns))
    parsed[CLASS_LABEL] = parsed[CLASS_LABEL] - label_offset
    if with_boxes:
        for key in BOX_KEYS:
            parsed[key] = tf.sparse.to_dense(parsed[key])
        parsed[BOX_CLASS_LABEL] = parsed[BOX_CLASS_LABEL] - label_offset
    return parsed
