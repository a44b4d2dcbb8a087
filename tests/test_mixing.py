"""transforms.online.mixing: Mixup/CutMix with one permutation, lambda correction, the box rule."""
import numpy as np
import pytest
import tensorflow as tf

from configs.online import MixConfig
from transforms.online import mixing
from transforms.online.seeds import step_seed

SIZE = 16


def _constant_images(batch):
    """Sample i is filled with the value i + 1, so every pixel tells where it came from."""
    values = np.arange(1, batch + 1, dtype=np.float32)[:, None, None, None]
    return np.broadcast_to(values, (batch, SIZE, SIZE, 3)).copy()


def _one_hot(batch, classes=4):
    return np.eye(classes, dtype=np.float32)[np.arange(batch) % classes]


def _sample(config, batch, step=0):
    return mixing.MixOp(config).sample(batch, (SIZE, SIZE), step_seed(11, 0, step))


@pytest.mark.parametrize("batch", [1, 5, 8])
def test_permutation_is_a_permutation(batch):
    for step in range(5):
        permutation = _sample(MixConfig(), batch, step)["permutation"].numpy()
        assert sorted(permutation.tolist()) == list(range(batch))


def test_permutation_varies_with_the_step():
    drawn = {tuple(_sample(MixConfig(), 7, step)["permutation"].numpy()) for step in range(6)}
    assert len(drawn) > 1


@pytest.mark.parametrize("mode", ["batch", "sample"])
@pytest.mark.parametrize("mixup_alpha,cutmix_alpha", [(0.4, 0.0), (0.0, 1.0), (0.4, 1.0)])
def test_mixed_labels_sum_to_one(mode, mixup_alpha, cutmix_alpha):
    config = MixConfig(mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha, lambda_mode=mode)
    op = mixing.MixOp(config)
    labels = _one_hot(5) * 0.9 + 0.025  # soft labels, rows sum to 1
    batch = {"images": tf.constant(_constant_images(5)), "labels": tf.constant(labels)}
    for step in range(4):
        out = op.apply(batch, _sample(config, 5, step))
        np.testing.assert_allclose(out["labels"].numpy().sum(axis=1), 1.0, atol=1e-6)


def test_cutmix_lambda_equals_the_pasted_area_ratio():
    config = MixConfig(mixup_alpha=0.0, cutmix_alpha=1.0, lambda_mode="sample")
    op = mixing.MixOp(config)
    images = _constant_images(7)
    for step in range(4):
        params = _sample(config, 7, step)
        out = op.apply({"images": tf.constant(images), "labels": tf.constant(_one_hot(7))},
                       params)["images"].numpy()
        own = np.arange(1, 8, dtype=np.float32)[:, None, None]
        pasted = np.mean(out[..., 0] != own, axis=(1, 2))
        box = params["cut_box"].numpy()
        area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1]) / SIZE ** 2
        lam = params["lam"].numpy()
        np.testing.assert_allclose(1.0 - lam, area, atol=1e-6)
        moved = params["permutation"].numpy() != np.arange(7)
        np.testing.assert_allclose(pasted[moved], area[moved], atol=1e-6)


def test_cutmix_box_from_lambda_and_centre():
    box = mixing.cutmix_box(tf.constant([0.75, 0.75, 1.0]),
                            tf.constant([[0.5, 0.5], [0.0, 0.0], [0.5, 0.5]]), SIZE, SIZE)
    assert box.numpy().tolist() == [[4, 4, 12, 12], [0, 0, 4, 4], [8, 8, 8, 8]]


def test_clipped_cutmix_box_corrects_lambda():
    # Force a centre in the corner: the 8x8 box is clipped to 4x4, lambda 1 - 16/256.
    box = mixing.cutmix_box(tf.constant([0.75]), tf.constant([[0.0, 0.0]]), SIZE, SIZE)
    mask = mixing.cutmix_mask(box, SIZE, SIZE).numpy()
    assert mask.sum() == 16 and mask[0, :4, :4].all()


