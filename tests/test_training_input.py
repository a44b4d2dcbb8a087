"""The training reader: snapshot selection, reproducible batches, resume, sharding, boxes, fit."""
from __future__ import annotations

import glob
import hashlib
import io
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from configs.schema import ConfigError, load_config
from pipelines import training_input
from tests.fake_snapshot import write_synthetic_snapshot
from tests.tiers import shared_fixture
from transforms import codec
from transforms.online.augment import build_batch_augmenter
from transforms.online.seeds import step_seed

NUM_CLASSES = 4
TRAIN_IMAGES = 32
BATCH = 4
SEED = 3
# XLA compiles once per augmenter setting (seconds); the reader's logic is the same either way,
# so these tests read uncompiled, and test_xla_batches_are_reproducible covers the compiled
# default.
EAGER = dict(jit_compile=False)


@shared_fixture(scope="module")
def config():
    return load_config(overrides=["online.image_size=16"])


@shared_fixture(scope="module")
def output_dir(tmp_path_factory):
    """4 classes in 4 shards; image i has label i % 4 and lies in shard i % 4, so every shard
    holds one class and the labels a replica sees tell which shards it read."""
    root = str(tmp_path_factory.mktemp("classify"))
    write_synthetic_snapshot(root, counts={"train": TRAIN_IMAGES, "validation": 6},
                             image_size=24, num_classes=NUM_CLASSES, num_shards=4, seed=1)
    return root


@shared_fixture(scope="module")
def box_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("boxes"))
    write_synthetic_snapshot(root, counts={"train": 8}, image_size=24, num_classes=3,
                             num_shards=2, max_boxes=3, seed=2)
    return root


def _batches(dataset) -> list:
    return [tf.nest.map_structure(lambda t: t.numpy(), batch) for batch in dataset]


def _assert_same(first, second):
    tf.nest.assert_same_structure(first, second)
    for a, b in zip(tf.nest.flatten(first), tf.nest.flatten(second)):
        np.testing.assert_array_equal(a, b)


def _differs(first, second) -> bool:
    return any(a.shape != b.shape or not np.array_equal(a, b)
               for a, b in zip(tf.nest.flatten(first), tf.nest.flatten(second)))


@shared_fixture(scope="module")
def epoch0(output_dir, config):
    """The augmented epoch 0 of a continuing run."""
    return _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                seed=SEED, epoch=0, **EAGER))


@shared_fixture(scope="module")
def epoch1(output_dir, config):
    return _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                seed=SEED, epoch=1, **EAGER))


# ----------------------------------------------------------------------------- snapshots

def test_latest_names_the_snapshot_that_is_read(tmp_path):
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 4}, run_id="run1", num_shards=1)
    write_synthetic_snapshot(root, counts={"train": 6}, run_id="run2", num_shards=1)
    tf.io.gfile.GFile(f"{root}/LATEST", "w").write("run1\n")
    assert training_input.select_snapshots(root) == [
        training_input.Snapshot("run1", f"{root}/snapshots/run1")]


def test_uncommitted_snapshot_is_ignored(tmp_path, config):
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 4}, num_classes=2, run_id="run1",
                             num_shards=1)
    write_synthetic_snapshot(root, counts={"train": 12}, num_classes=3, run_id="run2",
                             num_shards=1, commit=False)
    dataset = training_input.make_dataset(root, batch_size=1, config=config, augment=False)
    batches = _batches(dataset)
    assert len(batches) == 4
    assert batches[0][1].shape == (1, 2)


def test_latest_naming_an_uncommitted_snapshot_falls_back_to_a_committed_one(tmp_path):
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 4}, run_id="run1", num_shards=1)
    write_synthetic_snapshot(root, counts={"train": 4}, run_id="run2", num_shards=1,
                             commit=False)
    tf.io.gfile.GFile(f"{root}/LATEST", "w").write("run2\n")
    assert [s.run_id for s in training_input.select_snapshots(root)] == ["run1"]


def test_no_committed_snapshot_is_an_error(tmp_path):
    write_synthetic_snapshot(str(tmp_path), counts={"train": 4}, num_shards=1, commit=False)
    with pytest.raises(FileNotFoundError, match="No committed snapshot"):
        training_input.select_snapshots(str(tmp_path))


