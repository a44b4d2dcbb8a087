"""`pixelmill preview`: the grid shows the reader's batch beside training step 0's augmentation."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from configs.schema import load_config
from pipelines.training_input import make_dataset
from runners.jobs import preview
from tests.fake_snapshot import write_synthetic_snapshot
from tests.tiers import shared_fixture

IDENTITY = ["online.geometry.enabled=false", "online.pixel.enabled=false",
            "online.mix.enabled=false"]


@shared_fixture(scope="module")
def output_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("preview"))
    write_synthetic_snapshot(root, counts={"train": 8}, image_size=24, num_classes=3,
                             num_shards=2, seed=5)
    return root


@shared_fixture(scope="module")
def box_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("preview_boxes"))
    write_synthetic_snapshot(root, counts={"train": 4}, image_size=24, num_classes=3,
                             num_shards=1, max_boxes=1, seed=6)
    return root


def _argv(output_dir, out, *extra, overrides=()):
    argv = ["--output_dir", output_dir, "--out", str(out), "--set", "online.image_size=16"]
    for override in overrides:
        argv += ["--set", override]
    return argv + list(extra)


def _enlarged(pixels: np.ndarray, panel: tuple) -> np.ndarray:
    size = (panel[2] - panel[0], panel[3] - panel[1])
    return np.asarray(Image.fromarray(pixels).resize(size, Image.NEAREST))


def test_png_holds_original_beside_augmented(output_dir, tmp_path):
    out = tmp_path / "grid.png"
    result = preview.run(_argv(output_dir, out, "--n", "4", "--seed", "2"))
    written = np.asarray(Image.open(out).convert("RGB"))
    assert written.shape[:2] == (result.image.size[1], result.image.size[0])
    assert len(result.panels) == 4
    for index, (original, augmented) in enumerate(result.panels):
        assert original[2] <= augmented[0]  # original on the left
        assert augmented[2] - augmented[0] == 128  # 16 px enlarged 8x
        left, top, right, bottom = original
        np.testing.assert_array_equal(written[top:bottom, left:right],
                                      _enlarged(result.originals[index], original))
        left, top, right, bottom = augmented
        np.testing.assert_array_equal(written[top:bottom, left:right],
                                      _enlarged(result.augmented[index], augmented))


@shared_fixture(scope="module")
def seed2(output_dir):
    """`build_preview` of all 8 samples at seed 2 (uncompiled), and the reader's first batch
    of 8 at seed 2, unnormalized: plain, and augmented as training step 0 (resize then warp)."""
    config = load_config(overrides=["online.image_size=16"])
    kwargs = dict(batch_size=8, config=config, seed=2, normalize=False, jit_compile=False)
    return (preview.build_preview(output_dir, config, n=8, seed=2, jit_compile=False),
            next(iter(make_dataset(output_dir, augment=False, **kwargs))),
            next(iter(make_dataset(output_dir, resample_once=False, **kwargs))))


def test_grid_is_the_reader_batch_and_training_step_zero(seed2):
    result, plain, trained = seed2
    plain, trained = plain[0].numpy(), trained[0].numpy()
    # The preview warps the resized batch: training's resize-then-warp path.
    np.testing.assert_array_equal(result.originals, preview._to_uint8(plain))
    difference = np.abs(result.augmented.astype(int) - preview._to_uint8(trained).astype(int))
    assert difference.max() <= 1  # eager vs tf.data graph: at most a rounding step
    assert not np.array_equal(result.originals, result.augmented)


def test_captions_name_the_classes(seed2):
    result, plain, _ = seed2
    assert [c[0] for c in result.captions] == [f"class_{i}" for i in
                                               plain[1].numpy().argmax(axis=1)]
    assert any(" + " in c[1] for c in result.captions)  # mixed labels show their weights


def test_caption_of_a_mixed_label_lists_weights_largest_first():
    names = ["cat", "dog", "owl"]
    assert preview._caption(np.array([0.0, 0.25, 0.75]), names) == "owl 0.75 + dog 0.25"
    assert preview._caption(np.array([0.0, 1.0, 0.0]), names) == "dog"


def test_boxes_are_drawn_in_their_class_colour(box_dir, tmp_path):
    out = tmp_path / "boxes.png"
    result = preview.run(_argv(box_dir, out, "--n", "4", "--seed", "1", overrides=IDENTITY))
    written = np.asarray(Image.open(out).convert("RGB"))
    np.testing.assert_array_equal(result.originals, result.augmented)  # all ops off
    config = load_config(overrides=["online.image_size=16"])
    batch = next(iter(make_dataset(box_dir, batch_size=4, config=config, seed=1,
                                   augment=False, normalize=False)))
    for index in range(4):
        ymin, xmin, ymax, _ = batch["boxes"][index, 0].numpy()
        colour = preview._BOX_COLOURS[int(batch["box_labels"][index, 0])]
        for left, top, right, bottom in result.panels[index]:
            x = left + round(float(xmin) * (right - left))
            y = top + round(float((ymin + ymax) / 2) * (bottom - top))
            assert tuple(written[y, x]) == colour


def test_n_beyond_the_split_shows_every_sample(output_dir, tmp_path):
    result = preview.run(_argv(output_dir, tmp_path / "all.png", "--n", "50",
                               overrides=IDENTITY))
    assert len(result.panels) == 8


def test_n_below_one_is_rejected(output_dir, tmp_path):
    from runners.errors import UsageError
    with pytest.raises(UsageError, match=r"--n must be >= 1. Received: --n=0"):
        preview.run(_argv(output_dir, tmp_path / "none.png", "--n", "0"))
