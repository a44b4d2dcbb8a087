"""Tests for transforms.offline.quality and image_hash: exact metrics on hand-made arrays, the
verdict rules one by one, the area downscale, the perceptual hash and its band keys, and the
channel moments."""
from __future__ import annotations

import io
import itertools
import re

import numpy as np
import pytest
from PIL import Image

from configs.schema import QualityConfig
from runners.demo.data import photo_like
from transforms.codec import QUALITY_METRICS
from transforms.offline import image_hash, quality


def _grey(values) -> np.ndarray:
    """A uint8 RGB image whose three channels all equal `values` (so luma == values)."""
    values = np.asarray(values, dtype=np.uint8)
    return np.repeat(values[..., None], 3, axis=2)


def _checkerboard(size: int, low: int, high: int) -> np.ndarray:
    rows, cols = np.indices((size, size))
    return _grey(np.where((rows + cols) % 2 == 0, high, low))


# ---------------------------------------------------------------- measure

def test_measure_returns_exactly_the_codec_metrics_as_python_floats():
    metrics = quality.measure(_checkerboard(4, 0, 255))
    assert tuple(metrics) == QUALITY_METRICS
    assert all(type(value) is float for value in metrics.values())


def test_measure_constant_image_is_flat():
    assert quality.measure(_grey(np.full((6, 9), 77))) == {
        "brightness_mean": 77.0, "brightness_p01": 77.0, "brightness_p99": 77.0,
        "contrast_std": 0.0, "entropy": 0.0, "blur_laplacian_var": 0.0, "blur_fine_share": 0.0,
        "blur_laplacian_ratio": 0.0}


def test_measure_two_level_checkerboard_has_one_bit_of_entropy():
    # Every valid Laplacian is 4 * (255 - 0) with alternating sign: variance 1020**2, 64 times
    # the luma variance; the 2x2 means are all 127.5, so all the detail is at the finest scale.
    assert quality.measure(_checkerboard(8, 0, 255)) == {
        "brightness_mean": 127.5, "brightness_p01": 0.0, "brightness_p99": 255.0,
        "contrast_std": 127.5, "entropy": 1.0, "blur_laplacian_var": 1040400.0,
        "blur_fine_share": 1.0, "blur_laplacian_ratio": 64.0}


def test_measure_ramp_of_all_256_levels():
    # 0..255 once each: 8 bits, std sqrt((256**2 - 1) / 12); a linear ramp has zero Laplacian.
    ramp = _grey(np.arange(256).reshape(16, 16))
    assert quality.measure(ramp) == {
        "brightness_mean": 127.5, "brightness_p01": 2.55, "brightness_p99": 252.45,
        "contrast_std": 73.9003, "entropy": 8.0, "blur_laplacian_var": 0.0,
        "blur_fine_share": 0.0, "blur_laplacian_ratio": 0.0}


def test_measure_laplacian_uses_the_valid_region_only():
    # One bright pixel in a 5x5 black image: the 3x3 valid region holds -1020 at the centre,
    # 255 at the four neighbours and 0 at the corners: mean 0, variance (1020**2 + 4*255**2)/9.
    image = np.zeros((5, 5), dtype=np.uint8)
    image[2, 2] = 255
    metrics = quality.measure(_grey(image))
    assert metrics["blur_laplacian_var"] == 144500.0
    assert metrics["brightness_mean"] == 10.2


def test_measure_luma_weights_are_bt601():
    red_green_blue = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]]], dtype=np.uint8)
    assert quality.measure(red_green_blue[:, :1])["brightness_mean"] == 76.245
    assert quality.measure(red_green_blue[:, 1:2])["brightness_mean"] == 149.685
    assert quality.measure(red_green_blue[:, 2:])["brightness_mean"] == 29.07
    assert quality.measure(red_green_blue)["brightness_mean"] == 85.0


def test_measure_image_smaller_than_the_laplacian_has_zero_sharpness():
    assert quality.measure(_checkerboard(2, 0, 255))["blur_laplacian_var"] == 0.0


@pytest.mark.parametrize("bad", [
    np.zeros((4, 4), dtype=np.uint8),
    np.zeros((4, 4, 4), dtype=np.uint8),
    np.zeros((4, 4, 3), dtype=np.float32),
    np.zeros((0, 4, 3), dtype=np.uint8),
])
def test_measure_rejects_arrays_that_are_not_uint8_rgb(bad):
    with pytest.raises(ValueError, match="Received"):
        quality.measure(bad)


