"""What the training reader learns from a snapshot's small files before it reads a shard:
the class table, the record counts, whether there are boxes, the normalization numbers and
the label offset the class ids were stored with.

`normalization` is the one place that decides which numbers the reader normalizes with (the
newest snapshot's TFT transform, the snapshots' `stats.json` pixel stats, the config's fixed
numbers, or none). Files are read with `tf.io.gfile` (through `transforms.snapshot_layout`),
never Beam.
"""
from __future__ import annotations

import json
from typing import Sequence

import tensorflow as tf

from configs.checks import check_one_of
from configs.online import NormalizeConfig
from configs.schema import SPLITS
from transforms import codec
from transforms.live_view import LiveView, live_view, select_snapshots
from transforms.snapshot_layout import (
    CLASSES,
    GFILE,
    MANIFEST,
    STATS,
    TRANSFORM_FN,
    Snapshot,
    join,
    parse_manifest,
    tfrecord_compression,
)

__all__ = ["read_class_names", "read_stats", "read_pixel_stats", "normalization",
           "count_examples", "has_boxes", "batches_per_epoch", "read_label_offset",
           "orientation_recorded"]

_PEEK_RECORDS = 256


def read_class_names(snapshots: Sequence[Snapshot]) -> list[str]:
    """The class table (id = line index). Tables are append-only, so the longest one of the
    selected snapshots covers them all."""
    tables = []
    for snapshot in snapshots:
        text = GFILE.read_text(join(snapshot.path, CLASSES))
        tables.append([line for line in text.splitlines() if line.strip()])
    longest = max(tables, key=len)
    for table in tables:
        if table != longest[:len(table)]:
            raise ValueError(
                "Class tables of the selected snapshots disagree (ids must never change). "
                f"Received: {table} vs {longest}")
    if not longest:
        raise ValueError(f"Empty class table in {snapshots[0].path}/{CLASSES}")
    return longest


def read_stats(snapshot: Snapshot) -> dict:
    """The snapshot's `stats.json`."""
    return json.loads(GFILE.read_text(join(snapshot.path, STATS)))


def read_pixel_stats(snapshots: Sequence[Snapshot]) -> tuple[list[float], list[float]]:
    """Per-channel (mean, std) on the [0, 1] scale from the snapshots' `stats.json`
    (`pixel_stats: {mean, std, scale: "0-1" | "0-255", images}`); several snapshots are pooled
    (means and variances weighted by their image counts)."""
    parts = [_snapshot_pixel_stats(s) for s in snapshots]
    parts = [p for p in parts if p[2] > 0] or parts
    total = sum(p[2] for p in parts) or len(parts)
    weights = [(p[2] or 1) / total for p in parts]
    mean = [sum(w * p[0][c] for w, p in zip(weights, parts)) for c in range(3)]
    second = [sum(w * (p[1][c] ** 2 + p[0][c] ** 2) for w, p in zip(weights, parts))
              for c in range(3)]
    std = [max(second[c] - mean[c] ** 2, 0.0) ** 0.5 for c in range(3)]
    if min(std) <= 0.0:
        raise ValueError(f"pixel_stats std must be positive in every channel. Received: {std}")
    return mean, std


def _snapshot_pixel_stats(snapshot: Snapshot) -> tuple[list[float], list[float], int]:
    path = join(snapshot.path, STATS)
    pixel_stats = read_stats(snapshot).get("pixel_stats")
    if not isinstance(pixel_stats, dict) or "mean" not in pixel_stats or "std" not in pixel_stats:
        raise ValueError(
            f"{path} has no pixel_stats with mean and std; set online.normalize.mode to fixed or "
            f"none, or pass normalize=False. Received: pixel_stats={pixel_stats!r}")
    scale = pixel_stats.get("scale", "0-1")
    check_one_of("pixel_stats.scale", scale, ("0-1", "0-255"))
    divisor = 255.0 if scale == "0-255" else 1.0
    mean, std = pixel_stats["mean"], pixel_stats["std"]
    if pixel_stats.get("images") == 0:  # a night that only retired records: weight 0
        return [0.0] * 3, [0.0] * 3, 0
    if not all(isinstance(v, list) and len(v) == 3
               and all(isinstance(c, (int, float)) for c in v) for v in (mean, std)):
        raise ValueError(
            f"{path}: pixel_stats needs 3 numeric means and 3 numeric stds (null when the "
            f"snapshot has no images). Received: mean={pixel_stats['mean']}, "
            f"std={pixel_stats['std']}")
    mean = [float(v) / divisor for v in mean]
    std = [float(v) / divisor for v in std]
    if min(std) <= 0.0:
        raise ValueError(
            f"{path}: pixel_stats std must be positive in every channel. "
            f"Received: std={pixel_stats['std']}")
    return mean, std, int(pixel_stats.get("images", 0) or 0)


