"""Per-sample pixel ops on float32 images in [0, 1], vectorized over the batch.

Each op has a pure function (`adjust_brightness(images, delta)`, ...) that takes one parameter
per sample and clips its output to [0, 1], and a small sample-then-apply class (`GammaOp`,
...) that draws those parameters statelessly from a batch seed. The random draws (including the
noise fields) all happen in `sample`, so `apply` is a pure, XLA-compilable function of the
images and the parameter dict.

Brightness, contrast, saturation and hue are affine in the colour values, so the augmenter runs
them as ONE op, `ColorJitterOp`: one 3x3 matrix and offset per sample and a single clip (as
DALI's ColorTwist), equal to the four functions applied in that order without the clips between
them. Everything is written elementwise (no tiny matmuls), so XLA fuses it into one loop.

Luma is ITU-R BT.601 (0.299 R + 0.587 G + 0.114 B), as in `tf.image.rgb_to_grayscale`.
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from transforms.online import seeds as seeds_lib

__all__ = [
    "LUMA_WEIGHTS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_saturation",
    "adjust_hue",
    "adjust_gamma",
    "to_grayscale",
    "gaussian_blur",
    "jpeg_compress",
    "add_gaussian_noise",
    "add_speckle_noise",
    "color_matrices",
    "apply_color_matrix",
    "ColorJitterOp",
    "GammaOp",
    "GrayscaleOp",
    "BlurOp",
    "JpegOp",
    "GaussianNoiseOp",
    "SpeckleNoiseOp",
]

LUMA_WEIGHTS = (0.299, 0.587, 0.114)

_RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114],
                        [0.595716, -0.274453, -0.321263],
                        [0.211456, -0.522591, 0.311135]], dtype=np.float64)
_YIQ_TO_RGB = np.linalg.inv(_RGB_TO_YIQ)

# ITU T.81 Annex K quantisation tables (luma, chroma), row-major 8x8.
_JPEG_LUMA = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99],
    dtype=np.float32).reshape(8, 8)
_JPEG_CHROMA = np.array([
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
    24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32,
    dtype=np.float32).reshape(8, 8)
# Orthonormal 8-point DCT-II matrix.
_DCT = np.array([[(math.sqrt(1 / 8) if k == 0 else math.sqrt(2 / 8))
                  * math.cos((2 * n + 1) * k * math.pi / 16) for n in range(8)]
                 for k in range(8)], dtype=np.float32)


def _per_sample(values, images) -> tf.Tensor:
    """[B] parameters -> [B, 1, 1, 1] in the images' dtype."""
    return tf.reshape(tf.cast(values, images.dtype), [-1, 1, 1, 1])


def _luma(images) -> tf.Tensor:
    return tf.reduce_sum(images * tf.constant(LUMA_WEIGHTS, images.dtype), axis=-1,
                         keepdims=True)


def _mean_luma(images) -> tf.Tensor:
    """Mean luma per image, [B]. Written as one matrix-vector product of the flattened images
    with the luma weights tiled over the pixels: XLA:CPU runs that as a GEMV, faster than its
    reduction of the 3-wide channel axis followed by the spatial mean (docs/benchmarks.md);
    equal to `mean(_luma(images))` to float rounding."""
    batch, height, width, _ = tf.unstack(tf.shape(images), 4)
    pixels = height * width
    weights = tf.tile(tf.constant(LUMA_WEIGHTS, images.dtype), [pixels])
    total = tf.linalg.matvec(tf.reshape(images, [batch, pixels * 3]), weights)
    return total / tf.cast(pixels, images.dtype)


def _clip(images) -> tf.Tensor:
    return tf.clip_by_value(images, 0.0, 1.0)


def adjust_brightness(images, delta) -> tf.Tensor:
    """`images + delta[b]`, clipped."""
    return _clip(images + _per_sample(delta, images))


def adjust_contrast(images, factor) -> tf.Tensor:
    """Scales each image about its mean luma: `x * f + mean * (1 - f)`, clipped (f = 1: x)."""
    f = _per_sample(factor, images)
    mean = _per_sample(_mean_luma(images), images)
    return _clip(images * f + mean * (1.0 - f))


