"""The compiled passes of the quality analysis (transforms/offline/_analysis_kernel.c): the
analysis copy's resize (`area_resize.rounded_resize`) and its luma, levels and channel sums
(`quality._luma_pass`). Built by `make test`'s install, and the same integers as their numpy
forms (`rounded_resize_numpy`, `_luma_pass_numpy`) on every shape kind they meet, so the
quality metrics, the hashes and the shards cannot move with them; the numpy forms run where the
kernel is not built."""
from __future__ import annotations

import shutil
import sysconfig

import numpy as np
import pytest

from transforms.offline import analysis_kernel, area_resize, quality


def _image(rng, height: int, width: int, channels: int = 3, fill=None) -> np.ndarray:
    if fill is not None:
        return np.full((height, width, channels), fill, np.uint8)
    return rng.integers(0, 256, (height, width, channels), dtype=np.uint8)


def test_the_kernel_is_built_by_the_install():
    """setup.py's extension is optional (a machine without a C compiler runs the numpy form):
    where the compiler Python was built with is present, a missing kernel is a broken build."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the numpy form runs")
    assert analysis_kernel.compiled is not None


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_give_the_numpys_integers(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        height, width = (int(v) for v in rng.integers(1, 700, 2))
        out_height, out_width = (int(v) for v in rng.integers(1, 400, 2))
        fill = (None, 0, 255)[int(rng.integers(0, 3))]
        image = _image(rng, height, width, fill=fill)
        np.testing.assert_array_equal(
            area_resize.rounded_resize(image, out_height, out_width),
            area_resize.rounded_resize_numpy(image, out_height, out_width),
            err_msg=f"{height}x{width} -> {out_height}x{out_width}, fill {fill}")


@pytest.mark.parametrize("shape, size", [
    ((338, 328, 3), (256, 248)),     # a photo at the DCT scale: three taps per axis
    ((1500, 1500, 3), (256, 256)),   # past 2**21 pixels: the 64-bit sums
    ((3000, 4000, 3), (192, 256)),   # a camera PNG: 17 taps
    ((2049, 1025, 3), (2048, 1024)),  # barely shrunk, past 2**21 pixels
    ((5, 3000, 3), (1, 256)),
    ((40, 30, 1), (17, 11)),         # one channel, four channels
    ((40, 30, 4), (17, 11)),
])
def test_the_kernels_branches_give_the_numpys_integers(shape, size):
    rng = np.random.default_rng(sum(shape))
    for fill in (None, 0, 255):
        image = _image(rng, *shape, fill=fill)
        np.testing.assert_array_equal(area_resize.rounded_resize(image, *size),
                                      area_resize.rounded_resize_numpy(image, *size))


def test_a_grey_image_without_a_channel_axis_is_resized_as_numpy_does():
    image = _image(np.random.default_rng(5), 300, 200)[..., 0]
    resized = area_resize.rounded_resize(image, 150, 101)
    assert resized.shape == (150, 101)
    np.testing.assert_array_equal(resized, area_resize.rounded_resize_numpy(image, 150, 101))


def test_a_view_is_resized_as_its_values():
    """A strided view (a crop, a channel-reversed image) is copied to C order first."""
    rng = np.random.default_rng(7)
    image = _image(rng, 400, 500)[50:350:1, 20:480, ::-1]
    np.testing.assert_array_equal(area_resize.rounded_resize(image, 256, 200),
                                  area_resize.rounded_resize_numpy(image, 256, 200))


@pytest.mark.parametrize("divisor", [1, 2, 3, 7, 110864, 2**21 - 1, 12_000_000])
def test_the_float_rounding_is_the_integer_division(divisor):
    """The kernel rounds with floor((sum + d / 2 + 1 / 4) * (1 / d)) in float64: every sum a
    cell can have (0 ..= 255 * d; sampled densely near each rounding edge) gives
    (2 * sum + d) // (2 * d)."""
    edges = np.arange(256, dtype=np.int64) * divisor
    near = (edges[:, None] + np.arange(-3, 4)[None, :] - divisor // 2).ravel()
    sums = np.unique(np.concatenate([near, np.linspace(0, 255 * divisor, 5001).astype(np.int64)]))
    sums = sums[(sums >= 0) & (sums <= 255 * divisor)]
    estimate = np.floor((sums.astype(np.float64) + (divisor / 2 + 0.25)) * (1.0 / divisor))
    np.testing.assert_array_equal(estimate.astype(np.int64), (2 * sums + divisor) // (2 * divisor))


def test_wrong_buffers_are_refused():
    kernel = analysis_kernel.compiled
    image = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(ValueError, match="buffer sizes"):
        kernel.resize_uint8(image, np.empty((4, 4, 3), np.uint8), 10, 10, 3, 5, 5)
    with pytest.raises(ValueError, match="positive"):
        kernel.resize_uint8(image, np.empty((0, 5, 3), np.uint8), 10, 10, 3, 0, 5)
    with pytest.raises(TypeError):  # the target must be writable
        kernel.resize_uint8(image, bytes(75), 10, 10, 3, 5, 5)


def test_without_the_kernel_the_numpy_form_gives_the_same_copy(monkeypatch):
    image = _image(np.random.default_rng(3), 677, 657)
    compiled = quality.small_copy(image, 256)
    monkeypatch.setattr(analysis_kernel, "compiled", None)
    np.testing.assert_array_equal(quality.small_copy(image, 256), compiled)
    assert compiled.shape == (256, 248, 3) and compiled.flags.writeable


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (96, 112), (256, 248), (700, 1024)])
def test_the_luma_pass_gives_the_numpys_integers(shape):
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    for fill in (None, 0, 255):
        image = _image(rng, *shape, fill=fill)
        compiled, reference = quality._luma_pass(image), quality._luma_pass_numpy(image)
        for got, expected in zip(compiled, reference):
            np.testing.assert_array_equal(got, expected)
        assert compiled[3:] == reference[3:]  # the sums: Python integers, equal


def test_the_luma_pass_refuses_wrong_buffers():
    kernel = analysis_kernel.compiled
    image = np.zeros((4, 5, 3), np.uint8)
    luma, levels, counts = np.empty(20, np.int32), np.empty(20, np.uint8), np.empty(256, np.int64)
    with pytest.raises(ValueError, match="do not match"):
        kernel.luma_pass(image, luma[:19], levels, counts)
    with pytest.raises(ValueError, match="do not match"):
        kernel.luma_pass(image, luma, levels, counts[:255])


def test_without_the_kernel_the_analysis_is_the_same(monkeypatch):
    rng = np.random.default_rng(11)
    image = _image(rng, 480, 640)
    image[:240] //= 4  # some structure: a dark half
    compiled = quality.analyse(image, 256, center=True)
    monkeypatch.setattr(analysis_kernel, "compiled", None)
    assert quality.analyse(image, 256, center=True) == compiled