def normalization(config: NormalizeConfig, snapshots: Sequence[Snapshot], normalize: bool = True
                  ) -> tuple[list[float], list[float]] | None:
    """(mean, std) on the [0, 1] scale that the reader normalizes with, or None for images
    left in [0, 1] (`normalize=False` or mode `none`).

    Mode `dataset`: the newest selected snapshot's TFT transform when it has one (its analysis
    covers everything accepted up to it, and it is what serving normalizes with, so training
    and serving use the same numbers); otherwise the selected snapshots' `stats.json` pixel
    stats, pooled. Mode `fixed`: `config.mean` / `config.std`.
    """
    mode = config.mode if normalize else "none"
    if mode == "dataset":
        newest = snapshots[-1]
        if GFILE.exists(join(newest.path, TRANSFORM_FN)):
            from transforms.offline.tft_graph import read_normalization  # TFT imports slowly
            return read_normalization(newest.path)
        return read_pixel_stats(snapshots)
    if mode == "fixed":
        return list(config.mean), list(config.std)
    return None


def count_examples(output_dir: str, split: str = "train", snapshots="latest") -> int:
    """Live records in a split (`stats.json` `by_split`, less the records retired or
    forgotten since: `transforms.live_view`), e.g. for `steps_per_epoch`."""
    check_one_of("split", split, SPLITS)
    view = live_view(output_dir, snapshots=select_snapshots(output_dir, snapshots))
    total = 0
    for snapshot in view.snapshots:
        by_split = read_stats(snapshot).get("by_split", {})
        if split not in by_split:
            raise ValueError(
                f"{snapshot.path}/{STATS} has no by_split count for {split!r}. "
                f"Received: by_split={by_split!r}")
        total += int(by_split[split]) - view.removed_count(snapshot.run_id, split)
    return total


def has_boxes(snapshots: Sequence[Snapshot], files: Sequence[str]) -> bool:
    """Whether the shards carry boxes: `stats.json` `boxes.images_with_boxes` when present,
    else whether any of the first records of the first shard has a box (records carry the
    box keys, empty, also without boxes)."""
    counted = [read_stats(s).get("boxes", {}).get("images_with_boxes") for s in snapshots]
    if all(isinstance(count, int) for count in counted):
        return sum(counted) > 0
    records = tf.data.TFRecordDataset(files[0], tfrecord_compression(files[0]))
    for serialized in records.take(_PEEK_RECORDS):
        features = tf.train.Example.FromString(serialized.numpy()).features.feature
        if codec.BBOX_XMIN in features and features[codec.BBOX_XMIN].float_list.value:
            return True
    return False


def batches_per_epoch(view: LiveView, split: str, batch_size: int, drop_remainder: bool,
                      share: tuple[int, int] = (0, 1)) -> int | None:
    """Batches in one epoch of the view's live records (`stats.json` `by_split` less the
    removed records; None when a count is missing), or of the replica's share `(pipeline_id,
    num_pipelines)`: every n-th record from pipeline_id. Known cardinality lets Keras show
    progress and stop exactly; a wrong count fails loudly."""
    counts = [read_stats(s).get("by_split", {}).get(split) for s in view.snapshots]
    if not all(isinstance(count, int) for count in counts):
        return None
    total = sum(counts) - sum(view.removed_count(s.run_id, split) for s in view.snapshots)
    if share[1] > 1:
        total = len(range(share[0], total, share[1]))
    return total // batch_size if drop_remainder else -(-total // batch_size)


def _manifest(snapshot: Snapshot) -> dict:
    manifest, problem = parse_manifest(GFILE.read_text(join(snapshot.path, MANIFEST)))
    if problem:  # committed when selected, so changed since: name the file
        raise ValueError(f"{snapshot.path}/{MANIFEST}: {problem}")
    return manifest


def orientation_recorded(snapshots: Sequence[Snapshot]) -> bool:
    """Whether every record of the snapshots carries `image/orientation` (`manifest.json`
    `orientation_recorded`, written since the key exists). Then the reader takes the key as
    it is and builds no EXIF reader of the bytes into its graph for records from before the
    key (~0.9 s of CPU per dataset built)."""
    return all(_manifest(snapshot).get("orientation_recorded") is True
               for snapshot in snapshots)


def read_label_offset(snapshots: Sequence[Snapshot]) -> int:
    """The `output.label_offset` the snapshots stored class ids with (`manifest.json`
    `label_offset`; 0 for snapshots written before it was recorded). Records of several
    snapshots are read together, so they must agree."""
    offsets = {}
    for snapshot in snapshots:
        offset = _manifest(snapshot).get("label_offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"{snapshot.path}/{MANIFEST}: label_offset must be an integer "
                             f">= 0. Received: label_offset={offset!r}")
        offsets[snapshot.run_id] = offset
    if len(set(offsets.values())) > 1:
        raise ValueError(
            "The selected snapshots stored class ids with different label offsets "
            f"(output.label_offset), so their labels cannot be read together. Received: "
            f"{offsets}")
    return next(iter(offsets.values()))