def adjust_saturation(images, factor) -> tf.Tensor:
    """Blends with the luma: `luma + f * (x - luma)` (f = 0: grey, 1: unchanged), clipped."""
    luma = _luma(images)
    return _clip(luma + _per_sample(factor, images) * (images - luma))


def _hue_matrices(delta) -> tf.Tensor:
    """[B, 3, 3] RGB matrices rotating the YIQ chroma plane by `delta[b]` turns."""
    theta = 2.0 * math.pi * tf.cast(delta, tf.float32)
    cos, sin = tf.cos(theta), tf.sin(theta)
    one, zero = tf.ones_like(cos), tf.zeros_like(cos)
    rotation = tf.stack([tf.stack([one, zero, zero], -1), tf.stack([zero, cos, -sin], -1),
                         tf.stack([zero, sin, cos], -1)], axis=-2)
    to_rgb = tf.broadcast_to(tf.constant(_YIQ_TO_RGB, tf.float32), tf.shape(rotation))
    to_yiq = tf.broadcast_to(tf.constant(_RGB_TO_YIQ, tf.float32), tf.shape(rotation))
    return tf.matmul(tf.matmul(to_rgb, rotation), to_yiq)


def _saturation_matrices(factor) -> tf.Tensor:
    """[B, 3, 3] RGB matrices of `luma + f * (x - luma)`."""
    f = tf.reshape(tf.cast(factor, tf.float32), [-1, 1, 1])
    luma_rows = tf.broadcast_to(tf.constant([[LUMA_WEIGHTS]], tf.float32),
                                [tf.size(f), 3, 3])
    return f * tf.constant(np.eye(3)[None], tf.float32) + (1.0 - f) * luma_rows


def apply_color_matrix(images, matrix, offset) -> tf.Tensor:
    """`clip(matrix[b] @ rgb + offset[b])` per pixel; matrix [B, 3, 3], offset [B, 3].

    Written as 9 broadcast multiply-adds, which XLA fuses into one elementwise loop.
    """
    m = tf.reshape(tf.cast(matrix, images.dtype), [-1, 1, 1, 3, 3])
    o = tf.reshape(tf.cast(offset, images.dtype), [-1, 1, 1, 3])
    r, g, b = tf.split(images, 3, axis=-1)  # each [B, H, W, 1]
    m_r, m_g, m_b = tf.unstack(m, 3, axis=-1)  # the matrix's columns, each [B, 1, 1, 3]
    return _clip(r * m_r + g * m_g + b * m_b + o)


def adjust_hue(images, delta) -> tf.Tensor:
    """Rotates the chroma plane in YIQ by `delta[b]` turns (DALI ColorTwist style), clipped.

    Luma is preserved; +-0.5 is the opposite hue. One 3x3 matrix per sample.
    """
    batch = tf.shape(images)[0]
    return apply_color_matrix(images, _hue_matrices(delta), tf.zeros([batch, 3]))


def color_matrices(mean_luma, brightness=None, contrast=None, saturation=None,
                   hue=None) -> tuple[tf.Tensor, tf.Tensor]:
    """The (matrix [B, 3, 3], offset [B, 3]) of brightness -> contrast -> saturation -> hue.

    Each argument is a [B] parameter or None (op off). `mean_luma` [B] is the mean luma of the
    images the result is applied to (contrast pivots on it). Because saturation and hue keep
    greys grey, the composition is `f * S @ x + (d + (1 - f) * mean_luma)` with S = hue @ sat.
    """
    mean_luma = tf.cast(mean_luma, tf.float32)
    batch = tf.size(mean_luma)
    if saturation is not None:
        matrix = _saturation_matrices(saturation)
    else:
        matrix = tf.eye(3, batch_shape=[batch], dtype=tf.float32)
    if hue is not None:
        matrix = tf.matmul(_hue_matrices(hue), matrix)
    delta = tf.zeros([batch]) if brightness is None else tf.cast(brightness, tf.float32)
    if contrast is not None:
        factor = tf.cast(contrast, tf.float32)
        matrix = tf.reshape(factor, [-1, 1, 1]) * matrix
        delta = delta + (1.0 - factor) * mean_luma
    return matrix, tf.broadcast_to(tf.expand_dims(delta, -1), [batch, 3])


