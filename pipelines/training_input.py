"""The training input pipeline: committed shards -> reproducible, augmented batches.

One call gives a `tf.data.Dataset` for `model.fit` or a custom loop:

    ds = make_dataset("gs://bucket/out", split="train", batch_size=64, seed=7, epoch=epoch)
    model.fit(ds, ...)

The graph reads like the data flow (see DESIGN.md):

    select snapshot -> list shards -> file order (seed, epoch) -> replica's files
      -> interleave -> block shuffle (seed, epoch) -> skip start_step batches (still encoded)
      -> map: parse + decode + resize (per sample, no randomness) -> batch
      -> map: augment (geometry, pixel ops, mixup/cutmix; seed from (seed, epoch, step, replica))
      -> normalize with the snapshot's pixel stats -> prefetch

With augmentation and geometry on (`resample_once`, the default), the map decodes without
resizing and the batch pads the decoded uint8 images onto one canvas (`padded_batch`); the
geometry warp then resamples straight from them to `image_size`, so resize and warp are one
bilinear pass (saves the float resize, measured ~0.3 ms per 224 px image on 2 cores). Same
parameters, matrix and boxes as resize-then-warp; the pixels differ by resampling only.

Reproducibility: every random choice (file order, record order, augmentation) is a stateless
function of `(seed, epoch, step, replica)`. Two fresh datasets with the same arguments yield
identical batches on any machine; `start_step=s` yields exactly the batches the continuing run
yields from step `s` on, without decoding the skipped images. Nothing here reads the global
seed, so setting TensorFlow's global seed in user code does not change the batches.

Output: `(images, labels)` with images float32 `[B, H, W, 3]` (normalized with the snapshot's
per-channel mean/std, or in [0, 1] with `normalize=False`) and labels float32
`[B, num_classes]` (one-hot, or mixed by mixup/cutmix; each row sums to 1). When the shards
carry boxes (`with_boxes`), a dict instead, boxes padded with a count:

    images      float32 [B, H, W, 3]
    labels      float32 [B, num_classes]
    boxes       float32 [B, N, 4]  (ymin, xmin, ymax, xmax) normalized to [0, 1] of the output
                                   image; valid rows first, padding rows all zero
    box_labels  int32   [B, N]     class ids; padding -1
    num_boxes   int32   [B]        valid rows per image
    matrix      float32 [B, 3, 3]  maps an output pixel (x, y, 1) to the input pixel it came from
                                   (identity without augmentation); see transforms.online.augment

N is `max_boxes`, or `2 * max_boxes` when `online.mix` is on (room for a sample's own boxes and
its mixing partner's; the rule is in transforms.online.mixing). Boxes that
geometry pushes mostly out of the frame (below `online.geometry.min_box_area`) are dropped with
their labels. Padded rather than ragged so shapes stay static (XLA, TPU, `model.fit`); take the
valid boxes of image i with `boxes[i, :num_boxes[i]]`.

Resuming: either restore the tf.data iterator from a `tf.train.Checkpoint` and keep
`start_step=0` (the iterator carries its position; all ops are stateless, so it is
checkpointable), or store only `(epoch, step)` and rebuild with `epoch=e, start_step=s` (no
buffers in the checkpoint). Never both: a restored iterator already sits past the skipped steps.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Sequence

import tensorflow as tf

from configs.schema import SPLITS, Config, check_one_of, load_config
from configs.online import image_size_pair
from transforms import codec
from transforms.online.augment import build_batch_augmenter
from transforms.decode import decode_image
from transforms.online.seeds import epoch_seed, fold_in_name, step_seed

__all__ = [
    "Snapshot",
    "select_snapshots",
    "list_shards",
    "read_class_names",
    "read_pixel_stats",
    "count_examples",
    "augment_batch",
    "make_dataset",
]

_LATEST = "LATEST"
_MANIFEST = "manifest.json"
_STATS = "stats.json"
_CLASSES = "classes.txt"
_SNAPSHOTS = "snapshots"
_PEEK_RECORDS = 256


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One committed snapshot: `OUTPUT/snapshots/<run_id>/` with its manifest written."""
    run_id: str
    path: str


def _join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts)


def _read_text(path: str) -> str:
    with tf.io.gfile.GFile(path, "r") as handle:
        return handle.read()


