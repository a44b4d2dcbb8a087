"""The training reader names the shard when a record is corrupt or a shard is cut short (the
manifest's record counts), and reads a sound snapshot exactly as before."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from pipelines import training_input
from tests.conftest import TRAIN_IMAGES
from tests.jobutil import copy_output


def _batches(out):
    return [(images.numpy(), labels.numpy()) for images, labels in training_input.make_dataset(
        out, "train", batch_size=8, augment=False, shuffle=False, drop_remainder=False)]


def _first_shard(out) -> str:
    return sorted(glob.glob(os.path.join(out, "snapshots", "*", "train", "*.tfrecord-*")))[0]


def test_a_sound_snapshot_reads_every_record(train_snapshot):
    labels = np.concatenate([labels for _, labels in _batches(train_snapshot.out)])
    assert labels.shape[0] == TRAIN_IMAGES


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_shard_is_named(train_snapshot, tmp_path, damage):
    out = copy_output(train_snapshot.out, tmp_path / "out")
    shard = _first_shard(out)
    data = bytearray(open(shard, "rb").read())
    if damage == "truncate":
        data = data[:len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    with open(shard, "wb") as handle:
        handle.write(bytes(data))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _batches(out)
    message = str(error.value)
    assert "Corrupt or truncated shard" in message and shard in message
    assert "pixelmill verify" in message
