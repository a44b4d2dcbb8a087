"""transforms.online.geometry: the fused matrix, the gather-based warp, boxes, fill modes."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from configs.online import GeometryConfig
from transforms.online import geometry
from transforms.online.seeds import step_seed

SIZE = 16


def _matrices(batch=1, height=SIZE, width=SIZE, **overrides):
    """compose_matrices with identity defaults; overrides are per-sample Python lists."""
    params = dict(flip_horizontal=[0] * batch, flip_vertical=[0] * batch, rot90=[0] * batch,
                  angle=[0.0] * batch, shear=[0.0] * batch, scale=[1.0] * batch,
                  translate=[[0.0, 0.0]] * batch,
                  crop=[[0.0, 0.0, float(height), float(width)]] * batch)
    params.update(overrides)
    tensors = {k: tf.constant(v, tf.int32 if k == "rot90" else tf.float32)
               for k, v in params.items()}
    return geometry.compose_matrices(height, width, **tensors)


def _ramp_image(batch=1, height=SIZE, width=SIZE):
    values = np.arange(batch * height * width * 3, dtype=np.float32)
    return values.reshape(batch, height, width, 3)


def _boxes(*rows):
    boxes = tf.constant([[list(r) for r in rows]], tf.float32)
    return boxes, tf.constant([list(range(1, len(rows) + 1))], tf.int64), tf.constant([len(rows)])


def test_quarter_turn_rotates_image_and_known_box_exactly():
    matrix, forward = _matrices(rot90=[1])
    image = _ramp_image()
    warped = geometry.warp_images(image, matrix).numpy()
    np.testing.assert_array_equal(warped, np.rot90(image, k=1, axes=(1, 2)))  # CCW on screen
    boxes, labels, count = _boxes((0.25, 0.125, 0.5, 0.375))
    moved, _, kept = geometry.transform_boxes(boxes, labels, count, forward, SIZE, SIZE)
    np.testing.assert_array_equal(moved.numpy(), [[[0.625, 0.25, 0.875, 0.5]]])
    assert kept.numpy().tolist() == [1]


def test_horizontal_flip_mirrors_image_and_box_exactly():
    matrix, forward = _matrices(flip_horizontal=[1])
    image = _ramp_image()
    np.testing.assert_array_equal(geometry.warp_images(image, matrix).numpy(),
                                  image[:, :, ::-1])
    boxes, labels, count = _boxes((0.25, 0.125, 0.5, 0.375))
    moved, _, _ = geometry.transform_boxes(boxes, labels, count, forward, SIZE, SIZE)
    np.testing.assert_array_equal(moved.numpy(), [[[0.25, 0.625, 0.5, 0.875]]])


def test_vertical_flip_mirrors_rows_exactly():
    matrix, _ = _matrices(flip_vertical=[1])
    image = _ramp_image()
    np.testing.assert_array_equal(geometry.warp_images(image, matrix).numpy(),
                                  image[:, ::-1])


def test_scale_two_zooms_about_the_centre_exactly():
    matrix, forward = _matrices(scale=[2.0])
    # A linear ramp is reproduced exactly by bilinear sampling: out(j) = input coordinate.
    ramp = np.tile(np.arange(SIZE, dtype=np.float32)[None, None, :, None], (1, SIZE, 1, 3))
    warped = geometry.warp_images(ramp, matrix).numpy()
    expected_columns = np.arange(SIZE, dtype=np.float32) / 2.0 + 3.75
    np.testing.assert_array_equal(warped[0, 5, :, 0], expected_columns)
    nearest = geometry.warp_images(_ramp_image(), matrix, interpolation="nearest").numpy()
    index = np.floor(np.arange(SIZE) / 2.0 + 4.25).astype(int)
    np.testing.assert_array_equal(nearest, _ramp_image()[:, index][:, :, index])
    boxes, labels, count = _boxes((0.25, 0.25, 0.75, 0.75), (0.5, 0.5, 0.75, 0.75))
    moved, _, kept = geometry.transform_boxes(boxes, labels, count, forward, SIZE, SIZE)
    np.testing.assert_array_equal(moved.numpy(), [[[0.0, 0.0, 1.0, 1.0], [0.5, 0.5, 1.0, 1.0]]])
    assert kept.numpy().tolist() == [2]


def test_matrix_maps_an_output_pixel_back_to_where_it_came_from():
    matrix, forward = _matrices(rot90=[1], translate=[[0.125, -0.0625]])  # 2 px down, 1 left
    image = np.zeros((1, SIZE, SIZE, 3), np.float32)
    image[0, 3, 5] = 1.0  # row 3, column 5
    warped = geometry.warp_images(image, matrix, fill_mode="constant").numpy()
    rows, cols = np.nonzero(warped[0, :, :, 0])
    assert len(rows) == 1 and warped[0, rows[0], cols[0], 0] == 1.0
    out_centre = [[[cols[0] + 0.5, rows[0] + 0.5]]]
    np.testing.assert_array_equal(geometry.map_points(matrix, out_centre).numpy(),
                                  [[[5.5, 3.5]]])
    np.testing.assert_array_equal(geometry.map_points(forward, [[[5.5, 3.5]]]).numpy(),
                                  out_centre)
    np.testing.assert_array_equal(geometry.invert_matrices(matrix).numpy(), forward.numpy())


def test_warp_samples_exactly_where_a_general_matrix_points():
    op = geometry.GeometryOp(GeometryConfig(rotation_degrees=30.0, scale=(0.8, 1.3),
                                            translate=0.1, shear_degrees=10.0,
                                            crop_probability=1.0, interpolation="nearest",
                                            fill_mode="constant", fill_value=0.0))
    params = op.sample(3, (SIZE, SIZE), step_seed(0, 0, 0))
    image = _ramp_image(3) + 1.0  # every pixel unique and non-zero
    warped = geometry.warp_images(image, params["matrix"], "nearest", "constant").numpy()
    grid_y, grid_x = np.meshgrid(np.arange(SIZE) + 0.5, np.arange(SIZE) + 0.5, indexing="ij")
    points = np.stack([grid_x.ravel(), grid_y.ravel()], -1)[None].repeat(3, 0)
    source = geometry.map_points(params["matrix"], points).numpy()
    col = np.floor(source[..., 0]).astype(int)
    row = np.floor(source[..., 1]).astype(int)
    inside = (row >= 0) & (row < SIZE) & (col >= 0) & (col < SIZE)
    expected = np.zeros((3, SIZE * SIZE), np.float32)
    for b in range(3):
        expected[b, inside[b]] = image[b, row[b, inside[b]], col[b, inside[b]], 0]
    agree = np.mean(expected == warped[..., 0].reshape(3, -1))
    assert agree > 0.99  # only points within float rounding of a pixel edge may differ


def test_composed_matrix_and_forward_are_inverses():
    matrix, forward = _matrices(batch=2, flip_horizontal=[1, 0], flip_vertical=[0, 1],
                                rot90=[3, 2], angle=[0.3, -0.7], shear=[0.1, -0.2],
                                scale=[1.3, 0.7], translate=[[0.1, -0.2], [0.0, 0.3]],
                                crop=[[1.0, 2.0, 10.0, 12.0], [0.0, 0.0, 16.0, 8.0]])
    product = tf.matmul(matrix, forward).numpy()
    np.testing.assert_allclose(product, np.broadcast_to(np.eye(3), (2, 3, 3)), atol=1e-5)
    np.testing.assert_allclose(geometry.invert_matrices(matrix).numpy(), forward.numpy(),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fill_mode,first_columns", [
    ("constant", [0.0, 0.0]),
    ("nearest", [1.0, 1.0]),
    ("reflect", [2.0, 1.0]),
    ("wrap", [7.0, 8.0]),
])
def test_fill_modes_when_shifting_right_by_two_pixels(fill_mode, first_columns):
    width = 8
    image = np.tile(np.arange(1, width + 1, dtype=np.float32)[None, None, :, None],
                    (1, 4, 1, 3))
    matrix, _ = _matrices(height=4, width=width, translate=[[0.0, 0.25]])
    warped = geometry.warp_images(image, matrix, fill_mode=fill_mode, fill_value=0.0).numpy()
    np.testing.assert_array_equal(warped[0, 2, :, 1], first_columns + [1, 2, 3, 4, 5, 6])


def test_constant_fill_uses_fill_value():
    image = np.ones((1, 4, 8, 3), np.float32) * 0.25
    matrix, _ = _matrices(height=4, width=8, translate=[[0.0, 0.25]])
    warped = geometry.warp_images(image, matrix, fill_mode="constant", fill_value=0.5).numpy()
    np.testing.assert_array_equal(warped[0, 0, :, 0], [0.5, 0.5] + [0.25] * 6)


def test_boxes_are_clipped_dropped_below_min_area_and_compacted():
    boxes = tf.constant([[[0.0, 0.5, 0.5, 1.0],     # keeps 1/2 of its area
                          [0.0, 0.7, 0.5, 0.95],    # keeps 1/5: dropped
                          [0.5, 0.0, 1.0, 0.2],     # fully inside
                          [0.0, 0.0, 0.0, 0.0]]], tf.float32)  # padding
    labels = tf.constant([[3, 4, 5, 0]], tf.int64)
    _, forward = _matrices(translate=[[0.0, 0.25]])
    moved, moved_labels, count = geometry.transform_boxes(boxes, labels, tf.constant([3]),
                                                          forward, SIZE, SIZE, min_area=0.25)
    np.testing.assert_allclose(moved.numpy(), [[[0.0, 0.75, 0.5, 1.0], [0.5, 0.25, 1.0, 0.45],
                                                [0, 0, 0, 0], [0, 0, 0, 0]]], atol=1e-6)
    assert moved_labels.numpy().tolist() == [[3, 5, -1, -1]]
    assert count.numpy().tolist() == [2]


def test_padding_rows_are_never_kept_even_if_they_hold_a_box():
    boxes = tf.constant([[[0.1, 0.1, 0.4, 0.4], [0.2, 0.2, 0.6, 0.6]]], tf.float32)
    _, forward = _matrices()
    _, labels, count = geometry.transform_boxes(boxes, tf.constant([[7, 8]]), tf.constant([1]),
                                                forward, SIZE, SIZE)
    assert labels.numpy().tolist() == [[7, -1]] and count.numpy().tolist() == [1]


def test_elastic_displacement_of_one_pixel_shifts_the_image():
    op = geometry.GeometryOp(GeometryConfig(fill_mode="nearest"))
    image = _ramp_image()
    params = {"matrix": tf.eye(3, batch_shape=[1]),
              "displacement_grid": tf.concat([tf.ones([1, 4, 4, 1]), tf.zeros([1, 4, 4, 1])],
                                             axis=-1)}
    out = op.apply({"images": tf.constant(image)}, params)["images"].numpy()
    expected = np.concatenate([image[:, :, 1:], image[:, :, -1:]], axis=2)
    np.testing.assert_array_equal(out, expected)


def test_sampled_params_repeat_for_the_same_seed_and_differ_for_another():
    op = geometry.GeometryOp(GeometryConfig(rotation_degrees=20.0, crop_probability=0.5,
                                            elastic_alpha=2.0))
    first = op.sample(4, (SIZE, SIZE), step_seed(0, 0, 1))
    again = op.sample(4, (SIZE, SIZE), step_seed(0, 0, 1))
    other = op.sample(4, (SIZE, SIZE), step_seed(0, 0, 2))
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), again[key].numpy())
    assert not np.array_equal(first["matrix"].numpy(), other["matrix"].numpy())


def test_sample_draws_within_the_configured_ranges():
    config = GeometryConfig(horizontal_flip=1.0, rotation_degrees=10.0, scale=(1.0, 1.5),
                            translate=0.0, crop_probability=1.0, crop_area=(0.25, 0.25),
                            crop_aspect_ratio=(1.0, 1.0), rot90=True)
    params = geometry.GeometryOp(config).sample(64, (SIZE, SIZE), step_seed(3, 0, 0))
    assert params["flip_horizontal"].numpy().all()
    assert np.abs(params["angle"].numpy()).max() <= np.radians(10.0) + 1e-6
    scale = params["scale"].numpy()
    assert scale.min() >= 1.0 and scale.max() <= 1.5
    assert set(params["rot90"].numpy().tolist()) == {0, 1, 2, 3}
    np.testing.assert_allclose(params["crop"].numpy()[:, 2:], 8.0, atol=1e-5)  # 1/4 area


def test_apply_composes_an_incoming_matrix():
    op = geometry.GeometryOp(dataclasses.replace(GeometryConfig(), fill_mode="nearest"))
    flip, _ = _matrices(flip_horizontal=[1])
    turn, _ = _matrices(rot90=[1])
    out = op.apply({"images": tf.constant(_ramp_image()), "matrix": flip}, {"matrix": turn})
    np.testing.assert_array_equal(out["matrix"].numpy(), tf.matmul(flip, turn).numpy())


def test_unknown_interpolation_is_rejected():
    with pytest.raises(ValueError, match="Unknown interpolation 'bicubic'"):
        geometry.warp_images(_ramp_image(), tf.eye(3, batch_shape=[1]), "bicubic")


def test_warp_compiles_under_xla_and_agrees_with_eager():
    matrix, _ = _matrices(batch=2, angle=[0.3, -0.2], scale=[1.1, 0.9])
    image = tf.constant(np.random.default_rng(0).random((2, SIZE, SIZE, 3)), tf.float32)
    eager = geometry.warp_images(image, matrix, fill_mode="reflect")
    compiled = tf.function(lambda x, m: geometry.warp_images(x, m, fill_mode="reflect"),
                           jit_compile=True, autograph=False)(image, matrix)
    np.testing.assert_allclose(compiled.numpy(), eager.numpy(), atol=1e-5)


# ------------------------------------------------------------------ source canvases (resize folded)

def _canvas(images, canvas=(12, 12)):
    """uint8 [B, *canvas, 3] with each image at the top-left, and the int32 [B, 2] sizes."""
    out = np.zeros((len(images), *canvas, 3), np.uint8)
    for index, image in enumerate(images):
        out[index, :image.shape[0], :image.shape[1]] = image
    return out, np.array([image.shape[:2] for image in images], np.int32)


def _bytes_image(height, width, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3)).astype(np.uint8)


@pytest.mark.parametrize("source,output", [((8, 10), (4, 5)), ((6, 4), (9, 8))])
def test_resize_from_source_equals_tf_image_resize(source, output):
    canvas, sizes = _canvas([_bytes_image(*source)])
    expected = np.clip(tf.image.resize(canvas[:, :source[0], :source[1]], output).numpy() / 255.0,
                       0.0, 1.0)
    actual = geometry.resize_from_source(canvas, sizes, output).numpy()
    np.testing.assert_allclose(actual, expected, atol=1e-6)


def test_warp_from_a_larger_source_equals_resize_then_flip():
    canvas, sizes = _canvas([_bytes_image(8, 8)])
    flip, _ = _matrices(height=4, width=4, flip_horizontal=[1])
    folded = geometry.warp_images(canvas, geometry.source_matrices(sizes, (4, 4)) @ flip,
                                  output_size=(4, 4), source_size=sizes).numpy()
    resized = geometry.resize_from_source(canvas, sizes, (4, 4)).numpy()
    np.testing.assert_allclose(folded, resized[:, :, ::-1], atol=1e-6)


def test_source_sizes_keep_the_fill_at_each_images_own_border():
    """Two sizes on one canvas, shifted right by 2 px with reflect: each equals the image
    warped alone, so the canvas padding is never sampled."""
    images = [_bytes_image(6, 8, seed=1), _bytes_image(5, 4, seed=2)]
    canvas, sizes = _canvas(images)
    for index, image in enumerate(images):
        height, width = image.shape[:2]
        shift, _ = _matrices(height=height, width=width, translate=[[0.0, 2.0 / width]])
        on_canvas = geometry.warp_images(
            canvas[index:index + 1], shift, output_size=(height, width),
            source_size=sizes[index:index + 1]).numpy()
        alone = geometry.warp_images(image[None].astype(np.float32) / 255.0, shift).numpy()
        np.testing.assert_allclose(on_canvas, alone, atol=1e-6)
        np.testing.assert_array_equal(on_canvas[0, :, 2:], image[None, :, :-2][0] / np.float32(255))


def test_source_batch_without_an_output_size_is_rejected():
    canvas, sizes = _canvas([_bytes_image(8, 8)])
    op = geometry.GeometryOp(GeometryConfig())
    params = op.sample(1, (4, 4), step_seed(0, 0, 0))
    with pytest.raises(ValueError, match="output_size=None"):
        op.apply({"source": canvas, "source_size": sizes}, params)


def test_elastic_displacement_from_a_source_is_in_output_pixels():
    """A displacement of one output pixel moves a 2x larger source by two source pixels."""
    canvas, sizes = _canvas([_bytes_image(8, 8, seed=3)])
    op = geometry.GeometryOp(GeometryConfig(), output_size=(4, 4))
    grid = tf.constant([[[[1.0, 0.0]] * 2] * 2])  # dx = 1 everywhere
    out = op.apply({"source": canvas, "source_size": sizes},
                   {"matrix": tf.eye(3, batch_shape=[1]), "displacement_grid": grid})
    resized = geometry.resize_from_source(canvas, sizes, (4, 4)).numpy()
    np.testing.assert_allclose(out["images"].numpy()[:, :, :-1], resized[:, :, 1:], atol=1e-6)
