"""Fused per-sample geometry: one 3x3 matrix per sample, one gather-based resampling pass.

Coordinates. A point is `(x, y)` in continuous pixel units of an image of `height` x `width`:
x runs along the width, y down the height, pixel (row i, col j) covers `[j, j+1) x [i, i+1)`
and its centre is `(j + 0.5, i + 0.5)`. A normalized box coordinate is that divided by the
side (`x = xmin * width`). Boxes are float32 `(ymin, xmin, ymax, xmax)` normalized.

The matrix. `matrix[b]` maps an OUTPUT point `(x, y, 1)` to the INPUT point it was sampled from
(the convention of `ImageProjectiveTransformV3`, but in the continuous units above). So
`matrix @ (x_out, y_out, 1)` maps a pixel of the augmented image back to the original, and its
inverse (`invert_matrices`) maps an original pixel to where it went.

Why gathers: `ImageProjectiveTransformV3` has no XLA CPU kernel; sampling written with
`tf.gather` compiles under `tf.function(jit_compile=True)` on every device and is vectorized
over the batch (no per-sample loop or `map_fn`).

`GeometryOp` is the sample-then-apply op the augmenter uses: `sample` draws the per-sample
parameters (flips, rot90, angle, shear, scale, translation, random-resized crop, optional
elastic field) and composes the matrix; `apply` warps images and moves boxes.
"""
from __future__ import annotations

import logging
import math

import tensorflow as tf

from configs.online import FILL_MODES, GeometryConfig
from transforms.online import seeds as seeds_lib

__all__ = [
    "BOX_PADDING_LABEL",
    "GeometryOp",
    "compose_matrices",
    "invert_matrices",
    "map_points",
    "warp_images",
    "source_matrices",
    "resize_from_source",
    "transform_boxes",
    "compact_boxes",
    "identity_matrices",
]

# Label written into padded box rows (index >= num_boxes) by every box-moving function.
BOX_PADDING_LABEL = -1
_LOG = logging.getLogger(__name__)


def identity_matrices(batch_size) -> tf.Tensor:
    """float32 [B, 3, 3] identity matrices."""
    return tf.eye(3, batch_shape=[batch_size], dtype=tf.float32)


def _matrix(rows) -> tf.Tensor:
    """Stacks a 3x3 nested list of [B] tensors into [B, 3, 3]."""
    return tf.stack([tf.stack(row, axis=-1) for row in rows], axis=-2)


def _entries(matrix, trailing=()) -> list[tf.Tensor]:
    """The nine entries of [B, 3, 3] matrices, row-major, each float32 [B, *trailing] (1s), in
    two ops: a strided slice (and its three constants) each was much of the traced graph."""
    flat = tf.reshape(tf.cast(matrix, tf.float32), [-1, 9, *trailing])
    return tf.unstack(flat, 9, axis=1)