def test_mixup_blends_images_and_labels_with_hand_written_params():
    images = _constant_images(3)
    params = {"permutation": tf.constant([2, 0, 1]), "mixed": tf.constant([True] * 3),
              "use_cutmix": tf.constant([False] * 3), "lam": tf.constant([0.75, 0.5, 1.0]),
              "cut_box": tf.zeros([3, 4], tf.int32)}
    out = mixing.MixOp(MixConfig()).apply(
        {"images": tf.constant(images), "labels": tf.constant(_one_hot(3))}, params)
    np.testing.assert_array_equal(out["images"].numpy()[:, 0, 0, 0],
                                  [0.75 * 1 + 0.25 * 3, 0.5 * 2 + 0.5 * 1, 3.0])
    np.testing.assert_array_equal(out["labels"].numpy(),
                                  [[0.75, 0, 0.25, 0], [0.5, 0.5, 0, 0], [0, 0, 1, 0]])


def test_batch_mode_shares_one_lambda_and_sample_mode_draws_many():
    batch_params = _sample(MixConfig(lambda_mode="batch"), 6)
    assert len(set(batch_params["lam"].numpy().tolist())) == 1
    assert len(set(batch_params["use_cutmix"].numpy().tolist())) == 1
    sample_params = _sample(MixConfig(mixup_alpha=0.4, cutmix_alpha=0.0, lambda_mode="sample"),
                            6)
    assert len(set(sample_params["lam"].numpy().tolist())) == 6


def test_unmixed_samples_are_left_exactly_unchanged():
    config = MixConfig(probability=0.5, lambda_mode="sample")
    op = mixing.MixOp(config)
    images = np.random.default_rng(0).random((8, SIZE, SIZE, 3)).astype(np.float32)
    params = _sample(config, 8, step=3)
    mixed = params["mixed"].numpy()
    assert 0 < mixed.sum() < 8
    out = op.apply({"images": tf.constant(images), "labels": tf.constant(_one_hot(8))}, params)
    np.testing.assert_array_equal(out["images"].numpy()[~mixed], images[~mixed])
    np.testing.assert_array_equal(out["labels"].numpy()[~mixed], _one_hot(8)[~mixed])


def test_same_seed_same_params_other_seed_other_params():
    first, again, other = (_sample(MixConfig(lambda_mode="sample"), 5, step)
                           for step in (1, 1, 2))
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), again[key].numpy())
    assert not np.array_equal(first["lam"].numpy(), other["lam"].numpy())


def test_box_rule_for_cutmix_and_mixup():
    boxes = tf.constant([[[0.0, 0.0, 0.4, 0.4], [0.5, 0.5, 1.0, 1.0]],      # sample 0: A, B
                         [[0.25, 0.25, 0.75, 0.75], [0.6, 0.0, 0.9, 0.2]]])  # sample 1: C, D
    batch = {"images": tf.constant(_constant_images(2)), "labels": tf.constant(_one_hot(2)),
             "boxes": boxes, "box_labels": tf.constant([[1, 2], [3, 4]], tf.int64),
             "num_boxes": tf.constant([2, 2])}
    params = {"permutation": tf.constant([1, 0]), "mixed": tf.constant([True, True]),
              "use_cutmix": tf.constant([True, False]), "lam": tf.constant([0.75, 0.6]),
              "cut_box": tf.constant([[0, 0, 8, 8], [0, 0, 0, 0]])}
    out = mixing.MixOp(MixConfig(), min_box_area=0.2).apply(batch, params)
    # Sample 0 (CutMix, top-left quarter pasted from sample 1): A is covered, B stays; C is
    # clipped to the pasted quarter (keeps 1/4 >= 0.2), D lies outside it.
    np.testing.assert_array_equal(out["boxes"].numpy()[0],
                                  [[0.5, 0.5, 1.0, 1.0], [0.25, 0.25, 0.5, 0.5], [0] * 4, [0] * 4])
    assert out["box_labels"].numpy()[0].tolist() == [2, 3, -1, -1]
    # Sample 1 (Mixup with sample 0): its own boxes and all of the partner's.
    np.testing.assert_array_equal(out["boxes"].numpy()[1], np.float32([
        [0.25, 0.25, 0.75, 0.75], [0.6, 0.0, 0.9, 0.2], [0.0, 0.0, 0.4, 0.4], [0.5, 0.5, 1, 1]]))
    assert out["box_labels"].numpy()[1].tolist() == [3, 4, 1, 2]
    assert out["num_boxes"].numpy().tolist() == [2, 4]


