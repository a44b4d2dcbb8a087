"""The batch augmenter: config -> one seeded, vectorized augmentation of whole batches.

`build_batch_augmenter(config.online, num_classes)` adds an op only when it is enabled (timm's
transforms_factory style): geometry (one fused matrix), then the pixel ops in `PixelConfig`'s
order, then Mixup/CutMix. `BatchAugmenter` follows "sample, then apply":
`augmenter(batch, seed) == augmenter.apply(batch, augmenter.sample(batch_size, size, seed))`,
with `seed` from `seeds.step_seed` and `apply` pure and XLA-compilable.

A batch is a dict: `images` float32 [B, H, W, 3] in [0, 1] (or uint8 `source` canvases with
`source_size`, warped straight to `image_size`), `labels` [B, C] or int [B], optional padded
`boxes` / `box_labels` / `num_boxes`; out come the same keys plus `matrix` [B, 3, 3] (output
pixel -> input pixel), labels smoothed and mixed, boxes moved, filtered and compacted; other
keys pass through. `enable_rate` < 1 skips whole batches without changing the output structure.

`sample` (stateless gammas for Beta) cannot be compiled and stays outside XLA; with
`jit_compile=True` (the default) each op's apply is its own `tf.function(jit_compile=True)`.
Compiled and uncompiled results agree to float rounding (about 1e-5), not bit for bit.
The full batch contract and usage: docs/training.md ("The batch augmenter on its own").
"""
from __future__ import annotations

import functools
from typing import Sequence

import keras
import tensorflow as tf

from configs.online import OnlineConfig
from transforms.online import seeds as seeds_lib
from transforms.online.geometry import (
    GeometryOp,
    compact_boxes,
    identity_matrices,
    resize_from_source,
)
from transforms.online.mixing import MixOp
from transforms.online.pixel_ops import (
    BlurOp,
    ColorJitterOp,
    GammaOp,
    GaussianNoiseOp,
    GrayscaleOp,
    JpegOp,
    SpeckleNoiseOp,
)

__all__ = ["BatchAugmenter", "build_batch_augmenter", "build_ops", "AugmentLayer"]


def build_ops(online_config: OnlineConfig, image_size=None) -> list:
    """The enabled ops in application order (geometry, pixel ops, mix); disabled ones omitted.

    `image_size` (height, width) is the output size of source batches (see `GeometryOp`)."""
    ops = []
    geometry = online_config.geometry
    if not geometry.is_identity:
        ops.append(GeometryOp(geometry, output_size=image_size))
    pixel = online_config.pixel
    if pixel.enabled:
        switches = [
            (max(pixel.brightness, pixel.contrast, pixel.saturation, pixel.hue) > 0,
             ColorJitterOp),
            (pixel.gamma != (1.0, 1.0), GammaOp),
            (pixel.grayscale_probability > 0, GrayscaleOp),
            (pixel.blur_probability > 0, BlurOp),
            (pixel.jpeg_probability > 0, JpegOp),
            (pixel.gaussian_noise_std > 0, GaussianNoiseOp),
            (pixel.speckle_noise_std > 0, SpeckleNoiseOp),
        ]
        ops.extend(op_class(pixel) for enabled, op_class in switches if enabled)
    if not online_config.mix.is_identity:
        ops.append(MixOp(online_config.mix, min_box_area=geometry.min_box_area))
    return ops