def _committed_snapshots(output_dir: str) -> list[Snapshot]:
    root = _join(output_dir, _SNAPSHOTS)
    if not tf.io.gfile.isdir(root):
        return []
    found = []
    for entry in sorted(tf.io.gfile.listdir(root)):
        run_id = entry.rstrip("/")
        path = _join(root, run_id)
        if tf.io.gfile.exists(_join(path, _MANIFEST)):
            found.append(Snapshot(run_id, path))
    return found


def _latest_snapshot(output_dir: str) -> Snapshot:
    committed = _committed_snapshots(output_dir)
    if not committed:
        raise FileNotFoundError(
            f"No committed snapshot under {output_dir}/{_SNAPSHOTS} (a snapshot is committed once "
            f"its {_MANIFEST} is written). Run `pixelmill preprocess` first.")
    by_id = {s.run_id: s for s in committed}
    pointer = _join(output_dir, _LATEST)
    if tf.io.gfile.exists(pointer):
        run_id = _read_text(pointer).strip()
        if run_id in by_id:
            return by_id[run_id]
        logging.warning("%s names %r, which is not a committed snapshot; using the committed "
                        "snapshot with the newest manifest instead", pointer, run_id)
    else:
        logging.warning("%s is missing; using the committed snapshot with the newest manifest",
                        pointer)
    return max(committed,
               key=lambda s: (tf.io.gfile.stat(_join(s.path, _MANIFEST)).mtime_nsec, s.run_id))


def _parse_snapshots(spec) -> tuple[str, float]:
    """("latest" | "all" | "last" | "mix", N or weight) from the `snapshots` argument."""
    if isinstance(spec, bool):
        spec = str(spec)
    if isinstance(spec, int):
        spec = f"last:{spec}"
    if spec in ("latest", "all"):
        return spec, 0
    kind, _, value = str(spec).partition(":")
    try:
        number = float(value)
    except ValueError:
        number = None
    if kind == "last" and number is not None and number >= 1 and number == int(number):
        return "last", int(number)
    if kind == "mix" and number is not None and 0.0 < number < 1.0:
        return "mix", number
    raise ValueError(
        "Unknown snapshots selection. Expected one of ('latest', 'all', N or 'last:N' with "
        "N >= 1, 'mix:W' with 0 < W < 1 the share of the newest snapshot). "
        f"Received: snapshots={spec!r}")


def select_snapshots(output_dir: str, snapshots="latest") -> list[Snapshot]:
    """The committed snapshots to read, oldest first.

    `"latest"`: the one named in `OUTPUT/LATEST` (if `LATEST` is missing or names an
    uncommitted snapshot, the committed one with the newest manifest). `"all"`: every
    committed snapshot. `N` or `"last:N"`: the newest N. `"mix:W"`: all of them, the newest
    drawn with weight W against the archive (see `make_dataset`). Snapshots without
    `manifest.json` are uncommitted (a run still writing, or one that crashed) and never read.
    """
    kind, value = _parse_snapshots(snapshots)
    if kind == "latest":
        return [_latest_snapshot(output_dir)]
    committed = _committed_snapshots(output_dir)
    if not committed:
        _latest_snapshot(output_dir)  # raises the "no committed snapshot" error
    if kind == "last":
        return committed[-value:]
    if kind == "mix" and len(committed) < 2:
        raise ValueError(
            f"snapshots={snapshots!r} mixes the newest snapshot with the archive, but "
            f"{output_dir} has {len(committed)} committed snapshot(s).")
    return committed


def _split_files(snapshots: Sequence[Snapshot], split: str, name: str) -> list[str]:
    """Shards of `split` over several snapshots; a snapshot may have none of a split (a small
    night), but the selection as a whole must have some."""
    if len(snapshots) == 1:
        return list_shards(snapshots[0], split, name)
    files = []
    for snapshot in snapshots:
        if tf.io.gfile.glob(_join(snapshot.path, split, f"{name}-{split}.tfrecord-*")):
            files += list_shards(snapshot, split, name)
    if not files:
        raise FileNotFoundError(
            f"No shards for split {split!r} in the {len(snapshots)} selected snapshots.")
    return files