def adjust_gamma(images, gamma) -> tf.Tensor:
    """`x ** gamma[b]` (gamma > 0), clipped."""
    return _clip(tf.pow(images, _per_sample(gamma, images)))


def to_grayscale(images, apply) -> tf.Tensor:
    """Replaces the samples where `apply[b]` is true by their luma on all 3 channels."""
    grey = tf.broadcast_to(_luma(images), tf.shape(images))
    return tf.where(tf.reshape(tf.cast(apply, tf.bool), [-1, 1, 1, 1]), grey, images)


def _blur_kernel(sigma, radius: int) -> tf.Tensor:
    """Normalized 1-D gaussian taps [B, 2 * radius + 1]; sigma 0 gives the identity tap."""
    taps = tf.cast(tf.range(-radius, radius + 1), tf.float32)[None, :]
    sigma = tf.cast(sigma, tf.float32)[:, None]
    safe = tf.where(sigma > 0, sigma, 1.0)
    weights = tf.exp(-0.5 * tf.square(taps / safe))
    weights = tf.where(sigma > 0, weights, tf.cast(tf.equal(taps, 0.0), tf.float32))
    return weights / tf.reduce_sum(weights, axis=1, keepdims=True)


def gaussian_blur(images, sigma, radius: int) -> tf.Tensor:
    """Separable gaussian blur with per-sample `sigma[b]` px (0 = unchanged), edges reflected.

    `radius` (static) is the kernel half-width; use at least `ceil(3 * max sigma)`. Written as
    a sum of shifted slices, so it is vectorized over samples with different kernels.
    """
    size = 2 * radius + 1
    weights = tf.unstack(tf.reshape(tf.cast(_blur_kernel(sigma, radius), images.dtype),
                                    [-1, size, 1, 1, 1]), size, axis=1)  # each [B, 1, 1, 1]
    padded = tf.pad(images, [[0, 0], [radius, radius], [0, 0], [0, 0]], mode="SYMMETRIC")
    _, height, width, _ = tf.unstack(tf.shape(images), 4)
    rows = sum(weights[k] * padded[:, k:k + height] for k in range(size))
    padded = tf.pad(rows, [[0, 0], [0, 0], [radius, radius], [0, 0]], mode="SYMMETRIC")
    return _clip(sum(weights[k] * padded[:, :, k:k + width] for k in range(size)))


def _quant_tables(quality) -> tf.Tensor:
    """IJG quality scaling of the Annex K tables: [B, 3, 8, 8] for (Y, Cb, Cr)."""
    q = tf.clip_by_value(tf.round(tf.cast(quality, tf.float32)), 1.0, 100.0)[:, None, None]
    scale = tf.where(q < 50.0, 5000.0 / q, 200.0 - 2.0 * q)
    luma = tf.clip_by_value(tf.floor((_JPEG_LUMA * scale + 50.0) / 100.0), 1.0, 255.0)
    chroma = tf.clip_by_value(tf.floor((_JPEG_CHROMA * scale + 50.0) / 100.0), 1.0, 255.0)
    return tf.stack([luma, chroma, chroma], axis=1)