class BatchAugmenter:
    """Seeded augmentation of whole batches; see the module docstring for the batch contract.

    Args:
      ops: sample-then-apply ops (`build_ops`), applied in order.
      num_classes: C, to one-hot integer labels and for label smoothing.
      enable_rate: fraction of batches that are augmented (per-batch draw from the seed).
      label_smoothing: eps; labels become `y * (1 - eps) + eps / C` before mixing.
      jit_compile: run each op's apply as its own `tf.function(jit_compile=True)` (XLA).
    """

    def __init__(self, ops: Sequence, num_classes: int, enable_rate: float = 1.0,
                 label_smoothing: float = 0.0, jit_compile: bool = True):
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1. Received: num_classes={num_classes}")
        self.ops = list(ops)
        self.num_classes = int(num_classes)
        self.enable_rate = float(enable_rate)
        self.label_smoothing = float(label_smoothing)
        self.jit_compile = jit_compile
        # One XLA cluster per op: compiled as one program, XLA:CPU fuses the warp's gathers
        # into the consumers (colour matrix, the mix's partner gather) and recomputes them,
        # which measured 3-6x slower than compiling each op on its own. No autograph: the ops
        # use TF control flow only (uncompiled, `traced` runs them without it too), and
        # converting their code cost ~2.5 s at a process's first compiled augmenter.
        self._op_apply = {
            op.name: tf.function(op.apply, jit_compile=True, autograph=False) if jit_compile
            else op.apply
            for op in self.ops}
        geometry = [op for op in self.ops if isinstance(op, GeometryOp)]
        self.output_size = geometry[0].output_size if geometry else None
        self._resize_from_source = (
            tf.function(resize_from_source, jit_compile=True, autograph=False)
            if jit_compile else resize_from_source)

    @functools.cached_property
    def traced(self):
        """`__call__` as one `tf.function`: traced once per batch signature and then shared by
        every graph that calls it (each `tf.data` map would otherwise trace the whole
        augmentation again, a trace that costs seconds per dataset)."""
        return tf.function(self.__call__, reduce_retracing=True, autograph=False)

    @property
    def takes_source(self) -> bool:
        """True when batches may carry `source`/`source_size` instead of `images` (a geometry
        op with an output size): the resize then folds into the warp."""
        return self.output_size is not None

    @property
    def op_names(self) -> list[str]:
        return [op.name for op in self.ops]

    @property
    def mixes(self) -> bool:
        """True when a mix op is on (then the box capacity doubles)."""
        return any(isinstance(op, MixOp) for op in self.ops)

    def sample(self, batch_size, image_size, seed) -> dict:
        """Draws every op's parameters for a batch: `{"augment": bool [], op.name: {...}}`.

        `image_size` is (height, width); `seed` an int64 [2] batch seed. Not XLA-compilable
        when the mix op is on (stateless gamma).
        """
        seed = tf.convert_to_tensor(seed, tf.int64)
        gate = seeds_lib.uniform([], seeds_lib.fold_in_name(seed, "enable_rate"))
        params = {"augment": gate < self.enable_rate}
        for op in self.ops:
            params[op.name] = op.sample(batch_size, image_size, seed)
        return params

    def _prepare(self, batch: dict) -> dict:
        """Float images and labels, label smoothing, clean box padding, and no augmentation."""
        out = dict(batch)
        if "source" in batch and not self.takes_source:
            raise ValueError(
                "A source batch (keys 'source', 'source_size') needs a geometry op with an "
                "output size: build_batch_augmenter(..., image_size=(height, width)) with "
                "geometry enabled. Received: a source batch")
        if "images" in batch:
            images = tf.convert_to_tensor(batch["images"])
            if images.dtype == tf.uint8:
                images = tf.cast(images, tf.float32) / 255.0
            out["images"] = tf.cast(images, tf.float32)
        labels = tf.convert_to_tensor(batch["labels"])
        if labels.dtype.is_integer:
            labels = tf.one_hot(tf.reshape(labels, [-1]), self.num_classes, dtype=tf.float32)
        labels = tf.cast(labels, tf.float32)
        if self.label_smoothing > 0:
            labels = labels * (1.0 - self.label_smoothing) + (
                self.label_smoothing / self.num_classes)
        out["labels"] = labels
        if "boxes" in batch:
            boxes = tf.cast(batch["boxes"], tf.float32)
            num_boxes = tf.cast(batch["num_boxes"], tf.int32)
            _, capacity, _ = tf.unstack(tf.shape(boxes), 3)
            real = tf.range(capacity) < tf.expand_dims(num_boxes, -1)
            out["boxes"], out["box_labels"], out["num_boxes"] = compact_boxes(
                boxes, tf.convert_to_tensor(batch["box_labels"]), real)
        return out

    def _identity(self, batch: dict) -> dict:
        out = dict(batch)
        if "source" in out:  # not augmented: only the reader's resize
            out["images"] = self._resize_from_source(out.pop("source"), out.pop("source_size"),
                                                     self.output_size)
        if "matrix" not in out:
            out["matrix"] = identity_matrices(tf.shape(out["images"])[0])
        if "boxes" in batch and self.mixes:  # same 2N capacity as the mixed branch
            boxes, labels = batch["boxes"], batch["box_labels"]
            out["boxes"] = tf.concat([boxes, tf.zeros_like(boxes)], axis=1)
            padding = tf.fill(tf.shape(labels), tf.constant(-1, labels.dtype))
            out["box_labels"] = tf.concat([labels, padding], axis=1)
        return out

    def _augmented(self, batch: dict, params: dict) -> dict:
        out = batch
        for op in self.ops:
            out = self._op_apply[op.name](out, params[op.name])
        if "matrix" not in out:  # no geometry op: the images did not move
            out = {**out, "matrix": identity_matrices(tf.shape(out["images"])[0])}
        return out

    def apply(self, batch: dict, params: dict) -> dict:
        """Applies a parameter dict (from `sample`, or written by hand) to a batch. Pure."""
        batch = self._prepare(batch)
        if not self.ops:
            return self._identity(batch)
        if self.enable_rate >= 1.0:
            return self._augmented(batch, params)
        if self.enable_rate <= 0.0:
            return self._identity(batch)
        return tf.cond(params["augment"], lambda: self._augmented(batch, params),
                       lambda: self._identity(batch))

    @tf.autograph.experimental.do_not_convert
    def __call__(self, batch: dict, seed) -> dict:
        """`apply(batch, sample(B, (H, W), seed))` with `seed` an int64 [2] batch seed.

        Traced as written inside a user's `tf.data` map or a Keras `fit` too: the ops use TF
        control flow only, and autograph's conversion of them cost seconds at the first
        trace."""
        images = tf.convert_to_tensor(batch["source"] if "source" in batch else batch["images"])
        static = images.shape
        dynamic = tf.shape(images)
        batch_size = static[0] if static[0] is not None else dynamic[0]
        height = static[1] if static[1] is not None else dynamic[1]
        width = static[2] if static[2] is not None else dynamic[2]
        if "source" in batch and self.takes_source:
            height, width = self.output_size
        params = self.sample(batch_size, (height, width), seed)
        return self.apply(batch, params)


