"""The TF Model Garden's detection input reads the shards with its defaults.

`tf-models-official` pins another TensorFlow (2.20) and imports gin, OpenCV and more on
`import official.vision`, so it is not a test dependency. The test parses every record with the
feature spec its `official/vision/dataloaders/tf_example_decoder.TfExampleDecoder` declares by
default (same keys, types and defaults; `image/source_id` required) and runs the same steps:
3-channel decode, boxes stacked as (ymin, xmin, ymax, xmax), areas from the boxes when
`image/object/area` is absent, and `dataloaders/utils.process_source_id`'s conversion of the
source id to an int64 image id.
"""
from __future__ import annotations

import tensorflow as tf

from tests.jobutil import shard_files
from transforms import codec

# TfExampleDecoder's default keys_to_features (regenerate_source_id=False, no masks).
MODEL_GARDEN_SPEC = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/height": tf.io.FixedLenFeature((), tf.int64, -1),
    "image/width": tf.io.FixedLenFeature((), tf.int64, -1),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
    "image/source_id": tf.io.FixedLenFeature((), tf.string),
}


def _decode(serialized) -> dict:
    parsed = tf.io.parse_single_example(serialized, MODEL_GARDEN_SPEC)
    parsed = {k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v
              for k, v in parsed.items()}
    boxes = tf.stack([parsed["image/object/bbox/ymin"], parsed["image/object/bbox/xmin"],
                      parsed["image/object/bbox/ymax"], parsed["image/object/bbox/xmax"]], -1)
    height = tf.cast(parsed["image/height"], tf.float32)
    width = tf.cast(parsed["image/width"], tf.float32)
    areas = (boxes[:, 3] - boxes[:, 1]) * (boxes[:, 2] - boxes[:, 0]) * height * width
    return {"image": tf.io.decode_image(parsed["image/encoded"], channels=3),
            "boxes": boxes, "classes": parsed["image/object/class/label"], "areas": areas,
            "source_id": tf.strings.to_number(parsed["image/source_id"], tf.int64),
            "height": parsed["image/height"], "width": parsed["image/width"]}


def test_every_record_decodes_with_the_model_garden_defaults(demo_snapshot):
    ids, boxed, count = set(), 0, 0
    for serialized in tf.data.TFRecordDataset(shard_files(demo_snapshot)):
        decoded = _decode(serialized)
        record = codec.parse_example(serialized)
        assert decoded["image"].shape == (int(decoded["height"]), int(decoded["width"]), 3)
        sha256 = record[codec.IMAGE_SHA256].numpy().decode()
        assert int(decoded["source_id"]) == int(sha256[:16], 16) >> 1
        assert decoded["boxes"].shape == (len(decoded["classes"]), 4)
        assert bool(tf.reduce_all(decoded["areas"] > 0))
        boxed += bool(len(decoded["classes"]))
        ids.add(int(decoded["source_id"]))
        count += 1
    assert len(ids) == count > 1  # one image id per record
    assert 0 < boxed < count      # images with and without boxes
