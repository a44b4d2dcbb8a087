"""transforms.online.pixel_ops: per-sample colour, blur, JPEG and noise ops on float32 [0, 1]."""
import numpy as np
import pytest
import tensorflow as tf

from configs.online import PixelConfig
from transforms.online import pixel_ops
from transforms.online.seeds import step_seed

# ITU-R BT.601 luma weights (R, G, B), the published constants, not the module's copy.
LUMA = np.array([0.299, 0.587, 0.114], np.float32)

# ITU-T T.81 (JPEG) Annex K, tables K.1 (luminance) and K.2 (chrominance), quality 50.
ANNEX_K_LUMA = np.array([
    [16, 11, 10, 16, 24, 40, 51, 61],
    [12, 12, 14, 19, 26, 58, 60, 55],
    [14, 13, 16, 24, 40, 57, 69, 56],
    [14, 17, 22, 29, 51, 87, 80, 62],
    [18, 22, 37, 56, 68, 109, 103, 77],
    [24, 35, 55, 64, 81, 104, 113, 92],
    [49, 64, 78, 87, 103, 121, 120, 101],
    [72, 92, 95, 98, 112, 100, 103, 99]], np.float64)
ANNEX_K_CHROMA = np.array([
    [17, 18, 24, 47, 99, 99, 99, 99],
    [18, 21, 26, 66, 99, 99, 99, 99],
    [24, 26, 56, 99, 99, 99, 99, 99],
    [47, 66, 99, 99, 99, 99, 99, 99]] + [[99] * 8] * 4, np.float64)


def _images(batch=2, height=8, width=8, low=0.2, high=0.8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, (batch, height, width, 3)).astype(np.float32)


def test_brightness_adds_per_sample_and_clips():
    images = np.array([[[[0.2, 0.5, 0.95]]], [[[0.2, 0.5, 0.95]]]], np.float32)
    out = pixel_ops.adjust_brightness(images, [0.1, -0.3]).numpy()
    np.testing.assert_allclose(out[:, 0, 0], [[0.3, 0.6, 1.0], [0.0, 0.2, 0.65]], atol=1e-7)


def test_contrast_scales_about_the_mean_luma():
    images = _images()
    factor = np.array([2.0, 0.5], np.float32)
    mean = (images @ LUMA).mean(axis=(1, 2))
    expected = np.clip(images * factor[:, None, None, None]
                       + (mean * (1 - factor))[:, None, None, None], 0, 1)
    np.testing.assert_allclose(pixel_ops.adjust_contrast(images, factor).numpy(), expected,
                               atol=1e-6)


def test_saturation_zero_gives_luma_and_one_keeps_colour():
    images = _images()
    grey = pixel_ops.adjust_saturation(images, [0.0, 1.0]).numpy()
    np.testing.assert_allclose(grey[0], np.repeat((images[0] @ LUMA)[..., None], 3, -1),
                               atol=1e-6)
    np.testing.assert_allclose(grey[1], images[1], atol=1e-6)


def test_hue_keeps_luma_and_a_round_trip_is_the_identity():
    images = _images(low=0.4, high=0.6)  # stays inside the gamut, so no clipping
    turned = pixel_ops.adjust_hue(images, [0.25, -0.1]).numpy()
    np.testing.assert_allclose(turned @ LUMA, images @ LUMA, atol=1e-5)
    assert np.abs(turned - images).max() > 0.01
    back = pixel_ops.adjust_hue(turned, [-0.25, 0.1]).numpy()
    np.testing.assert_allclose(back, images, atol=1e-5)


def test_hue_leaves_greys_unchanged():
    grey = np.full((1, 4, 4, 3), 0.3, np.float32)
    np.testing.assert_allclose(pixel_ops.adjust_hue(grey, [0.37]).numpy(), grey, atol=1e-6)


def test_fused_colour_matrix_equals_the_four_ops_in_sequence():
    images = _images(low=0.4, high=0.6)
    brightness, contrast = np.array([0.05, -0.04]), np.array([1.1, 0.9])
    saturation, hue = np.array([1.2, 0.8]), np.array([0.03, -0.02])
    step = pixel_ops.adjust_brightness(images, brightness)
    step = pixel_ops.adjust_contrast(step, contrast)
    step = pixel_ops.adjust_saturation(step, saturation)
    step = pixel_ops.adjust_hue(step, hue).numpy()
    matrix, offset = pixel_ops.color_matrices((images @ LUMA).mean(axis=(1, 2)), brightness,
                                              contrast, saturation, hue)
    fused = pixel_ops.apply_color_matrix(images, matrix, offset).numpy()
    np.testing.assert_allclose(fused, step, atol=1e-5)