def compose_matrices(height, width, *, flip_horizontal, flip_vertical, rot90, angle, shear,
                     scale, translate, crop) -> tuple[tf.Tensor, tf.Tensor]:
    """Composes the per-sample geometry into (matrix, forward), both float32 [B, 3, 3].

    `matrix` maps output -> input (what the warp uses), `forward` maps input -> output (what the
    boxes use); each is built from exact component inverses, not by inverting the product.

    Forward order: crop the input region `crop` = (y0, x0, h, w) in input pixels and stretch it
    to the full size; then about the image centre: flip (`flip_horizontal`/`flip_vertical`,
    bool or 0/1 [B]), rotate counter-clockwise (as seen on screen) by `rot90` [B] int quarter
    turns (exact) plus `angle` [B] radians, shear x by `tan(shear)` [B], zoom by `scale` [B]
    (> 1 magnifies); finally shift by `translate` [B, 2] = (ty, tx) as fractions of the side.
    """
    height = tf.cast(height, tf.float32)
    width = tf.cast(width, tf.float32)
    one = tf.ones_like(tf.cast(angle, tf.float32))
    zero = tf.zeros_like(one)
    cy, cx = height / 2.0 * one, width / 2.0 * one

    fx = tf.where(tf.cast(flip_horizontal, tf.bool), -one, one)
    fy = tf.where(tf.cast(flip_vertical, tf.bool), -one, one)
    quarter = tf.math.floormod(tf.cast(rot90, tf.int32), 4)
    cos90 = tf.gather(tf.constant([1.0, 0.0, -1.0, 0.0]), quarter)
    sin90 = tf.gather(tf.constant([0.0, 1.0, 0.0, -1.0]), quarter)
    cos_a, sin_a = tf.cos(angle), tf.sin(angle)
    # Rotation by rot90 quarter turns then by angle: cos/sin of the sum, with the quarter exact.
    cos_t = cos90 * cos_a - sin90 * sin_a
    sin_t = sin90 * cos_a + cos90 * sin_a
    shear_t = tf.tan(shear)
    zoom = tf.cast(scale, tf.float32)
    ty, tx = tf.unstack(tf.cast(translate, tf.float32), 2, axis=1)
    ty, tx = ty * height, tx * width
    y0, x0, ch, cw = tf.unstack(tf.cast(crop, tf.float32), 4, axis=1)

    # Linear part A = Z * Sh * R * F (2x2), with y down: R = [[c, s], [-s, c]] is CCW on screen.
    # Sh * R:
    sr00, sr01 = cos_t - shear_t * sin_t, sin_t + shear_t * cos_t
    sr10, sr11 = -sin_t, cos_t
    a00, a01 = zoom * sr00 * fx, zoom * sr01 * fy
    a10, a11 = zoom * sr10 * fx, zoom * sr11 * fy
    # Crop stretch C: p1 = (p - (x0, y0)) * (W / cw, H / ch).
    sx, sy = width / cw, height / ch
    # forward = T(c + t) A T(-c) C
    f00, f01 = a00 * sx, a01 * sy
    f10, f11 = a10 * sx, a11 * sy
    off_x = -(a00 * cx + a01 * cy) + cx + tx
    off_y = -(a10 * cx + a11 * cy) + cy + ty
    f02 = off_x - f00 * x0 - f01 * y0
    f12 = off_y - f10 * x0 - f11 * y0
    forward = _matrix([[f00, f01, f02], [f10, f11, f12], [zero, zero, one]])

    # Inverse: C^-1 T(c) A^-1 T(-(c + t)), A^-1 = F R^-1 Sh^-1 Z^-1 (each exact).
    inv_zoom = 1.0 / zoom
    # R^-1 Sh^-1 = [[c, -s], [s, c]] [[1, -k], [0, 1]]
    rs00, rs01 = cos_t, -cos_t * shear_t - sin_t
    rs10, rs11 = sin_t, -sin_t * shear_t + cos_t
    b00, b01 = fx * rs00 * inv_zoom, fx * rs01 * inv_zoom
    b10, b11 = fy * rs10 * inv_zoom, fy * rs11 * inv_zoom
    ux, uy = cx + tx, cy + ty
    p02 = -(b00 * ux + b01 * uy) + cx
    p12 = -(b10 * ux + b11 * uy) + cy
    isx, isy = cw / width, ch / height
    matrix = _matrix([[b00 * isx, b01 * isx, p02 * isx + x0],
                      [b10 * isy, b11 * isy, p12 * isy + y0],
                      [zero, zero, one]])
    return matrix, forward


def invert_matrices(matrix: tf.Tensor) -> tf.Tensor:
    """Inverse of each [B, 3, 3] matrix by the adjugate (closed form, XLA-friendly)."""
    a, b, c, d, e, f, g, h, i = _entries(tf.convert_to_tensor(matrix, tf.float32))
    co00, co01, co02 = e * i - f * h, -(d * i - f * g), d * h - e * g
    det = a * co00 + b * co01 + c * co02
    adj = _matrix([[co00, -(b * i - c * h), b * f - c * e],
                   [co01, a * i - c * g, -(a * f - c * d)],
                   [co02, -(a * h - b * g), a * e - b * d]])
    return adj / det[:, None, None]


def map_points(matrix: tf.Tensor, points: tf.Tensor) -> tf.Tensor:
    """Applies [B, 3, 3] matrices to points [B, P, 2] given as (x, y) in pixel units."""
    x, y = tf.unstack(tf.convert_to_tensor(points, tf.float32), 2, axis=-1)
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = _entries(
        tf.convert_to_tensor(matrix, tf.float32), trailing=(1,))  # each [B, 1]
    new_x = m00 * x + m01 * y + m02
    new_y = m10 * x + m11 * y + m12
    w = m20 * x + m21 * y + m22
    return tf.stack([new_x / w, new_y / w], axis=-1)