def list_shards(snapshot: Snapshot, split: str, name: str = "images") -> list[str]:
    """The shard files of one split, sorted: `<name>-<split>.tfrecord-00000-of-00008[.gz]`.

    Raises if the split has no shards or if shards are missing from the `-of-N` series.
    """
    check_one_of("split", split, SPLITS)
    pattern = re.compile(
        rf"^{re.escape(name)}-{re.escape(split)}\.tfrecord-(\d+)-of-(\d+)(\.gz)?$")
    directory = _join(snapshot.path, split)
    files = [f for f in tf.io.gfile.glob(_join(directory, f"{name}-{split}.tfrecord-*"))
             if pattern.match(f.rsplit("/", 1)[-1])]
    if not files:
        raise FileNotFoundError(
            f"No shards for split {split!r} in snapshot {snapshot.run_id!r}: nothing matches "
            f"{directory}/{name}-{split}.tfrecord-NNNNN-of-NNNNN[.gz]")
    indices, totals = set(), set()
    for path in files:
        match = pattern.match(path.rsplit("/", 1)[-1])
        indices.add(int(match.group(1)))
        totals.add(int(match.group(2)))
    if len(totals) != 1 or indices != set(range(next(iter(totals)))):
        raise ValueError(
            f"Incomplete shard series for split {split!r} in {directory}: expected indices "
            f"0..N-1 of one N. Received: indices {sorted(indices)}, N in {sorted(totals)}")
    return sorted(files)


def read_class_names(snapshots: Sequence[Snapshot]) -> list[str]:
    """The class table (id = line index). Tables are append-only, so the longest one of the
    selected snapshots covers them all."""
    tables = []
    for snapshot in snapshots:
        text = _read_text(_join(snapshot.path, _CLASSES))
        tables.append([line for line in text.splitlines() if line.strip()])
    longest = max(tables, key=len)
    for table in tables:
        if table != longest[:len(table)]:
            raise ValueError(
                "Class tables of the selected snapshots disagree (ids must never change). "
                f"Received: {table} vs {longest}")
    if not longest:
        raise ValueError(f"Empty class table in {snapshots[0].path}/{_CLASSES}")
    return longest


def _read_stats(snapshot: Snapshot) -> dict:
    return json.loads(_read_text(_join(snapshot.path, _STATS)))


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
    path = _join(snapshot.path, _STATS)
    pixel_stats = _read_stats(snapshot).get("pixel_stats")
    if not isinstance(pixel_stats, dict) or "mean" not in pixel_stats or "std" not in pixel_stats:
        raise ValueError(
            f"{path} has no pixel_stats with mean and std; set online.normalize.mode to fixed or "
            f"none, or pass normalize=False. Received: pixel_stats={pixel_stats!r}")
    scale = pixel_stats.get("scale", "0-1")
    check_one_of("pixel_stats.scale", scale, ("0-1", "0-255"))
    divisor = 255.0 if scale == "0-255" else 1.0
    mean, std = pixel_stats["mean"], pixel_stats["std"]
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


def count_examples(output_dir: str, split: str = "train", snapshots="latest") -> int:
    """Records in a split (from `stats.json` `by_split`), e.g. for `steps_per_epoch`."""
    check_one_of("split", split, SPLITS)
    total = 0
    for snapshot in select_snapshots(output_dir, snapshots):
        by_split = _read_stats(snapshot).get("by_split", {})
        if split not in by_split:
            raise ValueError(
                f"{snapshot.path}/{_STATS} has no by_split count for {split!r}. "
                f"Received: by_split={by_split!r}")
        total += int(by_split[split])
    return total


def _has_boxes(snapshots: Sequence[Snapshot], files: Sequence[str]) -> bool:
    """Whether the shards carry boxes: `stats.json` `boxes.images_with_boxes` when present,
    else whether any of the first records of the first shard has a box feature."""
    counted = [_read_stats(s).get("boxes", {}).get("images_with_boxes") for s in snapshots]
    if all(isinstance(count, int) for count in counted):
        return sum(counted) > 0
    compression = "GZIP" if files[0].endswith(".gz") else ""
    for serialized in tf.data.TFRecordDataset(files[0], compression).take(_PEEK_RECORDS):
        example = tf.train.Example.FromString(serialized.numpy())
        if codec.BBOX_XMIN in example.features.feature:
            return True
    return False


