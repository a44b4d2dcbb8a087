"""No train/serve skew: the serving model on raw bytes predicts what the model predicts on the
training reader's batches (`pipelines.training_input.make_dataset`) of the same images, also
after `tf.saved_model.save` and load.

The fixture builds a tiny committed snapshot by hand: the TFT transform (class table given as a
list), one train shard written with the record codec, stats.json whose pixel_stats are the
transform's numbers, classes.txt, manifest.json and LATEST.
"""
from __future__ import annotations

import io
import json
import os

import apache_beam as beam
import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from configs.schema import load_config
from pipelines.serving import PREDICTIONS, SERVING_INPUT, build_serving_model
from pipelines.training_input import make_dataset
from runners.demo.data import photo_like
from tests.beamutil import beam_pipeline
from tests.tiers import shared_fixture, slow_fixture
from transforms import codec
from transforms.offline import tft_analysis as ta
from transforms.offline import tft_graph as tg
from transforms.offline.image_record import ImageRecord

CLASSES = ["cat", "dog", "bird"]
IMAGE_SIZE = 16
RUN_ID = "20250101T000000000000Z"


def _image(rng, index: int) -> tuple[bytes, str, int, int, tuple]:
    """Alternating JPEG/PNG, 32-48 px; moments of pixel/255 as the job measures them."""
    height, width = int(rng.integers(32, 49)), int(rng.integers(32, 49))
    pixels = photo_like(rng, height, width, index % len(CLASSES))
    buffer = io.BytesIO()
    image_format = "jpeg" if index % 2 == 0 else "png"
    Image.fromarray(pixels).save(buffer, image_format.upper(), **(
        {"quality": 85} if image_format == "jpeg" else {}))
    encoded = buffer.getvalue()
    decoded = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"), np.float64) / 255.0
    flat = decoded.reshape(-1, 3)
    moments = tuple(flat.mean(axis=0).tolist()) + tuple((flat ** 2).mean(axis=0).tolist())
    return encoded, image_format, width, height, moments


def _write_json(path: str, data) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle)


@slow_fixture(scope="module")
def snapshot(tmp_path_factory):
    rng = np.random.default_rng(3)
    output_dir = str(tmp_path_factory.mktemp("out"))
    snapshot_dir = os.path.join(output_dir, "snapshots", RUN_ID)
    os.makedirs(os.path.join(snapshot_dir, "train"))
    records, encoded_images, examples = [], [], []
    for index in range(12):
        encoded, image_format, width, height, moments = _image(rng, index)
        label = CLASSES[index % len(CLASSES)]
        records.append(ImageRecord(
            uri=f"/data/{index}", path=f"{index}.{image_format}", file_bytes=len(encoded),
            format=image_format, width=width, height=height, moments=moments, label=label,
            label_id=CLASSES.index(label), split="train"))
        encoded_images.append(encoded)
        examples.append(codec.encode_example(
            encoded=encoded, image_format=image_format, height=height, width=width,
            filename=f"{index}.{image_format}", sha256=f"{index:064x}",
            label=CLASSES.index(label), label_text=label))
    with beam_pipeline() as pipeline:
        _ = (pipeline
             | "Accepted" >> beam.Create(records)
             | "Analyze" >> ta.AnalyzeAndWriteTransform(
                 snapshot_dir, CLASSES, IMAGE_SIZE))
    shard = os.path.join(snapshot_dir, "train", "images-train.tfrecord-00000-of-00001")
    with tf.io.TFRecordWriter(shard) as writer:
        for example in examples:
            writer.write(example)
    summary = tg.tft_summary(snapshot_dir)
    _write_json(os.path.join(snapshot_dir, "stats.json"), {
        "by_split": {"train": len(examples)}, "pixel_stats": summary["pixel_stats"],
        "boxes": {"images_with_boxes": 0, "boxes": 0}})
    with open(os.path.join(snapshot_dir, "classes.txt"), "w") as handle:
        handle.write("".join(f"{name}\n" for name in CLASSES))
    _write_json(os.path.join(snapshot_dir, "manifest.json"), {"run_id": RUN_ID, "files": [
        {"path": os.path.relpath(shard, snapshot_dir)}]})
    with open(os.path.join(output_dir, "LATEST"), "w") as handle:
        handle.write(RUN_ID + "\n")
    return {"output_dir": output_dir, "path": snapshot_dir, "encoded": encoded_images,
            "records": records}


def _tiny_model() -> keras.Model:
    return keras.Sequential([
        keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3)),
        keras.layers.Conv2D(4, 3, kernel_initializer=keras.initializers.GlorotUniform(seed=1),
                            bias_initializer=keras.initializers.Constant(0.1)),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(CLASSES),
                           kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
    ])


@shared_fixture(scope="module")
def training_batch(snapshot):
    """The 12 images as the training reader yields them (no augmentation, file order)."""
    dataset = make_dataset(snapshot["output_dir"], split="train", batch_size=12,
                           config=load_config(), augment=False, shuffle=False,
                           drop_remainder=False, with_boxes=False, image_size=IMAGE_SIZE)
    batches = list(dataset)
    assert len(batches) == 1
    images, labels = batches[0]
    return images.numpy(), labels.numpy()


@shared_fixture(scope="module")
def model():
    return _tiny_model()


def test_transform_image_equals_training_reader_image(snapshot, training_batch):
    images, labels = training_batch
    transformed = build_serving_model(_tiny_model(), snapshot["path"]).transform_layer(
        {codec.IMAGE_ENCODED: tf.constant(snapshot["encoded"])})
    np.testing.assert_allclose(transformed[ta.IMAGE].numpy(), images, atol=1e-5)
    # Normalized (not in [0, 1]): the reader used the transform's mean/std.
    assert images.min() < -0.5
    assert np.argmax(labels, axis=1).tolist() == [r.label_id for r in snapshot["records"]]


def test_serving_predictions_equal_training_predictions(snapshot, training_batch, model):
    images, _ = training_batch
    expected = model(images, training=False).numpy()
    served = build_serving_model(model, snapshot["path"])(snapshot["encoded"])[PREDICTIONS]
    assert served.shape == (12, len(CLASSES))
    np.testing.assert_allclose(served.numpy(), expected, atol=1e-5)
    # The check can fail: the same images without normalization predict far apart.
    mean, std = tg.read_normalization(snapshot["path"])
    unnormalized = model(images * np.float32(std) + np.float32(mean), training=False).numpy()
    assert np.max(np.abs(unnormalized - expected)) > 1e-3


def test_saved_serving_model_predicts_the_same(snapshot, training_batch, model, tmp_path):
    images, _ = training_batch
    expected = model(images, training=False).numpy()
    export_dir = str(tmp_path / "serving")
    build_serving_model(model, snapshot["path"]).save(export_dir)
    loaded = tf.saved_model.load(export_dir)
    signature = loaded.signatures["serving_default"]
    assert list(signature.structured_input_signature[1]) == [SERVING_INPUT]
    served = signature(**{SERVING_INPUT: tf.constant(snapshot["encoded"])})[PREDICTIONS]
    np.testing.assert_allclose(served.numpy(), expected, atol=1e-5)


def test_serving_model_refuses_a_model_of_another_input_size(snapshot):
    wrong = keras.Sequential([keras.Input((IMAGE_SIZE * 2, IMAGE_SIZE * 2, 3)),
                              keras.layers.GlobalAveragePooling2D()])
    with pytest.raises(ValueError, match=r"takes images of shape \(32, 32, 3\).*\(16, 16, 3\)"):
        build_serving_model(wrong, snapshot["path"])
