"""Geometry with boxes: the padding a warp exposes holds no unboxed copy of an object.

`online.geometry.fill_mode: auto` (the default) pads with `fill_value` when the batch carries
boxes and reflects otherwise; an explicit reflect, wrap or nearest with boxes is used as asked,
with one warning. The check is the one a detection user would make: a bright square on a dark
background, its box, a strong random geometry, and no bright pixel outside every moved box.
"""

import numpy as np
import pytest
import tensorflow as tf

from configs.online import GeometryConfig, MixConfig, OnlineConfig, PixelConfig
from configs.schema import load_config
from tests.logutil import captured_warnings
from transforms.online import augment
from transforms.online.geometry import warp_images
from transforms.online.seeds import step_seed

SIZE, BATCH, STEPS, CLASSES = 32, 8, 12, 2
# The geometry of the check. min_box_area 0 keeps every box with a visible part, so a
# sliver of an object pushed mostly out of the frame is not counted as unboxed.
STRONG = dict(rotation_degrees=30.0, scale=(0.7, 1.3), translate=0.15, min_box_area=0.0)
# Squares (top, left, side) in pixels; most lie near a border, where reflect copies them.
SQUARES = [(1, 1, 8), (2, 20, 10), (22, 3, 9), (21, 22, 9), (12, 12, 8), (0, 12, 6),
           (14, 0, 7), (24, 14, 8)]


def _config(**geometry) -> OnlineConfig:
    return OnlineConfig(image_size=(SIZE, SIZE),
                        geometry=GeometryConfig(**{**STRONG, **geometry}),
                        pixel=PixelConfig(enabled=False), mix=MixConfig(enabled=False))


def _objects() -> dict:
    """uint8 images (dark 25, object 230), one box per image exactly on the square's edges."""
    images = np.full((BATCH, SIZE, SIZE, 3), 25, np.uint8)
    boxes = np.zeros((BATCH, 1, 4), np.float32)
    for index, (top, left, side) in enumerate(SQUARES):
        images[index, top:top + side, left:left + side] = 230
        boxes[index, 0] = [top / SIZE, left / SIZE, (top + side) / SIZE, (left + side) / SIZE]
    return {"images": images, "labels": np.arange(BATCH) % CLASSES, "boxes": boxes,
            "box_labels": np.ones((BATCH, 1), np.int64), "num_boxes": np.ones([BATCH], np.int32)}


def _as_source(batch: dict) -> dict:
    """The reader's form: decoded images on a larger canvas, warped and resized in one pass."""
    out = dict(batch)
    canvas = np.zeros((BATCH, 2 * SIZE, 2 * SIZE, 3), np.uint8)
    canvas[:, :SIZE, :SIZE] = out.pop("images")
    out["source"], out["source_size"] = canvas, np.full((BATCH, 2), SIZE, np.int32)
    return out


def _unboxed_object_pixels(out: dict) -> np.ndarray:
    """Per sample: object pixels (brighter than half-way) whose centre is outside every box."""
    images = out["images"].numpy()
    threshold = (25 + 230) / 2 / 255
    centres = (np.arange(SIZE) + 0.5) / SIZE
    ys, xs = np.meshgrid(centres, centres, indexing="ij")
    counts = []
    for image, boxes, count in zip(images, out["boxes"].numpy(), out["num_boxes"].numpy()):
        inside = np.zeros((SIZE, SIZE), bool)
        for ymin, xmin, ymax, xmax in boxes[:count]:
            inside |= ((ys >= ymin - 1e-5) & (ys <= ymax + 1e-5)
                       & (xs >= xmin - 1e-5) & (xs <= xmax + 1e-5))
        counts.append(int(((image.max(axis=-1) > threshold) & ~inside).sum()))
    return np.array(counts)