def test_unknown_snapshots_choice_names_the_allowed_values(output_dir):
    with pytest.raises(ValueError, match=r"Expected one of \('latest', 'all'.*Received: "
                                         r"snapshots='newest'"):
        training_input.select_snapshots(output_dir, "newest")


def test_incomplete_shard_series_is_an_error(tmp_path):
    root = str(tmp_path)
    snapshot = write_synthetic_snapshot(root, counts={"train": 6}, num_shards=3)
    tf.io.gfile.remove(f"{snapshot}/train/images-train.tfrecord-00001-of-00003")
    with pytest.raises(ValueError, match=r"Incomplete shard series.*indices \[0, 2\]"):
        training_input.list_shards(training_input.Snapshot("synthetic", snapshot), "train")


def test_gzip_shards_are_read(tmp_path, config):
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 5}, num_shards=2, compression="gzip")
    files = training_input.list_shards(training_input.select_snapshots(root)[0], "train")
    assert [f.rsplit("/", 1)[-1] for f in files] == [
        "images-train.tfrecord-00000-of-00002.gz", "images-train.tfrecord-00001-of-00002.gz"]
    batches = _batches(training_input.make_dataset(root, batch_size=5, config=config,
                                                   augment=False))
    assert batches[0][0].shape == (5, 16, 16, 3)


def test_count_examples_reads_by_split(output_dir):
    assert training_input.count_examples(output_dir, "train") == TRAIN_IMAGES
    assert training_input.count_examples(output_dir, "validation") == 6


def test_unknown_split_is_an_error(output_dir, config):
    with pytest.raises(ConfigError, match="Received: split='dev'"):
        training_input.make_dataset(output_dir, split="dev", config=config)


# ----------------------------------------------------------------------------- output

def test_shapes_and_dtypes(epoch0):
    assert len(epoch0) == TRAIN_IMAGES // BATCH
    images, labels = epoch0[0]
    assert images.shape == (BATCH, 16, 16, 3) and images.dtype == np.float32
    assert labels.shape == (BATCH, NUM_CLASSES) and labels.dtype == np.float32


def test_labels_sum_to_one_and_some_are_mixed(epoch0):
    labels = np.concatenate([batch[1] for batch in epoch0])
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, atol=1e-6)
    assert np.any((labels > 0) & (labels < 1))  # mixup/cutmix did mix


def test_validation_keeps_the_last_partial_batch_and_is_not_augmented(output_dir, config):
    batches = _batches(training_input.make_dataset(output_dir, "validation", batch_size=4,
                                                   config=config))
    assert [b[0].shape[0] for b in batches] == [4, 2]
    labels = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(labels, np.eye(NUM_CLASSES)[labels.argmax(axis=1)])


def test_normalization_uses_the_snapshot_pixel_stats(output_dir, config):
    kwargs = dict(split="validation", batch_size=6, config=config)
    raw = _batches(training_input.make_dataset(output_dir, normalize=False, **kwargs))[0][0]
    normalized = _batches(training_input.make_dataset(output_dir, **kwargs))[0][0]
    stats = json.loads(tf.io.gfile.GFile(
        f"{output_dir}/snapshots/synthetic/stats.json").read())["pixel_stats"]
    expected = (raw - np.float32(stats["mean"])) / np.float32(stats["std"])
    np.testing.assert_allclose(normalized, expected, rtol=1e-6, atol=1e-6)
    assert raw.min() >= 0.0 and raw.max() <= 1.0


def _bilinear(pixels: np.ndarray, size: int) -> np.ndarray:
    """The documented resize by hand: bilinear, half-pixel centres, no antialiasing
    (`tf.image.resize`'s default): source = (out + 0.5) * in / out - 0.5, edges clamped."""
    def taps(length):
        source = np.clip((np.arange(size) + 0.5) * length / size - 0.5, 0, length - 1)
        low = np.floor(source).astype(int)
        return low, np.minimum(low + 1, length - 1), source - low
    top, bottom, dy = taps(pixels.shape[0])
    left, right, dx = taps(pixels.shape[1])
    rows = pixels[top] * (1 - dy)[:, None, None] + pixels[bottom] * dy[:, None, None]
    return rows[:, left] * (1 - dx)[None, :, None] + rows[:, right] * dx[None, :, None]