# ---------------------------------------------------------------- judge

_GOOD = {"brightness_mean": 120.0, "brightness_p01": 20.0, "brightness_p99": 220.0,
         "contrast_std": 40.0, "entropy": 7.0, "blur_laplacian_var": 500.0,
         "blur_fine_share": 0.4, "blur_laplacian_ratio": 0.3}


def _with(**changes) -> dict:
    return {**_GOOD, **changes}


def test_judge_accepts_good_metrics():
    assert quality.judge(_GOOD, QualityConfig()) is None


def test_judge_low_std_is_low_information():
    assert quality.judge(_with(contrast_std=0.9), QualityConfig()) == (
        "low_information", "contrast_std=0.9 < min_std=1.0")


def test_judge_low_entropy_is_low_information():
    assert quality.judge(_with(entropy=2.0), QualityConfig()) == (
        "low_information", "entropy=2.0 < min_entropy=2.5")


def test_judge_dim_p99_is_too_dark():
    assert quality.judge(_with(brightness_p99=12.3), QualityConfig()) == (
        "too_dark", "brightness_p99=12.3 < dark_p99_max=40.0")


def test_judge_glaring_p01_is_too_bright():
    assert quality.judge(_with(brightness_p01=240.5, brightness_p99=255.0), QualityConfig()) == (
        "too_bright", "brightness_p01=240.5 > bright_p01_min=210.0")


def test_judge_little_fine_detail_is_blurry():
    assert quality.judge(_with(blur_fine_share=0.1), QualityConfig()) == (
        "blurry", "blur_fine_share=0.1 < blur_fine_min=0.12")


def test_judge_low_laplacian_ratio_is_blurry():
    assert quality.judge(_with(blur_laplacian_ratio=0.01), QualityConfig()) == (
        "blurry", "blur_laplacian_ratio=0.01 < blur_ratio_min=0.015")


def test_judge_no_longer_uses_the_absolute_laplacian_variance():
    # It moves with contrast: a washed-out or soft photo has a small one and is still sharp.
    assert quality.judge(_with(blur_laplacian_var=1.0), QualityConfig()) is None


def test_judge_value_equal_to_threshold_passes():
    at_thresholds = _with(contrast_std=1.0, entropy=2.5, brightness_p99=40.0,
                          brightness_p01=210.0, blur_fine_share=0.12,
                          blur_laplacian_ratio=0.015)
    assert quality.judge(at_thresholds, QualityConfig()) is None


def test_judge_checks_std_before_entropy():
    assert quality.judge(_with(contrast_std=0.5, entropy=1.0), QualityConfig())[1] == (
        "contrast_std=0.5 < min_std=1.0")


def test_judge_checks_flatness_before_dark():
    verdict = quality.judge(_with(contrast_std=0.5, brightness_p99=10.0), QualityConfig())
    assert verdict[0] == "low_information"


def test_judge_checks_exposure_before_entropy():
    # A darkened or washed-out photo keeps some contrast but little entropy: its own reason.
    dark = _with(contrast_std=2.0, entropy=1.5, brightness_p99=15.0)
    assert quality.judge(dark, QualityConfig())[0] == "too_dark"
    washed = _with(contrast_std=4.0, entropy=2.0, brightness_p01=220.0, brightness_p99=250.0)
    assert quality.judge(washed, QualityConfig())[0] == "too_bright"


def test_judge_checks_dark_before_blurry():
    verdict = quality.judge(_with(brightness_p99=10.0, blur_fine_share=0.01), QualityConfig())
    assert verdict[0] == "too_dark"


def test_judge_checks_bright_before_blurry():
    verdict = quality.judge(_with(brightness_p01=250.0, brightness_p99=255.0,
                                  blur_fine_share=0.01), QualityConfig())
    assert verdict[0] == "too_bright"


def test_judge_none_threshold_switches_only_its_rule_off():
    config = QualityConfig(dark_p99_max=None)
    assert quality.judge(_with(brightness_p99=10.0), config) is None
    assert quality.judge(_with(brightness_p99=10.0, blur_fine_share=0.01), config)[0] == "blurry"


