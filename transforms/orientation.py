"""EXIF orientation inside the TensorFlow graph: read the tag from encoded bytes, apply it.

The serving graph receives only `image/encoded`, so the orientation a viewer applies must be
read from the bytes with TF ops. `read_orientation` is the graph twin of
`transforms.offline.exif.read_orientation` (same search, same limits, same answer on every
input): it looks at the first `EXIF_HEAD` bytes only (`tf.strings.substr`), finds the JPEG APP1
`Exif` segment or the PNG `eXIf` chunk, and reads tag 0x0112 of IFD0 in either byte order,
with small gathers from the head's bytes (decoded once), no loop. It never fails: bytes
without a usable tag give 1. Its size is paid at every trace, SavedModel write and load (TFT,
serving, readers with the EXIF fallback): ~370 ops, where the first version had ~940.

`apply_orientation` turns an image [H, W, C] stored in `orientation` into what a viewer
shows: the transforms of `PIL.ImageOps.exif_transpose`. A Python int builds only its own
ops (1 builds none); a tensor selects one of the eight at run time.
"""
from __future__ import annotations

import tensorflow as tf

from transforms.offline.exif import EXIF_HEAD, ORIENTATION_TAG

__all__ = ["orient_array", "read_orientation", "apply_orientation"]

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


_WINDOW_MAX = 8  # the longest `_window` read


class _Head:
    """The first `EXIF_HEAD` bytes of the encoded image, as a string and as int64 bytes read
    once (zeros after the end), so each small read is one gather rather than a substring, a
    decode and a pad (the graph's size is paid at every trace, save and load)."""

    def __init__(self, encoded: tf.Tensor):
        self.text = tf.strings.substr(tf.convert_to_tensor(encoded, tf.string), 0, EXIF_HEAD)
        self.size = tf.cast(tf.strings.length(self.text), tf.int64)
        values = tf.cast(tf.io.decode_raw(self.text, tf.uint8), tf.int64)
        self.bytes = tf.concat([values, tf.zeros([_WINDOW_MAX], tf.int64)], 0)

    def prefix(self, length) -> tf.Tensor:
        return tf.strings.substr(self.text, tf.constant(0, tf.int64), tf.cast(length, tf.int64))

    def window(self, pos: tf.Tensor, length: int) -> tf.Tensor:
        """int64 [length]: the bytes at `pos` (clamped into the head), zero past its end."""
        pos = tf.clip_by_value(pos, 0, self.size)
        return tf.gather(self.bytes, pos + tf.constant(list(range(length)), tf.int64))

    def rows(self, pos: tf.Tensor, rows: tf.Tensor, width: int) -> tf.Tensor:
        """int64 [rows, width]: `rows * width` bytes from `pos`, which the caller keeps
        inside the head."""
        pos = tf.clip_by_value(pos, 0, self.size)
        table = tf.gather(self.bytes, pos + tf.range(rows * width, dtype=tf.int64))
        table = tf.reshape(table, [-1, width])
        table.set_shape([None, width])
        return table


def _find(text: tf.Tensor, sep: bytes) -> tf.Tensor:
    """int64: the offset of the first `sep` in the scalar string `text`, or -1 (one native
    search: the op under `tf.strings.split` with `maxsplit=1`, without its ragged wrapping,
    which was 70 ops a search)."""
    _, parts, _ = tf.raw_ops.StringSplitV2(input=tf.reshape(text, [1]), sep=sep, maxsplit=1)
    before = tf.concat([parts, [b""]], 0)[0]
    return tf.where(tf.size(parts) > 1, tf.cast(tf.strings.length(before), tf.int64),
                    tf.constant(-1, tf.int64))


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


def _exif_block(head: _Head) -> tuple[tf.Tensor, tf.Tensor]:
    """(start, end) of the TIFF block in the head, or (-1, -1): see `transforms.offline.exif`."""
    size = head.size
    is_jpeg = tf.equal(head.prefix(2), b"\xff\xd8")
    is_png = tf.equal(head.prefix(8), _PNG_MAGIC)
    # Each search runs on the head of its own format only (an empty string otherwise).
    exif_at = _find(head.prefix(tf.where(is_jpeg, size, 0)), b"Exif\x00\x00")
    segment = head.window(exif_at - 4, 4)                       # FF E1 and the length
    jpeg = (is_jpeg & (exif_at >= 4) & tf.equal(segment[0], 0xFF)
            & tf.equal(segment[1], 0xE1))
    jpeg_end = tf.minimum(exif_at - 2 + _number(segment[2:]), size)
    png_head = head.prefix(tf.where(is_png, size, 0))
    png_at, idat = _find(png_head, b"eXIf"), _find(png_head, b"IDAT")
    png = is_png & (png_at >= 12) & ((idat < 0) | (idat > png_at))
    png_end = tf.minimum(png_at + 4 + _number(head.window(png_at - 4, 4)), size)
    none = tf.constant(-1, tf.int64)
    start = tf.where(jpeg, exif_at + 6, tf.where(png, png_at + 4, none))
    end = tf.where(jpeg, jpeg_end, tf.where(png, png_end, none))
    return start, end