def test_unaugmented_pixels_are_the_decoded_jpeg_bilinearly_resized(output_dir, config):
    """Oracle outside the reader: PIL decodes each stored JPEG (24 px), the resize above
    brings it to 16 px, /255. Every batch image matches one record (same label) to within
    the two JPEG decoders' rounding (TF's default IDCT is libjpeg's fast integer one, PIL's the
    accurate one: up to 4 levels apart on these images, about 1 on average)."""
    expected = []
    for shard in sorted(glob.glob(f"{output_dir}/snapshots/synthetic/validation/*")):
        for serialized in tf.data.TFRecordDataset(shard).as_numpy_iterator():
            feature = tf.train.Example.FromString(serialized).features.feature
            pixels = np.asarray(Image.open(io.BytesIO(
                feature["image/encoded"].bytes_list.value[0])).convert("RGB"), np.float64)
            assert pixels.shape == (24, 24, 3)
            expected.append((_bilinear(pixels, 16) / 255.0,
                             feature["image/class/label"].int64_list.value[0]))
    batches = _batches(training_input.make_dataset(output_dir, "validation", batch_size=6,
                                                   config=config, normalize=False))
    (images, labels), = batches
    assert len(expected) == len(images) == 6
    unmatched = list(range(len(expected)))
    for image, label in zip(images, labels.argmax(axis=1)):
        errors = [np.abs(image - expected[i][0]).mean() for i in unmatched]
        best = unmatched.pop(int(np.argmin(errors)))
        assert min(errors) < 1.5 / 255.0 and expected[best][1] == label
        assert np.abs(image - expected[best][0]).max() < 6.0 / 255.0


def _raw_records_interleaved(files):
    """Records of the shards in the reader's unshuffled order: one from each shard in turn."""
    per_file = [[codec.parse_example(r) for r in tf.data.TFRecordDataset(f)] for f in files]
    return [records[i] for i in range(max(map(len, per_file)))
            for records in per_file if i < len(records)]


def test_boxes_come_out_padded_with_count_in_ymin_xmin_ymax_xmax(box_dir, config):
    dataset = training_input.make_dataset(box_dir, batch_size=8, config=config, augment=False,
                                          shuffle=False, normalize=False, max_boxes=4)
    batch = _batches(dataset)[0]
    assert sorted(batch) == ["box_labels", "boxes", "images", "labels", "matrix", "num_boxes"]
    files = training_input.list_shards(training_input.select_snapshots(box_dir)[0], "train")
    for index, record in enumerate(_raw_records_interleaved(files)):
        count = len(record[codec.BBOX_XMIN])
        expected = np.zeros((4, 4), np.float32)
        expected[:count] = np.stack([record[codec.BBOX_YMIN], record[codec.BBOX_XMIN],
                                     record[codec.BBOX_YMAX], record[codec.BBOX_XMAX]], axis=1)
        labels = np.full(4, -1, np.int32)
        labels[:count] = record[codec.BOX_CLASS_LABEL]
        assert batch["num_boxes"][index] == count
        np.testing.assert_array_equal(batch["boxes"][index], expected)
        np.testing.assert_array_equal(batch["box_labels"][index], labels)
    np.testing.assert_array_equal(batch["matrix"], np.broadcast_to(np.eye(3), (8, 3, 3)))
    assert batch["boxes"].dtype == np.float32 and batch["box_labels"].dtype == np.int32


@shared_fixture(scope="module")
def box_epoch(box_dir, config):
    """The augmented epoch of the box snapshot (batches of 4, seed SEED, unnormalized, up to 3
    boxes an image), as training reads it (the default: resize folded into the warp)."""
    return _batches(training_input.make_dataset(box_dir, batch_size=4, config=config, seed=SEED,
                                                normalize=False, max_boxes=3, **EAGER))


