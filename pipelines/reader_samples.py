"""The training reader's per-sample and per-batch steps: parse + decode -> batch -> output.

* `parse_sample`: one serialized record -> labels (one-hot), the decoded image, and the boxes
  padded to `max_boxes` with their count. No randomness: the augmentation comes per batch.
  The image is `transforms.decode.decode_for_model` (DCT-scaled decode, resize to image_size,
  [0, 1]); or, when the batch warp does the resize (`to_canvas`), `decode_scaled` without a
  resize, at most `canvas_size`.
  Upright: the record's `image/orientation` is applied (read from the bytes when the record
  predates the key), unless `exif_orientation` is False (`decode.exif_orientation`).
* `batch_samples`: `batch`, or `padded_batch` onto one canvas for the decoded images.
* `select_output`: normalizes (after augmentation: the ops work on [0, 1]) and picks the
  output structure, `(images, labels)` or the boxes dict.
"""
from __future__ import annotations

import tensorflow as tf

from transforms import codec
from transforms.decode import decode_for_model, decode_scaled
from transforms.orientation import read_orientation

__all__ = ["canvas_size", "decode_for_canvas", "parse_sample", "batch_samples",
           "select_output"]


def canvas_size(image_size: tuple[int, int]) -> tuple[int, int]:
    """Canvas for decoded images when the warp does the resize: twice the output per side. The
    DCT-scaled decode keeps the short side in [target, 2 * target) for JPEGs, so square to 4:3
    photos fit; see `decode_for_canvas` for the rest."""
    return 2 * image_size[0], 2 * image_size[1]


def decode_for_canvas(encoded: tf.Tensor, height: tf.Tensor, width: tf.Tensor,
                      image_size: tuple[int, int], orientation=None
                      ) -> tuple[tf.Tensor, tf.Tensor]:
    """(uint8 [h, w, 3] decoded image, int32 [2] its size), at most the canvas size.

    Same decode as `decode_for_model` (shared decoder, same DCT scale) but no resize: batches
    are padded to the canvas (`padded_batch`, the image at the top-left) and the batch warp
    resamples straight from them to image_size. An image larger than the canvas after the DCT
    scale (very large or elongated) is first resized to fit, aspect kept, rounded to 8 bits.
    Upright (`orientation` as in `transforms.decode`); the canvas fit uses the turned size.
    """
    canvas = canvas_size(image_size)
    image = decode_scaled(encoded, image_size, (height, width), orientation)
    shape = tf.shape(image)

    def fit():
        resized = tf.image.resize(image, canvas, preserve_aspect_ratio=True)
        return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)

    fits = (shape[0] <= canvas[0]) & (shape[1] <= canvas[1])
    image = tf.cond(fits, lambda: image, fit)
    image.set_shape([None, None, 3])
    return image, tf.shape(image)[:2]


def _one_hot_labels(parsed: dict, num_classes: int) -> tf.Tensor:
    label = parsed[codec.CLASS_LABEL]
    in_table = tf.debugging.assert_equal(
        (label >= 0) & (label < num_classes), True,
        message=f"A record's class label is outside the class table of {num_classes} classes "
                f"(an unlabeled record, or num_classes too small)")
    with tf.control_dependencies([in_table]):
        return tf.one_hot(label, num_classes, dtype=tf.float32)


def _padded_boxes(parsed: dict, max_boxes: int) -> dict:
    """boxes [max_boxes, 4] (ymin, xmin, ymax, xmax), box_labels [max_boxes] (padding -1) and
    num_boxes; more than max_boxes boxes fails with an error naming max_boxes."""
    boxes = tf.stack([parsed[codec.BBOX_YMIN], parsed[codec.BBOX_XMIN],
                      parsed[codec.BBOX_YMAX], parsed[codec.BBOX_XMAX]], axis=-1)
    count = tf.shape(boxes)[0]
    check = tf.debugging.assert_less_equal(
        count, max_boxes,
        message=f"An image has more boxes than max_boxes={max_boxes}; raise max_boxes")
    with tf.control_dependencies([check]):
        padding = max_boxes - count
    padded = {
        "boxes": tf.pad(boxes, [[0, padding], [0, 0]]),
        "box_labels": tf.pad(tf.cast(parsed[codec.BOX_CLASS_LABEL], tf.int32),
                             [[0, padding]], constant_values=-1),
        "num_boxes": tf.cast(count, tf.int32),
    }
    padded["boxes"].set_shape([max_boxes, 4])
    padded["box_labels"].set_shape([max_boxes])
    return padded


