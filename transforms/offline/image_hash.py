"""The perceptual hash of an image's luma and what near-duplicate search does with it: the
64-bit DCT hash (`hash_of_luma`; `quality.perceptual_hash` of an RGB image), the hash of the
central region (`center`, `center_box`; crop-tolerant near duplicates), the Hamming distance
(`hamming`) and the bands that bucket candidates (`hash_bands`).

The DCT coefficients are rounded to 6 decimals before their bits are taken, so floating-point
summation order (BLAS, the compiled analysis of `analysis_kernel`) cannot flip a hash; the area
sums before the DCT are exact integers in every form.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from transforms.offline import analysis_kernel, area_resize

__all__ = ["hash_of_luma", "center", "center_box", "dct_rows", "hamming", "hash_bands",
           "CENTER_FRACTION", "HASH_RESIZE", "HASH_LOW"]

_HASH_BITS = 64
HASH_RESIZE = 32        # pHash: luma is area-resized to 32x32 before the DCT
HASH_LOW = 8            # pHash: the top-left 8x8 (lowest frequencies) make the 64 bits
# center_hash: the central 90% of each side. A 92% centre crop's full hash lies within 4 bits
# of its original's centre hash on 56 of 60 photos measured; unrelated photos >= 16 bits apart.
CENTER_FRACTION = 0.9


@functools.lru_cache(maxsize=None)
def _dct_matrix(size: int) -> np.ndarray:
    """The orthonormal DCT-II matrix: coefficients = D @ x for a length-`size` signal x."""
    k = np.arange(size)[:, None]
    n = np.arange(size)[None, :]
    matrix = np.cos(np.pi * (2 * n + 1) * k / (2 * size)) * math.sqrt(2.0 / size)
    matrix[0, :] = math.sqrt(1.0 / size)
    matrix.setflags(write=False)
    return matrix


def center(luma_1000: np.ndarray) -> np.ndarray:
    """The central `CENTER_FRACTION` of the luma (each side rounded to the nearest pixel, at
    least 1): what the centre hash is the hash of."""
    top, left, keep_h, keep_w = center_box(*luma_1000.shape)
    return luma_1000[top:top + keep_h, left:left + keep_w]


def center_box(height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the central `CENTER_FRACTION` of each side."""
    keep_h = max(1, int(height * CENTER_FRACTION + 0.5))
    keep_w = max(1, int(width * CENTER_FRACTION + 0.5))
    return (height - keep_h) // 2, (width - keep_w) // 2, keep_h, keep_w


# Up to this many luma pixels the numpy form's area sums are two float64 products with
# area_matrix (exact: 255000 * pixels < 2**53) instead of the taps: fewer calls on thumbnails;
# larger, the taps are faster (and BLAS may start threads).
_MATRIX_RESIZE_PIXELS = 160 * 160


def _hash_sums(luma_1000: np.ndarray) -> np.ndarray:
    """The luma's area sums on the hash's 32 x 32 grid: one compiled pass where
    `analysis_kernel` is built (~0.09 ms less per photo), else numpy. Exact integers in every
    form, so the hash cannot depend on which ran."""
    height, width = luma_1000.shape
    kernel = analysis_kernel.compiled
    if kernel is not None:
        sums = np.empty((HASH_RESIZE, HASH_RESIZE), np.int64)
        try:
            kernel.area_sums(np.ascontiguousarray(luma_1000, np.int32), sums, height, width,
                             HASH_RESIZE, HASH_RESIZE)
            return sums
        except OverflowError:  # 2**32 pixels or more: never an analysis copy
            pass
    return _hash_sums_numpy(luma_1000)


def _hash_sums_numpy(luma_1000: np.ndarray) -> np.ndarray:
    height, width = luma_1000.shape
    if height * width <= _MATRIX_RESIZE_PIXELS:
        return (area_resize.area_matrix(height, HASH_RESIZE) @ luma_1000
                @ area_resize.area_matrix(width, HASH_RESIZE).T)
    return area_resize.area_sums(luma_1000, HASH_RESIZE, HASH_RESIZE)[0]


def hash_of_luma(luma_1000: np.ndarray) -> str:
    """The hash (`quality.perceptual_hash`'s rule) of the integer luma times 1000."""
    height, width = luma_1000.shape
    sums = _hash_sums(luma_1000)
    luma = sums / (height * width * 1000.0)  # the same integers either way, so the same floats
    dct = _dct_matrix(HASH_RESIZE)
    coefficients = (dct @ luma @ dct.T)[:HASH_LOW, :HASH_LOW].ravel()
    coefficients = np.round(coefficients, 6)
    # np.median of the 63 (odd) AC terms is the middle one after a partition: the same value
    middle = (coefficients.size - 1) // 2
    median = np.partition(coefficients[1:], middle)[middle]
    return np.packbits(coefficients > median).tobytes().hex()


def _hash_value(phash: str, name: str) -> int:
    if not isinstance(phash, str) or len(phash) != 16:
        raise ValueError(f"{name} must be a 16-character hex string. Received: {name}={phash!r}")
    try:
        return int(phash, 16)
    except ValueError:
        raise ValueError(
            f"{name} must be a 16-character hex string. Received: {name}={phash!r}") from None


def hamming(a: str, b: str) -> int:
    """The number of differing bits between two 64-bit hex hashes."""
    return (_hash_value(a, "a") ^ _hash_value(b, "b")).bit_count()


def hash_bands(phash: str, max_hamming: int) -> list[tuple[int, int]]:
    """The hash cut into `max_hamming + 1` contiguous bands, as `[(band_index, band_value)]`.

    Band sizes differ by at most one bit (the first `64 % bands` bands get the extra bit). By
    the pigeonhole principle two hashes within `max_hamming` bits agree on at least one band, so
    grouping by these keys finds every near-duplicate candidate pair without comparing all pairs.
    """
    value = _hash_value(phash, "phash")
    if isinstance(max_hamming, bool) or not isinstance(max_hamming, (int, np.integer)) \
            or not 0 <= max_hamming < _HASH_BITS:
        raise ValueError(
            f"max_hamming must be an integer in [0, {_HASH_BITS - 1}]. "
            f"Received: max_hamming={max_hamming!r}")
    count = int(max_hamming) + 1
    base, extra = divmod(_HASH_BITS, count)
    bands, shift = [], _HASH_BITS
    for index in range(count):
        width = base + (1 if index < extra else 0)
        shift -= width
        bands.append((index, (value >> shift) & ((1 << width) - 1)))
    return bands


@functools.cache
def dct_rows() -> np.ndarray:
    """The hash's DCT rows the kept coefficients need (the first `HASH_LOW`), C order."""
    rows = np.ascontiguousarray(_dct_matrix(HASH_RESIZE)[:HASH_LOW])
    rows.setflags(write=False)
    return rows
