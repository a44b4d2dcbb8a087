"""The quality rules as one table: the single owner of every fact about a quality metric or rule.

Everything else is derived from `METRICS`, `RULES` and `REASON_MEANINGS`:

    the record contract's metrics      codec.QUALITY_METRICS = metric_names()
    the verdict                        quality.judge walks RULES in order
    the config keys and their checks   configs.schema.QualityConfig: one `float | None` field
                                       per rule (threshold_defaults), range-checked against its
                                       metric (threshold_ranges)
    the reject vocabulary              rejects.REASONS includes REASON_MEANINGS
    the stats histograms               reporting.stats.HISTOGRAM_EDGES includes histogram_edges()
    the report's threshold lines       stats.json "thresholds" = thresholds(config.quality)
    the README's quality-rule table    docs_table() (a test keeps the README equal to it)

To add a rule (say `too_noisy` on a new metric `noise_sigma`): add the `Metric` and the `Rule`
here (and the reason's meaning, unless the rule shares a reason), compute the metric in
`quality.measure`, set its threshold in `configs/base.yaml`, and paste `docs_table()` into the
README. Pure Python (no TensorFlow, Beam or configs imports), so `configs/` can import it
without an import cycle.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Mapping

__all__ = ["Metric", "Rule", "METRICS", "RULES", "REASON_MEANINGS", "metric_names",
           "histogram_edges", "threshold_defaults", "threshold_ranges", "thresholds",
           "check_table", "docs_table"]

_DIRECTIONS = ("min", "max")


@dataclasses.dataclass(frozen=True)
class Metric:
    """A number measured on the analysis copy's 8-bit luma, stored as `quality/<name>`.

    `edges`: the fixed histogram edges of stats.json (fixed so bundles merge by adding counts).
    `valid_range`: (low, high) the metric can take (None: unbounded); a threshold on it must lie
    in this range.
    """
    name: str
    meaning: str
    edges: tuple
    valid_range: tuple


@dataclasses.dataclass(frozen=True)
class Rule:
    """Reject an image as `reason` when `metric` is below (`direction` "min": the threshold is
    the least acceptable value) or above ("max": the most acceptable value) the threshold set by
    `quality.<config_key>` (`default` in the config class; null in YAML switches the rule off).
    A value equal to the threshold passes."""
    reason: str
    metric: str
    config_key: str
    direction: str
    default: float

    @property
    def operator(self) -> str:
        """The comparison that rejects, as the verdict's detail writes it."""
        return "<" if self.direction == "min" else ">"

    def fires(self, value: float, threshold: float) -> bool:
        return value < threshold if self.direction == "min" else value > threshold


_LUMA_EDGES = tuple(range(0, 257, 16))  # 8-bit luma values and percentiles, 16 bins
_LUMA_RANGE = (0.0, 255.0)

