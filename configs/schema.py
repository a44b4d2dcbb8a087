"""The pixelmill configuration: YAML loaded into frozen, validated dataclasses.

Every section is a frozen dataclass that checks its own values in `__post_init__`; the loader
checks key names and types against the field annotations. Errors name the full key, the allowed
values and what was received, and are raised before any work starts:

    ConfigError: Unknown key 'quality.blurr'. Expected one of (min_std, ...). Received: blurr=0.1

A preset (e.g. `configs/satellite.yaml`) names its parent with `extends: base.yaml` and overrides
only what differs (`configs/yaml_files.py` reads and merges the files). Command-line overrides
use dotted keys: `--set quality.blur_fine_min=0.1`. The basic checks live in `configs/checks.py`.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any, Mapping

import yaml

from configs.checks import ConfigError, check_one_of, check_range, type_ok
from configs.online import OnlineConfig
from configs.yaml_files import read_yaml
from transforms.offline import quality_rules

__all__ = [
    "ConfigError",
    "Config",
    "DiscoveryConfig",
    "LimitsConfig",
    "QualityConfig",
    "DedupConfig",
    "LabelsConfig",
    "BoxesConfig",
    "ClassesConfig",
    "SplitConfig",
    "OutputConfig",
    "DecodeConfig",
    "DriftConfig",
    "ReportConfig",
    "TransformConfig",
    "load_config",
    "config_from_dict",
    "config_to_dict",
    "default_config_path",
    "check_one_of",   # re-exported from configs.checks, their owner
    "check_range",
]

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class DiscoveryConfig:
    """Which files under the data root are images to consider (case-insensitive extensions)."""
    extensions: tuple = ("jpg", "jpeg", "png", "gif", "bmp", "webp")

    def __post_init__(self):
        if not self.extensions:
            raise ConfigError("discovery.extensions must not be empty. Received: []")
        object.__setattr__(self, "extensions",
                           tuple(sorted({e.lower().lstrip(".") for e in self.extensions})))


@dataclasses.dataclass(frozen=True)
class LimitsConfig:
    """Size rules. `max_pixels` (one frame) and `max_total_pixels` (all frames of a GIF or an
    animated PNG) are checked on the header, before anything is decoded, as is `max_jpeg_scans`
    (a progressive JPEG's scans, counted from its markers: each costs a pass over the image, so
    a file repeating one scan thousands of times decodes for minutes; photos have ~10);
    `max_file_bytes` on the listing, before the file is opened."""
    max_pixels: int = 40_000_000
    min_side: int = 32
    max_side: int = 16384
    max_aspect_ratio: float = 8.0
    max_total_pixels: int = 100_000_000
    max_file_bytes: int = 160 * 2**20
    max_jpeg_scans: int = 100

    def __post_init__(self):
        check_range("limits.max_pixels", self.max_pixels, 1)
        check_range("limits.max_jpeg_scans", self.max_jpeg_scans, 1)
        check_range("limits.max_total_pixels", self.max_total_pixels, 1)
        check_range("limits.max_file_bytes", self.max_file_bytes, 1)
        check_range("limits.min_side", self.min_side, 1)
        check_range("limits.max_side", self.max_side, self.min_side)
        check_range("limits.max_aspect_ratio", self.max_aspect_ratio, 1.0)


@dataclasses.dataclass(frozen=True)
class QualityConfig:
    """Quality filter thresholds, all measured on 8-bit luma of a copy at most `analysis_size` px.

    Besides `enabled` and `analysis_size`, one threshold per rule of the quality rule table
    (`transforms/offline/quality_rules.RULES`, which owns their meaning and valid range), in
    its verdict order and with its defaults (tests/test_config.py keeps the two equal). Set a
    threshold to null to switch that rule off.
    """
    enabled: bool = True
    analysis_size: int = 256
    # One per quality rule: the rule's config_key and default.
    min_std: float | None = 1.0           # low_information: luma std below this
    dark_p99_max: float | None = 40.0     # too_dark: 99th luma percentile below this
    bright_p01_min: float | None = 210.0  # too_bright: 1st luma percentile above this
    min_entropy: float | None = 2.5       # low_information: histogram entropy (bits) below this
    blur_fine_min: float | None = 0.12    # blurry: finest scale's share of Laplacian variance
    blur_ratio_min: float | None = 0.015  # blurry: Laplacian variance / luma variance

    def __post_init__(self):
        check_range("quality.analysis_size", self.analysis_size, 32, 4096)
        for key, (low, high) in quality_rules.threshold_ranges().items():
            value = getattr(self, key)
            if value is not None:
                check_range(f"quality.{key}", value, low, high)


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    """Exact duplicates by sha256 always; near duplicates by perceptual-hash Hamming distance.
    `crop_tolerant`: also a hash of each image's central region, compared with the other
    images' full hashes (within `crop_max_hamming`), so a moderate centre crop is a near
    duplicate; off by default (one more hash per image and one more banded search)."""
    near_duplicates: bool = True
    max_hamming: int = 4
    crop_tolerant: bool = False
    crop_max_hamming: int = 4

    def __post_init__(self):
        check_range("dedup.max_hamming", self.max_hamming, 0, 16)
        check_range("dedup.crop_max_hamming", self.crop_max_hamming, 0, 16)


@dataclasses.dataclass(frozen=True)
class LabelsConfig:
    """CSV columns. Every other column is carried into the record as `meta/<column>`."""
    path_column: str = "path"
    label_column: str = "label"
    split_column: str = "split"
    delimiter: str = ","
    folder_labels: bool = True  # label = parent folder name when no CSV is given
    max_cell_bytes: int = 65536  # a longer CSV cell makes its row one bad_csv_row, read on

    def __post_init__(self):
        check_range("labels.max_cell_bytes", self.max_cell_bytes, 1, 1 << 30)
        if len(self.delimiter) != 1:
            raise ConfigError(
                f"labels.delimiter must be one character. Received: labels.delimiter="
                f"{self.delimiter!r}")
        names = [self.path_column, self.label_column, self.split_column]
        if len(set(names)) != 3 or not all(names):
            raise ConfigError(
                "labels.path_column, labels.label_column and labels.split_column must be "
                f"distinct non-empty names. Received: {names}")


@dataclasses.dataclass(frozen=True)
class BoxesConfig:
    """Bounding-box CSV: `path,xmin,ymin,xmax,ymax,label` in pixel or normalized coordinates."""
    coordinates: str = "pixel"
    on_bad_box: str = "reject"

    def __post_init__(self):
        check_one_of("boxes.coordinates", self.coordinates, ("pixel", "normalized"))
        check_one_of("boxes.on_bad_box", self.on_bad_box, ("reject", "clip"))


@dataclasses.dataclass(frozen=True)
class ClassesConfig:
    """Class table policy. ids never change: `OUTPUT/classes.txt` is append-only across runs.

    `frozen: true` rejects labels missing from the table as `unknown_class` instead of
    appending them (a `--classes` file always freezes the table to that file's names plus the
    existing table). `renames` maps an old class name to a new one; the id is kept.
    """
    frozen: bool = False
    renames: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.renames, Mapping):
            raise ConfigError(
                f"classes.renames must be a mapping old_name: new_name. "
                f"Received: classes.renames={self.renames!r}")
        object.__setattr__(self, "renames", dict(self.renames))


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """Split ratios used when a CSV row has no split column; deterministic from the sha256."""
    train: float = 0.8
    validation: float = 0.1
    test: float = 0.1

    def __post_init__(self):
        for name in SPLITS:
            check_range(f"split.{name}", getattr(self, name), 0.0, 1.0)
        total = self.train + self.validation + self.test
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(
                "split ratios must add up to 1. Received: "
                f"split.train={self.train}, split.validation={self.validation}, "
                f"split.test={self.test} (sum {total:g})")


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """Shard naming and sizing: `<name>-<split>.tfrecord-00000-of-00008` (+ `.gz`).

    `label_offset` is added to the stored class ids (`image/class/label`,
    `image/object/class/label`): 1 for detection models that reserve id 0 for background (the
    TF Model Garden's). The training reader subtracts it again."""
    name: str = "images"
    target_shard_mb: float = 128.0
    num_shards: int = 0  # 0: from target_shard_mb
    compression: str = "none"
    label_offset: int = 0

    def __post_init__(self):
        if not self.name or "/" in self.name or "-" in self.name:
            raise ConfigError(
                "output.name must be non-empty without '/' or '-'. "
                f"Received: output.name={self.name!r}")
        check_range("output.target_shard_mb", self.target_shard_mb, 0.0, low_open=True)
        check_range("output.num_shards", self.num_shards, 0, 100000)
        check_one_of("output.compression", self.compression, ("none", "gzip"))
        check_range("output.label_offset", self.label_offset, 0, 1000)


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """How the offline decode check is isolated: a crashing or hanging decoder only rejects
    the one file (`subprocess`, with `timeout_s` per file), or runs in the worker (`inline`).
    `processes`: isolating processes per worker; 0 (auto) is every core for the default local
    run and one per worker on other runners (`runners.beam_runner.decode_processes`). The
    default timeout leaves a wide margin over the slowest 40 MP decode (docs/benchmarks.md).
    `exif_orientation`: every decode path (inspection, reader, TFT/serving graph, thumbnails,
    preview) shows images as a viewer does, EXIF orientation applied; false keeps the stored
    (sensor) orientation everywhere."""
    isolation: str = "subprocess"
    timeout_s: float = 20.0
    processes: int = 0
    exif_orientation: bool = True

    def __post_init__(self):
        check_one_of("decode.isolation", self.isolation, ("subprocess", "inline"))
        check_range("decode.timeout_s", self.timeout_s, 0.0, low_open=True)
        check_range("decode.processes", self.processes, 0, 1024)
        if not isinstance(self.exif_orientation, bool):
            raise ConfigError(f"decode.exif_orientation must be true or false. Received: "
                              f"decode.exif_orientation={self.exif_orientation!r}")


@dataclasses.dataclass(frozen=True)
class DriftConfig:
    """Nightly drift check of tonight's snapshot against the cumulative archive.

    `class_linf_max`: the largest allowed L-infinity distance between tonight's class
    distribution and the archive's (TFDV's categorical drift comparator). `quality_js_max`: the
    largest allowed Jensen-Shannon divergence (base 2, in [0, 1]) between the histograms of each
    quality metric (TFDV's numeric drift comparator). `low_count_ratio`: alarm when tonight
    brings fewer accepted images (in all, or of one class) than this fraction of the median of
    earlier nights; rejects never count. Checks start once
    `min_history` snapshots exist.
    """
    class_linf_max: float = 0.25
    quality_js_max: float = 0.25
    low_count_ratio: float = 0.2
    min_history: int = 1

    def __post_init__(self):
        check_range("drift.class_linf_max", self.class_linf_max, 0.0, 1.0)
        check_range("drift.quality_js_max", self.quality_js_max, 0.0, 1.0)
        check_range("drift.low_count_ratio", self.low_count_ratio, 0.0, 1.0)
        check_range("drift.min_history", self.min_history, 1)


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    """The TensorFlow Transform analysis and exported `transform_fn/` of every snapshot.

    TFT reads and writes through `tf.io.gfile` (local disk, gs://, and what tensorflow-io
    adds); switch it off only for an output on a file system TensorFlow cannot reach.
    """
    enabled: bool = True
    size_quantiles: int = 10

    def __post_init__(self):
        check_range("transform.size_quantiles", self.size_quantiles, 2, 1000)


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """What `report.html` shows. `thumbnails_per_reason`: rejected images drawn per reject
    reason (decoded in an isolated child process that imports TensorFlow, a few seconds of
    publishing when the decoders' process is not already running); 0: none, only their paths."""
    thumbnails_per_reason: int = 4

    def __post_init__(self):
        check_range("report.thumbnails_per_reason", self.thumbnails_per_reason, 0, 50)


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole configuration. Each section is documented on its dataclass."""
    discovery: DiscoveryConfig = dataclasses.field(default_factory=DiscoveryConfig)
    limits: LimitsConfig = dataclasses.field(default_factory=LimitsConfig)
    quality: QualityConfig = dataclasses.field(default_factory=QualityConfig)
    dedup: DedupConfig = dataclasses.field(default_factory=DedupConfig)
    labels: LabelsConfig = dataclasses.field(default_factory=LabelsConfig)
    boxes: BoxesConfig = dataclasses.field(default_factory=BoxesConfig)
    classes: ClassesConfig = dataclasses.field(default_factory=ClassesConfig)
    split: SplitConfig = dataclasses.field(default_factory=SplitConfig)
    output: OutputConfig = dataclasses.field(default_factory=OutputConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    drift: DriftConfig = dataclasses.field(default_factory=DriftConfig)
    transform: TransformConfig = dataclasses.field(default_factory=TransformConfig)
    report: ReportConfig = dataclasses.field(default_factory=ReportConfig)
    online: OnlineConfig = dataclasses.field(default_factory=OnlineConfig)


def _build(cls: type, data: Mapping[str, Any], prefix: str):
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"Section '{prefix or 'config'}' must be a mapping. Received: {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else key
        if key not in fields:
            raise ConfigError(
                f"Unknown key '{full}'. Expected one of ({', '.join(fields)}). "
                f"Received: {key}={value!r}")
        annotation = hints[key]
        if dataclasses.is_dataclass(annotation):
            kwargs[key] = _build(annotation, value or {}, full)
            continue
        if not type_ok(value, annotation):
            raise ConfigError(
                f"Wrong type for '{full}'. Expected {getattr(annotation, '__name__', annotation)}"
                f". Received: {full}={value!r} ({type(value).__name__})")
        if (isinstance(value, int) and not isinstance(value, bool)
                and float in (typing.get_args(annotation) or (annotation,))):
            value = float(value)
        if isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a dataclass rejected the arguments
        raise ConfigError(f"Invalid section '{prefix or 'config'}': {exc}") from exc


def _parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"Override must look like section.key=value. Received: {text!r}")
    key, raw = text.split("=", 1)
    try:
        return key.strip().split("."), yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(f"Override value is not valid YAML. Received: {text!r}") from None


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Validates a plain mapping (as read from YAML) into a `Config`."""
    return _build(Config, data, "")


def load_config(path: str | None = None, overrides: list[str] | tuple = ()) -> Config:
    """Reads YAML (default `configs/base.yaml`), applies `section.key=value` overrides and
    validates."""
    data = read_yaml(path or default_config_path())
    for text in overrides:
        keys, value = _parse_override(text)
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"Cannot override {text!r}: {key} is not a section")
        node[keys[-1]] = value
    return config_from_dict(data)


def config_to_dict(config: Config) -> dict:
    """The config as plain JSON-able data (for the manifest)."""
    def convert(value):
        if dataclasses.is_dataclass(value):
            return {f.name: convert(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, tuple):
            return [convert(v) for v in value]
        if isinstance(value, Mapping):
            return {k: convert(v) for k, v in value.items()}
        return value
    return convert(config)


def default_config_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "base.yaml")
