"""The compiled passes of the quality analysis (transforms/offline/_analysis_kernel.c): the
analysis copy's resize (`area_resize.rounded_resize`), its luma, levels and channel sums
(`quality._luma_pass`), the hash's area sums (`image_hash._hash_sums`), the luma's float
metrics (`quality._float_moments`), its percentiles' order statistics
(`quality._order_statistics`) and all of these with the hashes in one call (`quality.analyse`).
Built by `make test`'s install, and the same integers, or float64 bits, as their numpy forms on
every shape kind they meet, so the quality metrics, the hashes and the shards cannot move with
them; the numpy forms run where the kernel is not built."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sysconfig

import numpy as np
import pytest

from transforms.offline import analysis_kernel, area_resize, image_hash, quality


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


def _luma(rng, height: int, width: int, kind: int) -> np.ndarray:
    """int32 luma times 1000: noise, whole levels, a smooth pattern, or flat."""
    if kind == 0:
        return rng.integers(0, 255001, (height, width)).astype(np.int32)
    if kind == 1:
        return (rng.integers(0, 256, (height, width)) * 1000).astype(np.int32)
    if kind == 2:
        y, x = np.mgrid[0:height, 0:width]
        pattern = (np.sin(x / 7.0) + np.cos(y / 5.0) + 2) * 60000
        return (pattern + rng.integers(0, 50, (height, width))).astype(np.int32)
    return np.full((height, width), int(rng.integers(0, 255001)), np.int32)


@pytest.mark.parametrize("seed", range(4))
def test_the_float_moments_are_the_numpys_bits(seed):
    """Sides from 1 px (no Laplacian, no half-size copy) to 400, so the pairwise sums meet
    every branch (under 8 values, one block of up to 128, halves above) with every remainder."""
    rng = np.random.default_rng(seed)
    for case in range(150):
        height, width = (int(v) for v in rng.integers(1, 400, 2))
        luma = _luma(rng, height, width, case % 4)
        compiled = quality._float_moments(luma)
        assert all(isinstance(value, float) for value in compiled)
        assert compiled == quality._float_moments_numpy(luma), (height, width, case % 4)


@pytest.mark.parametrize("shape", [(1, 1), (2, 9), (3, 3), (5, 7), (6, 6), (7, 6), (3, 200),
                                   (11, 12), (16, 16), (96, 100), (256, 192), (700, 1024)])
def test_the_float_moments_at_the_edges_of_the_laplacian_and_the_half_copy(shape):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    for kind in range(4):
        luma = _luma(rng, *shape, kind)
        assert quality._float_moments(luma) == quality._float_moments_numpy(luma)


def test_the_float_moments_of_a_view_are_those_of_its_values():
    luma = _luma(np.random.default_rng(4), 300, 200, 0)[10:250:2, ::-1]
    assert quality._float_moments(luma) == quality._float_moments_numpy(luma)


def test_the_float_moments_refuse_wrong_buffers():
    kernel = analysis_kernel.compiled
    luma = np.zeros((4, 5), np.int32)
    with pytest.raises(ValueError, match="does not match"):
        kernel.float_moments(luma, 4, 4)
    with pytest.raises(ValueError, match="does not match"):
        kernel.float_moments(luma, 0, 5)


@pytest.mark.parametrize("seed", range(3))
def test_the_hash_sums_are_the_numpys_integers(seed):
    """Both numpy forms (the matrix products up to 160 x 160 px, the taps above) on sides from
    1 px (32 cells from fewer pixels) to 500, and a centre crop's view."""
    rng = np.random.default_rng(seed)
    for case in range(120):
        height, width = (int(v) for v in rng.integers(1, 500, 2))
        luma = _luma(rng, height, width, case % 4)
        for values in (luma, image_hash.center(luma)):
            compiled = image_hash._hash_sums(values)
            assert compiled.shape == (32, 32)
            np.testing.assert_array_equal(compiled, image_hash._hash_sums_numpy(values),
                                          err_msg=f"{values.shape}")


def test_the_area_sums_refuse_wrong_buffers():
    kernel = analysis_kernel.compiled
    values, sums = np.zeros((10, 10), np.int32), np.empty((4, 4), np.int64)
    with pytest.raises(ValueError, match="buffer sizes"):
        kernel.area_sums(values, sums, 10, 10, 5, 5)
    with pytest.raises(ValueError, match="positive"):
        kernel.area_sums(values, sums, 10, 10, 0, 4)
    with pytest.raises(TypeError):  # the sums must be writable
        kernel.area_sums(values, bytes(128), 10, 10, 4, 4)