def test_augmented_boxes_keep_the_format(box_epoch):
    for batch in box_epoch:
        assert batch["boxes"].shape == (4, 6, 4)  # mix on: own and partner boxes
        for boxes, labels, count in zip(batch["boxes"], batch["box_labels"],
                                        batch["num_boxes"]):
            valid = boxes[:count]
            assert np.all((valid >= 0) & (valid <= 1))
            assert np.all(valid[:, 0] <= valid[:, 2]) and np.all(valid[:, 1] <= valid[:, 3])
            assert np.all(labels[:count] >= 0)
            np.testing.assert_array_equal(boxes[count:], 0)
            np.testing.assert_array_equal(labels[count:], -1)


def test_more_boxes_than_max_boxes_is_an_error(box_dir, config):
    dataset = training_input.make_dataset(box_dir, batch_size=8, config=config, augment=False,
                                          max_boxes=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_boxes=1"):
        _batches(dataset)


# ----------------------------------------------------------------------------- reproducibility

@shared_fixture(scope="module")
def epoch0_again(output_dir, config):
    """Epoch 0 of the same seed read again, through a `ReaderSpec` and `read_dataset`."""
    spec = training_input.ReaderSpec.from_config(config, batch_size=BATCH, seed=SEED, epoch=0,
                                                 **EAGER)
    return _batches(training_input.read_dataset(output_dir, spec))


def test_same_seed_epoch_step_gives_identical_batches(epoch0, epoch0_again):
    assert len(epoch0_again) == len(epoch0)
    for first, second in zip(epoch0, epoch0_again):
        _assert_same(first, second)


def test_xla_batches_are_reproducible_and_match_the_uncompiled_ops(output_dir, config, epoch0):
    def compiled():
        return _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                    seed=SEED, epoch=0).take(2))
    first, second = compiled(), compiled()
    for a, b, eager in zip(first, second, epoch0):
        _assert_same(a, b)
        np.testing.assert_allclose(a[0], eager[0], atol=1e-4)
        np.testing.assert_allclose(a[1], eager[1], atol=1e-6)


def test_datasets_with_the_same_settings_share_one_traced_augmentation(output_dir, config):
    """A dataset per epoch (or per seed) re-traces nothing: the augmentation is traced once
    per setting and batch signature in the process (when a dataset is built); another setting
    gets its own augmenter."""
    def spec(**kwargs):
        return training_input.ReaderSpec.from_config(config, batch_size=BATCH, **EAGER,
                                                     **kwargs)

    first = training_input.plan_reading(output_dir, spec(seed=1, epoch=0)).augmenter
    training_input.read_dataset(output_dir, spec(seed=1, epoch=0))
    traces = first.traced.experimental_get_tracing_count()
    assert traces >= 1
    again = training_input.read_dataset(output_dir, spec(seed=2, epoch=3))
    assert training_input.plan_reading(output_dir, spec(seed=2, epoch=3)).augmenter is first
    assert first.traced.experimental_get_tracing_count() == traces
    assert next(iter(again))[0].shape == (BATCH, 16, 16, 3)
    other = training_input.plan_reading(output_dir, spec(seed=1, resample_once=False))
    assert other.augmenter is not first


def test_read_dataset_with_a_spec_equals_make_dataset(epoch0, epoch0_again):
    """`epoch0` comes from `make_dataset`, `epoch0_again` from the spec it stands for."""
    assert [len(b) for b in epoch0_again] == [len(b) for b in epoch0]
    for expected, actual in zip(epoch0, epoch0_again):
        _assert_same(expected, actual)


def test_different_epoch_gives_different_batches(epoch0, epoch1):
    assert _differs(epoch0[0], epoch1[0])


def test_different_epoch_reads_a_different_order(output_dir, config):
    def label_order(epoch):
        dataset = training_input.make_dataset(output_dir, batch_size=TRAIN_IMAGES, config=config,
                                              seed=SEED, epoch=epoch, augment=False)
        return _batches(dataset)[0][1].argmax(axis=1).tolist()
    first, second = label_order(0), label_order(1)
    assert sorted(first) == sorted(second) and first != second


