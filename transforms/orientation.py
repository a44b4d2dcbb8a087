"""EXIF orientation inside the TensorFlow graph: read the tag from encoded bytes, apply it.

The serving graph receives only `image/encoded`, so the orientation a viewer applies must be
read from the bytes with TF ops. `read_orientation` is the graph twin of
`transforms.offline.exif.read_orientation` (same walk, same limits, same answer on every
input): it looks at the first `EXIF_HEAD` bytes only (`tf.strings.substr`), walks JPEG markers
or PNG chunks to the EXIF block, and reads tag 0x0112 of IFD0 in either byte order. It never
fails: bytes without a usable tag give 1.

`apply_orientation` turns an image [H, W, C] stored in `orientation` into what a viewer
shows: the transforms of `PIL.ImageOps.exif_transpose`. A Python int builds only its own
ops (1 builds none); a tensor selects one of the eight at run time.
"""
from __future__ import annotations

import tensorflow as tf

from transforms.offline.exif import EXIF_HEAD, MAX_STEPS, ORIENTATION_TAG

__all__ = ["read_orientation", "apply_orientation"]

_PAD = 16  # zero bytes after the head, so every fixed-offset read stays inside the tensor


class _Bytes:
    """The head of the file as int64 values, read at (possibly out-of-range) positions."""

    def __init__(self, encoded: tf.Tensor):
        head = tf.strings.substr(encoded, 0, EXIF_HEAD)
        values = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)
        self.size = tf.size(values, out_type=tf.int64)
        self._values = tf.concat([values, tf.zeros([_PAD], tf.int64)], 0)

    def at(self, pos: tf.Tensor) -> tf.Tensor:
        return tf.gather(self._values, tf.clip_by_value(pos, 0, self.size + _PAD - 1))

    def uint(self, pos: tf.Tensor, width: int, little: tf.Tensor | bool = False) -> tf.Tensor:
        """Unsigned `width`-byte integer at `pos`, big-endian unless `little`."""
        big = tf.zeros_like(pos)
        small = tf.zeros_like(pos)
        for i in range(width):
            big = big * 256 + self.at(pos + i)
            small = small + self.at(pos + i) * (256 ** i)
        return tf.where(little, small, big)

    def equals(self, pos: tf.Tensor, text: bytes) -> tf.Tensor:
        matches = [tf.equal(self.at(pos + i), byte) for i, byte in enumerate(text)]
        return tf.logical_and(pos + len(text) <= self.size, tf.reduce_all(tf.stack(matches)))


def _walk(data: _Bytes, start: int, step) -> tuple[tf.Tensor, tf.Tensor]:
    """Runs `step(pos) -> (found, stop, next_pos, end)` from `start` for at most MAX_STEPS
    steps; (start, end) of the block found, or (-1, -1)."""
    minus_one = tf.constant(-1, tf.int64)

    def body(i, pos, found_at, end, done):
        found, stop, next_pos, block_end = step(pos)
        return (i + 1, next_pos, tf.where(found, pos, found_at),
                tf.where(found, block_end, end), found | stop)

    _, _, found_at, end, _ = tf.while_loop(
        lambda i, pos, found_at, end, done: tf.logical_and(i < MAX_STEPS, tf.logical_not(done)),
        body, (tf.constant(0), tf.constant(start, tf.int64), minus_one, minus_one,
               tf.constant(False)))
    return found_at, end


def _jpeg_exif(data: _Bytes) -> tuple[tf.Tensor, tf.Tensor]:
    """(start, end) of the TIFF block of the first `Exif` APP1 segment, or (-1, -1)."""

    def step(pos):
        marker = data.at(pos + 1)
        length = data.uint(pos + 2, 2)
        fill = tf.equal(marker, 0xFF)
        alone = tf.equal(marker, 0x01) | ((marker >= 0xD0) & (marker <= 0xD8))
        broken = (pos + 4 > data.size) | tf.not_equal(data.at(pos), 0xFF)
        found = (tf.logical_not(broken) & tf.equal(marker, 0xE1)
                 & data.equals(pos + 4, b"Exif\x00\x00"))
        stop = broken | tf.equal(marker, 0xD9) | tf.equal(marker, 0xDA) | (
            tf.logical_not(fill | alone) & (length < 2))
        one, two = tf.constant(1, tf.int64), tf.constant(2, tf.int64)
        next_pos = pos + tf.where(fill, one, tf.where(alone, two, 2 + length))
        return found, stop, next_pos, tf.minimum(pos + 2 + length, data.size)

    found_at, end = _walk(data, 2, step)
    return tf.where(found_at >= 0, found_at + 10, found_at), end


