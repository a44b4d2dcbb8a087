"""Tests for transforms.offline.quality_rules: the table is consistent, and every copy of a
rule's facts (judge, record contract, config, reason vocabulary, stats histograms, report
thresholds, base.yaml, README) is derived from it or equal to it."""
from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import pytest
import yaml

from configs.schema import ConfigError, QualityConfig, config_from_dict, default_config_path
from transforms import codec
from transforms.offline import quality, quality_rules
from transforms.offline.quality_rules import METRICS, REASON_MEANINGS, RULES, Metric, Rule
from transforms.offline.rejects import REASONS
from transforms.reporting.stats import HISTOGRAM_EDGES

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The user docs: the README and docs/ (the quality-rule table is in docs/config.md).
_DOCS = [os.path.join(_ROOT, "README.md")] + sorted(
    os.path.join(_ROOT, "docs", name) for name in os.listdir(os.path.join(_ROOT, "docs"))
    if name.endswith(".md"))
# Values that pass every default rule by a wide margin.
_GOOD = {"brightness_mean": 120.0, "brightness_p01": 10.0, "brightness_p99": 240.0,
         "contrast_std": 50.0, "entropy": 7.0, "blur_laplacian_var": 500.0,
         "blur_fine_share": 0.4, "blur_laplacian_ratio": 0.2}


def _readme_lines() -> list[str]:
    lines = []
    for path in _DOCS:
        with open(path, encoding="utf-8") as handle:
            lines += handle.read().splitlines() + [""]
    return lines


def _table_after(header: str) -> list[str]:
    lines = _readme_lines()
    assert header in lines, f"README.md and docs/ have no table with the header {header!r}"
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


# ---------------------------------------------------------------- the table itself

def test_table_is_consistent():
    quality_rules.check_table()
    assert len({rule.config_key for rule in RULES}) == len(RULES)


def test_verdict_order_is_pinned():
    # Flat first (whatever the exposure), then exposure, so a dark or washed-out photo is not
    # called low_information; blur last (issue 12).
    assert [(rule.reason, rule.config_key) for rule in RULES] == [
        ("low_information", "min_std"), ("too_dark", "dark_p99_max"),
        ("too_bright", "bright_p01_min"), ("low_information", "min_entropy"),
        ("blurry", "blur_fine_min"), ("blurry", "blur_ratio_min")]


_BROKEN = [
    ("repeated metric", METRICS + (METRICS[0],), RULES, REASON_MEANINGS,
     "metric names must be unique"),
    ("repeated key", METRICS, RULES + (dataclasses.replace(RULES[0], metric="brightness_mean"),),
     REASON_MEANINGS, "config keys must be unique"),
    ("two rules on a metric", METRICS,
     RULES + (dataclasses.replace(RULES[0], config_key="max_std", direction="max"),),
     REASON_MEANINGS, "metrics with a rule must be unique"),
    ("unknown metric", METRICS, (Rule("blurry", "sharpness", "blur_min", "min", 1.0),),
     {"blurry": "x"}, "unknown metric"),
    ("unknown direction", METRICS, (Rule("blurry", "blur_laplacian_var", "blur_min", "<", 1.0),),
     {"blurry": "x"}, "unknown direction"),
    ("reason without meaning", METRICS, RULES + (
        Rule("too_noisy", "brightness_mean", "noise_max", "max", 1.0),), REASON_MEANINGS,
     "reason without a meaning"),
    ("meaning without rule", METRICS, RULES, {**REASON_MEANINGS, "too_noisy": "x"},
     r"reasons \['too_noisy'\] have a meaning but no rule"),
    ("default out of range", METRICS, (Rule("too_dark", "brightness_p99", "dark_p99_max", "min",
                                            300.0),), {"too_dark": "x"}, "outside its metric"),
    ("edges not increasing", (Metric("m", "x", (0, 2, 1), (0.0, None)),), (), {},
     "strictly increasing"),
    ("one edge", (Metric("m", "x", (0,), (0.0, None)),), (), {}, "at least two"),
]


@pytest.mark.parametrize("name, metrics, rules, reasons, message", _BROKEN,
                         ids=[case[0] for case in _BROKEN])