def test_different_seed_gives_different_batches(output_dir, config, epoch0):
    other = _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                 seed=SEED + 1, epoch=0, **EAGER).take(1))
    assert _differs(epoch0[0], other[0])


@shared_fixture(scope="module")
def plain_epoch1(output_dir, config):
    """Epoch 1 of seed SEED in the reader's order, neither augmented nor normalized."""
    return _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                seed=SEED, epoch=1, augment=False,
                                                normalize=False))


def test_augmentation_seed_is_seed_epoch_step_replica(output_dir, config, plain_epoch1):
    """Batch k of epoch 1 is the unaugmented batch k augmented with step_seed(SEED, 1, k, 0)
    (resize, then warp: `resample_once=False`; the default folds the resize into the warp)."""
    plain = plain_epoch1
    epoch1 = _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                  seed=SEED, epoch=1, resample_once=False,
                                                  **EAGER))
    augmenter = build_batch_augmenter(config.online, NUM_CLASSES, **EAGER)
    stats = json.loads(tf.io.gfile.GFile(
        f"{output_dir}/snapshots/synthetic/stats.json").read())["pixel_stats"]
    mean, std = np.float32(stats["mean"]), np.float32(stats["std"])
    for step in (0, 5):
        images, labels = plain[step]
        # the documented derivation, applied by hand (not through the reader's augment_batch)
        out = augmenter({"images": images, "labels": labels}, step_seed(SEED, 1, step, 0))
        np.testing.assert_allclose((out["images"].numpy() - mean) / std, epoch1[step][0],
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["labels"].numpy(), epoch1[step][1])


def test_resample_once_equals_resize_then_warp_when_the_size_is_kept(tmp_path, config):
    """Stored size == image_size: the folded resize is the identity, so the default one-pass
    path and resize-then-warp agree to float rounding (geometry, colour, mix, labels)."""
    root = str(tmp_path)
    write_synthetic_snapshot(root, counts={"train": 12}, image_size=16,
                             num_classes=NUM_CLASSES, num_shards=2, seed=4)
    kwargs = dict(batch_size=BATCH, config=config, seed=SEED, normalize=False, **EAGER)
    once = _batches(training_input.make_dataset(root, **kwargs))
    twice = _batches(training_input.make_dataset(root, resample_once=False, **kwargs))
    assert len(once) == len(twice) == 3
    for a, b in zip(once, twice):
        np.testing.assert_allclose(a[0], b[0], atol=1e-5)
        np.testing.assert_array_equal(a[1], b[1])


def test_resample_once_moves_boxes_like_resize_then_warp(box_dir, config, box_epoch):
    """24 px sources to 16 px: same parameters, matrix, labels and boxes; the pixels differ
    only by resampling once instead of twice."""
    twice = _batches(training_input.make_dataset(box_dir, batch_size=4, config=config,
                                                 seed=SEED, normalize=False, max_boxes=3,
                                                 resample_once=False, **EAGER))
    assert len(box_epoch) == len(twice) == 2
    for a, b in zip(box_epoch, twice):
        for key in ("labels", "boxes", "box_labels", "num_boxes", "matrix"):
            np.testing.assert_array_equal(a[key], b[key])
        assert a["images"].shape == b["images"].shape == (4, 16, 16, 3)
        assert np.abs(a["images"] - b["images"]).mean() < 0.02


