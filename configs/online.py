"""The `online:` section: what the training input does to each batch (seeded augmentation).

Frozen dataclasses validated in `__post_init__`, loaded from YAML by the generic loader in
`configs/schema.py` (nested sections `online.geometry`, `online.pixel`, `online.mix` and
`online.normalize` are built from the annotations). Errors read like the rest of the config:

    ConfigError: Unknown fill_mode 'reflec'. Expected one of ('auto', 'constant', 'reflect',
    'nearest', 'wrap'). Received: online.geometry.fill_mode='reflec'

Conventions used throughout:
* Images are float32 in [0, 1]; every pixel op clips its output to [0, 1].
* A range is a pair `[low, high]` with `low <= high`; a value is drawn uniformly from it per
  sample. A magnitude `m` (brightness, rotation_degrees, ...) means the range `[-m, m]` (or
  `[1 - m, 1 + m]` for a factor); 0 switches that op off, so the factory never builds it.
* A `*_probability` is the per-sample chance that the op is applied at all.
* Each section has `enabled`; `enabled: false` removes the whole section (exact identity).
"""
from __future__ import annotations

import dataclasses

from configs.checks import ConfigError, check_one_of, check_pair, check_probability, check_range

__all__ = [
    "image_size_pair",
    "IMAGE_SIZE_RANGE",
    "FILL_MODES",
    "INTERPOLATIONS",
    "LAMBDA_MODES",
    "NORMALIZE_MODES",
    "GeometryConfig",
    "PixelConfig",
    "MixConfig",
    "NormalizeConfig",
    "OnlineConfig",
]

FILL_MODES = ("auto", "constant", "reflect", "nearest", "wrap")
# What each fill mode puts into the padding a warp exposes, for the warning with boxes.
_COPIES = {"reflect": "a mirror image of the picture", "wrap": "the opposite side of the picture",
           "nearest": "the border pixels stretched outwards"}
INTERPOLATIONS = ("bilinear", "nearest")
LAMBDA_MODES = ("batch", "sample")
NORMALIZE_MODES = ("dataset", "fixed", "none")
IMAGE_SIZE_RANGE = (8, 8192)  # each side of the model's input, in px


def image_size_pair(value, key: str = "image_size") -> tuple[int, int]:
    """(height, width) from an int (a square) or a pair of ints, each side in IMAGE_SIZE_RANGE.

    The one parser of an image size: `online.image_size`, the training reader's and the TFT
    transform's `image_size` argument all go through it, so they accept the same values."""
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    low, high = IMAGE_SIZE_RANGE
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
                       for v in pair)):
        raise ConfigError(
            f"{key} must be an int or a pair [height, width] of ints, each in [{low}, {high}]. "
            f"Received: {key}={value!r}")
    return int(pair[0]), int(pair[1])