def _fill_index(index: tf.Tensor, size: tf.Tensor, fill_mode: str):
    """Maps integer-valued float32 indices outside [0, size) (float32) per fill mode; returns
    (int32 index, inside mask). Float arithmetic is exact here (integers far below 2**24) and,
    unlike an integer floormod, vectorizes (XLA:CPU ran the integer version slower with
    per-image sizes; docs/benchmarks.md)."""
    inside = (index >= 0.0) & (index < size)
    if fill_mode == "reflect":  # half-sample symmetric: d c b a | a b c d | d c b a
        period = index - 2.0 * size * tf.floor(index / (2.0 * size))
        index = tf.where(period >= size, 2.0 * size - 1.0 - period, period)
    elif fill_mode == "wrap":
        index = index - size * tf.floor(index / size)
    else:  # nearest, and constant (masked by `inside` later)
        index = tf.clip_by_value(index, 0.0, size - 1.0)
    return tf.cast(index, tf.int32), inside


def warp_images(images: tf.Tensor, matrix: tf.Tensor, interpolation: str = "bilinear",
                fill_mode: str = "reflect", fill_value: float = 0.0,
                displacement: tf.Tensor | None = None, output_size=None,
                source_size: tf.Tensor | None = None) -> tf.Tensor:
    """Resamples images [B, H, W, C] through output->input `matrix` [B, 3, 3] in one pass.

    `displacement` (optional, float32 [B, H_out, W_out, 2] as (dx, dy) in input pixels) is added
    to the mapped coordinates (elastic deformation in the same pass). Points outside the input
    follow `fill_mode`: constant (`fill_value`), reflect (half-sample symmetric), nearest (edge),
    wrap. An integer-aligned matrix (flips, quarter turns, integer shifts) reproduces pixels
    exactly.

    `output_size` (static (height, width); default the input's) lets the output differ from the
    input, so a resize folds into the same pass. `source_size` (int32 [B, 2], optional) is the
    valid (height, width) at the top-left of each input when the inputs are padded canvases of
    different images: fill modes then act at each image's own border. uint8 inputs give float32
    outputs in [0, 1] (interpolated on the 0-255 values, then divided by 255, like the reader's
    resize).
    """
    if fill_mode not in FILL_MODES[1:]:  # `auto` is resolved by GeometryOp, which sees boxes
        raise ValueError(f"Unknown fill_mode {fill_mode!r}. Expected one of {FILL_MODES[1:]}. "
                         f"Received: fill_mode={fill_mode!r}")
    images = tf.convert_to_tensor(images)
    batch, in_height, in_width, channels = tf.unstack(tf.shape(images), 4)
    out_height, out_width = (in_height, in_width) if output_size is None else output_size
    ys = tf.cast(tf.range(out_height), tf.float32) + 0.5
    xs = tf.cast(tf.range(out_width), tf.float32) + 0.5
    grid_y, grid_x = tf.meshgrid(ys, xs, indexing="ij")  # [H_out, W_out]
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = _entries(matrix, trailing=(1, 1))
    src_x = m00 * grid_x + m01 * grid_y + m02  # [B, 1, 1] entries: [B, H_out, W_out]
    src_y = m10 * grid_x + m11 * grid_y + m12
    src_w = m20 * grid_x + m21 * grid_y + m22
    src_x, src_y = src_x / src_w, src_y / src_w
    if displacement is not None:
        # Sliced: unstacked, grappler sums differently uncompiled (batches move by ~1e-6).
        src_x = src_x + displacement[..., 0]
        src_y = src_y + displacement[..., 1]
    # Back to index space: the centre of pixel j is at j + 0.5. Points beyond 2**22 px (only a
    # degenerate matrix gets there) are clamped so the float index arithmetic stays exact.
    limit = float(1 << 22)
    src_x = tf.clip_by_value(src_x - 0.5, -limit, limit)
    src_y = tf.clip_by_value(src_y - 0.5, -limit, limit)

    if source_size is None:
        height, width = in_height, in_width
    else:  # each [B, 1, 1]
        height, width = tf.unstack(tf.reshape(tf.cast(source_size, tf.int32), [-1, 2, 1, 1]),
                                   2, axis=1)
    height, width = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    flat = tf.reshape(images, [-1, channels])
    base = tf.reshape(tf.range(batch) * in_height * in_width, [-1, 1, 1])
    from_bytes = images.dtype == tf.uint8
    dtype = tf.float32 if from_bytes else images.dtype
    fill = tf.cast(fill_value * 255.0 if from_bytes else fill_value, dtype)

    # Each row and column index is mapped once and shared by the taps that read it.
    def row(y):
        iy, inside_y = _fill_index(y, height, fill_mode)
        return base + iy * in_width, inside_y

    def column(x):
        return _fill_index(x, width, fill_mode)

    def tap(row_, column_):
        (start, inside_y), (ix, inside_x) = row_, column_
        values = tf.cast(tf.gather(flat, start + ix), dtype)  # [B, H, W, C]
        if fill_mode == "constant":
            values = tf.where(tf.expand_dims(inside_y & inside_x, -1), values, fill)
        return values

    def finish(values):
        return tf.clip_by_value(values / 255.0, 0.0, 1.0) if from_bytes else values

    if interpolation == "nearest":
        return finish(tap(row(tf.floor(src_y + 0.5)), column(tf.floor(src_x + 0.5))))
    if interpolation != "bilinear":
        raise ValueError(
            f"Unknown interpolation {interpolation!r}. Expected one of ('bilinear', 'nearest')."
            f" Received: interpolation={interpolation!r}")
    y0f, x0f = tf.floor(src_y), tf.floor(src_x)
    wy, wx = tf.expand_dims(src_y - y0f, -1), tf.expand_dims(src_x - x0f, -1)
    y0, y1 = row(y0f), row(y0f + 1.0)
    x0, x1 = column(x0f), column(x0f + 1.0)
    left = 1.0 - wx
    top = tap(y0, x0) * left + tap(y0, x1) * wx
    bottom = tap(y1, x0) * left + tap(y1, x1) * wx
    return finish(top * (1.0 - wy) + bottom * wy)


