"""A committed snapshot written without running the offline job, for the reader's tests.

`write_synthetic_snapshot` writes seeded JPEG records with `transforms.codec` into the folder
layout that `transforms.snapshot_layout` owns (folder, shard and file names, commit order), so
a reader test needs neither Beam nor TFT and takes a fraction of a second. The pictures are the
train benchmark's (`runners.bench.bench_train.synthetic_image`). Same arguments, same bytes.
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import Sequence

import numpy as np
import tensorflow as tf
from PIL import Image

from configs.schema import SPLITS
from runners.bench.bench_train import synthetic_image
from transforms import codec
from transforms import snapshot_layout as layout

__all__ = ["write_synthetic_snapshot"]


def _random_boxes(rng: np.random.Generator, count: int) -> list[tuple[float, ...]]:
    boxes = []
    for _ in range(count):
        width, height = rng.uniform(0.2, 0.5, size=2)
        xmin, ymin = rng.uniform(0.0, 1.0 - width), rng.uniform(0.0, 1.0 - height)
        boxes.append((float(xmin), float(ymin), float(xmin + width), float(ymin + height)))
    return boxes


def _write_text(path: str, text: str) -> None:
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(text)


class _Moments:
    """Pixel sums for stats.json's pixel_stats (0-1 scale) and box counts."""

    def __init__(self):
        self.sum, self.sq_sum, self.count = np.zeros(3), np.zeros(3), 0
        self.images_with_boxes, self.boxes = 0, 0

    def add(self, pixels: np.ndarray, boxes: Sequence) -> None:
        self.images_with_boxes += bool(boxes)
        self.boxes += len(boxes)
        flat = pixels.reshape(-1, 3).astype(np.float64) / 255.0
        self.sum += flat.sum(0)
        self.sq_sum += (flat ** 2).sum(0)
        self.count += pixels.shape[0] * pixels.shape[1]

    def stats(self, counts: dict) -> dict:
        mean = self.sum / max(self.count, 1)
        std = np.sqrt(np.maximum(self.sq_sum / max(self.count, 1) - mean ** 2, 1e-12))
        return {
            "pixel_stats": {"mean": mean.round(6).tolist(), "std": std.round(6).tolist(),
                            "scale": "0-1"},
            "by_split": {split: counts.get(split, 0) for split in SPLITS},
            "boxes": {"images_with_boxes": self.images_with_boxes, "boxes": self.boxes}}


def _write_split(snapshot: str, split: str, split_index: int, count: int, moments: _Moments,
                 *, image_size, class_names, num_shards, max_boxes, compression, seed,
                 name) -> list[str]:
    """One split's shards; image i has label i % num_classes and lies in shard i % num_shards."""
    num_classes = len(class_names)
    paths = [layout.join(snapshot, layout.shard_name(name, split, shard, num_shards, compression))
             for shard in range(num_shards)]
    tf.io.gfile.makedirs(layout.join(snapshot, split))
    options = tf.io.TFRecordOptions(compression_type="GZIP" if compression == "gzip" else "")
    writers = [tf.io.TFRecordWriter(path, options) for path in paths]
    for index in range(count):
        rng = np.random.default_rng([seed, split_index, index])
        label = index % num_classes
        boxes = _random_boxes(rng, int(rng.integers(1, max_boxes + 1))) if max_boxes else []
        pixels = synthetic_image(rng, image_size, label, boxes)
        moments.add(pixels, boxes)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        encoded = buffer.getvalue()
        box_labels = [(label + k) % num_classes for k in range(len(boxes))]
        writers[index % num_shards].write(codec.encode_example(
            encoded=encoded, image_format="jpeg", height=image_size, width=image_size,
            filename=f"{split}/{class_names[label]}/{index:06d}.jpg",
            sha256=hashlib.sha256(encoded).hexdigest(), label=label,
            label_text=class_names[label], boxes=boxes, box_labels=box_labels,
            box_texts=[class_names[k] for k in box_labels]))
    for writer in writers:
        writer.close()
    return paths


def write_synthetic_snapshot(output_dir: str, *, counts: dict | None = None,
                             image_size: int = 32, num_classes: int = 3, num_shards: int = 2,
                             max_boxes: int = 0, compression: str = "none", seed: int = 0,
                             run_id: str = "synthetic", name: str = "images",
                             commit: bool = True) -> str:
    """Writes one snapshot in the offline job's layout and returns its folder.

    `OUTPUT/snapshots/<run_id>/{classes.txt, <split>/<name>-<split>.tfrecord-0000i-of-0000n[.gz],
    stats.json (pixel_stats on the 0-1 scale, by_split, boxes), manifest.json}`, plus
    `OUTPUT/LATEST` and `OUTPUT/classes.txt`. Image i of a split has label `i % num_classes`
    and, when `max_boxes` > 0, 1..max_boxes boxes. `commit=False` leaves out manifest.json and
    LATEST (a crashed run).
    """
    counts = {"train": 64} if counts is None else counts
    class_names = [f"class_{index}" for index in range(num_classes)]
    snapshot = layout.snapshot_dir(output_dir, run_id)
    moments, files = _Moments(), []
    for split_index, (split, count) in enumerate(sorted(counts.items())):
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}. Expected one of {SPLITS}.")
        files += _write_split(snapshot, split, split_index, count, moments,
                              image_size=image_size, class_names=class_names,
                              num_shards=num_shards, max_boxes=max_boxes,
                              compression=compression, seed=seed, name=name)
    table = "".join(f"{c}\n" for c in class_names)
    _write_text(layout.join(snapshot, layout.CLASSES), table)
    _write_text(layout.join(snapshot, layout.STATS),
                json.dumps(moments.stats(counts), indent=2))
    if commit:  # the manifest last: the commit point, then the table and the pointer
        _write_text(layout.join(snapshot, layout.MANIFEST), json.dumps(
            {"run_id": run_id, "synthetic": True, "orientation_recorded": True,
             "files": [  # relative, as the publisher's
                {"path": path[len(snapshot) + 1:]} for path in sorted(files)]}, indent=2))
        _write_text(layout.join(output_dir, layout.CLASSES), table)
        _write_text(layout.join(output_dir, layout.LATEST), f"{run_id}\n")
    return snapshot