# In the record contract's order: the index columns, stats.json and the report list them so.
METRICS = (
    Metric("brightness_mean", "luma mean (BT.601, 0..255)", _LUMA_EDGES, _LUMA_RANGE),
    Metric("brightness_p01", "1st luma percentile", _LUMA_EDGES, _LUMA_RANGE),
    Metric("brightness_p99", "99th luma percentile", _LUMA_EDGES, _LUMA_RANGE),
    Metric("contrast_std", "luma standard deviation (population)",
           tuple(range(0, 129, 8)), (0.0, None)),  # luma std is at most 127.5
    Metric("entropy", "Shannon entropy (bits) of the 256-level luma histogram",
           tuple(i / 2 for i in range(17)), (0.0, 8.0)),
    Metric("blur_laplacian_var", "variance of the 4-neighbour Laplacian of luma",
           (0, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000),
           (0.0, None)),
    Metric("blur_fine_share", "share of the finest scale in the Laplacian variance: "
           "var(L) / (var(L) + var(L of the 2x2-mean half-size copy)); unchanged by brightness "
           "and contrast",
           (0, 0.04, 0.08, 0.1, 0.12, 0.14, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
           (0.0, 1.0)),
    Metric("blur_laplacian_ratio", "variance of the Laplacian over the luma variance; "
           "unchanged by brightness and contrast",
           (0, 0.002, 0.005, 0.01, 0.015, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 64),
           (0.0, None)),
)

# In the order the rules are checked: the first that fires is the verdict. Defaults are
# calibrated with `pixelmill bench quality` (photo-like corpus and real photos, README):
# - min_std 1.0 first: a flat fill (noise std 1) measures 0.3-0.7 whatever its exposure, a
#   photo darkened to x0.08 or washed out 85% toward white still 1.1-11, so those reach the
#   exposure rules (a contrast floor judged first called every dark image low_information);
# - dark_p99_max 40: x0.08 puts any photo's 99th percentile at <= 20.4, x0.5 keeps ours >= 71;
# - bright_p01_min 210: 85% toward white puts the 1st percentile at >= 216.75 (230 missed
#   most); good photos measured <= 90;
# - min_entropy 2.5 after exposure: posterized or nearly blank content; photos at x0.5
#   measured >= 3.2 bits;
# - blur: fine detail below 0.12 of the Laplacian variance (Gaussian blur sigma >= 1.5 px at
#   the analysis size measures 0.08-0.12, sharp photos 0.2-0.6, a soft microscopy photo 0.13),
#   or a Laplacian variance below 0.015 of the luma variance (strong blur, where 8-bit noise
#   fills the finest scale and the share rises again).
RULES = (
    Rule("low_information", "contrast_std", "min_std", "min", 1.0),
    Rule("too_dark", "brightness_p99", "dark_p99_max", "min", 40.0),
    Rule("too_bright", "brightness_p01", "bright_p01_min", "max", 210.0),
    Rule("low_information", "entropy", "min_entropy", "min", 2.5),
    Rule("blurry", "blur_fine_share", "blur_fine_min", "min", 0.12),
    Rule("blurry", "blur_laplacian_ratio", "blur_ratio_min", "min", 0.015),
)

# The rejects-ledger meaning of each reason the rules give (part of rejects.REASONS).
REASON_MEANINGS = types.MappingProxyType({
    "too_dark": "99th luma percentile below quality.dark_p99_max",
    "too_bright": "1st luma percentile above quality.bright_p01_min",
    "low_information": "nearly flat: luma std below quality.min_std or entropy below "
                       "quality.min_entropy (e.g. blank)",
    "blurry": "little fine detail: the share of the finest scale in the Laplacian variance below "
              "quality.blur_fine_min, or the Laplacian variance below quality.blur_ratio_min "
              "of the luma variance",
})


def metric_names() -> tuple:
    """The metric names, in the record contract's order."""
    return tuple(metric.name for metric in METRICS)


def histogram_edges() -> dict:
    """{metric: fixed histogram edges} for stats.json."""
    return {metric.name: metric.edges for metric in METRICS}


def threshold_defaults() -> dict:
    """{config key: default threshold}, in verdict order: the config class's threshold fields."""
    return {rule.config_key: rule.default for rule in RULES}


def threshold_ranges() -> dict:
    """{config key: (low, high)} a threshold must lie in (its metric's range; None: unbounded)."""
    ranges = {metric.name: metric.valid_range for metric in METRICS}
    return {rule.config_key: ranges[rule.metric] for rule in RULES}


def thresholds(quality_config) -> dict:
    """{metric: threshold} of the rules switched on in `quality_config` (a QualityConfig): what
    stats.json records and the report draws on each metric's histogram."""
    return {rule.metric: getattr(quality_config, rule.config_key) for rule in RULES
            if getattr(quality_config, rule.config_key) is not None}


def _check_rule(rule: Rule, ranges: Mapping, reasons: Mapping) -> None:
    if rule.metric not in ranges:
        raise ValueError(f"Quality rule {rule.config_key!r} names an unknown metric. Expected "
                         f"one of {tuple(ranges)}. Received: metric={rule.metric!r}")
    if rule.direction not in _DIRECTIONS:
        raise ValueError(f"Quality rule {rule.config_key!r} has an unknown direction. Expected "
                         f"one of {_DIRECTIONS}. Received: direction={rule.direction!r}")
    if rule.reason not in reasons:
        raise ValueError(f"Quality rule {rule.config_key!r} gives a reason without a meaning. "
                         f"Expected one of {tuple(reasons)}. Received: reason={rule.reason!r}")
    low, high = ranges[rule.metric]
    if rule.default < low or (high is not None and rule.default > high):
        raise ValueError(f"Quality rule {rule.config_key!r} has a default outside its metric's "
                         f"range [{low}, {high}]. Received: default={rule.default!r}")


def check_table(metrics=METRICS, rules=RULES, reasons=REASON_MEANINGS) -> None:
    """Raises ValueError when the table contradicts itself: duplicate metric names or config
    keys, a metric with two rules (the report draws one threshold per metric), a rule naming
    an unknown metric or direction, a reason without a meaning or a meaning without a rule, a
    default outside the metric's range, or histogram edges that do not strictly increase."""
    names = [metric.name for metric in metrics]
    keys = [rule.config_key for rule in rules]
    ruled = [rule.metric for rule in rules]
    for what, values in (("metric names", names), ("config keys", keys),
                         ("metrics with a rule", ruled)):
        repeated = sorted({value for value in values if values.count(value) > 1})
        if repeated:
            raise ValueError(f"Quality rule table: {what} must be unique. Received repeats: "
                             f"{repeated}")
    for metric in metrics:
        edges = metric.edges
        if len(edges) < 2 or any(a >= b for a, b in zip(edges, edges[1:])):
            raise ValueError(f"Histogram edges of metric {metric.name!r} must be at least two "
                             f"strictly increasing numbers. Received: {edges}")
    ranges = {metric.name: metric.valid_range for metric in metrics}
    for rule in rules:
        _check_rule(rule, ranges, reasons)
    unused = sorted(set(reasons) - {rule.reason for rule in rules})
    if unused:
        raise ValueError(f"Quality rule table: reasons {unused} have a meaning but no rule.")


def docs_table() -> str:
    """The README's quality-rule table (markdown), in verdict order."""
    meanings = {metric.name: metric.meaning for metric in METRICS}
    lines = ["| reason | rejected when | default | metric |", "| --- | --- | --- | --- |"]
    for rule in RULES:
        lines.append(f"| `{rule.reason}` | `{rule.metric}` {rule.operator} "
                     f"`quality.{rule.config_key}` | {rule.default} | "
                     f"{meanings[rule.metric]} |")
    return "\n".join(lines) + "\n"


check_table()
