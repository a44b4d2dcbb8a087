"""Exact area (box) resizing of integer images, for the quality analysis (numpy only).

Output cell i of an axis of n input pixels resized to `target` cells averages the input over
[i*n/target, (i+1)*n/target), partial pixels weighted by the part inside. Measured in units of
1/target pixel, the overlap of input pixel j with cell i is an integer in [0, target], and these
weights of one cell sum to n. So `n * average` is an exact integer sum: nothing is rounded until
the caller divides once, and the result cannot depend on summation order or platform.

A cell overlaps at most `ceil(n / target) + 1` input pixels (its "taps"). The reduction is one
gather and one multiply-add per tap over whole rows, which numpy runs as long contiguous loops:
for the analysis copy (a JPEG decoded at the DCT scale, at most twice the target) that is three
taps per axis, faster than block sums gathered cell by cell (docs/benchmarks.md).

`rounded_resize` (the analysis copy) runs compiled where setup.py could build it
(`analysis_kernel`): the same sums in one pass, ~3x less CPU than the ~10 numpy passes of
`rounded_resize_numpy`, which stays the reference and the fallback (tests compare the two).
"""
from __future__ import annotations

import functools

import numpy as np

from transforms.offline import analysis_kernel

__all__ = ["area_taps", "area_matrix", "reduce_rows", "reduce_columns", "area_sums", "fitted_size",
           "rounded_resize", "rounded_resize_numpy"]


@functools.lru_cache(maxsize=4096)
def area_taps(n: int, target: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), both int64 [taps, target]: cell i (times n) is
    `sum_k weights[k, i] * x[indices[k, i]]`. Unused taps have weight 0 (and a valid index)."""
    if n < 1 or target < 1:
        raise ValueError(f"n and target must be >= 1. Received: n={n}, target={target}")
    cells = np.arange(target, dtype=np.int64)
    low, high = cells * n, (cells + 1) * n          # cell i in units of 1/target pixel
    first = low // target
    taps = int(((high - 1) // target - first).max()) + 1
    indices = first[None, :] + np.arange(taps, dtype=np.int64)[:, None]
    overlap = (np.minimum((indices + 1) * target, high[None, :])
               - np.maximum(indices * target, low[None, :]))
    weights = np.maximum(overlap, 0)
    indices = np.minimum(indices, n - 1)
    indices.setflags(write=False)
    weights.setflags(write=False)
    return indices, weights


@functools.lru_cache(maxsize=1024)
def area_matrix(n: int, target: int) -> np.ndarray:
    """float64 [target, n], read-only: row i holds cell i's weights (`area_taps` scattered), so
    `area_matrix(n, target) @ x` is `reduce_rows(x, target, ...)` as floats: exact whatever the
    product's summation order while max(|x|) * n * (x's other side) < 2**53, as every term and
    partial sum is then an integer float64 holds. For small images one BLAS call beats the taps."""
    indices, weights = area_taps(n, target)
    matrix = np.zeros((target, n))
    cells = np.arange(target)
    for tap in range(indices.shape[0]):
        np.add.at(matrix, (cells, indices[tap]), weights[tap])
    matrix.setflags(write=False)
    return matrix


def reduce_rows(values: np.ndarray, target: int, dtype) -> np.ndarray:
    """[n, ...] integers -> [target, ...] `dtype` holding n * the area average along axis 0.
    `dtype` must hold `max(values) * n`."""
    n = values.shape[0]
    flat = values.reshape(n, -1)
    indices, weights = area_taps(n, target)
    weights = weights.astype(dtype)[..., None]
    total = np.multiply(flat[indices[0]], weights[0], dtype=dtype)
    for tap in range(1, indices.shape[0]):
        total += np.multiply(flat[indices[tap]], weights[tap], dtype=dtype)
    return total.reshape((target,) + values.shape[1:])


def reduce_columns(values: np.ndarray, target: int, dtype) -> np.ndarray:
    """[h, n, ...] integers -> [h, target, ...] `dtype` holding n * the area average along
    axis 1. The columns are gathered from the rows flattened with their channels, so every
    loop runs over a whole output row."""
    height, n = values.shape[:2]
    channels = int(np.prod(values.shape[2:], dtype=np.int64))
    flat = values.reshape(height, n * channels)
    indices, weights = area_taps(n, target)
    lanes = np.arange(channels, dtype=np.int64)
    columns = (indices[..., None] * channels + lanes).reshape(indices.shape[0], -1)
    weights = np.repeat(weights, channels, axis=1).astype(dtype)
    total = np.multiply(np.take(flat, columns[0], axis=1), weights[0], dtype=dtype)
    for tap in range(1, indices.shape[0]):
        total += np.multiply(np.take(flat, columns[tap], axis=1), weights[tap], dtype=dtype)
    return total.reshape((height, target) + values.shape[2:])


def area_sums(values: np.ndarray, height: int, width: int) -> tuple[np.ndarray, int]:
    """Area-resizes an integer [H, W, ...] array to [height, width, ...]: (integer sums,
    divisor), the average being sums / divisor (divisor = H * W). int64 sums unless int32
    holds them."""
    in_height, in_width = values.shape[:2]
    peak = 255 if values.dtype == np.uint8 else int(np.abs(values).max(initial=0))
    row_type = np.int32 if peak * in_height < 2**31 else np.int64
    sum_type = np.int32 if peak * in_height * in_width < 2**31 else np.int64
    rows = reduce_rows(values, height, row_type)
    return reduce_columns(rows, width, sum_type), in_height * in_width


def fitted_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """(height, width) scaled so the longer side is `longest`: the short side keeps the aspect
    ratio, rounded to the nearest pixel (half up) and at least 1."""
    side = max(height, width)
    return (max(1, (2 * height * longest + side) // (2 * side)),
            max(1, (2 * width * longest + side) // (2 * side)))


def rounded_resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 [H, W, ...] -> uint8 [height, width, ...]: the area average rounded half up (what
    `rounded_resize_numpy` gives), compiled where `analysis_kernel` is built (the trailing
    axes are its channels)."""
    kernel = analysis_kernel.compiled
    if kernel is not None and image.dtype == np.uint8 and image.ndim >= 2:
        in_height, in_width = image.shape[:2]
        resized = np.empty((height, width) + image.shape[2:], np.uint8)
        try:
            kernel.resize_uint8(np.ascontiguousarray(image), resized, in_height, in_width,
                                int(np.prod(image.shape[2:], dtype=np.int64)), height, width)
            return resized
        except OverflowError:  # too large for its 32-bit row sums: never an analysis input
            pass
    return rounded_resize_numpy(image, height, width)


def rounded_resize_numpy(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """`rounded_resize` in numpy: `area_sums` divided once, rounded half up
    ((2 * sums + divisor) // (2 * divisor))."""
    sums, divisor = area_sums(image, height, width)
    if 511 * divisor >= 2**31:      # 2 * sums + divisor must not overflow
        sums = sums.astype(np.int64)
    sums *= 2
    sums += divisor
    sums //= 2 * divisor
    return sums.astype(np.uint8)
