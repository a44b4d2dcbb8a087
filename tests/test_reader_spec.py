"""ReaderSpec: the training reader's settings, validated and with split-dependent defaults
resolved once (make_dataset's keyword arguments build one)."""
from __future__ import annotations

import dataclasses

import pytest

from configs.schema import ConfigError, load_config
from pipelines.reader_spec import ReaderSpec

CONFIG = load_config(overrides=["online.image_size=16", "online.seed=11"])


def test_train_defaults_come_from_the_split_and_the_config():
    spec = ReaderSpec.from_config(CONFIG)
    assert (spec.augment, spec.shuffle, spec.drop_remainder) == (True, True, True)
    assert spec.seed == 11 and spec.image_size == (16, 16)
    assert spec.shard_name == CONFIG.output.name and spec.online is CONFIG.online
    assert spec.with_boxes is None and spec.num_classes is None  # known once the snapshot is read


def test_other_splits_default_to_no_augmentation_and_file_order():
    spec = ReaderSpec.from_config(CONFIG, split="validation", image_size=(12, 20), seed=0)
    assert (spec.augment, spec.shuffle, spec.drop_remainder) == (False, False, False)
    assert spec.seed == 0 and spec.image_size == (12, 20)


def test_explicit_choices_win():
    spec = ReaderSpec.from_config(CONFIG, split="test", augment=True, shuffle=True,
                                  drop_remainder=True, snapshots="mix:0.25")
    assert (spec.augment, spec.shuffle, spec.drop_remainder) == (True, True, True)
    assert spec.selection.kind == "mix" and spec.selection.mix_weight == 0.25


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ReaderSpec.from_config(CONFIG).batch_size = 3


@pytest.mark.parametrize("settings,error,message", [
    ({"split": "dev"}, ConfigError, "Received: split='dev'"),
    ({"batch_size": 0}, ValueError, "batch_size must be an integer >= 1. Received: batch_size=0"),
    ({"seed": 1.5}, ValueError, "seed must be an integer. Received: seed=1.5"),
    ({"start_step": -1}, ValueError, "start_step must be an integer >= 0"),
    ({"max_boxes": True}, ValueError, "max_boxes must be an integer >= 1. Received: "
                                      "max_boxes=True"),
    ({"num_classes": 0}, ValueError, "num_classes must be an integer >= 1"),
    ({"image_size": 4}, ConfigError, "Received: image_size=4"),
    ({"snapshots": "newest"}, ValueError, r"Expected one of \('latest', 'all'"),
])
def test_bad_settings_name_the_argument(settings, error, message):
    with pytest.raises(error, match=message):
        ReaderSpec.from_config(CONFIG, **settings)