def _tiff_orientation(head: _Head, start: tf.Tensor, end: tf.Tensor) -> tf.Tensor:
    """Tag 0x0112 of IFD0 of the TIFF block head[start:end]; 1 when absent or not 1..8."""
    header = head.window(start, 8)
    little = tf.equal(header[0], 0x49) & tf.equal(header[1], 0x49)       # "II"
    big = tf.equal(header[0], 0x4D) & tf.equal(header[1], 0x4D)          # "MM"
    ifd = start + _number(header[4:8], little)
    usable = ((start >= 0) & (end - start >= 8) & (little | big)
              & tf.equal(_number(header[2:4], little), 42) & (ifd + 2 <= end))
    count = tf.where(usable, _number(head.window(ifd, 2), little), 0)
    fits = tf.maximum((end - (ifd + 2)) // 12, 0)
    entries = tf.minimum(count, fits)
    table = head.rows(ifd + 2, entries, 12)
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
    tensor); 1 for other formats and for bytes without a usable tag. No control flow: ~300
    small ops and three searches of the first `EXIF_HEAD` bytes."""
    head = _Head(encoded)
    start, end = _exif_block(head)
    return _tiff_orientation(head, start, end)


# What a viewer does to an image [H, W, C] stored in orientation k (`exif_transpose`), once
# for the three forms below: (transpose, then reverse axis 0, reverse axis 1). Plain
# transpose/reverse ops: `tf.image.rot90` and the flips carry shape Asserts, which are stateful
# and would keep the decode alive in graphs that prune it (TFT's analysis of empty bytes).
_MOVES = (
    (False, False, False),  # 1
    (False, False, True),   # 2: mirrored left-right
    (False, True, True),    # 3: upside down
    (False, True, False),   # 4: mirrored top-bottom
    (True, False, False),   # 5
    (True, False, True),    # 6: a quarter turn clockwise
    (True, True, True),     # 7: transverse
    (True, True, False),    # 8: a quarter turn counter-clockwise
)


def orient_array(image, orientation: int):
    """`apply_orientation` for a numpy array and a Python int (outside 1..8: unchanged); a
    view, the caller copies if it needs contiguity."""
    if not 1 <= orientation <= 8:
        return image
    transpose, rows, columns = _MOVES[orientation - 1]
    image = image.transpose(1, 0, 2) if transpose else image
    return image[::-1 if rows else 1, ::-1 if columns else 1]


def apply_orientation(image: tf.Tensor, orientation) -> tf.Tensor:
    """`image` [H, W, C] as a viewer shows it when stored in EXIF `orientation` (a Python int
    or an int tensor; values outside 1..8 are treated as 1)."""
    if isinstance(orientation, int) and not isinstance(orientation, bool):
        if not 1 <= orientation <= 8:
            return image
        transpose, rows, columns = _MOVES[orientation - 1]
        image = tf.transpose(image, [1, 0, 2]) if transpose else image
        axes = [axis for axis, flip in ((0, rows), (1, columns)) if flip]
        return tf.reverse(image, axes) if axes else image
    # A tensor: the same moves with no control flow (a `switch_case` of the eight was nine
    # functions in every graph that decodes, each one paid at every trace, save and load): a
    # transpose whose permutation is chosen at run time, then a reverse of the chosen axes.
    orientation = tf.cast(orientation, tf.int32)
    index = tf.where((orientation >= 1) & (orientation <= 8), orientation - 1, 0)
    moves = tf.gather(tf.constant(_MOVES), index)               # [transpose, flip 0, flip 1]
    result = tf.transpose(image, tf.where(moves[0], [1, 0, 2], [0, 1, 2]))
    result = tf.reverse(result, tf.boolean_mask(tf.constant([0, 1]), moves[1:]))
    result.set_shape([None, None, image.shape[-1]])
    return result