def source_matrices(source_size, output_size) -> tf.Tensor:
    """float32 [B, 3, 3] scaling an output frame of `output_size` (h, w) onto each source of
    `source_size` int32 [B, 2] (h, w): the resize the reader would do, as a matrix. Composed as
    `source_matrices(...) @ matrix`, a warp from the source equals resize-then-warp in one pass;
    alone (with fill mode nearest) it is `tf.image.resize` bilinear to float rounding."""
    size_y, size_x = tf.unstack(tf.cast(source_size, tf.float32), 2, axis=1)
    sy = size_y / float(output_size[0])
    sx = size_x / float(output_size[1])
    one = tf.ones_like(sx)
    zero = tf.zeros_like(sx)
    return _matrix([[sx, zero, zero], [zero, sy, zero], [zero, zero, one]])


def compact_boxes(boxes: tf.Tensor, box_labels: tf.Tensor, keep: tf.Tensor):
    """Moves kept rows to the front (stable), pads the rest; returns (boxes, labels, count).

    Padded rows are boxes of zeros with label `BOX_PADDING_LABEL`; count is int32 [B].
    """
    _, n = tf.unstack(tf.shape(keep), 2)
    position = tf.range(n)  # [N], broadcast over the batch
    # Kept rows first, each group in order: a stable argsort of (kept ? i : i + N), as one
    # top_k of distinct keys (tf.argsort wraps the same top_k in ~13 ops).
    order = tf.math.top_k(tf.where(keep, n - position, -position), k=n).indices
    kept = tf.gather(keep, order, batch_dims=1)
    boxes = tf.where(tf.expand_dims(kept, -1), tf.gather(boxes, order, batch_dims=1), 0.0)
    padding = tf.cast(BOX_PADDING_LABEL, box_labels.dtype)
    labels = tf.where(kept, tf.gather(box_labels, order, batch_dims=1), padding)
    return boxes, labels, tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)