def test_check_table_rejects_a_broken_table(name, metrics, rules, reasons, message):
    with pytest.raises(ValueError, match=message):
        quality_rules.check_table(metrics, rules, reasons)


# ---------------------------------------------------------------- what is derived from it

def test_record_contract_metrics_are_the_tables():
    assert codec.QUALITY_METRICS == tuple(metric.name for metric in METRICS)
    grey = np.full((40, 40, 3), 100, dtype=np.uint8)
    assert tuple(quality.measure(grey)) == codec.QUALITY_METRICS


def test_every_rule_reason_is_in_the_reject_vocabulary_with_the_tables_meaning():
    assert {rule.reason for rule in RULES} == set(REASON_MEANINGS)
    for reason, meaning in REASON_MEANINGS.items():
        assert REASONS[reason] == meaning


def test_every_metric_has_its_histogram_edges_in_the_stats():
    for metric in METRICS:
        assert HISTOGRAM_EDGES[metric.name] == metric.edges


def test_config_has_one_threshold_field_per_rule_with_the_tables_default():
    fields = {field.name: field.default for field in dataclasses.fields(QualityConfig)}
    assert list(fields) == ["enabled", "analysis_size"] + [rule.config_key for rule in RULES]
    for rule in RULES:
        assert fields[rule.config_key] == rule.default


def test_base_yaml_sets_every_threshold_to_its_default():
    with open(default_config_path(), encoding="utf-8") as handle:
        section = yaml.safe_load(handle)["quality"]
    for rule in RULES:
        assert section.get(rule.config_key) == rule.default, rule.config_key


@pytest.mark.parametrize("rule", RULES, ids=[rule.config_key for rule in RULES])
def test_config_checks_each_threshold_against_its_metrics_range(rule):
    low, high = {metric.name: metric.valid_range for metric in METRICS}[rule.metric]
    key = f"quality.{rule.config_key}"
    with pytest.raises(ConfigError, match=re.escape(f"Received: {key}={low - 1.0}")):
        config_from_dict({"quality": {rule.config_key: low - 1.0}})
    if high is not None:
        with pytest.raises(ConfigError, match=re.escape(f"Value out of range for {key}")):
            config_from_dict({"quality": {rule.config_key: high + 1.0}})
    assert getattr(config_from_dict({"quality": {rule.config_key: None}}).quality,
                   rule.config_key) is None


@pytest.mark.parametrize("rule", RULES, ids=[rule.config_key for rule in RULES])
def test_judge_applies_each_rule_of_the_table(rule):
    bad = rule.default - 1.0 if rule.direction == "min" else rule.default + 1.0
    metrics = {**_GOOD, rule.metric: bad}
    assert quality.judge(metrics, QualityConfig()) == (
        rule.reason, f"{rule.metric}={bad} {rule.operator} {rule.config_key}={rule.default}")
    switched_off = QualityConfig(**{rule.config_key: None})
    assert quality.judge(metrics, switched_off) is None
    assert quality.judge({**_GOOD, rule.metric: rule.default}, QualityConfig()) is None


def test_report_thresholds_are_the_switched_on_rules():
    assert quality_rules.thresholds(QualityConfig()) == {
        "brightness_p99": 40.0, "brightness_p01": 210.0, "contrast_std": 1.0, "entropy": 2.5,
        "blur_fine_share": 0.12, "blur_laplacian_ratio": 0.015}
    assert quality_rules.thresholds(QualityConfig(blur_fine_min=None, min_std=3.0)) == {
        "brightness_p99": 40.0, "brightness_p01": 210.0, "contrast_std": 3.0, "entropy": 2.5,
        "blur_laplacian_ratio": 0.015}


# ---------------------------------------------------------------- the README

def test_readme_quality_rule_table_is_the_generated_one():
    generated = quality_rules.docs_table().splitlines()
    assert _table_after(generated[0]) == generated, (
        "The README's quality-rule table differs from the rule table; paste the output of "
        "`python -c 'from transforms.offline import quality_rules; "
        "print(quality_rules.docs_table())'`")


def test_readme_reject_reason_table_lists_every_reason():
    rows = _table_after("| reason | meaning |")[2:]
    documented = [re.match(r"\| `([a-z_]+)` \|", row).group(1) for row in rows]
    assert sorted(documented) == sorted(REASONS)