# Frozen from the reader at SEED (epoch 0, uncompiled, CPU): per-image mean and std of the
# normalized batch, and the label rows. Any change to the seeds, the ops, their order, the
# mixing or the reading order moves these; refreeze only for a deliberate change of output.
GOLDEN = {
    0: ([-0.32739, -0.43367, -0.28322, 0.22393], [1.12780, 0.67366, 0.95471, 1.30977],
        [[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]),
    5: ([0.20888, 0.30501, 0.30345, 0.24523], [1.05836, 0.77250, 1.07322, 0.90131],
        [[0, 0, 0.55859, 0.44141], [0.44141, 0, 0, 0.55859], [0, 0, 1, 0],
         [0.55859, 0, 0.44141, 0]]),
}


@pytest.mark.parametrize("step", sorted(GOLDEN))
def test_a_fixed_seed_gives_the_frozen_golden_batch(epoch0, step):
    means, stds, labels = GOLDEN[step]
    images, got_labels = epoch0[step]
    np.testing.assert_allclose(images.mean(axis=(1, 2, 3)), means, atol=1e-3)
    np.testing.assert_allclose(images.std(axis=(1, 2, 3)), stds, atol=1e-3)
    np.testing.assert_allclose(got_labels, labels, atol=1e-4)


def test_different_step_and_replica_get_different_augmentation(config, plain_epoch1):
    batch = {"images": plain_epoch1[0][0], "labels": plain_epoch1[0][1]}
    augmenter = build_batch_augmenter(config.online, NUM_CLASSES, **EAGER)

    def augmented(step, replica):
        out = training_input.augment_batch(augmenter, batch, SEED, 0, step, replica)
        return out["images"].numpy()
    base = augmented(0, 0)
    np.testing.assert_array_equal(base, augmented(0, 0))
    assert not np.array_equal(base, augmented(1, 0))
    assert not np.array_equal(base, augmented(0, 1))


def test_restart_at_start_step_equals_the_continuing_run(output_dir, config, epoch0):
    restarted = _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                     seed=SEED, epoch=0, start_step=5, **EAGER))
    assert len(restarted) == len(epoch0) - 5
    for continuing, resumed in zip(epoch0[5:], restarted):
        _assert_same(continuing, resumed)


def test_restored_iterator_checkpoint_continues_the_run(output_dir, config, epoch0, tmp_path):
    def fresh_iterator():
        return iter(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                seed=SEED, epoch=0, **EAGER))
    iterator = fresh_iterator()
    for _ in range(3):
        next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "data"))
    restored = fresh_iterator()
    tf.train.Checkpoint(iterator=restored).restore(path).assert_consumed()
    _assert_same(tf.nest.map_structure(lambda t: t.numpy(), next(restored)), epoch0[3])


def _write_snapshot_by_hand(root, records, class_names=("class_0", "class_1", "class_2")):
    """A committed one-shard snapshot holding exactly `records` (serialized Examples)."""
    snapshot = f"{root}/snapshots/manual"
    tf.io.gfile.makedirs(f"{snapshot}/train")
    with tf.io.TFRecordWriter(f"{snapshot}/train/images-train.tfrecord-00000-of-00001") as w:
        for record in records:
            w.write(record)
    for name, text in (("classes.txt", "".join(f"{c}\n" for c in class_names)),
                       ("stats.json", json.dumps({"by_split": {"train": len(records)}})),
                       ("manifest.json", json.dumps({"files": [  # committed: lists its files
                           {"path": "train/images-train.tfrecord-00000-of-00001"},
                           {"path": "classes.txt"}, {"path": "stats.json"}]}))):
        tf.io.gfile.GFile(f"{snapshot}/{name}", "w").write(text)
    tf.io.gfile.GFile(f"{root}/LATEST", "w").write("manual")


def _good_records(tmp_path, count):
    write_synthetic_snapshot(str(tmp_path / "source"), counts={"train": count}, num_shards=1)
    shard = f"{tmp_path}/source/snapshots/synthetic/train/images-train.tfrecord-00000-of-00001"
    return [r.numpy() for r in tf.data.TFRecordDataset(shard)]


def _record(encoded, label):
    return codec.encode_example(
        encoded=encoded, image_format="jpeg", height=24, width=24, filename="x.jpg",
        sha256=hashlib.sha256(encoded).hexdigest(), label=label, label_text=f"class_{label}")


PLAIN = dict(augment=False, shuffle=False, normalize=False)


def test_skipped_steps_are_not_decoded(tmp_path, config):
    """Record 0 is not an image: starting at step 1 never decodes it, starting at 0 fails."""
    root = str(tmp_path / "out")
    broken = _record(b"\xff\xd8\xff\xe0 not really a jpeg", 0)
    _write_snapshot_by_hand(root, [broken] + _good_records(tmp_path, 3))
    resumed = _batches(training_input.make_dataset(root, batch_size=2, config=config,
                                                   start_step=1, **PLAIN))
    assert len(resumed) == 1
    with pytest.raises(tf.errors.InvalidArgumentError):
        _batches(training_input.make_dataset(root, batch_size=2, config=config, start_step=0,
                                             **PLAIN))


