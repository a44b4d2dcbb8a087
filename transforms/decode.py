"""The one image decoder, shared by the offline validation and the online training input.

"Accepted offline" must mean "decodes in training": both halves call `decode_image`. It returns
8-bit RGB [H, W, 3] for JPEG, PNG (incl. 16-bit, grayscale, RGBA, palette), GIF (first frame),
BMP and WebP; corrupt or truncated data raises `tf.errors.InvalidArgumentError`, never padding.

`jpeg_ratio` (1, 2, 4 or 8) asks libjpeg for a DCT-scaled decode: every byte is still
Huffman-decoded (so truncation and corruption are still caught) but the inverse DCT and colour
conversion run at 1/ratio size, for the quality metrics' small copy and the model's input. The
scale rule (`JPEG_RATIOS`: the largest ratio that keeps a side at least the target) is written
once in two forms: `pick_jpeg_ratio` for Python ints (offline, from the header's size) and
`jpeg_ratio_index` for tensors (inside a graph).

Orientation: every function returns the image as a viewer shows it. `orientation=None` reads
the EXIF orientation from the bytes in the graph (`transforms.orientation.read_orientation`: the
serving graph has nothing else); an int or int tensor (a record's `image/orientation`, or 1 for
`decode.exif_orientation: false`) is applied as given. The DCT scale depends on the short side
only, so it is the same before and after a quarter turn.

For the model, `decode_scaled` (uint8, at the DCT scale for `image_size`) and `decode_for_model`
(that, bilinearly resized to `image_size`, float32 in [0, 1]); the training reader and the TFT
`preprocessing_fn` (hence serving) both call them, so training and serving see the same pixels.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from transforms.orientation import apply_orientation, orient_array, read_orientation

__all__ = ["JPEG_RATIOS", "decode_image", "decode_image_array", "string_tensor", "string_tensors",
           "pick_jpeg_ratio", "jpeg_ratio_index", "decode_scaled", "decode_for_model"]

JPEG_RATIOS = (1, 2, 4, 8)  # the DCT scales libjpeg offers


def decode_image(contents: tf.Tensor, jpeg_ratio: int = 1, is_jpeg: bool | None = None,
                 orientation=None) -> tf.Tensor:
    """Decodes encoded image bytes (a scalar string tensor) to uint8 [H, W, 3], upright
    (`orientation`: see the module docstring). `is_jpeg` (when the caller already sniffed the
    magic bytes) skips the in-graph format test."""
    contents = string_tensor(contents)
    return _oriented(_decode_stored(contents, jpeg_ratio, is_jpeg), contents, orientation)


def string_tensor(contents) -> tf.Tensor:
    """A scalar string tensor of `contents` (bytes, or a tensor, returned as it is). Bytes go
    through a 0-d object array: TensorFlow copies a bytes object given directly at under
    1 GB/s (2.2 ms for a 1.8 MB camera JPEG, ~4% of its inspection), one held in an object
    array at memory speed (0.6 ms, page faults included); the tensor is the same. By
    `tf.constant`: `tf.convert_to_tensor`'s dispatch costs ~8 us more (a thumbnail's decode
    is ~200 us)."""
    if isinstance(contents, (bytes, bytearray, memoryview)):
        return tf.constant(np.array(bytes(contents), dtype=object), tf.string)
    return tf.convert_to_tensor(contents, tf.string)


def string_tensors(contents: list) -> list:
    """A scalar string tensor of each bytes object of `contents` (`string_tensor`'s), made in
    two calls whatever their number: one 1-D tensor, unstacked. A tensor made alone costs
    ~10-30 us of TensorFlow's dispatch, more than decoding a thumbnail's part of it."""
    array = np.empty(len(contents), dtype=object)  # one bytes object per cell, never split
    array[:] = [bytes(value) for value in contents]
    return tf.unstack(tf.constant(array, tf.string))


def _oriented(image: tf.Tensor, contents: tf.Tensor, orientation) -> tf.Tensor:
    """`image` decoded from `contents`, turned by `orientation` (None: read from `contents`)."""
    if orientation is None:
        orientation = read_orientation(contents)
    image = apply_orientation(image, orientation)
    image.set_shape([None, None, 3])
    return image


def _decode_jpeg(contents: tf.Tensor, jpeg_ratio: int) -> tf.Tensor:
    """uint8 [H, W, 3] of a JPEG at a DCT scale: `tf.io.decode_jpeg`'s op and defaults, but
    `acceptable_fraction` given as the float the op wants: its default (int 1) sends every
    eager call to TensorFlow's slow path (0.057 -> 0.031 ms a call on a thumbnail). The
    attributes, and so the graph and the pixels, are the same."""
    return tf.raw_ops.DecodeJpeg(contents=contents, channels=3, ratio=jpeg_ratio,
                                 acceptable_fraction=1.0)


def _decode_stored(contents: tf.Tensor, jpeg_ratio: int, is_jpeg: bool | None) -> tf.Tensor:
    """uint8 [H, W, 3] as stored (no orientation applied)."""

    def as_jpeg():
        return _decode_jpeg(contents, jpeg_ratio)

    def as_other():
        # channels=0 then RGB: TF refuses channels=3 for WebP with alpha ("Number of channels
        # requested does not match input"), so decode what is stored and drop alpha ourselves.
        return _to_rgb(tf.io.decode_image(contents, channels=0, dtype=tf.uint8,
                                          expand_animations=False))

    if jpeg_ratio == 1 or is_jpeg is False:
        image = as_other()  # decode_image dispatches JPEG to the same libjpeg path
    elif is_jpeg:
        image = as_jpeg()
    else:
        image = tf.cond(tf.io.is_jpeg(contents), as_jpeg, as_other)
    image.set_shape([None, None, 3])
    return image


def decode_image_array(contents: bytes, jpeg_ratio: int = 1, is_jpeg: bool | None = None,
                       orientation: int | None = None) -> np.ndarray:
    """`decode_image(...).numpy()`, pixel for pixel and with the same errors: the same decode
    op, but the channel fix-up and an int `orientation` in numpy instead of eager `tf.cond`,
    slicing and reversing, whose dispatch costs more than decoding a thumbnail. For eager
    callers that decode one image per call (the offline inspection), which only read it: an
    image that needs no fix-up is a read-only view of the decoded tensor (`_pixels`), not a
    copy."""
    if orientation is None or (jpeg_ratio != 1 and is_jpeg is None):
        return _pixels(decode_image(contents, jpeg_ratio, is_jpeg, orientation))
    # A string tensor, as decode_image makes: given Python bytes, the DecodeImage op misses
    # TensorFlow's eager fast path and pays for its slow one (~0.03 ms a call).
    contents = string_tensor(contents)
    if jpeg_ratio != 1 and is_jpeg:
        image = _pixels(_decode_jpeg(contents, jpeg_ratio))
    else:
        # The op `tf.io.decode_image` runs for uint8, without its Python wrapper (~0.02 ms a
        # call, a fifth of a thumbnail's decode).
        image = _pixels(tf.raw_ops.DecodeImage(contents=contents, channels=0,
                                               dtype=tf.uint8, expand_animations=False))
        if image.shape[-1] < 3:
            image = np.repeat(image[..., :1], 3, axis=-1)
        elif image.shape[-1] > 3:
            image = image[..., :3]
    return np.ascontiguousarray(orient_array(image, orientation))


def _pixels(image: tf.Tensor) -> np.ndarray:
    """A CPU tensor's values as a read-only array over its memory (TensorFlow's documented
    zero-copy view, `np.asarray(memoryview(t))`): `.numpy()` copies them, ~0.03 ms of a photo's
    ~3 ms inspection."""
    return np.asarray(memoryview(image))


def _to_rgb(image: tf.Tensor) -> tf.Tensor:
    """[H, W, C] with C in 1..4 -> [H, W, 3]: grey (+alpha) is repeated, alpha is dropped.
    One gather of channels chosen at run time, not a `tf.cond` (two more functions in every
    graph that decodes)."""
    channels = tf.shape(image)[-1]
    return tf.gather(image, tf.where(channels < 3, [0, 0, 0], [0, 1, 2]), axis=-1)


def pick_jpeg_ratio(width: int, height: int, target: int, side: str = "short") -> int:
    """The largest DCT scale in `JPEG_RATIOS` that keeps the `side` ("short" or "long") at
    least `target` px: the short side for a model input, the long side for an analysis copy
    that must fit in `target` x `target`. The Python form of `jpeg_ratio_index`."""
    if side not in ("short", "long"):
        raise ValueError(f"Unknown side {side!r}. Expected one of ('short', 'long').")
    length = min(width, height) if side == "short" else max(width, height)
    return max(ratio for ratio in JPEG_RATIOS if ratio == 1 or length // ratio >= target)


def jpeg_ratio_index(height: tf.Tensor, width: tf.Tensor, target: int) -> tf.Tensor:
    """int32 index into `JPEG_RATIOS` of the largest DCT scale that keeps the short side of a
    `height` x `width` image at least `target` px (for `tf.switch_case`). The graph form of
    `pick_jpeg_ratio(width, height, target)`."""
    short_side = tf.minimum(height, width)
    index = tf.constant(0, tf.int32)
    for branch, ratio in enumerate(JPEG_RATIOS[1:], start=1):
        index = tf.where(short_side // ratio >= target, branch, index)
    return index


def _stored_size(encoded: tf.Tensor, is_jpeg: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(height, width) int64 from a JPEG header, (0, 0) for other formats (scale 1)."""
    size = tf.cond(is_jpeg,
                   lambda: tf.io.extract_jpeg_shape(encoded, output_type=tf.int64)[:2],
                   lambda: tf.zeros([2], tf.int64))
    return size[0], size[1]


