"""The exact area resize (transforms/offline/area_resize.py) and the one-pass analysis
(quality.analyse): the same numbers as the plain definitions, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from transforms.offline import area_resize, quality


def _dense_weights(n: int, target: int) -> np.ndarray:
    """The [target, n] overlap matrix in units of 1/target pixel, straight from the definition."""
    weights = np.zeros((target, n))
    for cell in range(target):
        low, high = cell * n, (cell + 1) * n
        for pixel in range(n):
            weights[cell, pixel] = max(0, min((pixel + 1) * target, high)
                                       - max(pixel * target, low))
    return weights


@pytest.mark.parametrize("n, target", [(7, 3), (3, 7), (10, 10), (511, 256), (256, 32),
                                       (20, 32), (1, 5), (5, 1)])
def test_taps_are_the_overlaps_and_sum_to_n(n, target):
    indices, weights = area_resize.area_taps(n, target)
    dense = np.zeros((target, n))
    for tap in range(indices.shape[0]):
        np.add.at(dense, (np.arange(target), indices[tap]), weights[tap])
    np.testing.assert_array_equal(dense, _dense_weights(n, target))
    assert (dense.sum(axis=1) == n).all()


@pytest.mark.parametrize("shape, size", [((37, 53, 3), (11, 29)), ((300, 511, 3), (150, 256)),
                                         ((9, 4, 3), (20, 7)), ((64, 64), (32, 32)),
                                         ((1, 1, 3), (1, 1))])
def test_area_sums_equal_the_dense_matrix_product(shape, size):
    values = np.random.default_rng(sum(shape)).integers(0, 256, shape).astype(np.uint8)
    sums, divisor = area_resize.area_sums(values, *size)
    rows, cols = _dense_weights(shape[0], size[0]), _dense_weights(shape[1], size[1])
    expected = np.einsum("ih,hw...,jw->ij...", rows, values.astype(np.float64), cols,
                         optimize=True)  # two matrix products, not one 5-deep loop
    np.testing.assert_array_equal(sums, expected)  # float64 holds these integers exactly
    assert divisor == shape[0] * shape[1]


def test_fitted_size_rounds_the_short_side_half_up_and_keeps_one_pixel():
    assert area_resize.fitted_size(300, 600, 256) == (128, 256)
    assert area_resize.fitted_size(1000, 3, 256) == (256, 1)
    assert area_resize.fitted_size(511, 300, 256) == (256, 150)


@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (3, 1), (7, 13), (64, 100), (256, 171)])
@pytest.mark.parametrize("spread", [0, 3, 255000])
def test_percentiles_equal_numpys(shape, spread):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1] + spread)
    luma = (120000 + rng.integers(-spread, spread + 1, shape)).clip(0, 255000).astype(np.int32)
    levels = (luma + 500) // 1000
    counts = np.bincount(levels.ravel(), minlength=256)
    got = quality._percentiles(luma, levels, counts)
    expected = [float(v) for v in np.percentile(luma / 1000.0, [1, 99])]
    assert got == expected


def test_small_copy_of_a_large_image_does_not_overflow():
    image = np.full((3000, 3000, 3), 255, dtype=np.uint8)  # 255 * 9e6 > 2**31 per cell sum
    np.testing.assert_array_equal(quality.small_copy(image, 256), 255)


@pytest.mark.parametrize("seed", range(4))
def test_analyse_is_small_copy_then_measure_moments_and_hash(seed):
    rng = np.random.default_rng(seed)
    height, width = (int(v) for v in rng.integers(40, 700, 2))
    image = rng.integers(0, 256, (height, width, 3)).astype(np.uint8)
    image[: height // 2] //= 3  # not uniform noise: some structure
    analysis = quality.analyse(image, 256)
    small = quality.small_copy(image, 256)
    assert analysis.metrics == quality.measure(small)
    assert (analysis.means, analysis.square_means) == quality.channel_moments(small)
    assert analysis.phash == quality.perceptual_hash(small)
