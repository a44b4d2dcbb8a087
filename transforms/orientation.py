"""EXIF orientation inside the TensorFlow graph: read the tag from encoded bytes, apply it.

The serving graph receives only `image/encoded`, so the orientation a viewer applies must be
read from the bytes with TF ops. `read_orientation` is the graph twin of
`transforms.offline.exif.read_orientation` (same search, same limits, same answer on every
input): it looks at the first `EXIF_HEAD` bytes only (`tf.strings.substr`), finds the JPEG APP1
`Exif` segment or the PNG `eXIf` chunk, and reads tag 0x0112 of IFD0 in either byte order,
with small windows of bytes (`substr` + `decode_raw`), no loop. It never fails: bytes without
a usable tag give 1.

`apply_orientation` turns an image [H, W, C] stored in `orientation` into what a viewer
shows: the transforms of `PIL.ImageOps.exif_transpose`. A Python int builds only its own
ops (1 builds none); a tensor selects one of the eight at run time.
"""
from __future__ import annotations

import tensorflow as tf

from transforms.offline.exif import EXIF_HEAD, ORIENTATION_TAG

__all__ = ["orient_array", "read_orientation", "apply_orientation"]

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _length(text: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.strings.length(text), tf.int64)


def _substr(head: tf.Tensor, pos: tf.Tensor, length) -> tf.Tensor:
    return tf.strings.substr(head, tf.cast(pos, tf.int64), tf.cast(length, tf.int64))


def _find(head: tf.Tensor, text: bytes) -> tf.Tensor:
    """int64: the offset of the first `text` in the scalar string `head`, or -1 (one native
    search, `tf.strings.split` with `maxsplit=1`)."""
    parts = tf.strings.split(head, text, maxsplit=1)
    before = tf.concat([parts, [b""]], 0)[0]
    return tf.where(tf.size(parts) > 1, _length(before), tf.constant(-1, tf.int64))


def _window(head: tf.Tensor, pos: tf.Tensor, length: int) -> tf.Tensor:
    """int64 [length]: the bytes of `head` at `pos` (clamped into it), zero past its end."""
    pos = tf.clip_by_value(pos, 0, _length(head))
    values = tf.io.decode_raw(_substr(head, pos, length), tf.uint8)
    values = tf.pad(values, [[0, length - tf.size(values)]])
    return tf.cast(tf.reshape(values, [length]), tf.int64)


def _number(values: tf.Tensor, little: tf.Tensor | bool = False) -> tf.Tensor:
    """Unsigned integer of the bytes on the last axis of `values`, big-endian unless
    `little`."""
    width = values.shape[-1]
    big = [256 ** (width - 1 - i) for i in range(width)]
    if isinstance(little, bool):
        weights = tf.constant(big[::-1] if little else big, tf.int64)
    else:  # one weight vector chosen at run time: ~10 ops, where a sum of terms is ~50
        weights = tf.where(little, tf.constant(big[::-1], tf.int64), tf.constant(big, tf.int64))
    return tf.reduce_sum(values * weights, axis=-1)