def test_gamma_is_a_power():
    images = _images()
    np.testing.assert_allclose(pixel_ops.adjust_gamma(images, [2.0, 0.5]).numpy(),
                               np.stack([images[0] ** 2, np.sqrt(images[1])]), rtol=1e-6)


def test_grayscale_only_where_asked():
    images = _images()
    out = pixel_ops.to_grayscale(images, [False, True]).numpy()
    np.testing.assert_array_equal(out[0], images[0])
    np.testing.assert_allclose(out[1], np.repeat((images[1] @ LUMA)[..., None], 3, -1),
                               atol=1e-6)


def test_blur_sigma_zero_is_exact_identity_and_impulse_gives_the_gaussian():
    impulse = np.zeros((2, 9, 9, 3), np.float32)
    impulse[:, 4, 4] = 1.0
    out = pixel_ops.gaussian_blur(impulse, [0.0, 1.0], radius=3).numpy()
    np.testing.assert_array_equal(out[0], impulse[0])
    taps = np.exp(-0.5 * np.arange(-3, 4) ** 2)
    taps /= taps.sum()
    np.testing.assert_allclose(out[1, 1:8, 1:8, 0], np.outer(taps, taps), atol=1e-7)
    assert out[1, 0].max() == 0.0


def test_blur_keeps_a_flat_image_flat():
    flat = np.full((1, 6, 10, 3), 0.4, np.float32)
    np.testing.assert_allclose(pixel_ops.gaussian_blur(flat, [1.5], radius=5).numpy(), flat,
                               atol=1e-6)


def test_pure_primaries_turn_into_the_bt601_weights():
    primaries = np.eye(3, dtype=np.float32).reshape(3, 1, 1, 3)
    out = pixel_ops.to_grayscale(primaries, [True, True, True]).numpy()
    np.testing.assert_allclose(out[:, 0, 0, 0], [0.299, 0.587, 0.114], atol=1e-7)
    grey = pixel_ops.adjust_saturation(primaries, [0.0, 0.0, 0.0]).numpy()
    np.testing.assert_allclose(grey[:, 0, 0], np.repeat(LUMA[:, None], 3, 1), atol=1e-6)


def _dct_basis(k: int, m: int) -> np.ndarray:
    """The orthonormal 2-D DCT-II basis image (8x8) of coefficient (k, m)."""
    def c(u):
        return np.sqrt((1 if u == 0 else 2) / 8) * np.cos((2 * np.arange(8) + 1) * u * np.pi / 16)
    return np.outer(c(k), c(m))


def _jfif_to_rgb(y, cb, cr) -> np.ndarray:
    """JFIF YCbCr (Cb, Cr centred on 0) to RGB in [0, 1], the published constants."""
    rgb = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], -1)
    return (rgb / 255.0).astype(np.float32)


def test_jpeg_quantises_each_dct_coefficient_by_the_annex_k_table():
    """One 8x8 image per (channel, coefficient): 2.4 table steps of that DCT basis on a flat
    grey 128 round to 2 steps at quality 50, so the output shows the Annex K entry; at
    quality 100 every step is 1 (coefficients that are whole numbers survive)."""
    inputs, expected = [], []
    for channel, table in ((0, ANNEX_K_LUMA), (1, ANNEX_K_CHROMA), (2, ANNEX_K_CHROMA)):
        for k in range(8):
            for m in range(8):
                planes = [np.full((8, 8), 128.0), np.zeros((8, 8)), np.zeros((8, 8))]
                wanted = [p.copy() for p in planes]
                planes[channel] = planes[channel] + 2.4 * table[k, m] * _dct_basis(k, m)
                wanted[channel] = wanted[channel] + 2.0 * table[k, m] * _dct_basis(k, m)
                inputs.append(_jfif_to_rgb(*planes))
                expected.append(_jfif_to_rgb(*wanted))
    inputs = np.stack(inputs)
    out = pixel_ops.jpeg_compress(inputs, [50.0] * len(inputs), [True] * len(inputs)).numpy()
    np.testing.assert_allclose(out, np.stack(expected), atol=0.02 / 255.0)
    whole = _jfif_to_rgb(128.0 + 24.0 * _dct_basis(2, 3), np.zeros((8, 8)), np.zeros((8, 8)))
    lossless = pixel_ops.jpeg_compress(whole[None], [100.0], [True]).numpy()
    np.testing.assert_allclose(lossless[0], whole, atol=0.02 / 255.0)