def test_judge_none_min_std_still_checks_entropy():
    config = QualityConfig(min_std=None)
    assert quality.judge(_with(contrast_std=0.0), config) is None
    assert quality.judge(_with(contrast_std=0.0, entropy=0.0), config) == (
        "low_information", "entropy=0.0 < min_entropy=2.5")


def test_judge_disabled_config_accepts_everything():
    awful = _with(contrast_std=0.0, entropy=0.0, brightness_p99=0.0, blur_fine_share=0.0)
    assert quality.judge(awful, QualityConfig(enabled=False)) is None


def test_judge_names_a_missing_metric():
    metrics = dict(_GOOD)
    del metrics["blur_fine_share"]
    with pytest.raises(ValueError, match="'blur_fine_share' needed by quality.blur_fine_min"):
        quality.judge(metrics, QualityConfig())


def test_judge_of_a_measured_blank_image_is_low_information():
    assert quality.judge(quality.measure(_grey(np.full((40, 40), 128))), QualityConfig()) == (
        "low_information", "contrast_std=0.0 < min_std=1.0")


# ---------------------------------------------------------------- small_copy

def test_small_copy_returns_an_image_that_fits_unchanged():
    image = _checkerboard(64, 0, 255)
    assert quality.small_copy(image, 64) is image


@pytest.mark.parametrize("height, width, size, expected", [
    (1000, 500, 256, (256, 128)),
    (300, 700, 256, (110, 256)),     # 300 * 256 / 700 = 109.7 -> 110
    (257, 257, 256, (256, 256)),
    (4000, 10, 256, (256, 1)),       # the short side never drops below 1
])
def test_small_copy_size_keeps_aspect_with_longest_side_at_most_analysis_size(
        height, width, size, expected):
    small = quality.small_copy(np.zeros((height, width, 3), dtype=np.uint8), size)
    assert small.shape == expected + (3,)
    assert small.dtype == np.uint8


def test_small_copy_integer_factor_is_block_mean_rounded_half_up():
    image = _grey(np.arange(16).reshape(4, 4))          # block means 2.5, 4.5, 10.5, 12.5
    np.testing.assert_array_equal(quality.small_copy(image, 2)[..., 0], [[3, 5], [11, 13]])


def test_small_copy_fractional_factor_weights_partial_pixels():
    # 3 -> 2 pixels per side: each output cell covers 1.5 x 1.5 input cells.
    image = _grey([[0, 0, 90], [0, 0, 90], [90, 90, 90]])
    np.testing.assert_array_equal(quality.small_copy(image, 2)[..., 0], [[0, 60], [60, 80]])


def test_small_copy_keeps_channels_apart():
    image = np.zeros((4, 4, 3), dtype=np.uint8)
    image[..., 0], image[..., 2] = 200, 10
    np.testing.assert_array_equal(quality.small_copy(image, 2), np.tile([200, 0, 10], (2, 2, 1)))


def test_small_copy_rejects_non_positive_analysis_size():
    with pytest.raises(ValueError, match="analysis_size=0"):
        quality.small_copy(np.zeros((8, 8, 3), dtype=np.uint8), 0)


# ---------------------------------------------------------------- perceptual hash

def _photo(seed: int, height: int = 300, width: int = 400, class_index: int = 0) -> np.ndarray:
    return photo_like(np.random.default_rng(seed), height, width, class_index)


def _jpeg_roundtrip(image: np.ndarray, jpeg_quality: int) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=jpeg_quality)
    return np.asarray(Image.open(buffer).convert("RGB"))


def test_phash_is_16_lowercase_hex_chars():
    assert re.fullmatch(r"[0-9a-f]{16}", quality.perceptual_hash(_photo(1)))


def _ramp(width: int = 32, height: int = 32, step: int = 8) -> np.ndarray:
    """A grey ramp falling from left to right: value step * (width - 1 - column)."""
    return _grey(np.tile(step * (width - 1 - np.arange(width)), (height, 1)))


def test_phash_of_a_ramp_is_hand_computed():
    """Columns falling linearly: X = 1 f^T, so the DCT D X D^T is non-zero in row 0 only
    (D 1 has only a DC term); D f is zero at even frequencies (f minus its mean is odd about
    the centre) and positive at odd ones (f falls as cos((2n+1)k pi/64) does for odd k).
    Median of the 63 AC terms: 0; bits 0 (DC), 1, 3, 5, 7 set: 0b11010101 = 0xd5."""
    assert quality.perceptual_hash(_ramp()) == "d500000000000000"
    # the same ramp at 64 x 48 area-resizes to the same 32 x 32 ramp
    assert quality.perceptual_hash(_ramp(64, 48, 4)) == "d500000000000000"