def transform_boxes(boxes, box_labels, num_boxes, forward, height, width,
                    min_area: float = 0.0):
    """Moves normalized boxes [B, N, 4] (ymin, xmin, ymax, xmax) with input->output `forward`.

    Each box's 4 corners are mapped, the enclosing box is taken and clipped to the image; a box
    is kept when it is a real row (index < `num_boxes`), its clipped area is > 0 and at least
    `min_area` of its unclipped transformed area. Kept boxes move to the front in their
    original order. Returns (boxes, box_labels, num_boxes) with the same shapes.
    """
    boxes = tf.convert_to_tensor(boxes, tf.float32)
    h = tf.cast(height, tf.float32)
    w = tf.cast(width, tf.float32)
    ymin, xmin, ymax, xmax = tf.unstack(boxes, 4, axis=-1)
    left, right, top, bottom = xmin * w, xmax * w, ymin * h, ymax * h
    corners = tf.stack([left, top, right, top, left, bottom, right, bottom],
                       axis=-1)  # [B, N, 8]: 4 corners (x, y)
    batch, n, _ = tf.unstack(tf.shape(boxes), 3)
    mapped = tf.reshape(map_points(forward, tf.reshape(corners, [batch, -1, 2])),
                        [batch, n, 4, 2])
    mapped_x, mapped_y = tf.unstack(mapped, 2, axis=-1)  # [B, N, 4]
    new_xmin = tf.reduce_min(mapped_x, axis=2) / w
    new_xmax = tf.reduce_max(mapped_x, axis=2) / w
    new_ymin = tf.reduce_min(mapped_y, axis=2) / h
    new_ymax = tf.reduce_max(mapped_y, axis=2) / h
    area = (new_ymax - new_ymin) * (new_xmax - new_xmin)
    clipped = tf.clip_by_value(tf.stack([new_ymin, new_xmin, new_ymax, new_xmax], -1), 0.0, 1.0)
    clipped_ymin, clipped_xmin, clipped_ymax, clipped_xmax = tf.unstack(clipped, 4, axis=-1)
    clipped_area = (clipped_ymax - clipped_ymin) * (clipped_xmax - clipped_xmin)
    real = tf.range(n) < tf.expand_dims(tf.cast(num_boxes, tf.int32), -1)
    keep = real & (clipped_area > 0) & (clipped_area >= min_area * area)
    return compact_boxes(clipped, box_labels, keep)