@pytest.mark.parametrize("quality, luma_dc_step", [(50, 16), (25, 32), (10, 80), (75, 8)])
def test_jpeg_quality_scales_the_tables_the_ijg_way(quality, luma_dc_step):
    """IJG scaling of K.1's DC entry (16): 5000/q percent below 50, 200 - 2q from 50 up.
    A flat grey 128 + 2.3 steps has only a DC coefficient (8 x the offset): 2 steps remain."""
    offset = 2.3 * luma_dc_step / 8.0
    flat = _jfif_to_rgb(np.full((8, 8), 128.0 + offset), np.zeros((8, 8)), np.zeros((8, 8)))
    out = pixel_ops.jpeg_compress(flat[None], [float(quality)], [True]).numpy()
    np.testing.assert_allclose(out[0], np.full((8, 8, 3), (128.0 + 2 * luma_dc_step / 8) / 255),
                               atol=0.02 / 255.0)


def test_jpeg_degrades_more_at_low_quality_and_skips_unselected_samples():
    rng = np.random.default_rng(1)
    texture = rng.random((1, 16, 24, 3)).astype(np.float32)
    images = np.concatenate([texture] * 3)
    out = pixel_ops.jpeg_compress(images, [95.0, 10.0, 10.0], [True, True, False]).numpy()
    error = np.abs(out - images).mean(axis=(1, 2, 3))
    assert 0 < error[0] < error[1]
    np.testing.assert_array_equal(out[2], images[2])
    assert out.min() >= 0.0 and out.max() <= 1.0


def test_jpeg_handles_sides_that_are_not_multiples_of_8_and_keeps_flat_grey():
    flat = np.full((1, 13, 10, 3), 0.5, np.float32)
    out = pixel_ops.jpeg_compress(flat, [30.0], [True]).numpy()
    assert out.shape == flat.shape
    np.testing.assert_allclose(out, flat, atol=1.0 / 255.0)


def test_gaussian_and_speckle_noise_formulas():
    images = _images()
    noise = np.random.default_rng(2).standard_normal(images.shape).astype(np.float32)
    std = np.array([0.0, 0.1], np.float32)
    additive = pixel_ops.add_gaussian_noise(images, noise, std).numpy()
    np.testing.assert_array_equal(additive[0], images[0])
    np.testing.assert_allclose(additive[1], np.clip(images[1] + 0.1 * noise[1], 0, 1),
                               atol=1e-7)
    speckle = pixel_ops.add_speckle_noise(images, noise, std).numpy()
    np.testing.assert_allclose(speckle[1], np.clip(images[1] * (1 + 0.1 * noise[1]), 0, 1),
                               atol=1e-7)


def test_speckle_leaves_black_black():
    black = np.zeros((1, 4, 4, 3), np.float32)
    noise = np.ones_like(black)
    np.testing.assert_array_equal(pixel_ops.add_speckle_noise(black, noise, [0.5]).numpy(),
                                  black)


@pytest.mark.parametrize("key,value,param,low,high", [
    ("brightness", 0.2, "brightness", -0.2, 0.2),
    ("contrast", 0.3, "contrast", 0.7, 1.3),
    ("saturation", 0.5, "saturation", 0.5, 1.5),
    ("hue", 0.1, "hue", -0.1, 0.1),
])
def test_color_jitter_samples_only_enabled_params_within_range(key, value, param, low, high):
    magnitudes = {"brightness": 0.0, "contrast": 0.0, "saturation": 0.0, "hue": 0.0}
    config = PixelConfig(**{**magnitudes, key: value})
    params = pixel_ops.ColorJitterOp(config).sample(256, (8, 8), step_seed(0, 0, 0))
    assert set(params) == {param}
    drawn = params[param].numpy()
    assert drawn.min() >= low and drawn.max() <= high
    assert drawn.max() - drawn.min() > (high - low) * 0.8  # spread over the range


def test_noise_op_samples_a_field_of_the_image_size():
    op = pixel_ops.GaussianNoiseOp(PixelConfig(gaussian_noise_std=0.1))
    params = op.sample(3, (5, 7), step_seed(0, 0, 0))
    assert params["noise"].shape == (3, 5, 7, 3)
    assert params["std"].numpy().max() <= 0.1


def test_blur_op_radius_is_capped_by_small_images():
    op = pixel_ops.BlurOp(PixelConfig(blur_probability=1.0, blur_sigma=(2.0, 3.0)))
    images = tf.constant(_images(1, 5, 5))
    params = op.sample(1, (5, 5), step_seed(0, 0, 0))
    out = op.apply({"images": images}, params)["images"]
    assert out.shape == (1, 5, 5, 3)