def jpeg_compress(images, quality, apply) -> tf.Tensor:
    """A stateless JPEG round trip for the samples where `apply[b]`, at `quality[b]` (1-100).

    YCbCr (JFIF), 8x8 orthonormal DCT, quantisation with the IJG-scaled standard tables,
    rounding, inverse DCT, back to RGB; 4:4:4 (no chroma subsampling). Image sides that are not
    multiples of 8 are padded symmetrically and cropped back. Pure TF, so it runs in a graph,
    under XLA and on the GPU, unlike `tf.image.adjust_jpeg_quality` (one quality per call).
    """
    dtype = images.dtype
    x = tf.cast(images, tf.float32) * 255.0
    shape = tf.shape(x)
    batch, height, width = shape[0], shape[1], shape[2]
    pad_h, pad_w = (-height) % 8, (-width) % 8
    x = tf.pad(x, [[0, 0], [0, pad_h], [0, pad_w], [0, 0]], mode="SYMMETRIC")
    to_ycc = tf.constant([[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5],
                          [0.5, -0.418688, -0.081312]], tf.float32)
    ycc = tf.einsum("bhwc,dc->bhwd", x, to_ycc) - tf.constant([128.0, 0.0, 0.0])
    blocks_h, blocks_w = (height + pad_h) // 8, (width + pad_w) // 8
    blocks = tf.reshape(ycc, [batch, blocks_h, 8, blocks_w, 8, 3])
    blocks = tf.transpose(blocks, [0, 1, 3, 5, 2, 4])  # [B, bh, bw, 3, 8, 8]
    dct = tf.constant(_DCT)
    coeffs = tf.einsum("ki,bxycij,lj->bxyckl", dct, blocks, dct)
    table = _quant_tables(quality)[:, None, None]  # [B, 1, 1, 3, 8, 8]
    coeffs = tf.round(coeffs / table) * table
    blocks = tf.einsum("ki,bxyckl,lj->bxycij", dct, coeffs, dct)
    ycc = tf.reshape(tf.transpose(blocks, [0, 1, 4, 2, 5, 3]),
                     [batch, blocks_h * 8, blocks_w * 8, 3])
    ycc = ycc[:, :height, :width] + tf.constant([128.0, 0.0, 0.0])
    to_rgb = tf.constant([[1.0, 0.0, 1.402], [1.0, -0.344136, -0.714136], [1.0, 1.772, 0.0]],
                         tf.float32)
    rgb = tf.cast(tf.einsum("bhwc,dc->bhwd", ycc, to_rgb) / 255.0, dtype)
    return tf.where(tf.reshape(tf.cast(apply, tf.bool), [-1, 1, 1, 1]), _clip(rgb), images)


def add_gaussian_noise(images, noise, std) -> tf.Tensor:
    """`x + std[b] * noise`, clipped; `noise` is a standard-normal field like `images`."""
    return _clip(images + _per_sample(std, images) * tf.cast(noise, images.dtype))


def add_speckle_noise(images, noise, std) -> tf.Tensor:
    """Multiplicative (speckle) noise `x * (1 + std[b] * noise)`, clipped."""
    return _clip(images * (1.0 + _per_sample(std, images) * tf.cast(noise, images.dtype)))


class _PixelOp:
    """Sample-then-apply base: `sample(batch_size, image_size, seed) -> dict`, `apply`."""
    name = ""

    def __init__(self, config):
        self.config = config

    def _uniform(self, batch_size, seed, columns: int | None = None,
                 tag: str = "") -> tf.Tensor:
        """[B] uniforms, or [B, columns] taken apart into `columns` [B] tensors (the same
        numbers: a draw's values do not depend on its shape, only on their count)."""
        draws = seeds_lib.uniform([batch_size] if columns is None else [batch_size, columns],
                                  seeds_lib.fold_in_name(seed, self.name + tag))
        return draws if columns is None else tf.unstack(draws, columns, axis=1)

    def apply(self, batch: dict, params: dict) -> dict:
        out = dict(batch)
        out["images"] = self._apply(batch["images"], params)
        return out