def test_phash_of_a_transposed_ramp_moves_the_bits_to_column_0():
    """Transposing the image transposes the 8x8 block: coefficients (1, 0), (3, 0), (5, 0),
    (7, 0) are bits 8, 24, 40, 56, i.e. the top bit of bytes 1, 3, 5 and 7."""
    assert quality.perceptual_hash(_ramp().transpose(1, 0, 2)) == "8080008000800080"


def test_phash_of_a_mirrored_ramp_negates_the_odd_frequencies():
    """Mirroring left-right multiplies coefficient (0, k) by (-1)^k: the odd ones turn
    negative, under the median 0, so only the DC bit stays."""
    assert quality.perceptual_hash(_ramp()[:, ::-1]) == "8000000000000000"


def test_phash_of_flat_images_has_only_the_dc_bit():
    assert quality.perceptual_hash(_grey(np.full((20, 30), 90))) == "8000000000000000"
    assert quality.perceptual_hash(_grey(np.zeros((20, 30)))) == "0000000000000000"


def test_phash_identical_images_have_distance_zero():
    image = _photo(2)
    assert image_hash.hamming(quality.perceptual_hash(image),
                           quality.perceptual_hash(image.copy())) == 0


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_phash_survives_jpeg_reencoding_at_quality_80(seed):
    image = _photo(seed)
    reencoded = _jpeg_roundtrip(image, 80)
    assert image_hash.hamming(quality.perceptual_hash(image),
                           quality.perceptual_hash(reencoded)) <= 4


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_phash_survives_resizing_to_90_percent(seed):
    image = _photo(seed)
    smaller = np.asarray(Image.fromarray(image).resize((360, 270), Image.Resampling.BILINEAR))
    assert image_hash.hamming(quality.perceptual_hash(image),
                           quality.perceptual_hash(smaller)) <= 4


def test_phash_unrelated_images_are_far_apart():
    hashes = [quality.perceptual_hash(_photo(seed, class_index=seed % 4)) for seed in range(8)]
    distances = [image_hash.hamming(a, b) for a, b in itertools.combinations(hashes, 2)]
    assert min(distances) > 10


def test_phash_does_not_depend_on_the_analysis_copy_size():
    image = _photo(9, 600, 800)
    assert image_hash.hamming(quality.perceptual_hash(image),
                           quality.perceptual_hash(quality.small_copy(image, 256))) <= 2


# ---------------------------------------------------------------- hamming

def test_hamming_counts_differing_bits():
    assert image_hash.hamming("0000000000000000", "ffffffffffffffff") == 64
    assert image_hash.hamming("8000000000000000", "0000000000000000") == 1
    assert image_hash.hamming("0123456789abcdef", "0123456789abcdee") == 1


@pytest.mark.parametrize("bad", ["123", "0123456789abcdez", 17])
def test_hamming_rejects_non_hash_values(bad):
    with pytest.raises(ValueError, match="16-character hex"):
        image_hash.hamming(bad, "0000000000000000")


# ---------------------------------------------------------------- hash_bands

def test_hash_bands_splits_contiguous_bits_extra_bits_first():
    # 5 bands of 64 bits: 13, 13, 13, 13, 12.
    assert image_hash.hash_bands("ffffffffffffffff", 4) == [
        (0, 8191), (1, 8191), (2, 8191), (3, 8191), (4, 4095)]


def test_hash_bands_of_four_are_the_16_bit_words():
    assert image_hash.hash_bands("0123456789abcdef", 3) == [
        (0, 0x0123), (1, 0x4567), (2, 0x89AB), (3, 0xCDEF)]


def test_hash_bands_zero_distance_is_the_whole_hash():
    assert image_hash.hash_bands("0123456789abcdef", 0) == [(0, 0x0123456789ABCDEF)]


def _flip(phash: str, bits) -> str:
    value = int(phash, 16)
    for bit in bits:
        value ^= 1 << int(bit)
    return f"{value:016x}"