def test_unmixed_sample_keeps_only_its_own_boxes():
    batch = {"images": tf.constant(_constant_images(2)), "labels": tf.constant(_one_hot(2)),
             "boxes": tf.constant([[[0.1, 0.1, 0.2, 0.2]], [[0.3, 0.3, 0.4, 0.4]]]),
             "box_labels": tf.constant([[5], [6]]), "num_boxes": tf.constant([1, 1])}
    params = {"permutation": tf.constant([1, 0]), "mixed": tf.constant([False, False]),
              "use_cutmix": tf.constant([False, False]), "lam": tf.constant([1.0, 1.0]),
              "cut_box": tf.zeros([2, 4], tf.int32)}
    out = mixing.MixOp(MixConfig()).apply(batch, params)
    assert out["box_labels"].numpy().tolist() == [[5, -1], [6, -1]]
    assert out["num_boxes"].numpy().tolist() == [1, 1]


def test_apply_compiles_under_xla_and_agrees_with_eager():
    config = MixConfig(lambda_mode="sample")
    op = mixing.MixOp(config)
    images = tf.constant(np.random.default_rng(0).random((5, SIZE, SIZE, 3)), tf.float32)
    batch = {"images": images, "labels": tf.constant(_one_hot(5))}
    params = _sample(config, 5, step=2)
    eager = op.apply(batch, params)
    compiled = tf.function(op.apply, jit_compile=True, autograph=False)(batch, params)
    for key in ("images", "labels"):
        np.testing.assert_allclose(compiled[key].numpy(), eager[key].numpy(), atol=1e-6)


@pytest.mark.parametrize("mixup_alpha,cutmix_alpha", [(0.4, 0.0), (0.0, 1.0), (0.4, 1.0)])
def test_sample_mode_with_an_unknown_batch_size_weights_labels_by_pixels(mixup_alpha,
                                                                         cutmix_alpha):
    """`lambda_mode: sample` in a graph whose batch size is a tensor (a dataset's last partial
    batch), traced without autograph as the reader does: each sample's own-label weight is the
    share of its own pixels (Mixup: the blend weight; CutMix: the pixels outside the box)."""
    batch = 6
    config = MixConfig(mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha,
                       lambda_mode="sample")
    op = mixing.MixOp(config)

    @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32),
                                  tf.TensorSpec([None, batch], tf.float32),
                                  tf.TensorSpec([2], tf.int64)], autograph=False)
    def mix(images, labels, seed):
        params = op.sample(tf.shape(images)[0], (SIZE, SIZE), seed)
        return op.apply({"images": images, "labels": labels}, params), params

    own = np.arange(1, batch + 1, dtype=np.float32)
    for step in range(4):
        out, params = mix(_constant_images(batch), _one_hot(batch, batch),
                          step_seed(11, 0, step))
        permutation, lam = params["permutation"].numpy(), params["lam"].numpy()
        labels, pixels = out["labels"].numpy(), out["images"].numpy()[..., 0]
        moved = permutation != np.arange(batch)
        partner = own[permutation]
        cut = params["use_cutmix"].numpy()
        own_share = np.where(
            cut, np.mean(pixels == own[:, None, None], axis=(1, 2)),
            np.mean((pixels - partner[:, None, None])
                    / np.where(moved, own - partner, 1.0)[:, None, None], axis=(1, 2)))
        own_weight = labels[np.arange(batch), np.arange(batch)]
        np.testing.assert_allclose(own_weight[moved], own_share[moved], atol=1e-5)
        np.testing.assert_allclose(own_weight[moved], lam[moved], atol=1e-6)
        np.testing.assert_allclose(labels[~moved], np.eye(batch)[~moved], atol=1e-6)
    assert len(set(np.round(lam, 6).tolist())) > 1  # per sample, not one per batch