@dataclasses.dataclass(frozen=True)
class GeometryConfig:
    """Per-sample geometry composed into ONE 3x3 matrix and applied in one resampling pass.

    Order of the forward (input -> output) map: random-resized crop, then about the image
    centre: flips, rot90, rotation, shear, scale, then translation. Boxes follow the same matrix;
    a box whose visible area after clipping is below `min_box_area` of its transformed area is
    dropped with its label. Elastic deformation (off when `elastic_alpha` is 0) adds a smooth
    random displacement field of up to `elastic_alpha` px to the same sampling pass; boxes follow
    the affine part only.

    `fill_mode: auto` (the default) pads with `fill_value` (constant) when the batches carry
    boxes and reflects otherwise: reflect, wrap and nearest copy objects into the padding without
    a box, which teaches a detector that they are background. Set explicitly with boxes, they
    are used with one warning (`unboxed_copies_warning`).
    """
    enabled: bool = True
    horizontal_flip: float = 0.5          # probability
    vertical_flip: float = 0.0            # probability
    rot90: bool = False                   # add a random multiple of 90 degrees
    rotation_degrees: float = 10.0        # uniform in [-r, r]
    scale: tuple = (0.9, 1.1)             # zoom factor (> 1 zooms in)
    translate: float = 0.1                # shift, fraction of the side, uniform in [-t, t]
    shear_degrees: float = 0.0            # x-shear angle, uniform in [-s, s]
    crop_probability: float = 0.0         # random-resized crop
    crop_area: tuple = (0.5, 1.0)         # fraction of the image area kept by the crop
    crop_aspect_ratio: tuple = (0.75, 1.3333333333333333)  # width/height, log-uniform
    interpolation: str = "bilinear"
    fill_mode: str = "auto"               # auto: constant with boxes, reflect without
    fill_value: float = 0.0               # used by fill_mode constant (and auto with boxes)
    min_box_area: float = 0.25            # drop boxes keeping less of their area than this
    elastic_alpha: float = 0.0            # max displacement in px; 0 = off
    elastic_grid: int = 4                 # control points per side of the displacement field

    def __post_init__(self):
        p = "online.geometry"
        check_probability(f"{p}.horizontal_flip", self.horizontal_flip)
        check_probability(f"{p}.vertical_flip", self.vertical_flip)
        check_range(f"{p}.rotation_degrees", self.rotation_degrees, 0.0, 180.0)
        object.__setattr__(self, "scale", check_pair(f"{p}.scale", self.scale, 0.0, 10.0,
                                                      low_open=True))
        check_range(f"{p}.translate", self.translate, 0.0, 1.0)
        check_range(f"{p}.shear_degrees", self.shear_degrees, 0.0, 60.0)
        check_probability(f"{p}.crop_probability", self.crop_probability)
        object.__setattr__(self, "crop_area", check_pair(f"{p}.crop_area", self.crop_area,
                                                          0.0, 1.0, low_open=True))
        object.__setattr__(self, "crop_aspect_ratio", check_pair(
            f"{p}.crop_aspect_ratio", self.crop_aspect_ratio, 0.0, 100.0, low_open=True))
        check_one_of(f"{p}.interpolation", self.interpolation, INTERPOLATIONS)
        check_one_of(f"{p}.fill_mode", self.fill_mode, FILL_MODES)
        check_range(f"{p}.fill_value", self.fill_value, 0.0, 1.0)
        check_range(f"{p}.min_box_area", self.min_box_area, 0.0, 1.0)
        check_range(f"{p}.elastic_alpha", self.elastic_alpha, 0.0, 1000.0)
        check_range(f"{p}.elastic_grid", self.elastic_grid, 2, 64)

    @property
    def is_identity(self) -> bool:
        """True when no sample can ever move (then the factory builds no geometry op)."""
        return (not self.enabled) or (
            self.horizontal_flip == 0 and self.vertical_flip == 0 and not self.rot90
            and self.rotation_degrees == 0 and self.scale == (1.0, 1.0) and self.translate == 0
            and self.shear_degrees == 0 and self.crop_probability == 0
            and self.elastic_alpha == 0)

    @property
    def exposes_padding(self) -> bool:
        """True when a sample can show points from outside the input (rotation, shear, shift,
        zoom out, elastic, a quarter turn of a non-square image); flips and crops cannot."""
        return (not self.is_identity) and (
            self.rotation_degrees > 0 or self.shear_degrees > 0 or self.translate > 0
            or self.scale[0] < 1.0 or self.elastic_alpha > 0 or self.rot90)

    def fill_mode_for(self, with_boxes: bool) -> str:
        """The fill mode used: `auto` is constant when the batches carry boxes, else reflect."""
        if self.fill_mode != "auto":
            return self.fill_mode
        return "constant" if with_boxes else "reflect"

    def unboxed_copies_warning(self) -> str | None:
        """The warning for batches with boxes when the fill mode copies image content into the
        padding (an explicit reflect, wrap or nearest); None when nothing is copied."""
        if self.fill_mode not in _COPIES or not self.exposes_padding:
            return None
        return (f"online.geometry.fill_mode={self.fill_mode!r} with boxes: the padding that "
                f"rotation, scale, shift, shear or elastic deformation expose is filled with "
                f"{_COPIES[self.fill_mode]}, so objects copied there carry no box (a detector "
                f"learns them as background). fill_mode: auto (the default) or constant pads "
                f"with fill_value instead.")