def _exif_block(head: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(start, end) of the TIFF block in `head`, or (-1, -1): see `transforms.offline.exif`."""
    size = _length(head)
    is_jpeg = tf.equal(_substr(head, 0, 2), b"\xff\xd8")
    is_png = tf.equal(_substr(head, 0, 8), _PNG_MAGIC)
    # Each search runs on the head of its own format only (an empty string otherwise).
    exif_at = _find(_substr(head, 0, tf.where(is_jpeg, size, 0)), b"Exif\x00\x00")
    segment = _window(head, exif_at - 4, 4)                     # FF E1 and the length
    jpeg = (is_jpeg & (exif_at >= 4) & tf.equal(segment[0], 0xFF)
            & tf.equal(segment[1], 0xE1))
    jpeg_end = tf.minimum(exif_at - 2 + _number(segment[2:]), size)
    png_head = _substr(head, 0, tf.where(is_png, size, 0))
    png_at, idat = _find(png_head, b"eXIf"), _find(png_head, b"IDAT")
    png = is_png & (png_at >= 12) & ((idat < 0) | (idat > png_at))
    png_end = tf.minimum(png_at + 4 + _number(_window(head, png_at - 4, 4)), size)
    none = tf.constant(-1, tf.int64)
    start = tf.where(jpeg, exif_at + 6, tf.where(png, png_at + 4, none))
    end = tf.where(jpeg, jpeg_end, tf.where(png, png_end, none))
    return start, end


def _tiff_orientation(head: tf.Tensor, start: tf.Tensor, end: tf.Tensor) -> tf.Tensor:
    """Tag 0x0112 of IFD0 of the TIFF block head[start:end]; 1 when absent or not 1..8."""
    header = _window(head, start, 8)
    little = tf.equal(header[0], 0x49) & tf.equal(header[1], 0x49)       # "II"
    big = tf.equal(header[0], 0x4D) & tf.equal(header[1], 0x4D)          # "MM"
    ifd = start + _number(header[4:8], little)
    usable = ((start >= 0) & (end - start >= 8) & (little | big)
              & tf.equal(_number(header[2:4], little), 42) & (ifd + 2 <= end))
    count = tf.where(usable, _number(_window(head, ifd, 2), little), 0)
    fits = tf.maximum((end - (ifd + 2)) // 12, 0)
    entries = tf.minimum(count, fits)
    raw = tf.io.decode_raw(_substr(head, tf.clip_by_value(ifd + 2, 0, _length(head)),
                                   12 * entries), tf.uint8)
    table = tf.cast(tf.reshape(raw, [-1, 12]), tf.int64)
    table.set_shape([None, 12])
    # The first entry with the tag; a sentinel row after the last (argmax needs one row).
    is_tag = tf.concat([tf.equal(_number(table[:, 0:2], little), ORIENTATION_TAG), [True]], 0)
    row = tf.argmax(tf.cast(is_tag, tf.int32), output_type=tf.int64)
    entry = tf.concat([table, tf.zeros([1, 12], tf.int64)], 0)[row]
    kind = _number(entry[2:4], little)
    value = tf.where(tf.equal(kind, 1), entry[8],
                     tf.where(tf.equal(kind, 3), _number(entry[8:10], little),
                              _number(entry[8:12], little)))
    usable = ((row < entries) & tf.equal(_number(entry[4:8], little), 1)
              & ((kind == 1) | (kind == 3) | (kind == 4)) & (value >= 1) & (value <= 8))
    return tf.cast(tf.where(usable, value, 1), tf.int32)


def read_orientation(encoded: tf.Tensor) -> tf.Tensor:
    """int32 scalar: the EXIF orientation (1..8) of encoded JPEG or PNG bytes (a scalar string
    tensor); 1 for other formats and for bytes without a usable tag. No control flow: a few
    dozen small ops and two searches of the first `EXIF_HEAD` bytes."""
    head = tf.strings.substr(tf.convert_to_tensor(encoded, tf.string), 0, EXIF_HEAD)
    start, end = _exif_block(head)
    return _tiff_orientation(head, start, end)


def _transpose(image: tf.Tensor) -> tf.Tensor:
    return tf.transpose(image, [1, 0, 2])


# What a viewer does to an image [H, W, C] stored in orientation k (`exif_transpose`). Plain
# reverse/transpose ops: `tf.image.rot90` and the flips carry shape Asserts, which are stateful
# and would keep the decode alive in graphs that prune it (TFT's analysis of empty bytes).
_TRANSFORMS = (
    lambda image: image,                                    # 1
    lambda image: tf.reverse(image, [1]),                   # 2: mirrored left-right
    lambda image: tf.reverse(image, [0, 1]),                # 3: upside down
    lambda image: tf.reverse(image, [0]),                   # 4: mirrored top-bottom
    _transpose,                                             # 5
    lambda image: tf.reverse(_transpose(image), [1]),       # 6: a quarter turn clockwise
    lambda image: tf.reverse(_transpose(image), [0, 1]),    # 7: transverse
    lambda image: tf.reverse(_transpose(image), [0]),       # 8: a quarter turn counter-clockwise
)


# The same turns on a numpy array [H, W, C] (views; the caller copies if it needs contiguity).
_ARRAY_TRANSFORMS = (
    lambda a: a, lambda a: a[:, ::-1], lambda a: a[::-1, ::-1], lambda a: a[::-1],
    lambda a: a.transpose(1, 0, 2), lambda a: a.transpose(1, 0, 2)[:, ::-1],
    lambda a: a.transpose(1, 0, 2)[::-1, ::-1], lambda a: a.transpose(1, 0, 2)[::-1],
)


def orient_array(image, orientation: int):
    """`apply_orientation` for a numpy array and a Python int (outside 1..8: unchanged)."""
    return _ARRAY_TRANSFORMS[orientation - 1](image) if 1 <= orientation <= 8 else image


def apply_orientation(image: tf.Tensor, orientation) -> tf.Tensor:
    """`image` [H, W, C] as a viewer shows it when stored in EXIF `orientation` (a Python int
    or an int tensor; values outside 1..8 are treated as 1)."""
    if isinstance(orientation, int) and not isinstance(orientation, bool):
        return _TRANSFORMS[orientation - 1](image) if 1 <= orientation <= 8 else image
    orientation = tf.cast(orientation, tf.int32)
    index = tf.where((orientation >= 1) & (orientation <= 8), orientation - 1, 0)
    result = tf.switch_case(index, [lambda f=f: f(image) for f in _TRANSFORMS])
    result.set_shape([None, None, image.shape[-1]])
    return result