def _png_exif(data: _Bytes) -> tuple[tf.Tensor, tf.Tensor]:
    """(start, end) of an `eXIf` chunk's data before the first IDAT, or (-1, -1)."""

    def step(pos):
        length = data.uint(pos, 4)
        in_head = pos + 8 <= data.size
        found = in_head & data.equals(pos + 4, b"eXIf")
        stop = tf.logical_not(in_head) | data.equals(pos + 4, b"IDAT") | data.equals(
            pos + 4, b"IEND")
        return found, stop, pos + 12 + length, tf.minimum(pos + 8 + length, data.size)

    found_at, end = _walk(data, 8, step)
    return tf.where(found_at >= 0, found_at + 8, found_at), end


def _tiff_orientation(data: _Bytes, start: tf.Tensor, end: tf.Tensor) -> tf.Tensor:
    """Tag 0x0112 of IFD0 of the TIFF block data[start:end]; 1 when absent or not 1..8."""
    little = data.equals(start, b"II")
    header_ok = ((end - start >= 8) & (little | data.equals(start, b"MM"))
                 & tf.equal(data.uint(start + 2, 2, little), 42))
    ifd = start + data.uint(start + 4, 4, little)
    header_ok &= ifd + 2 <= end
    count = tf.where(header_ok, data.uint(ifd, 2, little), 0)
    fits = tf.maximum((end - (ifd + 2)) // 12, 0)
    entries = ifd + 2 + 12 * tf.range(tf.minimum(count, fits))
    tags = data.uint(entries, 2, little)
    # The first entry with the tag; a sentinel -1 after the last (argmax needs one element).
    is_tag = tf.concat([tf.equal(tags, ORIENTATION_TAG), [True]], 0)
    entries = tf.concat([entries, tf.constant([-1], tf.int64)], 0)
    entry = tf.gather(entries, tf.argmax(tf.cast(is_tag, tf.int32), output_type=tf.int64))
    kind = data.uint(entry + 2, 2, little)
    single = tf.equal(data.uint(entry + 4, 4, little), 1)
    value = tf.where(tf.equal(kind, 1), data.at(entry + 8),
                     tf.where(tf.equal(kind, 3), data.uint(entry + 8, 2, little),
                              data.uint(entry + 8, 4, little)))
    usable = ((entry >= 0) & single & ((kind == 1) | (kind == 3) | (kind == 4))
              & (value >= 1) & (value <= 8))
    return tf.cast(tf.where(usable, value, 1), tf.int32)


def read_orientation(encoded: tf.Tensor) -> tf.Tensor:
    """int32 scalar: the EXIF orientation (1..8) of encoded JPEG or PNG bytes (a scalar string
    tensor); 1 for other formats and for bytes without a usable tag."""
    encoded = tf.convert_to_tensor(encoded, tf.string)
    data = _Bytes(encoded)
    is_jpeg = data.equals(tf.constant(0, tf.int64), b"\xff\xd8")
    is_png = data.equals(tf.constant(0, tf.int64), b"\x89PNG\r\n\x1a\n")
    none = (tf.constant(-1, tf.int64), tf.constant(-1, tf.int64))
    start, end = tf.cond(is_jpeg, lambda: _jpeg_exif(data),
                         lambda: tf.cond(is_png, lambda: _png_exif(data), lambda: none))
    return tf.cond(start >= 0, lambda: _tiff_orientation(data, start, end),
                   lambda: tf.constant(1, tf.int32))


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