def _permutation(size: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    keys = tf.random.stateless_uniform(tf.reshape(size, [1]), seed=seed, alg="philox")
    return tf.argsort(keys, stable=True)


def _jpeg_ratio(height: tf.Tensor, width: tf.Tensor, target: int) -> tf.Tensor:
    """Branch index for the largest DCT scale (1, 2, 4, 8) keeping the short side >= target;
    the graph twin of `transforms.decode.pick_jpeg_ratio`."""
    short_side = tf.minimum(height, width)
    index = tf.constant(0, tf.int32)
    for branch, ratio in enumerate((2, 4, 8), start=1):
        index = tf.where(short_side // ratio >= target, branch, index)
    return index


def _decode_resized(encoded: tf.Tensor, height: tf.Tensor, width: tf.Tensor,
                    image_size: tuple[int, int]) -> tf.Tensor:
    """Decodes with the shared decoder (DCT-scaled for large JPEGs) and resizes to image_size,
    float32 in [0, 1]. Box coordinates are normalized, so the resize leaves them unchanged."""
    branches = [lambda r=r: tf.image.resize(decode_image(encoded, jpeg_ratio=r), image_size)
                for r in (1, 2, 4, 8)]
    index = _jpeg_ratio(height, width, min(image_size))
    image = tf.switch_case(index, branches)
    image.set_shape([*image_size, 3])
    return tf.clip_by_value(image / 255.0, 0.0, 1.0)


def _canvas_size(image_size: tuple[int, int]) -> tuple[int, int]:
    """Canvas for decoded images when the warp does the resize: twice the output per side. The
    DCT-scaled decode keeps the short side in [target, 2 * target) for JPEGs, so square to 4:3
    photos fit; see `_decode_for_canvas` for the rest."""
    return 2 * image_size[0], 2 * image_size[1]


def _decode_for_canvas(encoded: tf.Tensor, height: tf.Tensor, width: tf.Tensor,
                       image_size: tuple[int, int]) -> tuple[tf.Tensor, tf.Tensor]:
    """(uint8 [h, w, 3] decoded image, int32 [2] its size), at most the canvas size.

    Same decode as `_decode_resized` (shared decoder, same DCT scale) but no resize: batches
    are padded to the canvas (`padded_batch`, the image at the top-left) and the batch warp
    resamples straight from them to image_size. An image larger than the canvas after the DCT
    scale (very large or elongated) is first resized to fit, aspect kept, rounded to 8 bits.
    """
    canvas = _canvas_size(image_size)
    branches = [lambda r=r: decode_image(encoded, jpeg_ratio=r) for r in (1, 2, 4, 8)]
    image = tf.switch_case(_jpeg_ratio(height, width, min(image_size)), branches)
    shape = tf.shape(image)

    def fit():
        resized = tf.image.resize(image, canvas, preserve_aspect_ratio=True)
        return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)

    fits = (shape[0] <= canvas[0]) & (shape[1] <= canvas[1])
    image = tf.cond(fits, lambda: image, fit)
    image.set_shape([None, None, 3])
    return image, tf.shape(image)[:2]


def _parse_sample(serialized: tf.Tensor, *, image_size: tuple[int, int], num_classes: int,
                  with_boxes: bool, max_boxes: int, to_canvas: bool = False) -> dict:
    parsed = codec.parse_example(serialized, with_boxes=with_boxes)
    label = parsed[codec.CLASS_LABEL]
    in_table = tf.debugging.assert_equal(
        (label >= 0) & (label < num_classes), True,
        message=f"A record's class label is outside the class table of {num_classes} classes "
                f"(an unlabeled record, or num_classes too small)")
    with tf.control_dependencies([in_table]):
        labels = tf.one_hot(label, num_classes, dtype=tf.float32)
    sample = {"labels": labels}
    decode_args = (parsed[codec.IMAGE_ENCODED], parsed[codec.IMAGE_HEIGHT],
                   parsed[codec.IMAGE_WIDTH], image_size)
    if to_canvas:
        sample["source"], sample["source_size"] = _decode_for_canvas(*decode_args)
    else:
        sample["images"] = _decode_resized(*decode_args)
    if with_boxes:
        boxes = tf.stack([parsed[codec.BBOX_YMIN], parsed[codec.BBOX_XMIN],
                          parsed[codec.BBOX_YMAX], parsed[codec.BBOX_XMAX]], axis=-1)
        count = tf.shape(boxes)[0]
        check = tf.debugging.assert_less_equal(
            count, max_boxes,
            message=f"An image has more boxes than max_boxes={max_boxes}; raise max_boxes")
        with tf.control_dependencies([check]):
            padding = max_boxes - count
        sample["boxes"] = tf.pad(boxes, [[0, padding], [0, 0]])
        sample["box_labels"] = tf.pad(tf.cast(parsed[codec.BOX_CLASS_LABEL], tf.int32),
                                      [[0, padding]], constant_values=-1)
        sample["num_boxes"] = tf.cast(count, tf.int32)
        sample["boxes"].set_shape([max_boxes, 4])
        sample["box_labels"].set_shape([max_boxes])
    return sample


def augment_batch(augmenter, batch: dict, seed: int, epoch, step, replica=0) -> dict:
    """Applies the batch augmenter with the seed of `(seed, epoch, step, replica)`: exactly what
    `make_dataset` does to that batch (the preview calls this to show a training batch)."""
    return augmenter(batch, step_seed(seed, epoch, step, replica))


def _normalization(config: Config, snapshots: Sequence[Snapshot], normalize: bool):
    """(mean, std) on the [0, 1] scale from `online.normalize`, or None for images in [0, 1]."""
    mode = config.online.normalize.mode if normalize else "none"
    if mode == "dataset":
        # The newest selected snapshot's TFT transform covers everything accepted up to it
        # (nightly runs analyze the archive plus the night): the same numbers as serving.
        newest = snapshots[-1]
        if tf.io.gfile.exists(_join(newest.path, "transform_fn")):
            from transforms.offline.tft_analysis import read_normalization  # TFT imports slowly
            return read_normalization(newest.path)
        return read_pixel_stats(snapshots)
    if mode == "fixed":
        return list(config.online.normalize.mean), list(config.online.normalize.std)
    return None


def _check_int(key: str, value, low: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low}"
        raise ValueError(f"{key} must be an integer{bound}. Received: {key}={value!r}")


def _block_shuffle(records: tf.data.Dataset, block_size: int,
                   seed: tf.Tensor) -> tf.data.Dataset:
    """Permutes consecutive blocks of `block_size` records, block i with the sub-seed
    `fold_in(seed, i)`: a stateless shuffle (no RNG state, unaffected by the global seed)."""
    def permute(block_index, block):
        block_seed = tf.random.experimental.stateless_fold_in(seed, block_index, alg="philox")
        return tf.gather(block, _permutation(tf.size(block), block_seed))
    return records.batch(block_size).enumerate().map(permute).unbatch()


def _select_output(batch: dict, with_boxes: bool, normalization):
    """Normalizes after augmentation (the ops work on [0, 1]) and picks the output structure."""
    images = batch["images"]
    if normalization is not None:
        mean, std = normalization
        images = (images - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)
    if not with_boxes:
        return images, batch["labels"]
    output = {"images": images}
    for key in ("labels", "boxes", "box_labels", "num_boxes"):
        output[key] = batch[key]
    output["matrix"] = batch["matrix"] if "matrix" in batch else tf.eye(
        3, batch_shape=[tf.shape(images)[0]], dtype=tf.float32)
    return output


def make_dataset(output_dir: str, split: str = "train", batch_size: int = 32,
                 config: Config | None = None, seed: int | None = None, epoch: int = 0,
                 start_step: int = 0, input_context: tf.distribute.InputContext | None = None,
                 snapshots="latest", *, num_epochs: int = 1, augment: bool | None = None,
                 normalize: bool = True, shuffle: bool | None = None,
                 drop_remainder: bool | None = None, with_boxes: bool | None = None,
                 max_boxes: int = 100, num_classes: int | None = None,
                 image_size: int | tuple[int, int] | None = None, shuffle_buffer: int = 1024,
                 cycle_length: int = 8, jit_compile: bool = True,
                 resample_once: bool = True) -> tf.data.Dataset:
    """Batches of one split of the committed snapshot, reproducible from `(seed, epoch, step)`.

    Args:
      output_dir: the offline job's OUTPUT folder (local or gs://).
      split: "train", "validation" or "test".
      batch_size: the batch this dataset yields. Under `tf.distribute`, pass
        `input_context.get_per_replica_batch_size(global_batch_size)`.
      config: the pixelmill config (`configs/base.yaml` when None). `config.online` gives the
        image size, the seed, the augmentation and the normalization; `config.output.name` the
        shard name.
      seed: the global seed every random draw derives from (default `config.online.seed`).
      epoch: the (first) epoch; file order, record order and augmentation differ per epoch.
      start_step: the first batch of the first epoch to yield (resume after a crash). The
        skipped records are read but neither parsed nor decoded.
      input_context: per-replica sharding by files (replicas see disjoint files within an
        epoch); its `input_pipeline_id` is the replica in the augmentation seed.
      snapshots: which committed snapshots to read: "latest" (default), "all", N or "last:N"
        (the newest N), or "mix:W": every snapshot, the newest drawn with probability W per
        record against the repeated archive, an epoch ending when the newest is used up (so
        training favours fresh data without forgetting). Normalization comes from the newest
        selected snapshot's TFT transform (nightly transforms cover the archive too).
      num_epochs: yields epochs `epoch .. epoch + num_epochs - 1` one after the other (for one
        `model.fit(..., epochs=num_epochs, steps_per_epoch=...)`); steps restart at 0 in each.
      augment: apply `config.online`'s batch augmentation (default: for "train" only).
      normalize: apply `online.normalize` (default mode `dataset`: the snapshot's per-channel
        mean/std); False leaves images in [0, 1].
      shuffle: file and record order from (seed, epoch) (default: for "train" only); otherwise
        the shards' sorted order.
      drop_remainder: drop a last partial batch (default: for "train" only; static shapes).
      with_boxes: emit the boxes dict (default: when the first records of the first shard
        carry boxes).
      max_boxes: padded box rows per image; an image with more boxes fails the pipeline with
        an InvalidArgumentError naming max_boxes (nothing is dropped silently).
      num_classes: width of the labels (default and minimum: the class table's length).
      image_size: overrides `config.online.image_size`: an int (square) or (height, width).
      shuffle_buffer: records per shuffled block.
      cycle_length: shards read at once.
      jit_compile: run the augmentation's apply step under XLA (`tf.function(jit_compile=True)`;
        the parameter sampling stays outside). About 3-4x faster on the CPU; results agree
        with the uncompiled ops within float rounding, and are identical run to run.
      resample_once: when augmenting with geometry on, warp straight from the decoded images
        (DCT-scaled JPEG decode, on a canvas of twice image_size) to image_size: the resize
        folds into the warp, one bilinear pass instead of resize-then-warp. False resizes
        first and warps the resized batch: exactly `augment_batch` on the `augment=False`
        batches (what the preview shows); the two differ by resampling only (same parameters,
        matrix and boxes).
    """
    config = config or load_config()
    check_one_of("split", split, SPLITS)
    seed = config.online.seed if seed is None else seed
    _check_int("seed", seed)
    for key, value, low in (("batch_size", batch_size, 1), ("epoch", epoch, 0),
                            ("start_step", start_step, 0), ("num_epochs", num_epochs, 1),
                            ("max_boxes", max_boxes, 1), ("shuffle_buffer", shuffle_buffer, 1),
                            ("cycle_length", cycle_length, 1)):
        _check_int(key, value, low)
    training = split == "train"
    augment = training if augment is None else augment
    shuffle = training if shuffle is None else shuffle
    drop_remainder = training if drop_remainder is None else drop_remainder
    size = image_size_pair(config.online.image_size if image_size is None else image_size)

    selected = select_snapshots(output_dir, snapshots)
    files = _split_files(selected, split, config.output.name)
    class_names = read_class_names(selected)
    if num_classes is None:
        num_classes = len(class_names)
    elif num_classes < len(class_names):
        raise ValueError(
            f"num_classes must be at least the class table's length {len(class_names)}. "
            f"Received: num_classes={num_classes}")
    if with_boxes is None:
        with_boxes = _has_boxes(selected, files)
    normalization = _normalization(config, selected, normalize)
    pipeline_id, num_pipelines = 0, 1
    if input_context is not None:
        pipeline_id = input_context.input_pipeline_id
        num_pipelines = input_context.num_input_pipelines
    kind, value = _parse_snapshots(snapshots)
    mix_weight = value if kind == "mix" else None
    if mix_weight is not None:
        fresh_files = _split_files(selected[-1:], split, config.output.name)
        archive_files = _split_files(selected[:-1], split, config.output.name)
    groups = [files] if mix_weight is None else [archive_files, fresh_files]
    if any(num_pipelines > len(group) for group in groups):
        raise ValueError(
            f"Sharding by files needs at least one shard per input pipeline. Received: "
            f"{' and '.join(str(len(g)) for g in groups)} shards for split {split!r}, "
            f"{num_pipelines} input pipelines")
    augmenter = (build_batch_augmenter(config.online, num_classes, jit_compile=jit_compile,
                                       image_size=size if resample_once else None)
                 if augment else None)
    to_canvas = augmenter is not None and augmenter.takes_source

    def parse(serialized):
        return _parse_sample(serialized, image_size=size, num_classes=num_classes,
                             with_boxes=with_boxes, max_boxes=max_boxes, to_canvas=to_canvas)

    def read_files(group: list[str], this_epoch, tag: str):
        paths = tf.constant(group)
        kinds = tf.constant(["GZIP" if f.endswith(".gz") else "" for f in group])
        if shuffle:
            order = _permutation(tf.size(paths), fold_in_name(this_epoch, f"reader/file_order{tag}"))
            paths, kinds = tf.gather(paths, order), tf.gather(kinds, order)
        per_pipeline = len(range(pipeline_id, len(group), num_pipelines))
        records = tf.data.Dataset.from_tensor_slices((paths, kinds)).shard(
            num_pipelines, pipeline_id).interleave(
                lambda path, kind: tf.data.TFRecordDataset(path, kind),
                cycle_length=min(cycle_length, per_pipeline), block_length=1,
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if shuffle:
            records = _block_shuffle(records, shuffle_buffer,
                                     fold_in_name(this_epoch, f"reader/record_order{tag}"))
        return records

    def one_epoch(epoch_index):
        this_epoch = epoch_seed(seed, epoch_index)
        if mix_weight is None:
            records = read_files(files, this_epoch, "")
        else:
            # The archive repeats; the epoch ends when the newest snapshot's records are used
            # up, so each epoch sees all fresh records once and (1 - W) / W as many archived
            # ones. Choices are stateless draws from (seed, epoch, record index).
            archive = read_files(archive_files, this_epoch, "/archive").repeat()
            fresh = read_files(fresh_files, this_epoch, "/fresh")
            mix_seed = fold_in_name(this_epoch, "reader/mix")
            choices = tf.data.Dataset.range(tf.int64.max).map(
                lambda i: tf.cast(tf.random.stateless_uniform(
                    [], seed=tf.random.experimental.stateless_fold_in(mix_seed, i),
                    alg="philox") < mix_weight, tf.int64))
            records = tf.data.Dataset.choose_from_datasets(
                [archive, fresh], choices, stop_on_empty_dataset=True)
        first_step = tf.where(epoch_index == epoch, tf.constant(start_step, tf.int64),
                              tf.constant(0, tf.int64))
        samples = records.skip(first_step * batch_size).map(
            parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if to_canvas:  # decoded images of any size, padded to one canvas per batch
            shapes = {key: spec.shape for key, spec in samples.element_spec.items()}
            shapes["source"] = tf.TensorShape([*_canvas_size(size), 3])
            batches = samples.padded_batch(batch_size, padded_shapes=shapes,
                                           drop_remainder=drop_remainder)
        else:
            batches = samples.batch(batch_size, drop_remainder=drop_remainder,
                                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if augmenter is not None:
            steps = tf.data.Dataset.range(first_step, tf.int64.max)
            batches = tf.data.Dataset.zip((steps, batches)).map(
                lambda step, batch: augment_batch(augmenter, batch, seed, epoch_index, step,
                                                  pipeline_id),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return batches.map(lambda batch: _select_output(batch, with_boxes, normalization),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    options = tf.data.Options()
    options.deterministic = True
    dataset = tf.data.Dataset.range(epoch, epoch + num_epochs).flat_map(one_epoch)
    if num_pipelines == 1 and mix_weight is None:  # every record is read: count is known
        per_epoch = _batches_per_epoch(selected, split, batch_size, drop_remainder)
        if per_epoch is not None:
            if start_step >= max(per_epoch, 1):
                raise ValueError(
                    f"start_step must be below the {per_epoch} batches of an epoch of split "
                    f"{split!r} at batch_size={batch_size}. Received: start_step={start_step}")
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(
                num_epochs * per_epoch - start_step))
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def _batches_per_epoch(snapshots: Sequence[Snapshot], split: str, batch_size: int,
                       drop_remainder: bool) -> int | None:
    """Batches in one epoch from `stats.json` `by_split` (None when a count is missing). Known
    cardinality lets Keras show progress and stop exactly; a wrong count fails loudly."""
    counts = [_read_stats(s).get("by_split", {}).get(split) for s in snapshots]
    if not all(isinstance(count, int) for count in counts):
        return None
    total = sum(counts)
    return total // batch_size if drop_remainder else -(-total // batch_size)
