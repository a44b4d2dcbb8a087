"""TensorFlow Datasets reads a snapshot as it is: `tfds.builder_from_directory(snapshot)`."""
from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tests.jobutil import read_records
from tests.tiers import shared_fixture
from transforms import codec
from transforms.reporting import tfds_metadata


@shared_fixture(scope="module")
def builder(demo_snapshot):
    return tfds.builder_from_directory(demo_snapshot.path)


def test_splits_and_shard_lengths_match_the_manifest(demo_snapshot, builder):
    manifest = json.load(open(os.path.join(demo_snapshot.path, "manifest.json")))
    assert {name: split.num_examples for name, split in builder.info.splits.items()} == \
        manifest["splits"]
    listed = {entry["path"] for entry in manifest["files"]}
    for name in (tfds_metadata.DATASET_INFO, tfds_metadata.FEATURES, tfds_metadata.LABELS_FILE):
        assert name in listed


def test_as_dataset_gives_every_record_decoded(demo_snapshot, builder):
    by_name = {r[codec.IMAGE_FILENAME].numpy(): r for r in read_records(demo_snapshot)}
    seen = []
    for split in builder.info.splits:
        for example in builder.as_dataset(split=split):
            record = by_name[example[codec.IMAGE_FILENAME].numpy()]
            seen.append(example[codec.IMAGE_FILENAME].numpy())
            assert example[codec.IMAGE_ENCODED].dtype == tf.uint8
            assert example[codec.IMAGE_ENCODED].shape == (
                int(record[codec.IMAGE_HEIGHT]), int(record[codec.IMAGE_WIDTH]), 3)
            assert int(example[codec.CLASS_LABEL]) == int(record[codec.CLASS_LABEL])
            assert example[codec.BBOX_XMIN].numpy().tolist() == pytest.approx(
                tf.sparse.to_dense(record[codec.BBOX_XMIN]).numpy().tolist())
            assert example["meta/source"].dtype == tf.string
    assert sorted(seen) == sorted(by_name)


def test_label_names_slicing_and_supervised_pairs(demo, builder):
    names = builder.info.features[codec.CLASS_LABEL].names
    assert names == open(demo.classes_txt).read().split()
    assert builder.info.features[codec.BOX_CLASS_LABEL].feature.names == names
    total = builder.info.splits["train"].num_examples
    first = [e[codec.IMAGE_FILENAME].numpy() for e in builder.as_dataset(split="train[:50%]")]
    rest = [e[codec.IMAGE_FILENAME].numpy() for e in builder.as_dataset(split="train[50%:]")]
    assert abs(len(first) - total / 2) <= 1 and len(first) + len(rest) == total
    assert not set(first) & set(rest)
    for example in builder.as_dataset(split="train").take(3):
        name = names[int(example[codec.CLASS_LABEL])]
        assert name == example[codec.CLASS_TEXT].numpy().decode()
    image, label = next(iter(builder.as_dataset(split="validation", as_supervised=True)))
    assert image.shape[-1] == 3 and label.dtype == tf.int64


def test_label_offset_names_the_reserved_ids():
    assert tfds_metadata.label_names(["cat", "dog"], 0) == ["cat", "dog"]
    assert tfds_metadata.label_names(["cat", "dog"], 1) == ["background", "cat", "dog"]
    assert tfds_metadata.label_names(["cat"], 3) == ["background", "reserved_1", "reserved_2",
                                                     "cat"]