class GeometryOp:
    """Random geometry from a `GeometryConfig`: sample the matrix, then warp and move boxes.

    Parameter dict (all per sample, B = batch size): `flip_horizontal`, `flip_vertical` bool
    [B]; `rot90` int32 [B]; `angle`, `shear` (radians), `scale` float32 [B]; `translate`
    float32 [B, 2] (ty, tx fractions); `crop` float32 [B, 4] (y0, x0, h, w input pixels);
    `matrix` float32 [B, 3, 3] (output -> input, the only key `apply` needs), and, when elastic
    is on, `displacement_grid` float32 [B, g, g, 2] (dx, dy input pixels, upsampled bilinearly).

    Source batches: instead of `images`, a batch may carry `source` (uint8 [B, Hc, Wc, 3]
    canvases, each decoded image at its top-left) and `source_size` (int32 [B, 2], each image's
    (height, width)); `apply` then warps straight from the decoded images to `output_size`,
    the resize folded into the one resampling pass (what `make_dataset` does), and drops the
    two keys. The matrix and boxes stay in the output frame: `matrix` maps an output pixel to
    the pixel of the `output_size` image (the reader's resize) it came from.

    Fill: `GeometryConfig.fill_mode_for` (auto: constant for a batch with boxes); an explicit
    fill mode that copies objects into the padding of a boxed batch is logged once per op.
    """
    name = "geometry"

    def __init__(self, config: GeometryConfig, output_size=None):
        self.config = config
        self.output_size = None if output_size is None else tuple(int(v) for v in output_size)
        self._warned = False

    def sample(self, batch_size, image_size, seed) -> dict:
        cfg = self.config
        height, width = image_size
        h = tf.cast(height, tf.float32)
        w = tf.cast(width, tf.float32)
        # One [B, 12] draw, its columns taken apart once (column 11 is unused).
        u = tf.unstack(seeds_lib.uniform([batch_size, 12], seeds_lib.fold_in_name(
            seed, self.name)), 12, axis=1)
        flip_horizontal = u[0] < cfg.horizontal_flip
        flip_vertical = u[1] < cfg.vertical_flip
        if cfg.rot90:
            rot90 = tf.minimum(tf.cast(tf.floor(u[2] * 4.0), tf.int32), 3)
        else:
            rot90 = tf.zeros([batch_size], tf.int32)
        max_angle = math.radians(cfg.rotation_degrees)
        angle = (2.0 * u[3] - 1.0) * max_angle
        max_shear = math.radians(cfg.shear_degrees)
        shear = (2.0 * u[4] - 1.0) * max_shear
        low, high = cfg.scale
        scale = low + (high - low) * u[5]
        translate = (2.0 * tf.stack(u[6:8], axis=1) - 1.0) * cfg.translate
        # Random-resized crop: area fraction and log-uniform aspect, clamped to the image.
        do_crop = u[8] < cfg.crop_probability
        area = cfg.crop_area[0] + (cfg.crop_area[1] - cfg.crop_area[0]) * u[9]
        log_lo, log_hi = math.log(cfg.crop_aspect_ratio[0]), math.log(cfg.crop_aspect_ratio[1])
        ratio = tf.exp(log_lo + (log_hi - log_lo) * u[10])
        crop_w = tf.minimum(tf.sqrt(area * h * w * ratio), w)
        crop_h = tf.minimum(tf.sqrt(area * h * w / ratio), h)
        crop_w = tf.where(do_crop, crop_w, w)
        crop_h = tf.where(do_crop, crop_h, h)
        position_y, position_x = tf.unstack(seeds_lib.uniform(
            [batch_size, 2], seeds_lib.fold_in_name(seed, self.name + "/crop")), 2, axis=1)
        crop_y = (h - crop_h) * position_y
        crop_x = (w - crop_w) * position_x
        crop = tf.stack([crop_y, crop_x, crop_h, crop_w], axis=-1)
        matrix, _ = compose_matrices(
            height, width, flip_horizontal=flip_horizontal, flip_vertical=flip_vertical,
            rot90=rot90, angle=angle, shear=shear, scale=scale, translate=translate, crop=crop)
        params = {"flip_horizontal": flip_horizontal, "flip_vertical": flip_vertical,
                  "rot90": rot90, "angle": angle, "shear": shear, "scale": scale,
                  "translate": translate, "crop": crop, "matrix": matrix}
        if cfg.elastic_alpha > 0:
            grid = cfg.elastic_grid
            params["displacement_grid"] = cfg.elastic_alpha * seeds_lib.uniform(
                [batch_size, grid, grid, 2], seeds_lib.fold_in_name(seed, self.name + "/elastic"),
                minval=-1.0, maxval=1.0)
        return params

    def apply(self, batch: dict, params: dict) -> dict:
        cfg = self.config
        out = dict(batch)
        matrix = tf.cast(params["matrix"], tf.float32)
        if "source" in batch:
            source, source_size = out.pop("source"), out.pop("source_size")
            height, width = self._output_size()
            to_source = source_matrices(source_size, (height, width))
            sampling = tf.matmul(to_source, matrix)
        else:
            source, source_size, sampling, to_source = batch["images"], None, matrix, None
            _, height, width, _ = tf.unstack(tf.shape(source), 4)
        displacement = None
        if "displacement_grid" in params:
            displacement = tf.image.resize(params["displacement_grid"], [height, width],
                                           method="bilinear")
            if to_source is not None:  # output-frame pixels -> source pixels: (sx, sy)
                scales = _entries(to_source, trailing=(1, 1, 1))  # each [B, 1, 1, 1]
                displacement = displacement * tf.concat([scales[0], scales[4]], -1)
        with_boxes = "boxes" in batch
        warning = cfg.unboxed_copies_warning() if with_boxes else None
        if warning and not self._warned:  # at trace time: once per op, not per batch
            self._warned = True
            _LOG.warning(warning)
        out["images"] = warp_images(
            source, sampling, cfg.interpolation, cfg.fill_mode_for(with_boxes), cfg.fill_value,
            displacement, None if to_source is None else (height, width), source_size)
        previous = batch.get("matrix")
        # Chained geometry composes: output -> this op's input -> the original input.
        out["matrix"] = matrix if previous is None else tf.matmul(previous, matrix)
        if "boxes" in batch:
            out["boxes"], out["box_labels"], out["num_boxes"] = transform_boxes(
                batch["boxes"], batch["box_labels"], batch["num_boxes"],
                invert_matrices(matrix), height, width, cfg.min_box_area)
        return out

    def _output_size(self) -> tuple[int, int]:
        if self.output_size is None:
            raise ValueError(
                "A source batch (keys 'source', 'source_size') needs the output size: build the "
                "op with GeometryOp(config, output_size=(height, width)) or the augmenter with "
                "build_batch_augmenter(..., image_size=...). Received: output_size=None")
        return self.output_size


def resize_from_source(source, source_size, output_size) -> tf.Tensor:
    """float32 [B, h, w, 3] in [0, 1] from a source batch (see `GeometryOp`): each image
    resized bilinearly to `output_size` (h, w), equal to the reader's `tf.image.resize` to
    float rounding. What an unaugmented source batch becomes."""
    return warp_images(source, source_matrices(source_size, output_size), "bilinear", "nearest",
                       output_size=output_size, source_size=source_size)
