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

    Frozen and validated on construction: a bad value raises ValueError naming the argument and
    what was received. `None` for `seed`, `image_size`, `augment`, `shuffle` and `drop_remainder`
    is resolved here (from `online`; the last three on for "train" only), so every step sees
    final values. Each argument is documented in docs/training.md ("`make_dataset` arguments").
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
