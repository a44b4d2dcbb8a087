"""What the training reader reads and how: one validated, frozen `ReaderSpec`.

`pipelines.training_input.make_dataset(...)` turns its keyword arguments into a `ReaderSpec`
(`ReaderSpec.from_config(config, split=..., batch_size=..., ...)`); the reader's steps read
their settings from it. Defaults that depend on the split (augment, shuffle, drop_remainder:
on for "train" only) or on the config (seed, image_size) are resolved here, once, so every
step sees final values. Errors name the argument and what was received, like config errors.
"""
from __future__ import annotations

import dataclasses

from configs.checks import check_one_of
from configs.online import OnlineConfig, image_size_pair
from configs.schema import SPLITS, Config
from transforms.snapshot_layout import Selection, parse_selection

__all__ = ["ReaderSpec"]


def _check_int(key: str, value, low: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low}"
        raise ValueError(f"{key} must be an integer{bound}. Received: {key}={value!r}")


@dataclasses.dataclass(frozen=True)
class ReaderSpec:
    """The settings of one training input pipeline (`make_dataset`'s keyword arguments).

    Attributes:
      online: `config.online`: the augmentation, the normalization, and the defaults of `seed`
        and `image_size`.
      shard_name: `config.output.name`, the `<name>` of `<name>-<split>.tfrecord-...` shards.
      split: "train", "validation" or "test".
      batch_size: the batch this dataset yields. Under `tf.distribute`, pass
        `input_context.get_per_replica_batch_size(global_batch_size)`.
      seed: the global seed every random draw derives from (default `online.seed`).
      epoch: the (first) epoch; file order, record order and augmentation differ per epoch.
      start_step: the first batch of the first epoch to yield (resume after a crash). The
        skipped records are read but neither parsed nor decoded.
      snapshots: which committed snapshots to read: "latest" (default), "all", N or "last:N"
        (the newest N), or "mix:W": every snapshot, the newest drawn with probability W per
        record against the repeated archive, an epoch ending when the newest is used up (so
        training favours fresh data without forgetting). Normalization comes from the newest
        selected snapshot's TFT transform (nightly transforms cover the archive too).
      num_epochs: yields epochs `epoch .. epoch + num_epochs - 1` one after the other (for one
        `model.fit(..., epochs=num_epochs, steps_per_epoch=...)`); steps restart at 0 in each.
      augment: apply `online`'s batch augmentation (default: for "train" only).
      normalize: apply `online.normalize` (default mode `dataset`: the snapshot's per-channel
        mean/std); False leaves images in [0, 1].
      shuffle: file and record order from (seed, epoch) (default: for "train" only); otherwise
        the shards' sorted order.
      drop_remainder: drop a last partial batch (default: for "train" only; static shapes).
      with_boxes: emit the boxes dict (default None: when the snapshot's shards carry boxes).
      max_boxes: padded box rows per image; an image with more boxes fails the pipeline with
        an InvalidArgumentError naming max_boxes (nothing is dropped silently).
      num_classes: width of the labels (default None and minimum: the class table's length,
        plus the label offset when `keep_label_offset`).
      keep_label_offset: keep the snapshot's `output.label_offset` on the class ids (labels
        and box_labels as stored, e.g. 1-based for a detection model that reserves 0);
        default False: ids are class-table ids whatever the offset.
      image_size: overrides `online.image_size`: an int (square) or (height, width); stored as
        the (height, width) pair.
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
      cache_dir: a local folder for copies of remote snapshots' shards (`s3://`, which only a
        copy can read, defaults to `~/.cache/pixelmill/snapshots`; `gs://` reads in place
        unless given). See `pipelines.reader_cache`.

    `None` for `seed`, `image_size`, `augment`, `shuffle` and `drop_remainder` is resolved on
    construction, so every step sees final values.
    """
    online: OnlineConfig
    shard_name: str = "images"
    split: str = "train"
    batch_size: int = 32
    seed: int | None = None
    epoch: int = 0
    start_step: int = 0
    snapshots: object = "latest"
    num_epochs: int = 1
    augment: bool | None = None
    normalize: bool = True
    shuffle: bool | None = None
    drop_remainder: bool | None = None
    with_boxes: bool | None = None
    max_boxes: int = 100
    num_classes: int | None = None
    keep_label_offset: bool = False
    image_size: object = None
    shuffle_buffer: int = 1024
    cycle_length: int = 8
    jit_compile: bool = True
    resample_once: bool = True
    exif_orientation: bool = True
    cache_dir: str | None = None

    def __post_init__(self):
        check_one_of("split", self.split, SPLITS)
        if self.seed is None:
            object.__setattr__(self, "seed", self.online.seed)
        _check_int("seed", self.seed)
        for key, low in (("batch_size", 1), ("epoch", 0), ("start_step", 0), ("num_epochs", 1),
                         ("max_boxes", 1), ("shuffle_buffer", 1), ("cycle_length", 1)):
            _check_int(key, getattr(self, key), low)
        if self.num_classes is not None:
            _check_int("num_classes", self.num_classes, 1)
        training = self.split == "train"
        for key in ("augment", "shuffle", "drop_remainder"):
            if getattr(self, key) is None:
                object.__setattr__(self, key, training)
        object.__setattr__(self, "image_size", image_size_pair(
            self.online.image_size if self.image_size is None else self.image_size))
        parse_selection(self.snapshots)
        if not isinstance(self.exif_orientation, bool):
            raise ValueError(f"exif_orientation must be a bool. Received: exif_orientation="
                             f"{self.exif_orientation!r}")
        if self.cache_dir is not None and (not isinstance(self.cache_dir, str)
                                           or not self.cache_dir or "://" in self.cache_dir):
            raise ValueError(f"cache_dir must be a local folder path or None. Received: "
                             f"cache_dir={self.cache_dir!r}")

    @classmethod
    def from_config(cls, config: Config, **settings) -> "ReaderSpec":
        """The spec for `config` (its `online` section, shard name and
        `decode.exif_orientation`) and `settings`."""
        return cls(online=config.online, shard_name=config.output.name,
                   exif_orientation=config.decode.exif_orientation, **settings)

    @property
    def selection(self) -> Selection:
        """The parsed `snapshots` choice."""
        return parse_selection(self.snapshots)
