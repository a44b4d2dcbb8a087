"""Reading across snapshots: "latest", "all", the last N, and the weighted fresh/archive mix."""
from __future__ import annotations

import pytest

from configs.schema import load_config
from pipelines import training_input
from tests.fake_snapshot import write_synthetic_snapshot
from tests.tiers import shared_fixture


@shared_fixture(scope="module")
def archive(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("snapshots"))
    write_synthetic_snapshot(root, counts={"train": 8}, image_size=16, num_shards=2, seed=1,
                             run_id="20260101T000000000000Z")
    write_synthetic_snapshot(root, counts={"train": 6}, image_size=16, num_shards=2, seed=2,
                             run_id="20260102T000000000000Z")
    return root


def _images(root, snapshots, epoch=0, seed=3):
    config = load_config(overrides=["online.image_size=16"])
    dataset = training_input.make_dataset(root, "train", batch_size=1, config=config, seed=seed,
                                          epoch=epoch, snapshots=snapshots, augment=False,
                                          normalize=False)
    return [images.numpy()[0].tobytes() for images, _ in dataset]


_READ = {}


def _images_once(root, snapshots) -> list:
    """`_images(root, snapshots)` (epoch 0, seed 3), read once per module for the tests that
    only use the records (the reproducibility check reads again with `_images`)."""
    if (root, snapshots) not in _READ:
        _READ[(root, snapshots)] = _images(root, snapshots)
    return _READ[(root, snapshots)]


@pytest.mark.parametrize("spec,expected", [
    ("latest", ["20260102T000000000000Z"]),
    ("all", ["20260101T000000000000Z", "20260102T000000000000Z"]),
    (1, ["20260102T000000000000Z"]),
    ("last:2", ["20260101T000000000000Z", "20260102T000000000000Z"]),
    ("mix:0.7", ["20260101T000000000000Z", "20260102T000000000000Z"]),
])
def test_selection(archive, spec, expected):
    assert [s.run_id for s in training_input.select_snapshots(archive, spec)] == expected


@pytest.mark.parametrize("spec", ["newest", "last:0", "mix:1.5", "mix:0", 0])
def test_unknown_selection_names_the_allowed_values(archive, spec):
    with pytest.raises(ValueError, match=r"Expected one of \('latest', 'all'"):
        training_input.select_snapshots(archive, spec)


def test_all_reads_every_record_once(archive):
    everything = _images_once(archive, "all")
    assert len(everything) == 14 == training_input.count_examples(archive, "train", "all")
    assert set(_images_once(archive, "latest")) | set(_images(archive, "last:1")) <= set(
        everything)


def test_mix_reads_each_fresh_record_once_plus_archive_draws(archive):
    fresh = set(_images_once(archive, "latest"))
    old = set(_images_once(archive, "all")) - fresh
    mixed = _images(archive, "mix:0.5")
    assert sorted(m for m in mixed if m in fresh) == sorted(fresh)  # every fresh one, once
    drawn = [m for m in mixed if m not in fresh]
    assert drawn and set(drawn) <= old  # the rest comes from the archive
    assert mixed == _images(archive, "mix:0.5")  # seeded: reproducible
    assert mixed != _images(archive, "mix:0.5", epoch=1)


def test_mix_weight_favours_fresh_data(archive):
    fresh = set(_images_once(archive, "latest"))
    heavy = _images(archive, "mix:0.9")
    light = _images(archive, "mix:0.2")
    assert len(heavy) < len(light)  # fewer archive draws before the fresh records run out
    assert sum(m in fresh for m in heavy) == sum(m in fresh for m in light) == len(fresh)