def _record_orientation(parsed: dict, exif_orientation: bool, recorded: bool):
    """What to turn the record's image by: 1 (as stored) when `exif_orientation` is off, else
    its `image/orientation`, or the bytes' when the record predates that key (parsed as 0).
    `recorded`: every record carries the key (the snapshots' manifests say so), so no reader
    of the bytes is built."""
    if not exif_orientation:
        return 1
    stored = tf.cast(parsed[codec.IMAGE_ORIENTATION], tf.int32)
    if recorded:
        return stored
    return tf.cond(stored > 0, lambda: stored,
                   lambda: read_orientation(parsed[codec.IMAGE_ENCODED]))


def parse_sample(serialized: tf.Tensor, *, image_size: tuple[int, int], num_classes: int,
                 with_boxes: bool, max_boxes: int, to_canvas: bool = False,
                 label_offset: int = 0, exif_orientation: bool = True,
                 orientation_recorded: bool = False) -> dict:
    """One record -> {labels, images | (source, source_size), [boxes, box_labels, num_boxes]}.
    `label_offset` is taken off the stored class ids (the snapshot's `output.label_offset`);
    `exif_orientation`: decode upright; `orientation_recorded`: every record carries
    `image/orientation` (see `_record_orientation`)."""
    parsed = codec.parse_example(serialized, with_boxes=with_boxes, label_offset=label_offset)
    sample = {"labels": _one_hot_labels(parsed, num_classes)}
    encoded = parsed[codec.IMAGE_ENCODED]
    height, width = parsed[codec.IMAGE_HEIGHT], parsed[codec.IMAGE_WIDTH]
    orientation = _record_orientation(parsed, exif_orientation, orientation_recorded)
    if to_canvas:
        sample["source"], sample["source_size"] = decode_for_canvas(
            encoded, height, width, image_size, orientation)
    else:
        # Box coordinates are normalized, so the resize leaves them unchanged.
        sample["images"] = decode_for_model(encoded, image_size, (height, width), orientation)
    if with_boxes:
        sample.update(_padded_boxes(parsed, max_boxes))
    return sample


def batch_samples(samples: tf.data.Dataset, batch_size: int, drop_remainder: bool,
                  image_size: tuple[int, int], to_canvas: bool) -> tf.data.Dataset:
    """Batches of samples; decoded images of any size are padded to one canvas per batch."""
    if to_canvas:
        shapes = {key: spec.shape for key, spec in samples.element_spec.items()}
        shapes["source"] = tf.TensorShape([*canvas_size(image_size), 3])
        return samples.padded_batch(batch_size, padded_shapes=shapes,
                                    drop_remainder=drop_remainder)
    return samples.batch(batch_size, drop_remainder=drop_remainder,
                         num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def select_output(batch: dict, with_boxes: bool, normalization):
    """Normalizes after augmentation (the ops work on [0, 1]) and picks the output structure."""
    images = batch["images"]
    if normalization is not None:
        mean, std = normalization
        images = (images - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)
    if not with_boxes:
        return images, batch["labels"]
    output = {"images": images}
    for key in ("labels", "boxes", "box_labels", "num_boxes"):
        output[key] = batch[key]
    output["matrix"] = batch["matrix"] if "matrix" in batch else tf.eye(
        3, batch_shape=[tf.shape(images)[0]], dtype=tf.float32)
    return output