def _levels_and_counts(luma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The luma pass's levels (uint8) and counts of an int32 luma."""
    levels = ((luma + 500) // 1000).astype(np.uint8)
    return levels, np.bincount(levels.ravel(), minlength=256).astype(np.int64)


@pytest.mark.parametrize("seed", range(3))
def test_the_order_statistics_are_the_numpys_integers(seed):
    """The percentiles' ranks of every size, up to 8 random ascending ranks (repeats allowed),
    and every rank of the smallest images, on noise, whole levels, smooth and flat luma."""
    rng = np.random.default_rng(seed)
    for case in range(120):
        height, width = (int(v) for v in rng.integers(1, 300, 2))
        if case % 10 == 0:
            height, width = 1, int(rng.integers(1, 9))
        luma = _luma(rng, height, width, case % 4)
        levels, counts = _levels_and_counts(luma)
        size = luma.size
        rank_sets = [quality._percentile_plan(size)[3],
                     sorted(int(r) for r in rng.integers(0, size, int(rng.integers(1, 9))))]
        if size <= 8:
            rank_sets.append(list(range(size)))
        for ranks in rank_sets:
            assert quality._order_statistics(luma, levels, counts, ranks) == \
                quality._order_statistics_numpy(luma, levels, counts, ranks), (luma.shape, ranks)


def test_the_order_statistics_at_the_ends_of_the_levels():
    """Values at both ends of a level's span (x500 rounds up, x499 down), level 0 and 255."""
    luma = np.array([[0, 499, 500, 1499, 254500, 255000, 1500, 999]], np.int32)
    levels, counts = _levels_and_counts(luma)
    ranks = list(range(luma.size))
    assert quality._order_statistics(luma, levels, counts, ranks) == dict(
        zip(ranks, sorted(luma.ravel().tolist())))


def test_the_order_statistics_refuse_wrong_inputs():
    kernel = analysis_kernel.compiled
    luma = np.array([10, 2000, 3000, 2400], np.int32)
    levels, counts = _levels_and_counts(luma)
    assert kernel.order_statistics(luma, levels, counts, [0, 3]) == [10, 3000]
    with pytest.raises(ValueError, match="do not match"):
        kernel.order_statistics(luma, levels[:3], counts, [0])
    with pytest.raises(ValueError, match="ascend"):
        kernel.order_statistics(luma, levels, counts, [2, 1])
    with pytest.raises(ValueError, match="ascend"):
        kernel.order_statistics(luma, levels, counts, [4])
    with pytest.raises(ValueError, match="1 to 8 ranks"):
        kernel.order_statistics(luma, levels, counts, list(range(9)))
    with pytest.raises(ValueError, match="do not cover"):
        kernel.order_statistics(luma, levels, np.zeros(256, np.int64), [0])
    with pytest.raises(ValueError, match="not \\(luma \\+ 500\\) / 1000"):
        kernel.order_statistics(luma, np.array([0, 0, 3, 2], np.uint8), counts, [0])
    wrong = counts.copy()
    wrong[2], wrong[3] = 3, 0  # level 3's pixel counted in level 2
    with pytest.raises(ValueError, match="do not match the levels"):
        kernel.order_statistics(luma, levels, wrong, [3])


def test_without_the_kernel_a_thumbnail_and_a_photo_measure_the_same(monkeypatch):
    """The whole analysis of a structured thumbnail (no resize) and photo (resized), centre
    hash included, with and without the kernel."""
    rng = np.random.default_rng(12)
    images = []
    for height, width in ((96, 100), (677, 657)):
        y, x = np.mgrid[0:height, 0:width]
        base = (np.sin(x / 9.0) * np.cos(y / 13.0) + 1) * 100
        image = base[..., None] + rng.integers(0, 40, (height, width, 3))
        images.append(np.clip(image, 0, 255).astype(np.uint8))
    compiled = [quality.analyse(image, 256, center=True) for image in images]
    monkeypatch.setattr(analysis_kernel, "compiled", None)
    assert [quality.analyse(image, 256, center=True) for image in images] == compiled


def _rgb(rng, height: int, width: int, kind: int) -> np.ndarray:
    """uint8 RGB: noise, grey whole levels, a smooth pattern with noise, or flat."""
    if kind == 0:
        return _image(rng, height, width)
    if kind == 1:
        return np.repeat(rng.integers(0, 256, (height, width, 1), dtype=np.uint8), 3, axis=2)
    if kind == 2:
        y, x = np.mgrid[0:height, 0:width]
        base = (np.sin(x / 7.0) * np.cos(y / 5.0) + 1) * 100
        return np.clip(base[..., None] + rng.integers(0, 40, (height, width, 3)), 0,
                       255).astype(np.uint8)
    return _image(rng, height, width, fill=int(rng.integers(0, 256)))


@pytest.mark.parametrize("seed", range(4))
def test_the_one_call_analysis_gives_the_separate_passes_values(seed):
    """`quality.analyse` makes one kernel call (`analyse`): its metrics, moments and both
    hashes equal those of the separate passes (`_analyse_luma`, each compiled) and of numpy's,
    on sides from 1 px (a single pixel's percentiles, no Laplacian, a 1 px centre) to 300."""
    rng = np.random.default_rng(seed)
    for case in range(60):
        height, width = (int(v) for v in rng.integers(1, 300, 2))
        if case % 10 == 0:
            height, width = int(rng.integers(1, 4)), int(rng.integers(1, 9))
        image = _rgb(rng, height, width, case % 4)
        for center in (False, True):
            one_call = quality.analyse(image, 512, center=center)
            assert one_call == quality._analyse_luma(image, center), (height, width, case % 4)
            assert (one_call.center_phash is None) is not center
            if case % 6 == 0:
                assert one_call == _numpy_analysis(image, center), (height, width, case % 4)


def _numpy_analysis(image: np.ndarray, center: bool):
    compiled = analysis_kernel.compiled
    analysis_kernel.compiled = None
    try:
        return quality.analyse(image, 512, center=center)
    finally:
        analysis_kernel.compiled = compiled


def test_the_one_call_analysis_of_a_view_and_of_a_resized_photo():
    """A strided view is analysed as its values; a photo goes through the analysis copy."""
    rng = np.random.default_rng(31)
    photo = _rgb(rng, 677, 657, 2)
    view = photo[::-1, 40:300]
    for image in (photo, view):
        assert quality.analyse(image, 256, center=True) == quality._analyse_luma(
            quality.small_copy(image, 256), True)


def test_the_one_call_analysis_refuses_wrong_inputs():
    kernel = analysis_kernel.compiled
    image, shares, dct = np.zeros((4, 5, 3), np.uint8), np.empty(256), image_hash.dct_rows()
    image[0, :2] = 255  # 2 of the 20 pixels white
    result = kernel.analyse(image, shares, 4, 5, dct, None)
    assert len(result) == 15 and result[-1] == 2
    assert shares[:2].tolist() == [18 / 20, 2 / 20]
    with pytest.raises(ValueError, match="do not match"):
        kernel.analyse(image, shares, 4, 4, dct, None)
    with pytest.raises(ValueError, match="do not match"):
        kernel.analyse(image, shares[:255], 4, 5, dct, None)
    with pytest.raises(ValueError, match="do not match"):
        kernel.analyse(image, shares, 4, 5, dct[:7], None)
    with pytest.raises(ValueError, match="not inside"):
        kernel.analyse(image, shares, 4, 5, dct, (1, 1, 4, 4))
    with pytest.raises(TypeError):
        kernel.analyse(image, shares, 4, 5, dct, (1, 1))
    with pytest.raises(TypeError):  # the shares must be writable
        kernel.analyse(image, bytes(2048), 4, 5, dct, None)


def _one_build_kernel(directory: str):
    """The kernel compiled here with ONE_BUILD (the baseline x86-64 code only, no AVX2 clone),
    loaded beside the installed one; None without a C compiler or Python's headers."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    include = sysconfig.get_paths()["include"]
    if shutil.which(compiler) is None or not os.path.exists(os.path.join(include, "Python.h")):
        return None
    source = os.path.join(os.path.dirname(analysis_kernel.__file__), "_analysis_kernel.c")
    target = os.path.join(directory, "_analysis_kernel" + importlib.machinery.EXTENSION_SUFFIXES[0])
    subprocess.run([compiler, "-O3", "-ffp-contract=off", "-DONE_BUILD", "-shared", "-fPIC",
                    f"-I{include}", "-o", target, source], check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("_analysis_kernel", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_specific_build_gives_the_baseline_builds_bytes(tmp_path):
    """The resize and the luma pass run the build for the CPU (AVX2 where it has it): their
    outputs, and the one-call analysis's, equal those of the file built without that build."""
    baseline = _one_build_kernel(str(tmp_path))
    if baseline is None:
        pytest.skip("no C compiler or Python headers: the installed kernel alone")
    installed = analysis_kernel.compiled
    assert baseline.__file__ != installed.__file__
    rng = np.random.default_rng(21)
    for case in range(40):
        height, width = (int(v) for v in rng.integers(1, 600, 2))
        image = _image(rng, height, width, fill=(None, 0, 255)[case % 3])
        out_height, out_width = area_resize.fitted_size(height, width, 256)
        resized = [np.empty((out_height, out_width, 3), np.uint8) for _ in range(2)]
        for kernel, target in zip((installed, baseline), resized):
            kernel.resize_uint8(image, target, height, width, 3, out_height, out_width)
        np.testing.assert_array_equal(*resized, err_msg=f"{height}x{width}")
        passes = []
        for kernel in (installed, baseline):
            luma = np.empty(height * width, np.int32)
            levels, counts = np.empty(height * width, np.uint8), np.empty(256, np.int64)
            passes.append((kernel.luma_pass(image, luma, levels, counts), luma, levels, counts))
        assert passes[0][0] == passes[1][0]
        for got, expected in zip(passes[0][1:], passes[1][1:]):
            np.testing.assert_array_equal(got, expected)
        small = quality.small_copy(image, 256)
        box = image_hash.center_box(*small.shape[:2])
        analyses = []
        for kernel in (installed, baseline):
            shares = np.empty(256)
            result = kernel.analyse(small, shares, *small.shape[:2], image_hash.dct_rows(), box)
            analyses.append((result, shares[:result[-1]]))
        assert analyses[0][0] == analyses[1][0]
        np.testing.assert_array_equal(analyses[0][1], analyses[1][1])