def decode_scaled(encoded: tf.Tensor, image_size: tuple[int, int],
                  stored_size: tuple[tf.Tensor, tf.Tensor] | None = None,
                  orientation=None) -> tf.Tensor:
    """uint8 [h, w, 3]: `decode_image` at the largest DCT scale that keeps a JPEG's short side
    at least `min(image_size)` (other formats: full size). `stored_size` is the image's
    (height, width) when the caller has it (a record's fields, stored or displayed: the short
    side is the same); otherwise a JPEG's comes from its header (`tf.io.extract_jpeg_shape`).
    Upright (`orientation`: see the module docstring)."""
    encoded = tf.convert_to_tensor(encoded, tf.string)
    is_jpeg = tf.io.is_jpeg(encoded)
    height, width = _stored_size(encoded, is_jpeg) if stored_size is None else stored_size
    index = jpeg_ratio_index(height, width, min(image_size))
    # A scaled decode is libjpeg's (`decode_image`'s JPEG path at that ratio); everything else
    # (ratio 1, other formats) is the one `decode_image` call, traced once, not once per ratio
    # (it is the largest part of the graph: ~4x less to trace in every reader and transform).
    scaled = [lambda r=r: _decode_stored(encoded, r, True) for r in JPEG_RATIOS[1:]]
    image = tf.cond(tf.logical_and(index > 0, is_jpeg),
                    lambda: tf.switch_case(index - 1, scaled),
                    lambda: _decode_stored(encoded, 1, None))
    image.set_shape([None, None, 3])
    return _oriented(image, encoded, orientation)


def decode_for_model(encoded: tf.Tensor, image_size: tuple[int, int],
                     stored_size: tuple[tf.Tensor, tf.Tensor] | None = None,
                     orientation=None) -> tf.Tensor:
    """float32 [height, width, 3] in [0, 1] at `image_size` (height, width): `decode_scaled`
    (upright), a bilinear resize, /255. What the model consumes, in training and in serving."""
    image = tf.image.resize(decode_scaled(encoded, image_size, stored_size, orientation),
                            image_size)
    image.set_shape([*image_size, 3])
    return tf.clip_by_value(image / 255.0, 0.0, 1.0)