@pytest.mark.parametrize("max_boxes,expected", [(0, False), (2, True)])
def test_boxes_are_found_in_the_records_without_box_counts(tmp_path, config, max_boxes,
                                                           expected):
    """stats.json without `boxes`: the first records decide; empty box lists are no boxes."""
    root = str(tmp_path / "out")
    write_synthetic_snapshot(str(tmp_path / "source"), counts={"train": 2}, num_shards=1,
                             max_boxes=max_boxes)
    shard = f"{tmp_path}/source/snapshots/synthetic/train/images-train.tfrecord-00000-of-00001"
    _write_snapshot_by_hand(root, [r.numpy() for r in tf.data.TFRecordDataset(shard)])
    batch = _batches(training_input.make_dataset(root, batch_size=2, config=config,
                                                 max_boxes=2, **PLAIN))[0]
    assert isinstance(batch, dict) == expected


def test_label_outside_the_class_table_is_an_error(tmp_path, config):
    root = str(tmp_path / "out")
    good = _good_records(tmp_path, 1)[0]
    encoded = codec.parse_example(good)[codec.IMAGE_ENCODED].numpy()
    _write_snapshot_by_hand(root, [_record(encoded, 5)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside the class table of 3"):
        _batches(training_input.make_dataset(root, batch_size=1, config=config, **PLAIN))


def test_cardinality_is_known_for_one_input_pipeline(output_dir, config):
    dataset = training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                          num_epochs=3, start_step=2, augment=False)
    assert int(dataset.cardinality()) == 3 * (TRAIN_IMAGES // BATCH) - 2
    validation = training_input.make_dataset(output_dir, "validation", batch_size=4,
                                             config=config)
    assert int(validation.cardinality()) == 2


def test_start_step_past_the_epoch_is_an_error(output_dir, config):
    with pytest.raises(ValueError, match="below the 8 batches.*Received: start_step=8"):
        training_input.make_dataset(output_dir, batch_size=BATCH, config=config, start_step=8)


def test_num_epochs_chains_the_epochs(output_dir, config, epoch0, epoch1):
    both = _batches(training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                                seed=SEED, epoch=0, num_epochs=2, **EAGER))
    assert len(both) == len(epoch0) + len(epoch1)
    for expected, actual in zip(epoch0 + epoch1, both):
        _assert_same(expected, actual)


# ----------------------------------------------------------------------------- replicas

def test_replicas_read_disjoint_files(output_dir, config):
    seen = []
    for replica in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=replica,
                                             num_replicas_in_sync=2)
        dataset = training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                              seed=SEED, input_context=context, augment=False)
        labels = np.concatenate([b[1] for b in _batches(dataset)]).argmax(axis=1)
        assert len(labels) == TRAIN_IMAGES // 2
        seen.append(set(labels.tolist()))
    # one class per shard: two classes each = two whole shards each, none shared
    assert len(seen[0]) == 2 and len(seen[1]) == 2
    assert seen[0].isdisjoint(seen[1])


# ----------------------------------------------------------------------------- training

def test_tiny_keras_model_loss_goes_down(output_dir, config):
    """model.fit on the augmented reader; the loss on the unaugmented training images drops."""
    epochs, steps = 5, TRAIN_IMAGES // BATCH
    dataset = training_input.make_dataset(output_dir, batch_size=BATCH, config=config,
                                          seed=SEED, num_epochs=epochs, **EAGER)
    plain = training_input.make_dataset(output_dir, batch_size=TRAIN_IMAGES, config=config,
                                        augment=False, shuffle=False)
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(8, 3, activation="relu",
                            kernel_initializer=keras.initializers.GlorotUniform(seed=0)),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(NUM_CLASSES, activation="softmax",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="categorical_crossentropy")
    before = model.evaluate(plain, verbose=0)
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps, shuffle=False, verbose=0)
    after = model.evaluate(plain, verbose=0)
    assert after < 0.5 * before, (before, after)
