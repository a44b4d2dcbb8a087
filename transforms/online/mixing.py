"""Batch composition: Mixup and CutMix with one permutation, per-batch or per-sample lambda.

Sample, then apply (timm's `Mixup` semantics, with stateless seeds instead of numpy's global
RNG). `MixOp.sample` draws, from the batch seed:
* `permutation` int32 [B]: a random permutation; sample i is mixed with sample perm[i]
  (odd batch sizes work; a sample may draw itself, which leaves it unchanged);
* per sample (or one value broadcast to the batch with `lambda_mode: batch`): whether it is
  mixed (`probability`), whether it uses CutMix (`switch_probability` when both are on),
  lambda ~ Beta(alpha, alpha) from two stateless gammas, and the CutMix box;
* `lam` float32 [B]: the weight of the sample's OWN label. For CutMix it is corrected to the
  clipped box: `1 - box_area / image_area`, i.e. exactly the fraction of own pixels left.
`apply` is pure (XLA-compilable): images `lam * x + (1 - lam) * x[perm]` (Mixup) or the
partner's pixels inside `cut_box` (CutMix); labels `lam * y + (1 - lam) * y[perm]`, so they
still sum to 1.

Boxes (when the batch has them) -- the rule: the output holds 2N rows, own boxes first, then
the partner's. Mixup keeps both sets whole (both images stay visible, as in YOLOX). CutMix keeps
an own box when at least `min_box_area` of its area lies outside the pasted region (the box is
not cut, as its visible part is not a box), and a partner box clipped to the pasted region when
the clipped part keeps at least `min_box_area` of its area. An unmixed sample keeps its own
boxes only. Rows are compacted and padded as in `geometry.compact_boxes`.
"""
from __future__ import annotations

import tensorflow as tf

from configs.online import MixConfig
from transforms.online import seeds as seeds_lib
from transforms.online.geometry import compact_boxes

__all__ = ["MixOp", "cutmix_box", "cutmix_mask", "mix_images", "mix_labels", "mix_boxes"]


