"""The one image decoder, shared by the offline validation and the online training input.

"Accepted offline" must mean "decodes in training": both halves call `decode_image`. It returns
8-bit RGB of shape [H, W, 3] for JPEG, PNG (incl. 16-bit, grayscale, RGBA, palette), GIF (first
frame), BMP and WebP. Corrupt or truncated data raises `tf.errors.InvalidArgumentError`; nothing
is ever padded.

`jpeg_ratio` (1, 2, 4 or 8) asks libjpeg for a DCT-scaled decode: every byte of the
entropy-coded data is still Huffman-decoded (so truncation and corruption are still caught) but
the inverse DCT and colour conversion run at 1/ratio size. The offline quality metrics use it
because they only need a small copy.
"""
from __future__ import annotations

import tensorflow as tf

__all__ = ["decode_image", "pick_jpeg_ratio"]


def decode_image(contents: tf.Tensor, jpeg_ratio: int = 1, is_jpeg: bool | None = None
                 ) -> tf.Tensor:
    """Decodes encoded image bytes (a scalar string tensor) to uint8 [H, W, 3]. `is_jpeg`
    (when the caller already sniffed the magic bytes) skips the in-graph format test."""
    contents = tf.convert_to_tensor(contents, tf.string)

    def as_jpeg():
        return tf.io.decode_jpeg(contents, channels=3, ratio=jpeg_ratio)

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


def _to_rgb(image: tf.Tensor) -> tf.Tensor:
    """[H, W, C] with C in 1..4 -> [H, W, 3]: grey (+alpha) is repeated, alpha is dropped."""
    channels = tf.shape(image)[-1]
    return tf.cond(channels < 3,
                   lambda: tf.tile(image[..., :1], [1, 1, 3]),
                   lambda: image[..., :3])


def pick_jpeg_ratio(width: int, height: int, target: int, side: str = "short") -> int:
    """The largest DCT scale (1, 2, 4, 8) that keeps the `side` ("short" or "long") at least
    `target` px: the short side for a training crop, the long side for an analysis copy that
    must fit in `target` x `target`."""
    if side not in ("short", "long"):
        raise ValueError(f"Unknown side {side!r}. Expected one of ('short', 'long').")
    length = min(width, height) if side == "short" else max(width, height)
    ratio = 1
    while ratio < 8 and length // (ratio * 2) >= target:
        ratio *= 2
    return ratio
