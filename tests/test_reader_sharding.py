"""The reader under tf.distribute: replicas split files, or records when files are too few.

With fewer shard files than input pipelines (a small dataset written as one shard), every
replica reads every file in the epoch's order and keeps every n-th live record: disjoint and
complete across replicas for every epoch, reproducible from the seed, with one log line.
"""
import hashlib
import json
import os

import pytest
import tensorflow as tf

from configs.schema import load_config
from pipelines import training_input
from tests.fake_snapshot import write_synthetic_snapshot
from tests.logutil import captured_warnings

RECORDS, EPOCHS, SEED = 11, 3, 5
FORGOTTEN = ("train/class_0/000003.jpg", "train/class_1/000007.jpg")


@pytest.fixture(scope="module")
def config():
    return load_config(overrides=["online.image_size=16"])


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("one_shard"))
    write_synthetic_snapshot(root, counts={"train": RECORDS}, image_size=16, num_classes=3,
                             num_shards=1, seed=4)
    return root


@pytest.fixture(scope="module")
def one_shard_less_two(tmp_path_factory):
    """The one-shard snapshot with two records forgotten (the reader's per-shard filter)."""
    root = str(tmp_path_factory.mktemp("one_shard_less_two"))
    write_synthetic_snapshot(root, counts={"train": RECORDS}, image_size=16, num_classes=3,
                             num_shards=1, seed=4)
    with open(os.path.join(root, "forgotten.jsonl"), "w") as handle:
        for path in FORGOTTEN:
            handle.write(json.dumps({"path": path, "snapshot": "synthetic", "split": "train",
                                     "reason": "forgotten"}) + "\n")
    return root


def _epochs(root, config, pipelines, replica, seed=SEED, epoch=0, **kwargs) -> list[list]:
    """Per epoch, the records a replica reads in order (as digests of their decoded pixels):
    one batch holds a whole epoch, and batches never cross epochs."""
    context = None
    if pipelines > 1:
        context = tf.distribute.InputContext(num_input_pipelines=pipelines,
                                             input_pipeline_id=replica,
                                             num_replicas_in_sync=pipelines)
    dataset = training_input.make_dataset(
        root, batch_size=2 * RECORDS, config=config, seed=seed, epoch=epoch,
        num_epochs=EPOCHS, input_context=context, augment=False, normalize=False,
        drop_remainder=False, **kwargs)
    assert dataset.cardinality().numpy() == EPOCHS  # known: every n-th live record
    return [[hashlib.sha256(image.tobytes()).hexdigest() for image in images.numpy()]
            for images, _ in dataset]


def _warnings():
    return captured_warnings("pipelines.training_input")


@pytest.mark.parametrize("pipelines", [2, 3])
def test_one_shard_is_split_by_records_disjoint_and_complete_every_epoch(one_shard, config,
                                                                         pipelines):
    whole = _epochs(one_shard, config, 1, 0)
    replicas = [_epochs(one_shard, config, pipelines, r) for r in range(pipelines)]
    for epoch in range(EPOCHS):
        assert len(set(whole[epoch])) == RECORDS
        parts = [replica[epoch] for replica in replicas]
        assert [len(p) for p in parts] == [len(range(r, RECORDS, pipelines))
                                           for r in range(pipelines)]
        union = [digest for part in parts for digest in part]
        assert sorted(union) == sorted(whole[epoch])  # each record exactly once
    assert whole[0] != whole[1]  # epochs are shuffled differently, each one still complete


def test_records_sharding_repeats_with_the_seed_and_changes_with_it(one_shard, config):
    first = [_epochs(one_shard, config, 2, r) for r in range(2)]
    again = [_epochs(one_shard, config, 2, r) for r in range(2)]
    other = [_epochs(one_shard, config, 2, r, seed=SEED + 1) for r in range(2)]
    assert first == again
    assert first != other
    # a later epoch read on its own is the continuing run's epoch
    assert _epochs(one_shard, config, 2, 1, epoch=1)[0] == first[1][1]


def test_records_sharding_keeps_the_removal_filter(one_shard, one_shard_less_two, config):
    whole = _epochs(one_shard, config, 1, 0)[0]
    live = _epochs(one_shard_less_two, config, 1, 0)[0]
    assert len(live) == RECORDS - len(FORGOTTEN) and set(live) < set(whole)
    for epoch in range(EPOCHS):
        parts = [_epochs(one_shard_less_two, config, 2, r)[epoch] for r in range(2)]
        assert sorted(parts[0] + parts[1]) == sorted(live)


def test_one_log_line_when_sharding_by_records_none_by_files(one_shard, tmp_path, config):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0)
    with _warnings() as lines:
        training_input.make_dataset(one_shard, config=config, input_context=context,
                                    augment=False)
    assert len(lines) == 1
    assert lines[0].startswith("Split 'train' has 1 shard files for 2 input pipelines: "
                               "sharding by records instead of files")
    two_shards = str(tmp_path)
    write_synthetic_snapshot(two_shards, counts={"train": 6}, image_size=16, num_shards=2)
    with _warnings() as lines:
        dataset = training_input.make_dataset(two_shards, config=config,
                                              input_context=context, augment=False)
    assert lines == []
    assert dataset.cardinality().numpy() == tf.data.UNKNOWN_CARDINALITY  # by files: unknown


def test_fresh_records_of_a_mix_are_split_by_records_too(tmp_path, config):
    """`snapshots="mix:W"` with one shard per snapshot: the fresh snapshot's records are
    split across replicas (each epoch ends when a replica's fresh share is used up)."""
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 5}, image_size=16, num_shards=1, seed=1,
                             run_id="r1")
    write_synthetic_snapshot(root, counts={"train": RECORDS}, image_size=16, num_shards=1,
                             seed=2, run_id="r2")
    fresh = set(_fresh_digests(root, config))
    parts = []
    for replica in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=replica)
        dataset = training_input.make_dataset(
            root, batch_size=1, config=config, seed=SEED, input_context=context,
            snapshots="mix:0.5", augment=False, normalize=False)
        digests = [hashlib.sha256(images.numpy()[0].tobytes()).hexdigest()
                   for images, _ in dataset]
        parts.append([d for d in digests if d in fresh])
    assert sorted(parts[0] + parts[1]) == sorted(fresh)
    assert len(parts[0]) == len(range(0, RECORDS, 2))


def _fresh_digests(root, config) -> list:
    dataset = training_input.make_dataset(root, batch_size=2 * RECORDS, config=config,
                                          snapshots="latest", augment=False,
                                          normalize=False, drop_remainder=False)
    return [hashlib.sha256(image.tobytes()).hexdigest()
            for images, _ in dataset for image in images.numpy()]
