"""What the job's transform holds and reports: the names of its outputs (what the model
consumes, and the analyzed constants under `stats/`), the checks of its arguments, and the
summary of its numbers (stats.json's `transform`, `tft_summary`).

Shared by the Beam side (`tft_analysis`, in the launcher, without TensorFlow) and the
TensorFlow side (`tft_graph`, where the transform is traced and read back).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from configs.online import image_size_pair
from transforms.offline.tft_totals import Analyzed, Totals

__all__ = ["IMAGE", "LABEL", "STATS_PREFIX", "STATS_PIXEL_MEAN", "STATS_PIXEL_STD", "STATS_IMAGES",
           "STATS_MEASURED", "STATS_PIXELS", "STATS_WIDTH_QUANTILES", "STATS_HEIGHT_QUANTILES",
           "DEFAULT_SIZE_QUANTILES", "checked_arguments", "job_summary", "summary_of"]

# What the model consumes.
IMAGE = "image"
LABEL = "label"
# The analyzed constants, broadcast to every row (read back by tft_summary).
STATS_PREFIX = "stats/"
STATS_PIXEL_MEAN = STATS_PREFIX + "pixel_mean"     # float32 [3]: what the graph subtracts
STATS_PIXEL_STD = STATS_PREFIX + "pixel_std"       # float32 [3]: what the graph divides by
STATS_IMAGES = STATS_PREFIX + "images"             # int64 [1]: rows analyzed
STATS_MEASURED = STATS_PREFIX + "measured_images"  # int64 [1]: rows with a pixel count > 0
STATS_PIXELS = STATS_PREFIX + "pixel_count"        # int64 [1]: sum of w*h over measured rows
STATS_WIDTH_QUANTILES = STATS_PREFIX + "width_quantiles"
STATS_HEIGHT_QUANTILES = STATS_PREFIX + "height_quantiles"

DEFAULT_SIZE_QUANTILES = 10


def checked_arguments(image_size, size_quantiles) -> tuple[int, int]:
    """(height, width) of `image_size`; ValueError for a bad size or `size_quantiles`."""
    size = image_size_pair(image_size)
    if (isinstance(size_quantiles, bool) or not isinstance(size_quantiles, int)
            or not 2 <= size_quantiles <= 1000):
        raise ValueError(
            f"size_quantiles must be an int in [2, 1000]. Received: size_quantiles="
            f"{size_quantiles!r}")
    return size


def job_summary(totals: Totals, class_table: Sequence[str], analyzed: Analyzed) -> dict:
    """`tft_summary` of the transform that the job writes from `totals` and `class_table`,
    from the same numbers (`analyzed`: `totals.analyzed`) without loading the transform back:
    that load was ~0.4 s of every job, over 1 s in a fresh process (docs/benchmarks.md, eighth
    round). A test holds the two equal."""
    constants = {STATS_IMAGES: analyzed.counts[:1].tolist(),
                 STATS_MEASURED: analyzed.counts[1:2].tolist(),
                 STATS_PIXELS: analyzed.counts[2:].tolist(),
                 STATS_PIXEL_MEAN: analyzed.mean.tolist(),
                 STATS_PIXEL_STD: analyzed.std.tolist(),
                 STATS_WIDTH_QUANTILES: analyzed.quantiles[0].tolist(),
                 STATS_HEIGHT_QUANTILES: analyzed.quantiles[1].tolist()}
    counts = ({label.decode("utf-8"): n for label, n in totals.label_counts.items()}
              if analyzed.counts[0] else {})
    return summary_of(constants, list(class_table), counts)


def summary_of(constants: Mapping, table: list, counts: Mapping) -> dict:
    """stats.json's `transform` from the `stats/*` constants (Python numbers, as row 0 of
    the transform's outputs), the class table and the rows per label."""
    images = constants[STATS_IMAGES][0]
    known = set(table)  # a label's lookup, not a walk of the table (21,841 names, ImageNet-21k)
    present = sum(1 for name in table if counts.get(name, 0) > 0)
    classes, weights_by_id = [], []
    for class_id, name in enumerate(table):
        count = counts.get(name, 0)
        weight = images / (present * count) if count else None
        classes.append({"id": class_id, "name": name, "count": count, "weight": weight})
        weights_by_id.append(weight)
    measured = constants[STATS_MEASURED][0]
    width_quantiles = constants[STATS_WIDTH_QUANTILES]
    return {
        "images": images,
        "classes": classes,
        "class_weights_by_id": weights_by_id,
        "labels_outside_table": {name: n for name, n in sorted(counts.items())
                                 if name not in known},
        "pixel_stats": {
            "mean": constants[STATS_PIXEL_MEAN] if measured else None,
            "std": constants[STATS_PIXEL_STD] if measured else None,
            "scale": "0-1",
            "weighting": "pixels",
            "images": measured,
            "pixel_count": constants[STATS_PIXELS][0],
        },
        "size_quantiles": {
            "num_buckets": len(width_quantiles) + 1,
            "width": width_quantiles if images else None,
            "height": constants[STATS_HEIGHT_QUANTILES] if images else None,
        },
    }
