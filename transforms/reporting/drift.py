"""Tonight against the archive: cumulative totals and the drift check of a nightly run.

The comparisons are the ones TFDV's `validate_statistics` makes with drift comparators:
L-infinity distance between categorical distributions (the classes) and Jensen-Shannon
divergence between numeric histograms (the quality metrics, which share fixed bin edges in
every snapshot's stats.json, so histograms add up exactly). TFDV itself is not a dependency;
these few lines compute the same statistics from the stats pixelmill already writes.
"""
from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from configs.schema import DriftConfig

__all__ = ["cumulative_stats", "class_distribution", "linf_distance", "js_divergence",
           "check_drift", "drift_view", "low_count_alarms"]


def _add_counts(into: dict, counts: Mapping) -> None:
    for key, value in counts.items():
        if isinstance(value, Mapping):
            _add_counts(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value


def drift_view(stats: Mapping) -> dict:
    """The part of a snapshot's stats.json that `cumulative_stats` and `check_drift` read (its
    counts and quality histograms): the same results from a few KB, whatever the snapshot's
    size, so a night can keep one per earlier snapshot."""
    return {"images": dict(stats.get("images", {})),
            "by_split": dict(stats.get("by_split", {})),
            "by_split_class": {split: dict(counts)
                               for split, counts in stats.get("by_split_class", {}).items()},
            "by_reason": dict(stats.get("by_reason", {})),
            "quality": {metric: {"histogram": summary["histogram"]}
                        for metric, summary in stats.get("quality", {}).items()
                        if summary.get("histogram")}}


def cumulative_stats(snapshot_stats: Sequence[Mapping]) -> dict:
    """Totals over several snapshots' stats.json (oldest first): counts per split, class and
    reject reason, and the summed quality histograms."""
    total: dict = {"snapshots": len(snapshot_stats), "images": {}, "by_split": {},
                   "by_split_class": {}, "by_reason": {}, "quality_histograms": {}}
    for stats in snapshot_stats:
        _add_counts(total["images"], stats.get("images", {}))
        _add_counts(total["by_split"], stats.get("by_split", {}))
        _add_counts(total["by_split_class"], stats.get("by_split_class", {}))
        _add_counts(total["by_reason"], stats.get("by_reason", {}))
        for metric, summary in stats.get("quality", {}).items():
            histogram = summary.get("histogram") or {}
            if not histogram.get("counts"):
                continue
            current = total["quality_histograms"].setdefault(
                metric, {"edges": list(histogram["edges"]), "counts": [0] * len(histogram["counts"])})
            if list(histogram["edges"]) != current["edges"]:
                raise ValueError(f"quality histogram edges of {metric!r} differ between "
                                 f"snapshots; cannot add them up")
            current["counts"] = [a + b for a, b in zip(current["counts"], histogram["counts"])]
    return total


def class_distribution(by_split_class: Mapping) -> dict:
    """class -> fraction of accepted images, over all splits."""
    counts: dict = {}
    for per_class in by_split_class.values():
        for name, count in per_class.items():
            counts[name] = counts.get(name, 0) + count
    total = sum(counts.values())
    return {name: count / total for name, count in sorted(counts.items())} if total else {}


def linf_distance(p: Mapping, q: Mapping) -> float:
    """max over categories of |p - q| (a category missing on one side counts as 0)."""
    keys = set(p) | set(q)
    return max((abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys), default=0.0)


def js_divergence(p_counts: Sequence[float], q_counts: Sequence[float]) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) of two histograms on the same bins."""
    p_total, q_total = sum(p_counts), sum(q_counts)
    if not p_total or not q_total:
        return 0.0
    p = [c / p_total for c in p_counts]
    q = [c / q_total for c in q_counts]
    m = [(a + b) / 2 for a, b in zip(p, q)]

    def kl(a, b):
        return sum(x * math.log2(x / y) for x, y in zip(a, b) if x > 0)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def _check(name: str, statistic: str, value: float, threshold: float, detail=None) -> dict:
    return {"name": name, "statistic": statistic, "value": round(value, 6),
            "threshold": threshold, "drifted": value > threshold, "detail": detail or {}}


def _class_counts(stats: Mapping) -> dict:
    """class -> accepted images, over all splits (rejects never count)."""
    counts: dict = {}
    for per_class in stats.get("by_split_class", {}).values():
        for name, count in per_class.items():
            counts[name] = counts.get(name, 0) + count
    return counts


def low_count_alarms(tonight: Mapping, history: Sequence[Mapping], ratio: float) -> list:
    """Alarms for tonight's accepted images, in all and per class, under `ratio` x the median
    of earlier nights' (a class missing from a night counts 0 there). Accepted images only: a
    night whose images are all rejected brought nothing to train on."""
    alarms = []
    earlier = [h.get("images", {}).get("accepted", 0) for h in history]
    tonight_count = tonight.get("images", {}).get("accepted", 0)
    usual = statistics.median(earlier) if earlier else 0
    if usual and tonight_count < ratio * usual:
        alarms.append({
            "name": "low_count", "tonight": tonight_count, "usual": usual,
            "detail": f"tonight brought {tonight_count} accepted images, under "
                      f"{ratio} x the median of earlier nights ({usual})"})
    earlier_classes = [_class_counts(h) for h in history]
    tonight_classes = _class_counts(tonight)
    for name in sorted({name for counts in earlier_classes for name in counts}):
        usual = statistics.median([counts.get(name, 0) for counts in earlier_classes])
        count = tonight_classes.get(name, 0)
        if usual and count < ratio * usual:
            alarms.append({
                "name": f"low_count/{name}", "class": name, "tonight": count, "usual": usual,
                "detail": f"tonight brought {count} accepted images of class {name!r}, under "
                          f"{ratio} x the median of earlier nights ({usual})"})
    return alarms


def check_drift(tonight: Mapping, history: Sequence[Mapping], config: DriftConfig) -> dict:
    """Tonight's stats.json against earlier snapshots' (oldest first): per-check verdicts,
    an overall `drifted` flag and the low-count alarm."""
    result = {"checked": len(history) >= config.min_history, "drifted": False, "checks": [],
              "alarms": []}
    if not result["checked"]:
        result["reason"] = (f"{len(history)} earlier snapshot(s); drift.min_history="
                            f"{config.min_history}")
        return result
    archive = cumulative_stats(history)
    tonight_classes = class_distribution(tonight.get("by_split_class", {}))
    archive_classes = class_distribution(archive["by_split_class"])
    if tonight_classes and archive_classes:
        # Sorted: of classes that shifted as much (two classes always do), the first by name,
        # not whichever a set of strings (hash-seeded per process) lists first.
        worst = max(sorted(set(tonight_classes) | set(archive_classes)),
                    key=lambda k: abs(tonight_classes.get(k, 0) - archive_classes.get(k, 0)))
        result["checks"].append(_check(
            "class_distribution", "linf", linf_distance(tonight_classes, archive_classes),
            config.class_linf_max, {"worst_class": worst,
                                    "tonight": round(tonight_classes.get(worst, 0.0), 6),
                                    "archive": round(archive_classes.get(worst, 0.0), 6)}))
    for metric, histogram in sorted(archive["quality_histograms"].items()):
        tonight_histogram = (tonight.get("quality", {}).get(metric, {}).get("histogram") or {})
        if not tonight_histogram.get("counts"):
            continue
        result["checks"].append(_check(
            f"quality/{metric}", "jensen_shannon",
            js_divergence(tonight_histogram["counts"], histogram["counts"]),
            config.quality_js_max))
    result["alarms"] += low_count_alarms(tonight, history, config.low_count_ratio)
    result["drifted"] = any(check["drifted"] for check in result["checks"]) or bool(
        result["alarms"])
    return result