@dataclasses.dataclass(frozen=True)
class PixelConfig:
    """Per-sample pixel ops on float32 [0, 1], applied in this order, each clipped to [0, 1]:
    colour (brightness, contrast, saturation and hue fused into one 3x3 matrix + offset per
    sample, one clip), gamma, grayscale, blur, JPEG re-compression, gaussian noise, speckle
    noise.

    * brightness: additive delta uniform in [-b, b].
    * contrast: factor uniform in [1 - c, 1 + c] around the per-image mean luma.
    * saturation: factor uniform in [1 - s, 1 + s] (0 = grey).
    * hue: rotation of the chroma plane (YIQ, as DALI's ColorTwist) by a fraction of a full turn
      uniform in [-h, h], h <= 0.5.
    * gamma: exponent uniform in [low, high] (`x ** gamma`).
    * blur: gaussian with sigma uniform in `blur_sigma` px, with `blur_probability`.
    * jpeg: a stateless simulation of JPEG (8x8 DCT, the standard luma/chroma quantisation tables
      scaled by a quality uniform in `jpeg_quality`, rounding), with `jpeg_probability`.
    * gaussian_noise_std: additive N(0, sd^2) with sd uniform in [0, std] per sample.
    * speckle_noise_std: multiplicative x * (1 + N(0, sd^2)), sd uniform in [0, std].
    """
    enabled: bool = True
    brightness: float = 0.1
    contrast: float = 0.1
    saturation: float = 0.1
    hue: float = 0.02
    gamma: tuple = (1.0, 1.0)
    grayscale_probability: float = 0.0
    blur_probability: float = 0.0
    blur_sigma: tuple = (0.1, 1.5)
    jpeg_probability: float = 0.0
    jpeg_quality: tuple = (40, 95)
    gaussian_noise_std: float = 0.0
    speckle_noise_std: float = 0.0

    def __post_init__(self):
        p = "online.pixel"
        check_range(f"{p}.brightness", self.brightness, 0.0, 1.0)
        check_range(f"{p}.contrast", self.contrast, 0.0, 1.0)
        check_range(f"{p}.saturation", self.saturation, 0.0, 1.0)
        check_range(f"{p}.hue", self.hue, 0.0, 0.5)
        object.__setattr__(self, "gamma", check_pair(f"{p}.gamma", self.gamma, 0.0, 10.0,
                                                      low_open=True))
        check_probability(f"{p}.grayscale_probability", self.grayscale_probability)
        check_probability(f"{p}.blur_probability", self.blur_probability)
        object.__setattr__(self, "blur_sigma", check_pair(f"{p}.blur_sigma", self.blur_sigma,
                                                           0.0, 10.0, low_open=True))
        check_probability(f"{p}.jpeg_probability", self.jpeg_probability)
        object.__setattr__(self, "jpeg_quality", check_pair(
            f"{p}.jpeg_quality", self.jpeg_quality, 1.0, 100.0))
        check_range(f"{p}.gaussian_noise_std", self.gaussian_noise_std, 0.0, 1.0)
        check_range(f"{p}.speckle_noise_std", self.speckle_noise_std, 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class MixConfig:
    """Mixup / CutMix on whole batches (timm's Mixup semantics, stateless seeds).

    One random permutation per batch pairs sample i with sample perm[i] (odd batch sizes work;
    a sample may be paired with itself). With `probability` a batch (`lambda_mode: batch`) or a
    sample (`lambda_mode: sample`) is mixed; it then uses CutMix with `switch_probability` when
    both are on, else Mixup. lambda ~ Beta(alpha, alpha). CutMix's lambda is corrected to the
    clipped pasted area. `mixup_alpha: 0` or `cutmix_alpha: 0` switches that one off.
    """
    enabled: bool = True
    probability: float = 1.0
    mixup_alpha: float = 0.2
    cutmix_alpha: float = 1.0
    switch_probability: float = 0.5       # chance of CutMix when both are on
    lambda_mode: str = "batch"

    def __post_init__(self):
        p = "online.mix"
        check_probability(f"{p}.probability", self.probability)
        check_range(f"{p}.mixup_alpha", self.mixup_alpha, 0.0, 100.0)
        check_range(f"{p}.cutmix_alpha", self.cutmix_alpha, 0.0, 100.0)
        check_probability(f"{p}.switch_probability", self.switch_probability)
        check_one_of(f"{p}.lambda_mode", self.lambda_mode, LAMBDA_MODES)

    @property
    def is_identity(self) -> bool:
        return (not self.enabled or self.probability == 0
                or (self.mixup_alpha == 0 and self.cutmix_alpha == 0))


@dataclasses.dataclass(frozen=True)
class NormalizeConfig:
    """Per-channel normalisation applied by the reader AFTER augmentation (ops expect [0, 1]).

    `dataset`: mean/std per channel from the snapshot's stats (the TFT transform carries the
    same numbers); `fixed`: the `mean`/`std` given here (on the [0, 1] scale); `none`: leave
    images in [0, 1].
    """
    mode: str = "dataset"
    mean: tuple = (0.485, 0.456, 0.406)
    std: tuple = (0.229, 0.224, 0.225)

    def __post_init__(self):
        p = "online.normalize"
        check_one_of(f"{p}.mode", self.mode, NORMALIZE_MODES)
        for name, low_open in (("mean", False), ("std", True)):
            value = getattr(self, name)
            if (not isinstance(value, (tuple, list)) or len(value) != 3
                    or any(isinstance(v, bool) or not isinstance(v, (int, float))
                           for v in value)):
                raise ConfigError(
                    f"{p}.{name} must be 3 numbers (R, G, B). Received: {p}.{name}={value!r}")
            for index, channel in enumerate(value):
                check_range(f"{p}.{name}[{index}]", float(channel), 0.0, 1.0,
                            low_open=low_open)
            object.__setattr__(self, name, tuple(float(v) for v in value))


@dataclasses.dataclass(frozen=True)
class OnlineConfig:
    """The training-time input: output size, seeds, augmentation layers and normalisation.

    `seed` is the global seed of `transforms.online.seeds`; `enable_rate` is the fraction of batches
    that are augmented at all (decided per batch from the batch seed, so it is reproducible; for
    A/B rollouts). `label_smoothing` (explicit, default 0) turns a one-hot target y into
    `y * (1 - eps) + eps / num_classes` before mixing.
    """
    image_size: int | tuple = (224, 224)   # (height, width) or one int for a square
    seed: int = 0
    enable_rate: float = 1.0
    label_smoothing: float = 0.0
    geometry: GeometryConfig = dataclasses.field(default_factory=GeometryConfig)
    pixel: PixelConfig = dataclasses.field(default_factory=PixelConfig)
    mix: MixConfig = dataclasses.field(default_factory=MixConfig)
    normalize: NormalizeConfig = dataclasses.field(default_factory=NormalizeConfig)

    def __post_init__(self):
        p = "online"
        object.__setattr__(self, "image_size",
                           image_size_pair(self.image_size, f"{p}.image_size"))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"{p}.seed must be an int. Received: {p}.seed={self.seed!r}")
        check_range(f"{p}.seed", self.seed, -(2 ** 63), 2 ** 63 - 1)
        check_range(f"{p}.enable_rate", self.enable_rate, 0.0, 1.0)
        check_range(f"{p}.label_smoothing", self.label_smoothing, 0.0, 1.0)