def _run(config: OnlineConfig, source: bool) -> tuple[np.ndarray, int]:
    """Unboxed object pixels per sample over STEPS batches, and the visible object pixels."""
    augmenter = augment.build_batch_augmenter(config, CLASSES, jit_compile=False,
                                              image_size=(SIZE, SIZE) if source else None)
    batch = _as_source(_objects()) if source else _objects()
    unboxed, visible = [], 0
    for step in range(STEPS):
        out = augmenter(batch, step_seed(5, 0, step))
        unboxed.append(_unboxed_object_pixels(out))
        visible += int((out["images"].numpy().max(axis=-1) > 0.5).sum())
    return np.concatenate(unboxed), visible


def _warnings():
    return captured_warnings("transforms.online.geometry")


def test_auto_is_the_default_fill_mode_and_resolves_by_boxes():
    assert load_config().online.geometry.fill_mode == "auto"
    assert GeometryConfig().fill_mode_for(with_boxes=True) == "constant"
    assert GeometryConfig().fill_mode_for(with_boxes=False) == "reflect"
    assert GeometryConfig(fill_mode="wrap").fill_mode_for(with_boxes=True) == "wrap"


@pytest.mark.parametrize("source", [False, True], ids=["images", "source"])
def test_with_boxes_and_the_default_fill_every_object_pixel_stays_in_its_moved_box(source):
    with _warnings() as lines:
        unboxed, visible = _run(_config(), source)
    assert visible > 0
    assert unboxed.sum() == 0, f"{(unboxed > 0).sum()} of {unboxed.size} samples"
    assert lines == []


@pytest.mark.parametrize("fill_mode", ["reflect", "wrap"])
def test_an_explicit_copying_fill_mode_is_kept_with_one_warning(fill_mode):
    with _warnings() as lines:
        unboxed, _ = _run(_config(fill_mode=fill_mode), source=True)
    assert (unboxed > 0).sum() > 0  # the copies the default avoids: the check can see them
    assert len(lines) == 1
    assert lines[0].startswith(f"online.geometry.fill_mode='{fill_mode}' with boxes: ")
    assert "carry no box" in lines[0] and "fill_mode: auto (the default) or constant" in lines[0]


def test_no_warning_without_boxes_or_when_nothing_can_be_exposed():
    batch = _objects()
    unboxed = {key: batch[key] for key in ("images", "labels")}
    flips_only = GeometryConfig(fill_mode="reflect", horizontal_flip=0.5, vertical_flip=0.5,
                                rotation_degrees=0.0, scale=(1.0, 1.3), translate=0.0,
                                crop_probability=0.5)
    with _warnings() as lines:
        augment.build_batch_augmenter(_config(fill_mode="reflect"), CLASSES,
                                      jit_compile=False)(unboxed, step_seed(5, 0, 0))
        config = OnlineConfig(image_size=(SIZE, SIZE), geometry=flips_only,
                              pixel=PixelConfig(enabled=False), mix=MixConfig(enabled=False))
        augment.build_batch_augmenter(config, CLASSES, jit_compile=False)(
            batch, step_seed(5, 0, 0))
    assert lines == []
    assert flips_only.unboxed_copies_warning() is None


def test_without_boxes_auto_reflects_exactly_as_before():
    batch = {key: _objects()[key] for key in ("images", "labels")}
    auto = augment.build_batch_augmenter(_config(), CLASSES, jit_compile=False)
    reflect = augment.build_batch_augmenter(_config(fill_mode="reflect"), CLASSES,
                                            jit_compile=False)
    seed = step_seed(5, 0, 3)
    np.testing.assert_array_equal(auto(batch, seed)["images"].numpy(),
                                  reflect(batch, seed)["images"].numpy())


def test_warp_images_names_its_fill_modes():
    with pytest.raises(ValueError, match=r"Unknown fill_mode 'auto'. Expected one of \("
                                         r"'constant', 'reflect', 'nearest', 'wrap'\)"):
        warp_images(tf.zeros([1, 4, 4, 3]), tf.eye(3, batch_shape=[1]), fill_mode="auto")
