"""`output.label_offset` shifts the stored class ids (image and box labels), the manifest
records it, and `make_dataset` takes it off again unless asked to keep it. The same run writes
gzip shards (no DALI index and no TFDS files for them) from two label CSVs of which only one has
a `source` column (every record still gets `meta/source`)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from configs.schema import ConfigError, load_config
from pipelines.training_input import make_dataset
from tests.conftest import FOLDER_IMAGES
from tests.jobutil import read_records, run_job
from tests.tiers import slow_fixture
from transforms import codec
from transforms.snapshot_layout import DALI_INDEX_DIR

CLASSES = ["cat", "dog"]


@slow_fixture(scope="module")
def offset_run(tmp_path_factory):
    from tests.conftest import write_folder_images
    base = tmp_path_factory.mktemp("label_offset")
    root = write_folder_images(base / "images")
    cats = sorted(p for p in FOLDER_IMAGES if p.startswith("cat/"))
    dogs = sorted(p for p in FOLDER_IMAGES if p.startswith("dog/"))
    (base / "cats.csv").write_text("path,label,split,source\n" + "".join(
        f"{p},cat,train,cam{i}\n" for i, p in enumerate(cats)))
    (base / "dogs.csv").write_text("path,label,split\n" + "".join(f"{p},dog,train\n"
                                                                  for p in dogs))
    (base / "boxes.csv").write_text(f"path,xmin,ymin,xmax,ymax,label\n{dogs[0]},1,2,60,50,cat\n"
                                    f"{dogs[0]},10,20,90,80,dog\n")
    (base / "classes.txt").write_text("".join(f"{name}\n" for name in CLASSES))
    out = base / "out"
    snapshot = run_job(root, out, labels=[base / "cats.csv", base / "dogs.csv"],
                       classes=base / "classes.txt", boxes=[base / "boxes.csv"],
                       sets=["output.label_offset=1", "output.compression=gzip"])
    return out, snapshot


def test_stored_ids_carry_the_offset(offset_run):
    _, snapshot = offset_run
    records = read_records(snapshot, compression="GZIP")
    assert len(records) == len(FOLDER_IMAGES)
    boxed = 0
    for record in records:
        text = record[codec.CLASS_TEXT].numpy().decode()
        assert int(record[codec.CLASS_LABEL]) == CLASSES.index(text) + 1
        box_labels = tf.sparse.to_dense(record[codec.BOX_CLASS_LABEL]).numpy().tolist()
        box_texts = tf.sparse.to_dense(record[codec.BOX_CLASS_TEXT]).numpy().tolist()
        assert box_labels == [CLASSES.index(t.decode()) + 1 for t in box_texts]
        boxed += bool(box_labels)
    assert boxed == 1
    manifest = json.load(open(os.path.join(snapshot.path, "manifest.json")))
    assert manifest["label_offset"] == 1 and manifest["config"]["output"]["label_offset"] == 1


def test_every_record_has_the_meta_column_and_gzip_gets_no_dali_or_tfds_files(offset_run):
    _, snapshot = offset_run
    spec = codec.feature_spec(meta_columns=("source",))
    sources = {}
    dataset = tf.data.TFRecordDataset(
        [os.path.join(snapshot.path, e["path"]) for e in json.load(open(os.path.join(
            snapshot.path, "manifest.json")))["files"] if ".tfrecord-" in e["path"]],
        compression_type="GZIP")
    for serialized in dataset:
        example = tf.train.Example.FromString(serialized.numpy())
        assert "meta/source" in example.features.feature  # no default needed to parse
        parsed = tf.io.parse_single_example(serialized, spec)
        sources[parsed[codec.IMAGE_FILENAME].numpy().decode()] = \
            parsed["meta/source"].numpy().decode()
    assert {p: s for p, s in sources.items() if p.startswith("dog/")} == {
        p: "" for p in FOLDER_IMAGES if p.startswith("dog/")}
    assert all(s.startswith("cam") for p, s in sources.items() if p.startswith("cat/"))
    names = {name for _, folders, files in os.walk(snapshot.path) for name in folders + files}
    assert DALI_INDEX_DIR not in names
    assert not names & {"dataset_info.json", "features.json", "image.class.label.labels.txt"}


def test_make_dataset_takes_the_offset_off_unless_kept(offset_run):
    out, _ = offset_run
    plain = dict(batch_size=len(FOLDER_IMAGES), augment=False, shuffle=False, normalize=False,
                 image_size=32, with_boxes=True)
    batch = next(iter(make_dataset(str(out), **plain)))
    assert batch["labels"].shape == (len(FOLDER_IMAGES), len(CLASSES))
    kept = next(iter(make_dataset(str(out), keep_label_offset=True, **plain)))
    assert kept["labels"].shape == (len(FOLDER_IMAGES), len(CLASSES) + 1)
    ids = np.argmax(batch["labels"], axis=1)
    np.testing.assert_array_equal(np.argmax(kept["labels"], axis=1), ids + 1)
    assert sorted(ids.tolist()) == [0, 0, 0, 1, 1, 1]
    row = int(np.argmax(batch["num_boxes"]))
    assert batch["box_labels"][row, :2].numpy().tolist() == [0, 1]
    assert kept["box_labels"][row, :2].numpy().tolist() == [1, 2]


def test_label_offset_config_is_checked():
    assert load_config(None, ["output.label_offset=1"]).output.label_offset == 1
    with pytest.raises(ConfigError, match="output.label_offset"):
        load_config(None, ["output.label_offset=-1"])



def test_snapshots_with_different_offsets_are_not_read_together(tmp_path):
    from tests.fake_snapshot import write_synthetic_snapshot
    out = str(tmp_path / "out")
    write_synthetic_snapshot(out, counts={"train": 4}, num_shards=1, run_id="a")
    newer = write_synthetic_snapshot(out, counts={"train": 4}, num_shards=1, run_id="b")
    read_all = dict(snapshots="all", batch_size=8, augment=False, shuffle=False,
                    normalize=False, image_size=32)
    assert next(iter(make_dataset(out, **read_all)))[1].shape == (8, 3)  # no offset: read
    manifest_path = os.path.join(newer, "manifest.json")
    manifest = json.load(open(manifest_path))
    with open(manifest_path, "w") as handle:
        json.dump(dict(manifest, label_offset=1), handle)
    with pytest.raises(ValueError, match="different label offsets"):
        make_dataset(out, **read_all)