@pytest.mark.parametrize("max_hamming", [1, 2, 4, 7, 16])
def test_hash_bands_pigeonhole_hashes_within_max_hamming_share_a_band(max_hamming):
    rng = np.random.default_rng(max_hamming)
    for _ in range(200):
        phash = f"{int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2)):016x}"
        other = _flip(phash, rng.choice(64, size=max_hamming, replace=False))
        assert image_hash.hamming(phash, other) == max_hamming
        assert set(image_hash.hash_bands(phash, max_hamming)) & set(
            image_hash.hash_bands(other, max_hamming))


def test_hash_bands_one_flip_per_band_shares_nothing():
    # max_hamming + 1 differing bits can hit every band: the guarantee is tight.
    other = _flip("0000000000000000", [63, 50, 37, 24, 11])   # one bit in each of the 5 bands
    assert not set(image_hash.hash_bands("0000000000000000", 4)) & set(
        image_hash.hash_bands(other, 4))


@pytest.mark.parametrize("bad", [-1, 64, 2.0, True])
def test_hash_bands_rejects_max_hamming_outside_0_to_63(bad):
    with pytest.raises(ValueError, match="max_hamming"):
        image_hash.hash_bands("0000000000000000", bad)


# ---------------------------------------------------------------- channel moments

def test_channel_moments_of_a_solid_colour():
    image = np.tile(np.array([255, 0, 51], dtype=np.uint8), (3, 5, 1))
    assert quality.channel_moments(image) == ([1.0, 0.0, 0.2], [1.0, 0.0, 0.04])


def test_channel_moments_mean_of_squares_is_not_square_of_mean():
    image = np.zeros((2, 2, 3), dtype=np.uint8)
    image[0, :, 0] = 255                                     # red: half 0, half 1
    means, square_means = quality.channel_moments(image)
    assert (means[0], square_means[0]) == (0.5, 0.5)


# ---------------------------------------------------------------- blur, whatever the exposure

def _photo_in_steps_of_4(size: int = 128) -> np.ndarray:
    """A photo-like image whose values are multiples of 4, so that x0.25 and x0.5 are exact."""
    image = photo_like(np.random.default_rng(5), size, size, 1)
    return (image // 4 * 4).astype(np.uint8)


@pytest.mark.parametrize("scale, shift", [(0.5, 0), (0.5, 100), (0.25, 10), (0.25, 180)])
def test_blur_scores_do_not_move_with_brightness_and_contrast(scale, shift):
    image = _photo_in_steps_of_4()
    changed = (image.astype(np.int32) * 4 // int(4 / scale) + shift).astype(np.uint8)
    before, after = quality.measure(image), quality.measure(changed)
    for name in ("blur_fine_share", "blur_laplacian_ratio"):
        assert after[name] == pytest.approx(before[name], rel=1e-3), name
    # the absolute Laplacian variance (no longer judged) moves with the contrast squared
    assert after["blur_laplacian_var"] == pytest.approx(before["blur_laplacian_var"] * scale ** 2,
                                                        rel=1e-3)


def _gaussian(image: np.ndarray, sigma: float) -> np.ndarray:
    from PIL import ImageFilter
    return np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(sigma)))


@pytest.mark.parametrize("sigma", [0.0, 0.5])
def test_sharp_photo_is_not_blurry(sigma):
    image = photo_like(np.random.default_rng(2), 256, 256, 2)
    image = _gaussian(image, sigma) if sigma else image
    assert quality.judge(quality.measure(image), QualityConfig()) is None


@pytest.mark.parametrize("sigma, metric", [(1.5, "blur_fine_share"),
                                           (3.0, "blur_laplacian_ratio"),
                                           (12.0, "blur_laplacian_ratio")])
def test_blurred_photo_is_blurry_by_the_rule_for_its_strength(sigma, metric):
    # Strong blur leaves only 8-bit rounding noise at the finest scale, whose share rises
    # again: the ratio to the luma variance catches it.
    photo = photo_like(np.random.default_rng(2), 256, 256, 2)
    metrics = quality.measure(_gaussian(photo, sigma))
    reason, detail = quality.judge(metrics, QualityConfig())
    assert reason == "blurry" and detail.startswith(metric)


def test_darkened_or_dimmed_blurry_photo_is_still_blurry_not_flat():
    blurred = _gaussian(photo_like(np.random.default_rng(4), 256, 256, 0), 3.0)
    dim = (blurred.astype(np.float32) * 0.3 + 0.5).astype(np.uint8)
    assert quality.judge(quality.measure(dim), QualityConfig())[0] == "blurry"