def cutmix_box(lam, center, height, width) -> tf.Tensor:
    """The CutMix rectangle for lambda `lam` [B] and centre `center` [B, 2] in [0, 1).

    Side ratio `sqrt(1 - lam)`, size `int(H * ratio) x int(W * ratio)` centred at
    `(int(cy * H), int(cx * W))`, clipped to the image (timm's `rand_bbox`). Returns int32
    [B, 4] as (y0, x0, y1, x1), half-open pixel rows/columns.
    """
    h = tf.cast(height, tf.float32)
    w = tf.cast(width, tf.float32)
    ratio = tf.sqrt(tf.maximum(1.0 - tf.cast(lam, tf.float32), 0.0))
    cut_h = tf.cast(tf.floor(h * ratio), tf.int32)
    cut_w = tf.cast(tf.floor(w * ratio), tf.int32)
    center_y, center_x = tf.unstack(tf.convert_to_tensor(center), 2, axis=1)
    cy = tf.cast(tf.floor(center_y * h), tf.int32)
    cx = tf.cast(tf.floor(center_x * w), tf.int32)
    height = tf.cast(height, tf.int32)
    width = tf.cast(width, tf.int32)
    y0 = tf.clip_by_value(cy - cut_h // 2, 0, height)
    y1 = tf.clip_by_value(cy + cut_h // 2, 0, height)
    x0 = tf.clip_by_value(cx - cut_w // 2, 0, width)
    x1 = tf.clip_by_value(cx + cut_w // 2, 0, width)
    return tf.stack([y0, x0, y1, x1], axis=-1)


def cutmix_mask(box, height, width) -> tf.Tensor:
    """bool [B, H, W]: true inside each sample's (y0, x0, y1, x1) box."""
    rows = tf.expand_dims(tf.range(height), -1)  # [H, 1]
    cols = tf.range(width)
    y0, x0, y1, x1 = tf.unstack(tf.reshape(tf.cast(box, tf.int32), [-1, 4, 1, 1]), 4, axis=1)
    return (rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)


def mix_images(images, permutation, lam, use_cutmix, box) -> tf.Tensor:
    """Mixup (`lam * x + (1 - lam) * x[perm]`) or, where `use_cutmix`, paste x[perm] in box.

    One blend with a per-pixel own weight: `lam` for Mixup, 0 inside / 1 outside the box for
    CutMix (`x * 0 + p * 1` is exactly `p`), so each pixel is computed once, not blended and
    pasted and then selected."""
    partner = tf.gather(images, permutation)
    _, height, width, _ = tf.unstack(tf.shape(images), 4)
    inside = tf.expand_dims(cutmix_mask(box, height, width), -1)
    cut = tf.reshape(tf.cast(use_cutmix, tf.bool), [-1, 1, 1, 1])
    lam = tf.reshape(tf.cast(lam, images.dtype), [-1, 1, 1, 1])
    weight = tf.where(cut, tf.cast(~inside, images.dtype), lam)
    return images * weight + partner * (1.0 - weight)


def mix_labels(labels, permutation, lam) -> tf.Tensor:
    """`lam * y + (1 - lam) * y[perm]` for float labels [B, C]."""
    weight = tf.expand_dims(tf.cast(lam, labels.dtype), -1)
    return labels * weight + tf.gather(labels, permutation) * (1.0 - weight)


def _area(corners):
    """Box areas from (low (ymin, xmin), high (ymax, xmax)) halves, each [..., 2]; empty
    boxes 0."""
    low_y, low_x = tf.unstack(corners[0], 2, axis=-1)
    high_y, high_x = tf.unstack(corners[1], 2, axis=-1)
    return tf.maximum(high_y - low_y, 0.0) * tf.maximum(high_x - low_x, 0.0)


def mix_boxes(boxes, box_labels, num_boxes, permutation, mixed, use_cutmix, box, height,
              width, min_box_area: float):
    """Applies the box rule in the module docstring. Returns ([B, 2N, 4], [B, 2N], [B])."""
    boxes = tf.convert_to_tensor(boxes, tf.float32)
    _, n, _ = tf.unstack(tf.shape(boxes), 3)
    real = tf.range(n) < tf.expand_dims(tf.cast(num_boxes, tf.int32), -1)
    cut = tf.cast(box, tf.float32) / tf.cast(
        tf.stack([height, width, height, width]), tf.float32)  # normalized y0 x0 y1 x1
    # Every box as its (ymin, xmin) and (ymax, xmax) halves, each [B, 1 or N, 2].
    cut_low, cut_high = tf.split(tf.expand_dims(cut, 1), 2, axis=-1)
    use_cutmix = tf.expand_dims(tf.cast(use_cutmix, tf.bool), -1)
    mixed = tf.expand_dims(tf.cast(mixed, tf.bool), -1)
    low, high = tf.split(boxes, 2, axis=-1)
    area = _area((low, high))
    overlap = _area((tf.maximum(low, cut_low), tf.minimum(high, cut_high)))
    own_keep = real & (~use_cutmix | ((area - overlap) >= min_box_area * area))
    partner_boxes = tf.gather(boxes, permutation)
    partner_real = tf.gather(real, permutation)
    partner_low, partner_high = tf.split(partner_boxes, 2, axis=-1)
    clipped_low = tf.clip_by_value(partner_low, cut_low, cut_high)
    clipped_high = tf.clip_by_value(partner_high, cut_low, cut_high)
    clipped_area = _area((clipped_low, clipped_high))
    partner_area = tf.gather(area, permutation)
    partner_cut_keep = (clipped_area > 0) & (clipped_area >= min_box_area * partner_area)
    partner_keep = partner_real & mixed & (~use_cutmix | partner_cut_keep)
    partner_boxes = tf.where(tf.expand_dims(use_cutmix, -1),
                             tf.concat([clipped_low, clipped_high], axis=-1), partner_boxes)
    all_boxes = tf.concat([boxes, partner_boxes], axis=1)
    all_labels = tf.concat([box_labels, tf.gather(box_labels, permutation)], axis=1)
    return compact_boxes(all_boxes, all_labels, tf.concat([own_keep, partner_keep], axis=1))


class MixOp:
    """Mixup/CutMix from a `MixConfig` (see the module docstring for the parameters).

    Parameter dict: `permutation` int32 [B]; `mixed` bool [B]; `use_cutmix` bool [B];
    `lam` float32 [B] (own-label weight, CutMix-corrected, 1 where not mixed); `cut_box` int32
    [B, 4] (y0, x0, y1, x1; empty where not CutMix). `sample` uses stateless gammas, so it is
    not XLA-compilable; `apply` is.
    """
    name = "mix"

    def __init__(self, config: MixConfig, min_box_area: float = 0.25):
        self.config = config
        self.min_box_area = min_box_area

    def sample(self, batch_size, image_size, seed) -> dict:
        cfg = self.config
        height, width = image_size
        seed = seeds_lib.fold_in_name(seed, self.name)
        permutation = tf.argsort(seeds_lib.uniform(
            [batch_size], seeds_lib.fold_in_name(seed, "permutation")))
        permutation = tf.cast(permutation, tf.int32)
        u = seeds_lib.uniform([batch_size, 4], seeds_lib.fold_in_name(seed, "choices"))
        per_batch = cfg.lambda_mode == "batch"
        if per_batch:  # one draw for the whole batch
            u = tf.broadcast_to(u[:1], tf.shape(u))
        u = tf.unstack(u, 4, axis=1)
        mixed = u[0] < cfg.probability
        if cfg.mixup_alpha > 0 and cfg.cutmix_alpha > 0:
            use_cutmix = u[1] < cfg.switch_probability
        else:
            use_cutmix = tf.fill([batch_size], cfg.cutmix_alpha > 0)
        use_cutmix = use_cutmix & mixed
        ones = tf.ones([batch_size], tf.float32)
        lam_mixup = ones
        if cfg.mixup_alpha > 0:
            lam_mixup = self._beta(per_batch, batch_size, cfg.mixup_alpha, seed, "mixup")
        lam_cutmix = ones
        if cfg.cutmix_alpha > 0:
            lam_cutmix = self._beta(per_batch, batch_size, cfg.cutmix_alpha, seed, "cutmix")
        box = cutmix_box(lam_cutmix, tf.stack(u[2:4], axis=1), height, width)
        box = tf.where(tf.expand_dims(use_cutmix, -1), box, tf.zeros_like(box))
        y0, x0, y1, x1 = tf.unstack(box, 4, axis=1)
        area = tf.cast((y1 - y0) * (x1 - x0), tf.float32)
        lam_cut_corrected = 1.0 - area / tf.cast(height * width, tf.float32)
        lam = tf.where(use_cutmix, lam_cut_corrected, tf.where(mixed, lam_mixup, 1.0))
        return {"permutation": permutation, "mixed": mixed, "use_cutmix": use_cutmix,
                "lam": lam, "cut_box": box}

    @staticmethod
    def _beta(per_batch: bool, batch_size, alpha, seed, tag) -> tf.Tensor:
        """float32 [B] lambdas: one draw broadcast (`per_batch`) or one per sample. The mode
        is a Python bool: `batch_size` may be a tensor (a last partial batch)."""
        draws = 1 if per_batch else batch_size
        lam = seeds_lib.stateless_beta([draws], alpha, alpha, seeds_lib.fold_in_name(seed, tag))
        return tf.broadcast_to(lam, [batch_size]) if per_batch else lam

    def apply(self, batch: dict, params: dict) -> dict:
        out = dict(batch)
        images = batch["images"]
        out["images"] = mix_images(images, params["permutation"], params["lam"],
                                   params["use_cutmix"], params["cut_box"])
        out["labels"] = mix_labels(batch["labels"], params["permutation"], params["lam"])
        if "boxes" in batch:
            _, height, width, _ = tf.unstack(tf.shape(images), 4)
            out["boxes"], out["box_labels"], out["num_boxes"] = mix_boxes(
                batch["boxes"], batch["box_labels"], batch["num_boxes"], params["permutation"],
                params["mixed"], params["use_cutmix"], params["cut_box"], height, width,
                self.min_box_area)
        return out