class ColorJitterOp(_PixelOp):
    """Brightness, contrast, saturation and hue as one colour matrix per sample, one clip.

    Params (only the enabled ones, uniform per sample): `brightness` delta in [-b, b],
    `contrast` factor in [1 - c, 1 + c], `saturation` factor in [1 - s, 1 + s], `hue` delta in
    [-h, h] turns. `apply` measures the mean luma of the images it receives (the contrast pivot)
    and applies `color_matrices`.
    """
    name = "color"
    _KEYS = ("brightness", "contrast", "saturation", "hue")

    def sample(self, batch_size, image_size, seed):
        params = {}
        for key in self._KEYS:
            magnitude = getattr(self.config, key)
            if magnitude > 0:
                signed = (2.0 * self._uniform(batch_size, seed, tag="/" + key) - 1.0)
                params[key] = signed * magnitude + (1.0 if key in ("contrast", "saturation")
                                                    else 0.0)
        return params

    def _apply(self, images, params):
        mean_luma = _mean_luma(images)
        matrix, offset = color_matrices(mean_luma, **{k: params.get(k) for k in self._KEYS})
        return apply_color_matrix(images, matrix, offset)


class GammaOp(_PixelOp):
    """Params: `gamma` float32 [B], uniform in `config.gamma`."""
    name = "gamma"

    def sample(self, batch_size, image_size, seed):
        low, high = self.config.gamma
        return {"gamma": low + (high - low) * self._uniform(batch_size, seed)}

    def _apply(self, images, params):
        return adjust_gamma(images, params["gamma"])


class GrayscaleOp(_PixelOp):
    """Params: `apply` bool [B] with `grayscale_probability`."""
    name = "grayscale"

    def sample(self, batch_size, image_size, seed):
        p = self.config.grayscale_probability
        return {"apply": self._uniform(batch_size, seed) < p}

    def _apply(self, images, params):
        return to_grayscale(images, params["apply"])


class BlurOp(_PixelOp):
    """Params: `sigma` float32 [B] px, uniform in `blur_sigma` with `blur_probability`, else 0.

    The kernel radius is fixed from the config, `ceil(3 * blur_sigma[1])`, and capped so the
    symmetric padding stays inside the image (`radius < min(side)`).
    """
    name = "blur"

    def sample(self, batch_size, image_size, seed):
        low, high = self.config.blur_sigma
        chance, position = self._uniform(batch_size, seed, columns=2)
        sigma = low + (high - low) * position
        return {"sigma": tf.where(chance < self.config.blur_probability, sigma, 0.0)}

    def _apply(self, images, params):
        static = images.shape[1:3]
        radius = int(math.ceil(3.0 * self.config.blur_sigma[1]))
        if static[0] is not None and static[1] is not None:
            radius = min(radius, min(static) - 1)
        return gaussian_blur(images, params["sigma"], max(radius, 1))


class JpegOp(_PixelOp):
    """Params: `quality` float32 [B] uniform in `jpeg_quality`; `apply` bool [B]."""
    name = "jpeg"

    def sample(self, batch_size, image_size, seed):
        low, high = self.config.jpeg_quality
        chance, position = self._uniform(batch_size, seed, columns=2)
        return {"quality": low + (high - low) * position,
                "apply": chance < self.config.jpeg_probability}

    def _apply(self, images, params):
        return jpeg_compress(images, params["quality"], params["apply"])


class _NoiseOp(_PixelOp):
    _std_key = ""

    def sample(self, batch_size, image_size, seed):
        height, width = image_size
        std = getattr(self.config, self._std_key) * self._uniform(batch_size, seed)
        noise = seeds_lib.normal(
            [batch_size, height, width, 3], seeds_lib.fold_in_name(seed, self.name + "/n"))
        return {"std": std, "noise": noise}


class GaussianNoiseOp(_NoiseOp):
    """Params: `std` float32 [B] uniform in [0, gaussian_noise_std]; `noise` N(0,1) [B,H,W,3]."""
    name = "gaussian_noise"
    _std_key = "gaussian_noise_std"

    def _apply(self, images, params):
        return add_gaussian_noise(images, params["noise"], params["std"])


class SpeckleNoiseOp(_NoiseOp):
    """Params: `std` float32 [B] uniform in [0, speckle_noise_std]; `noise` N(0,1) [B,H,W,3]."""
    name = "speckle_noise"
    _std_key = "speckle_noise_std"

    def _apply(self, images, params):
        return add_speckle_noise(images, params["noise"], params["std"])