def build_batch_augmenter(online_config: OnlineConfig, num_classes: int,
                          jit_compile: bool = True, image_size=None) -> BatchAugmenter:
    """The augmenter described by `online_config` (`config.online`); see `BatchAugmenter`.

    `image_size` (height, width): the output size of source batches (decoded images on
    canvases, resized in the warp's pass); without it, batches must carry `images`."""
    return BatchAugmenter(build_ops(online_config, image_size), num_classes=num_classes,
                          enable_rate=online_config.enable_rate,
                          label_smoothing=online_config.label_smoothing,
                          jit_compile=jit_compile)


class AugmentLayer(keras.layers.Layer):
    """The batch augmenter as a Keras layer, for a model or a custom `train_step`.

    Call it with a batch dict (`images`, `labels`, optional boxes) or with an images tensor
    alone (then the mix op must be off: there are no labels to mix). Only active with
    `training=True`; otherwise images pass through unchanged (a dict also gets its `matrix`).

    Seeds: pass `seed` (int64 [2], e.g. `seeds.step_seed(global_seed, epoch, step)`) for full
    control. Without it, the layer folds a non-trainable int64 `step` counter (saved with the
    model's weights, so a restore resumes the sequence) into `global_seed`:
    `step_seed(global_seed, 0, step)`, and increments it.

    Under `jit_compile` the mix op's Beta sampling cannot compile; call `augmenter.sample` in
    the input pipeline and `augmenter.apply` inside the compiled step instead.
    """

    def __init__(self, online_config: OnlineConfig, num_classes: int,
                 global_seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.online_config = online_config
        self.num_classes = num_classes
        self.global_seed = online_config.seed if global_seed is None else int(global_seed)
        self.augmenter = build_batch_augmenter(online_config, num_classes)
        self.step = self.add_weight(name="step", shape=(), dtype="int64", trainable=False,
                                    initializer="zeros")

    def call(self, inputs, training=None, seed=None):
        is_dict = isinstance(inputs, dict)
        if not is_dict and self.augmenter.mixes:
            raise ValueError(
                "AugmentLayer called with images only but online.mix is on; pass a dict with "
                "'images' and 'labels'. Received: a tensor")
        batch = dict(inputs) if is_dict else {
            "images": inputs,
            "labels": tf.zeros([tf.shape(inputs)[0], self.num_classes], tf.float32)}
        if not training:
            return self.augmenter._identity(batch) if is_dict else inputs
        if seed is None:
            seed = seeds_lib.step_seed(self.global_seed, 0, tf.convert_to_tensor(self.step))
            self.step.assign_add(1)
        out = self.augmenter(batch, seed)
        return out if is_dict else out["images"]

    def compute_output_shape(self, input_shape):
        return input_shape
