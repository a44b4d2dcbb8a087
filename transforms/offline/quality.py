"""Quality metrics, the quality verdict and the perceptual hash of one decoded image (numpy).

The offline job decodes an image (DCT-scaled for JPEG) and calls `analyse`: one pass that makes
the `small_copy` and its luma once and gives `measure` (the numbers stored as
`quality/<metric>`), `perceptual_hash` (near-duplicate detection: `image_hash`) and
`channel_moments` (the dataset's normalization statistics); `judge` gives the reject rule, if
any. One pass costs about half of separate calls (docs/benchmarks.md): the resize is one
compiled pass where it is built (`area_resize.rounded_resize`; else three whole-row
multiply-adds per axis), the rest of the analysis one compiled call (`analysis_kernel`; else
numpy's passes), and the percentiles come from the level histogram instead of partitioning
every pixel.

Everything here is deterministic across platforms: the downscale and the luma are computed in
exact integer arithmetic, metrics are rounded to 4 decimals, and DCT coefficients are rounded to
6 decimals before their bits are taken, so floating-point summation order cannot flip a result.

Luma is ITU-R BT.601, `0.299 R + 0.587 G + 0.114 B` on 0..255, computed as
`(299 R + 587 G + 114 B) / 1000` so a grey pixel's luma is exactly its value.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from transforms.offline import analysis_kernel, area_resize, image_hash, quality_rules

__all__ = ["measure", "judge", "small_copy", "perceptual_hash", "channel_moments", "analyse",
           "Analysis", "center_hash"]

_LUMA_WEIGHTS = np.array([299, 587, 114], dtype=np.int64)  # per mille, sum 1000


def _check_rgb(image: np.ndarray, name: str = "image") -> np.ndarray:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(
            f"{name} must be a uint8 array of shape [height, width, 3]. "
            f"Received: dtype={image.dtype}, shape={image.shape}")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{name} must not be empty. Received: shape={image.shape}")
    return image


def _luma_per_mille(image: np.ndarray) -> np.ndarray:
    """Exact integer luma times 1000, int32 [H, W] (at most 255000)."""
    luma = np.multiply(image[..., 0], int(_LUMA_WEIGHTS[0]), dtype=np.int32)
    luma += np.multiply(image[..., 1], int(_LUMA_WEIGHTS[1]), dtype=np.int32)
    luma += np.multiply(image[..., 2], int(_LUMA_WEIGHTS[2]), dtype=np.int32)
    return luma


def small_copy(image: np.ndarray, analysis_size: int) -> np.ndarray:
    """A copy whose longest side is at most `analysis_size`, by area averaging (exact, rounded
    half up). An image that already fits is returned as is (the same array, not a copy).

    The short side keeps the aspect ratio, rounded to the nearest pixel and at least 1.
    """
    image = _check_rgb(image)
    if isinstance(analysis_size, bool) or not isinstance(analysis_size, (int, np.integer)) \
            or analysis_size < 1:
        raise ValueError(
            f"analysis_size must be a positive integer. Received: analysis_size={analysis_size!r}")
    height, width = image.shape[:2]
    if max(height, width) <= analysis_size:
        return image
    return area_resize.rounded_resize(image, *area_resize.fitted_size(height, width,
                                                                      analysis_size))


def measure(image: np.ndarray) -> dict[str, float]:
    """The quality metrics of `image` (uint8 RGB; pass the `small_copy`), keyed by the metric
    names of `quality_rules.METRICS` (the record contract's `codec.QUALITY_METRICS`), each
    rounded to 4 decimals:

    - brightness_mean, brightness_p01, brightness_p99: luma mean and 1st/99th percentiles
      (numpy's linear interpolation);
    - contrast_std: luma standard deviation (population, ddof=0);
    - entropy: Shannon entropy in bits of the 256-bin histogram of luma rounded to integers;
    - blur_laplacian_var: variance of the 4-neighbour Laplacian [[0,1,0],[1,-4,1],[0,1,0]] of
      the float luma over the valid region (no padding). An image with a side below 3 px has no
      valid region and measures 0.0 (nothing sharp can be seen in it);
    - blur_fine_share: blur_laplacian_var / (blur_laplacian_var + the same of the half-size
      copy made of 2x2 luma means): how much of the detail sits at the finest scale. Natural
      photos have about as much at each scale (0.2-0.6); blur empties the finest first. 0.0
      when both are 0 or the half-size copy has a side below 3 px;
    - blur_laplacian_ratio: blur_laplacian_var / luma variance (0.0 for a flat image).
    Both ratios are unchanged when luma is scaled and shifted (brightness, contrast).
    """
    return _measure_luma(_luma_per_mille(_check_rgb(image)))


def _levels(luma_1000: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(levels, counts): the luma rounded to 0..255 and each level's pixel count."""
    levels = luma_1000 + 500
    levels //= 1000
    return levels, np.bincount(levels.ravel(), minlength=256)


def _measure_luma(luma_1000: np.ndarray, levels: np.ndarray | None = None,
                  counts: np.ndarray | None = None) -> dict[str, float]:
    """`measure` from the integer luma (and its `_levels`, when made already). The float values
    are `_float_moments`'s; the percentiles come from two order statistics each, found through
    the level histogram instead of partitioning the whole image."""
    if levels is None or counts is None:
        levels, counts = _levels(luma_1000)
    return _metrics(*_float_moments(luma_1000), *_percentiles(luma_1000, levels, counts),
                    _entropy(counts, luma_1000.size), luma_1000.shape)


def _entropy(counts: np.ndarray, size: int) -> float:
    """Shannon entropy in bits of the level histogram `counts` of `size` pixels."""
    return _entropy_of(counts[counts > 0] / size)


def _entropy_of(probabilities: np.ndarray) -> float:
    """Shannon entropy in bits of the nonzero `probabilities` (float64, numpy's pairwise sum)."""
    return float(-np.add.reduce(probabilities * np.log2(probabilities))) + 0.0  # no "-0.0"


def _metrics(mean: float, contrast: float, blur: float, coarse: float, p01: float, p99: float,
             entropy: float, shape: tuple) -> dict[str, float]:
    """`measure`'s metrics from the luma's float moments (`_float_moments`), percentiles and
    entropy; `shape`: the luma's (height, width)."""
    has_half = min(shape) // 2 >= 3
    values = {
        "brightness_mean": mean,
        "brightness_p01": p01,
        "brightness_p99": p99,
        "contrast_std": contrast,
        "entropy": entropy,
        "blur_laplacian_var": blur,
        "blur_fine_share": blur / (blur + coarse) if has_half and blur + coarse else 0.0,
        "blur_laplacian_ratio": blur / (contrast * contrast) if contrast > 0.0 else 0.0,
    }
    return {name: round(values[name], 4) for name in quality_rules.metric_names()}


def _float_moments(luma_1000: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, std, Laplacian variance, the half-size copy's Laplacian variance) of the float
    luma: one compiled pass where `analysis_kernel` is built (~0.08 ms less per thumbnail, ~0.3
    ms per photo), else `_float_moments_numpy`, the reference. The same bits either way: the
    kernel repeats numpy's float64 operations in numpy's order (its pairwise sums included),
    and tests compare the two forms."""
    kernel = analysis_kernel.compiled
    if kernel is None:
        return _float_moments_numpy(luma_1000)
    return kernel.float_moments(np.ascontiguousarray(luma_1000, np.int32), *luma_1000.shape)


def _float_moments_numpy(luma_1000: np.ndarray) -> tuple[float, float, float, float]:
    luma = luma_1000 / 1000.0
    return (float(luma.mean()), float(luma.std()), _laplacian_var(luma),
            _laplacian_var(_half_size(luma_1000)))


def _laplacian_var(luma: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian over the valid region; 0.0 below 3 px a side."""
    if luma.shape[0] < 3 or luma.shape[1] < 3:
        return 0.0
    laplacian = (luma[:-2, 1:-1] + luma[2:, 1:-1] + luma[1:-1, :-2] + luma[1:-1, 2:]
                 - 4.0 * luma[1:-1, 1:-1])
    return float(laplacian.var())


def _half_size(luma_1000: np.ndarray) -> np.ndarray:
    """Float luma of the half-size copy: means of 2x2 blocks (an odd last row or column is
    left out), summed exactly in integers."""
    height, width = luma_1000.shape[0] // 2 * 2, luma_1000.shape[1] // 2 * 2
    even = luma_1000[:height, :width]
    blocks = even[0::2, 0::2] + even[1::2, 0::2] + even[0::2, 1::2] + even[1::2, 1::2]
    return blocks / 4000.0


_PERCENTILES = np.true_divide([1, 99], 100)  # q as np.percentile computes it


def _order_statistics(luma_1000: np.ndarray, levels: np.ndarray, counts: np.ndarray,
                      ranks) -> dict[int, int]:
    """{rank: the rank-th smallest luma_1000 (0-based)}, `ranks` ascending: one compiled pass
    where `analysis_kernel` is built and the levels are the luma pass's (uint8; ~30 us less per
    thumbnail), else `_order_statistics_numpy`, the reference. Exact integers either way."""
    kernel = analysis_kernel.compiled
    if kernel is None or levels.dtype != np.uint8:
        return _order_statistics_numpy(luma_1000, levels, counts, ranks)
    values = kernel.order_statistics(np.ascontiguousarray(luma_1000, np.int32),
                                     np.ascontiguousarray(levels),
                                     np.ascontiguousarray(counts, np.int64), ranks)
    return dict(zip(ranks, values))


def _order_statistics_numpy(luma_1000: np.ndarray, levels: np.ndarray, counts: np.ndarray,
                            ranks) -> dict[int, int]:
    """Levels rise with luma, so a rank's value lies in the level whose cumulative count first
    exceeds it: only that level's pixels are sorted."""
    ends = np.cumsum(counts)
    by_level: dict[int, list] = {}
    for rank, level in zip(ranks, np.searchsorted(ends, ranks, side="right").tolist()):
        by_level.setdefault(level, []).append(rank)
    flat_luma, flat_levels = luma_1000.ravel(), levels.ravel()
    values = {}
    for level, level_ranks in by_level.items():
        inside = np.sort(flat_luma[flat_levels == level])
        start = int(ends[level - 1]) if level else 0
        values.update((rank, int(inside[rank - start])) for rank in level_ranks)
    return values


@functools.lru_cache(maxsize=1024)
def _percentile_plan(size: int) -> tuple[list, list, list, list]:
    """np.percentile's neighbours and weights for `_PERCENTILES` of `size` values: previous,
    following, gamma (lists, one per percentile) and the sorted ranks needed."""
    last = size - 1
    virtual = last * _PERCENTILES
    previous = np.floor(virtual).astype(np.int64)
    following = previous + 1
    at_end = virtual >= last
    previous[at_end] = following[at_end] = last
    gamma = virtual - np.where(at_end, -1, previous)  # numpy's gamma uses index -1 there
    ranks = sorted(set(previous.tolist() + following.tolist()))
    return previous.tolist(), following.tolist(), gamma.tolist(), ranks


def _percentiles(luma_1000: np.ndarray, levels: np.ndarray, counts: np.ndarray) -> list[float]:
    """`np.percentile(luma_1000 / 1000.0, [1, 99])` (method "linear"), bit for bit: the same
    virtual index, neighbours and `_lerp` arithmetic in float64 (tests compare the two)."""
    previous, following, gammas, ranks = _percentile_plan(luma_1000.size)
    stats = _order_statistics(luma_1000, levels, counts, ranks)
    result = []
    for low, high, weight in zip(previous, following, gammas):
        a, b = np.float64(stats[low] / 1000.0), np.float64(stats[high] / 1000.0)
        weight = np.float64(weight)
        difference = b - a
        value = b - difference * (1 - weight) if weight >= 0.5 else a + difference * weight
        result.append(float(value))
    return result


def perceptual_hash(image: np.ndarray) -> str:
    """The 64-bit DCT perceptual hash (pHash) of a uint8 RGB image, as 16 lowercase hex chars.

    Exact rule: luma (BT.601) is area-resized to 32x32 (aspect ratio ignored); its orthonormal
    2-D DCT-II is taken (D @ X @ D.T); the top-left 8x8 coefficients (row-major, the DC term
    first) are rounded to 6 decimals; `median` is the median of the 63 non-DC coefficients; bit
    i is 1 when coefficient i > median. Bit 0 is the most significant hex bit. Only the low
    frequencies count, so re-encoding, resizing and mild noise move few bits; a flat image has
    every AC bit 0.
    """
    return image_hash.hash_of_luma(_luma_per_mille(_check_rgb(image)))


def center_hash(image: np.ndarray) -> str:
    """`perceptual_hash` of the central `image_hash.CENTER_FRACTION` of `image` (each side,
    rounded to the nearest pixel, at least 1), for crop-tolerant near duplicates: a moderate
    centre crop of a photo hashes close to the photo's centre hash compared with the crop's full
    hash."""
    return image_hash.hash_of_luma(image_hash.center(_luma_per_mille(_check_rgb(image))))


def judge(metrics: dict, config) -> tuple[str, str] | None:
    """The quality verdict: `(reason, detail)` for the first rule that fires, or None.

    The rules and their order are `quality_rules.RULES` (the README's quality-rule table shows
    them). A threshold set to None switches its rule off; `config.enabled` False switches them
    all off. `config` is a `configs.schema.QualityConfig`.
    """
    if not config.enabled:
        return None
    for rule in quality_rules.RULES:
        threshold = getattr(config, rule.config_key)
        if threshold is None:
            continue
        if rule.metric not in metrics:
            raise ValueError(
                f"Missing quality metric {rule.metric!r} needed by quality.{rule.config_key}. "
                f"Expected keys {quality_rules.metric_names()}. Received: {sorted(metrics)}")
        value = metrics[rule.metric]
        if rule.fires(value, threshold):
            return (rule.reason,
                    f"{rule.metric}={value} {rule.operator} {rule.config_key}={threshold}")
    return None


def channel_moments(image: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel (R, G, B) mean and mean of squares of pixel / 255.

    Weighted by pixel count, these combine across images into the dataset mean and std
    (std = sqrt(mean of squares - mean**2)). Sums are exact integers before the one division.
    """
    image = _check_rgb(image)
    return _moments(*_channel_sums(image), image.shape[0] * image.shape[1])


def _channel_sums(image: np.ndarray) -> tuple[list[int], list[int]]:
    """The channels' sums and sums of squares, exact integers."""
    count = image.shape[0] * image.shape[1]
    # float64 holds every partial sum exactly (at most count * 65025 < 2**53), so the BLAS
    # products below are exact integers whatever their summation order
    pixels = image.reshape(count, 3).astype(np.float64)
    ones = np.ones(count)
    return ([int(s) for s in ones @ pixels], [int(s) for s in ones @ (pixels * pixels)])


def _moments(sums, square_sums, count: int) -> tuple[list[float], list[float]]:
    return ([float(s) / (count * 255.0) for s in sums],
            [float(s) / (count * 65025.0) for s in square_sums])


def _luma_pass(image: np.ndarray):
    """(luma_1000, levels, counts, channel sums, channel square sums) of a uint8 RGB image: one
    compiled pass where `analysis_kernel` is built (~0.4 ms less per photo than the numpy
    passes of `_luma_pass_numpy`, the reference), the same integers."""
    kernel = analysis_kernel.compiled
    if kernel is None:
        return _luma_pass_numpy(image)
    height, width = image.shape[:2]
    luma_1000 = np.empty((height, width), np.int32)
    levels = np.empty((height, width), np.uint8)
    counts = np.empty(256, np.int64)
    sums = kernel.luma_pass(np.ascontiguousarray(image), luma_1000, levels, counts)
    return luma_1000, levels, counts, list(sums[:3]), list(sums[3:])


def _luma_pass_numpy(image: np.ndarray):
    luma_1000 = _luma_per_mille(image)
    return (luma_1000, *_levels(luma_1000), *_channel_sums(image))


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Everything the offline job measures on one decoded image."""
    metrics: dict          # measure()
    means: list            # channel_moments()
    square_means: list
    phash: str             # perceptual_hash()
    center_phash: str | None = None  # center_hash(), when asked for


def analyse(image: np.ndarray, analysis_size: int, center: bool = False) -> Analysis:
    """`measure`, `channel_moments` and `perceptual_hash` of `small_copy(image, analysis_size)`
    in one pass: the small copy and its integer luma are made once and shared. `center`: also
    `center_hash` (crop-tolerant near duplicates), from the same luma. Where `analysis_kernel`
    is built, everything but the resize and the entropy is one compiled call (~40 us less per
    thumbnail than `_analyse_luma`'s separate calls); the same values (tests compare them)."""
    small = small_copy(image, analysis_size)
    kernel = analysis_kernel.compiled
    if kernel is not None:
        height, width = small.shape[:2]
        probabilities = np.empty(256)
        try:
            *sums, mean, contrast, blur, coarse, p01, p99, phash, center_phash, levels_seen = \
                kernel.analyse(np.ascontiguousarray(small), probabilities, height, width,
                               image_hash.dct_rows(),
                               image_hash.center_box(height, width) if center else None)
        except OverflowError:  # 2**32 pixels or more: never an analysis copy
            pass
        else:
            means, square_means = _moments(sums[:3], sums[3:], height * width)
            return Analysis(
                metrics=_metrics(mean, contrast, blur, coarse, p01, p99,
                                 _entropy_of(probabilities[:levels_seen]), (height, width)),
                means=means, square_means=square_means, phash=f"{phash:016x}",
                center_phash=None if center_phash is None else f"{center_phash:016x}")
    return _analyse_luma(small, center)


def _analyse_luma(small: np.ndarray, center: bool) -> Analysis:
    """`analyse` of the analysis copy in separate passes (each compiled where the kernel is
    built, else numpy): the reference the one compiled call gives the same values as."""
    luma_1000, levels, counts, sums, square_sums = _luma_pass(small)
    means, square_means = _moments(sums, square_sums, luma_1000.size)
    return Analysis(metrics=_measure_luma(luma_1000, levels, counts), means=means,
                    square_means=square_means,
                    phash=image_hash.hash_of_luma(luma_1000),
                    center_phash=image_hash.hash_of_luma(image_hash.center(luma_1000))
                    if center else None)
