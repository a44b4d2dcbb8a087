"""transforms.online.augment: the batch augmenter end to end, the table of every op, configs, layer."""
import dataclasses
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from configs.online import GeometryConfig, MixConfig, OnlineConfig, PixelConfig
from configs.schema import ConfigError, config_from_dict, load_config
from tests.tiers import shared_fixture
from transforms.online import augment, geometry
from transforms.online.seeds import step_seed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, SIZE, CLASSES = 6, 16, 4

_NO_GEOMETRY = dict(horizontal_flip=0.0, rotation_degrees=0.0, scale=(1.0, 1.0), translate=0.0)
_NO_COLOR = dict(brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0)


def _config(geometry=None, pixel=None, mix=None, **online):
    """An OnlineConfig with only the given ops on (None: that section's ops all off)."""
    return OnlineConfig(
        image_size=(SIZE, SIZE),
        geometry=GeometryConfig(**{**_NO_GEOMETRY, **(geometry or {})}),
        pixel=PixelConfig(**{**_NO_COLOR, **(pixel or {})}),
        mix=MixConfig(**(mix or {"enabled": False})), **online)


def _batch(batch=BATCH, boxes=False):
    rng = np.random.default_rng(0)
    out = {"images": tf.constant(rng.uniform(0.05, 0.95, (batch, SIZE, SIZE, 3)), tf.float32),
           "labels": tf.one_hot(np.arange(batch) % CLASSES, CLASSES)}
    if boxes:
        out["boxes"] = tf.constant(np.tile([[[0.1, 0.1, 0.5, 0.5], [0.4, 0.3, 0.9, 0.8],
                                             [0.0, 0.0, 0.0, 0.0]]], (batch, 1, 1)), tf.float32)
        out["box_labels"] = tf.constant(np.tile([[1, 2, 0]], (batch, 1)), tf.int64)
        out["num_boxes"] = tf.constant([2] * (batch - 1) + [1], tf.int32)
    return out


# One row per op: (row id, config, the ops it builds, the section that switches it off).
OP_TABLE = [
    ("horizontal_flip", _config(geometry={"horizontal_flip": 0.5}), ["geometry"], "geometry"),
    ("vertical_flip", _config(geometry={"vertical_flip": 0.5}), ["geometry"], "geometry"),
    ("rot90", _config(geometry={"rot90": True}), ["geometry"], "geometry"),
    ("rotation", _config(geometry={"rotation_degrees": 30.0}), ["geometry"], "geometry"),
    ("rotation_nearest_constant", _config(geometry={
        "rotation_degrees": 30.0, "interpolation": "nearest", "fill_mode": "constant"}),
     ["geometry"], "geometry"),
    ("rotation_wrap", _config(geometry={"rotation_degrees": 30.0, "fill_mode": "wrap"}),
     ["geometry"], "geometry"),
    ("rotation_edge", _config(geometry={"rotation_degrees": 30.0, "fill_mode": "nearest"}),
     ["geometry"], "geometry"),
    ("scale", _config(geometry={"scale": (0.7, 1.3)}), ["geometry"], "geometry"),
    ("translate", _config(geometry={"translate": 0.2}), ["geometry"], "geometry"),
    ("shear", _config(geometry={"shear_degrees": 20.0}), ["geometry"], "geometry"),
    ("resized_crop", _config(geometry={"crop_probability": 1.0}), ["geometry"], "geometry"),
    ("elastic", _config(geometry={"elastic_alpha": 2.0}), ["geometry"], "geometry"),
    ("brightness", _config(pixel={"brightness": 0.3}), ["color"], "pixel"),
    ("contrast", _config(pixel={"contrast": 0.5}), ["color"], "pixel"),
    ("saturation", _config(pixel={"saturation": 0.5}), ["color"], "pixel"),
    ("hue", _config(pixel={"hue": 0.2}), ["color"], "pixel"),
    ("gamma", _config(pixel={"gamma": (0.5, 2.0)}), ["gamma"], "pixel"),
    ("grayscale", _config(pixel={"grayscale_probability": 0.5}), ["grayscale"], "pixel"),
    ("blur", _config(pixel={"blur_probability": 0.5, "blur_sigma": (0.5, 1.5)}), ["blur"],
     "pixel"),
    ("jpeg", _config(pixel={"jpeg_probability": 0.5, "jpeg_quality": (10, 60)}), ["jpeg"],
     "pixel"),
    ("gaussian_noise", _config(pixel={"gaussian_noise_std": 0.1}), ["gaussian_noise"], "pixel"),
    ("speckle_noise", _config(pixel={"speckle_noise_std": 0.2}), ["speckle_noise"], "pixel"),
    ("mixup", _config(mix={"mixup_alpha": 0.4, "cutmix_alpha": 0.0, "lambda_mode": "sample"}),
     ["mix"], "mix"),
    ("cutmix", _config(mix={"mixup_alpha": 0.0, "cutmix_alpha": 1.0, "lambda_mode": "sample"}),
     ["mix"], "mix"),
]
ROW_IDS = [row[0] for row in OP_TABLE]


def _switched_off(config, section):
    part = getattr(config, section)
    return dataclasses.replace(config, **{section: dataclasses.replace(part, enabled=False)})


@pytest.mark.parametrize("row_id,config,op_names,section", OP_TABLE, ids=ROW_IDS)
def test_op_table_builds_only_that_op(row_id, config, op_names, section):
    assert augment.build_batch_augmenter(config, CLASSES).op_names == op_names


@pytest.mark.parametrize("row_id,config,op_names,section", OP_TABLE, ids=ROW_IDS)
def test_op_table_dtype_shape_range_and_labels(row_id, config, op_names, section):
    augmenter = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)
    batch = _batch(boxes=True)
    out = augmenter(batch, step_seed(0, 0, 0))
    images = out["images"].numpy()
    assert out["images"].dtype == tf.float32 and images.shape == (BATCH, SIZE, SIZE, 3)
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert out["matrix"].dtype == tf.float32 and out["matrix"].shape == (BATCH, 3, 3)
    np.testing.assert_allclose(out["labels"].numpy().sum(axis=1), 1.0, atol=1e-6)
    capacity = 6 if "mix" in op_names else 3
    assert out["boxes"].shape == (BATCH, capacity, 4)
    assert out["box_labels"].dtype == tf.int64 and out["num_boxes"].dtype == tf.int32
    assert not np.array_equal(images, batch["images"].numpy())


@pytest.mark.parametrize("row_id,config,op_names,section", OP_TABLE, ids=ROW_IDS)
def test_op_table_determinism_and_seed_sensitivity(row_id, config, op_names, section):
    batch = _batch()
    first = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)(
        batch, step_seed(5, 1, 2))
    fresh = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)(
        batch, step_seed(5, 1, 2))
    other = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)(
        batch, step_seed(5, 1, 3))
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), fresh[key].numpy())
    assert not np.array_equal(first["images"].numpy(), other["images"].numpy())


@pytest.mark.parametrize("row_id,config,op_names,section", OP_TABLE, ids=ROW_IDS)
def test_op_table_disabled_section_is_the_identity(row_id, config, op_names, section):
    augmenter = augment.build_batch_augmenter(_switched_off(config, section), CLASSES)
    assert augmenter.op_names == []
    batch = _batch(boxes=True)
    out = augmenter(batch, step_seed(0, 0, 0))
    np.testing.assert_array_equal(out["images"].numpy(), batch["images"].numpy())
    np.testing.assert_array_equal(out["labels"].numpy(), batch["labels"].numpy())
    expected_boxes = batch["boxes"].numpy()
    expected_boxes[-1, 1] = 0.0  # the last sample has 1 box: its second row is padding
    np.testing.assert_array_equal(out["boxes"].numpy(), expected_boxes)
    assert out["box_labels"].numpy()[-1].tolist() == [1, -1, -1]
    np.testing.assert_array_equal(out["matrix"].numpy(), np.broadcast_to(np.eye(3),
                                                                         (BATCH, 3, 3)))


# XLA compiles one program per augmenter (seconds each). The matrix ops (flips, rot90,
# rotation, scale, translate, shear, crop) and elastic all feed one warp, so they are compiled
# together; a sampler or fill mode that changes the program gets its own group. Every row of
# OP_TABLE is in exactly one group (test_xla_groups_cover_the_op_table).
XLA_GROUPS = [
    ("geometry", _config(geometry={
        "horizontal_flip": 0.5, "vertical_flip": 0.5, "rot90": True, "rotation_degrees": 30.0,
        "scale": (0.7, 1.3), "translate": 0.2, "shear_degrees": 20.0, "crop_probability": 1.0,
        "elastic_alpha": 2.0}),
     ["horizontal_flip", "vertical_flip", "rot90", "rotation", "scale", "translate", "shear",
      "resized_crop", "elastic"]),
    ("rotation_nearest_constant", OP_TABLE[ROW_IDS.index("rotation_nearest_constant")][1],
     ["rotation_nearest_constant"]),
    ("rotation_wrap", OP_TABLE[ROW_IDS.index("rotation_wrap")][1], ["rotation_wrap"]),
    ("rotation_edge", OP_TABLE[ROW_IDS.index("rotation_edge")][1], ["rotation_edge"]),
    ("pixel", _config(pixel={
        "brightness": 0.3, "contrast": 0.5, "saturation": 0.5, "hue": 0.2, "gamma": (0.5, 2.0),
        "grayscale_probability": 0.5, "blur_probability": 0.5, "blur_sigma": (0.5, 1.5),
        "gaussian_noise_std": 0.1, "speckle_noise_std": 0.2}),
     ["brightness", "contrast", "saturation", "hue", "gamma", "grayscale", "blur",
      "gaussian_noise", "speckle_noise"]),
    ("jpeg", OP_TABLE[ROW_IDS.index("jpeg")][1], ["jpeg"]),
    ("mixup", OP_TABLE[ROW_IDS.index("mixup")][1], ["mixup"]),
    ("cutmix", OP_TABLE[ROW_IDS.index("cutmix")][1], ["cutmix"]),
]


def test_xla_groups_cover_the_op_table():
    covered = [row for _, _, rows in XLA_GROUPS for row in rows]
    assert sorted(covered) == sorted(ROW_IDS)
    for _, config, rows in XLA_GROUPS:
        built = augment.build_batch_augmenter(config, CLASSES).op_names
        for row in rows:
            assert set(OP_TABLE[ROW_IDS.index(row)][2]) <= set(built), row


@pytest.mark.parametrize("group_id,config,rows", XLA_GROUPS, ids=[g[0] for g in XLA_GROUPS])
def test_op_table_xla_agrees_with_eager(group_id, config, rows):
    eager = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)
    compiled = augment.build_batch_augmenter(config, CLASSES, jit_compile=True)
    batch = _batch(boxes=True)
    params = eager.sample(BATCH, (SIZE, SIZE), step_seed(0, 0, 7))
    expected = eager.apply(batch, params)
    actual = compiled.apply(batch, params)
    if group_id == "jpeg":  # a DCT coefficient on a rounding edge may round the other way
        assert np.abs(actual["images"].numpy() - expected["images"].numpy()).mean() < 1e-3
    else:
        np.testing.assert_allclose(actual["images"].numpy(), expected["images"].numpy(),
                                   atol=1e-4)
    for key in ("labels", "boxes", "matrix"):
        np.testing.assert_allclose(actual[key].numpy(), expected[key].numpy(), atol=1e-5)


def test_base_config_as_one_xla_program_agrees_with_eager():
    config = dataclasses.replace(load_config().online, image_size=(SIZE, SIZE))
    augmenter = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)
    assert augmenter.op_names == ["geometry", "color", "mix"]
    batch = _batch(boxes=True)
    params = augmenter.sample(BATCH, (SIZE, SIZE), step_seed(1, 0, 0))
    expected = augmenter.apply(batch, params)
    actual = tf.function(augmenter.apply, jit_compile=True, autograph=False)(batch, params)
    for key in expected:
        np.testing.assert_allclose(actual[key].numpy(), expected[key].numpy(), atol=1e-4)


def test_hand_written_params_give_an_exact_flip():
    augmenter = augment.build_batch_augmenter(_config(geometry={"horizontal_flip": 0.5}),
                                              CLASSES, jit_compile=False)
    flip = tf.constant([[[-1.0, 0.0, SIZE], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]] * BATCH)
    batch = _batch()
    out = augmenter.apply(batch, {"augment": tf.constant(True), "geometry": {"matrix": flip}})
    np.testing.assert_array_equal(out["images"].numpy(), batch["images"].numpy()[:, :, ::-1])
    np.testing.assert_array_equal(out["matrix"].numpy(), flip.numpy())


def test_label_smoothing_is_explicit_and_exact():
    augmenter = augment.build_batch_augmenter(_config(label_smoothing=0.2), CLASSES)
    out = augmenter(_batch(batch=1), step_seed(0, 0, 0))
    np.testing.assert_allclose(out["labels"].numpy(), [[0.85, 0.05, 0.05, 0.05]], atol=1e-7)


def test_integer_labels_and_uint8_images_are_accepted():
    augmenter = augment.build_batch_augmenter(_config(), CLASSES)
    images = np.full((2, SIZE, SIZE, 3), 51, np.uint8)
    out = augmenter({"images": tf.constant(images), "labels": tf.constant([3, 1])},
                    step_seed(0, 0, 0))
    np.testing.assert_allclose(out["images"].numpy(), 0.2, atol=1e-7)
    np.testing.assert_array_equal(out["labels"].numpy(), [[0, 0, 0, 1], [0, 1, 0, 0]])


def test_enable_rate_gates_whole_batches_deterministically():
    config = _config(pixel={"brightness": 0.3}, enable_rate=0.5)
    augmenter = augment.build_batch_augmenter(config, CLASSES, jit_compile=False)
    batch = _batch(batch=2)
    gates = []
    for step in range(24):
        seed = step_seed(0, 0, step)
        out = augmenter(batch, seed)
        untouched = np.array_equal(out["images"].numpy(), batch["images"].numpy())
        gates.append(not untouched)
        assert bool(augmenter.sample(2, (SIZE, SIZE), seed)["augment"]) == (not untouched)
    assert 6 <= sum(gates) <= 18


def test_enable_rate_zero_keeps_structure_and_pads_boxes_to_the_mixed_capacity():
    config = _config(mix={"mixup_alpha": 0.2}, enable_rate=0.0)
    augmenter = augment.build_batch_augmenter(config, CLASSES)
    batch = _batch(boxes=True)
    out = augmenter(batch, step_seed(0, 0, 0))
    np.testing.assert_array_equal(out["images"].numpy(), batch["images"].numpy())
    assert out["boxes"].shape == (BATCH, 6, 4)
    assert out["box_labels"].numpy()[-1].tolist() == [1, -1, -1, -1, -1, -1]
    assert out["num_boxes"].numpy().tolist() == [2] * (BATCH - 1) + [1]


def _source_batch(size=2 * SIZE):
    """Decoded-image canvases as the reader feeds them: uint8 [B, 2S, 2S, 3], two sizes."""
    rng = np.random.default_rng(5)
    canvas = np.zeros((BATCH, 2 * SIZE, 2 * SIZE, 3), np.uint8)
    sizes = np.array([[size, size], [size - 6, size - 2]] * (BATCH // 2), np.int32)
    for index, (height, width) in enumerate(sizes):
        canvas[index, :height, :width] = rng.integers(0, 256, (height, width, 3))
    return {"source": tf.constant(canvas), "source_size": tf.constant(sizes),
            "labels": tf.one_hot(tf.range(BATCH) % CLASSES, CLASSES)}


def test_source_batch_equals_resize_then_augment_for_an_exact_flip():
    """With the resize folded into the warp, a flip of the source equals the flip of the
    resized batch; the matrix stays in the output frame."""
    config = _config(geometry={"horizontal_flip": 0.5})
    augmenter = augment.build_batch_augmenter(config, CLASSES, image_size=(SIZE, SIZE))
    batch = _source_batch()
    flip = tf.constant([[[-1.0, 0.0, SIZE], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]] * BATCH)
    out = augmenter.apply(batch, {"augment": tf.constant(True), "geometry": {"matrix": flip}})
    resized = geometry.resize_from_source(batch["source"], batch["source_size"], (SIZE, SIZE))
    assert "source" not in out and "source_size" not in out
    np.testing.assert_allclose(out["images"].numpy(), resized.numpy()[:, :, ::-1], atol=1e-6)
    np.testing.assert_array_equal(out["matrix"].numpy(), flip.numpy())


def test_source_batch_left_unaugmented_is_only_resized():
    config = _config(pixel={"brightness": 0.3}, geometry={"horizontal_flip": 0.5},
                     enable_rate=0.0)
    augmenter = augment.build_batch_augmenter(config, CLASSES, image_size=(SIZE, SIZE))
    batch = _source_batch()
    out = augmenter(batch, step_seed(0, 0, 0))
    resized = geometry.resize_from_source(batch["source"], batch["source_size"], (SIZE, SIZE))
    np.testing.assert_allclose(out["images"].numpy(), resized.numpy(), atol=1e-6)  # XLA
    assert sorted(out) == ["images", "labels", "matrix"]


def test_source_batch_base_config_xla_agrees_with_eager():
    config = dataclasses.replace(load_config().online, image_size=(SIZE, SIZE))
    eager = augment.build_batch_augmenter(config, CLASSES, jit_compile=False,
                                          image_size=(SIZE, SIZE))
    compiled = augment.build_batch_augmenter(config, CLASSES, jit_compile=True,
                                             image_size=(SIZE, SIZE))
    batch = _source_batch()
    expected, actual = eager(batch, step_seed(2, 0, 0)), compiled(batch, step_seed(2, 0, 0))
    assert expected["images"].shape == (BATCH, SIZE, SIZE, 3)
    for key in expected:
        np.testing.assert_allclose(actual[key].numpy(), expected[key].numpy(), atol=1e-5)


# Graph ops of the base config's traced augmentation of a source batch with boxes (what
# `make_dataset` traces for every setting): 1,928 before the slices were taken apart once and
# the gamma and argsort wrappers dropped, 1,202 after. Each op costs trace time and the first
# batch's graph set-up, so a regression past the margin fails here.
TRACED_OPS_BUDGET = 1250


def test_base_config_traced_augmentation_stays_within_its_op_budget():
    config = dataclasses.replace(load_config().online, image_size=(224, 224))
    augmenter = augment.build_batch_augmenter(config, 3, jit_compile=False,
                                              image_size=(224, 224))
    spec = {"source": tf.TensorSpec([None, 448, 448, 3], tf.uint8),
            "source_size": tf.TensorSpec([None, 2], tf.int32),
            "labels": tf.TensorSpec([None, 3], tf.float32),
            "boxes": tf.TensorSpec([None, 3, 4], tf.float32),
            "box_labels": tf.TensorSpec([None, 3], tf.int64),
            "num_boxes": tf.TensorSpec([None], tf.int32)}
    graph = augmenter.traced.get_concrete_function(spec, tf.TensorSpec([2], tf.int64)).graph
    ops = graph.get_operations()
    assert 1000 < len(ops) <= TRACED_OPS_BUDGET, len(ops)
    assert sum(op.type == "StridedSlice" for op in ops) <= 20


def test_source_batch_without_geometry_is_rejected():
    augmenter = augment.build_batch_augmenter(_config(pixel={"brightness": 0.3}), CLASSES,
                                              image_size=(SIZE, SIZE))
    with pytest.raises(ValueError, match="needs a geometry op with an output size"):
        augmenter(_source_batch(), step_seed(0, 0, 0))


@shared_fixture(scope="module")
def one_op_per_section():
    """(config, its XLA-compiled augmenter: the default): one op of each section keeps the
    compiles short (the base config under XLA has its own test). The direct calls of the tests
    that share it have one input signature, so it compiles them once."""
    config = _config(geometry={"rotation_degrees": 20.0}, pixel={"brightness": 0.3},
                     mix={"mixup_alpha": 0.4})
    return config, augment.build_batch_augmenter(config, CLASSES)


def test_tf_data_map_gives_the_same_batches_as_a_direct_call(one_op_per_section):
    """The XLA-compiled augmenter (the default) inside a dataset map."""
    _, augmenter = one_op_per_section
    batch = _batch()
    dataset = tf.data.Dataset.from_tensors(batch).repeat(2).enumerate().map(
        lambda step, b: augmenter(b, step_seed(9, 0, step)))
    for step, out in enumerate(dataset):
        direct = augmenter(batch, step_seed(9, 0, step))
        for key in direct:
            np.testing.assert_allclose(out[key].numpy(), direct[key].numpy(), atol=1e-6)


def test_augment_layer_passes_through_when_not_training():
    layer = augment.AugmentLayer(_config(pixel={"brightness": 0.3}), CLASSES)
    images = _batch()["images"]
    np.testing.assert_array_equal(layer(images, training=False).numpy(), images.numpy())


def test_augment_layer_with_a_seed_equals_the_augmenter(one_op_per_section):
    config, augmenter = one_op_per_section
    layer = augment.AugmentLayer(config, CLASSES)
    batch = _batch()
    seed = step_seed(2, 0, 5)
    out = layer(batch, training=True, seed=seed)
    expected = augmenter(batch, seed)
    for key in expected:
        np.testing.assert_allclose(out[key].numpy(), expected[key].numpy(), atol=1e-6)


def test_augment_layer_step_counter_advances_and_replays_after_restore():
    config = _config(pixel={"brightness": 0.3})
    layer = augment.AugmentLayer(config, CLASSES, global_seed=4)
    images = _batch()["images"]
    first = layer(images, training=True).numpy()
    second = layer(images, training=True).numpy()
    assert int(layer.step.numpy()) == 2 and not np.array_equal(first, second)
    restored = augment.AugmentLayer(config, CLASSES, global_seed=4)
    restored.step.assign(1)
    np.testing.assert_allclose(restored(images, training=True).numpy(), second, atol=1e-6)


def test_augment_layer_refuses_images_only_when_mixing():
    layer = augment.AugmentLayer(_config(mix={"mixup_alpha": 0.2}), CLASSES)
    with pytest.raises(ValueError, match="online.mix is on"):
        layer(_batch()["images"], training=True)


def test_num_classes_must_be_positive():
    with pytest.raises(ValueError, match="num_classes must be >= 1. Received: num_classes=0"):
        augment.build_batch_augmenter(_config(), 0)


@pytest.mark.parametrize("section,expected", [
    ({"geometry": {"fill_mode": "reflec"}},
     "Unknown fill_mode 'reflec'. Expected one of ('auto', 'constant', 'reflect', 'nearest', "
     "'wrap'). "
     "Received: online.geometry.fill_mode='reflec'"),
    ({"pixel": {"blurr": 1}}, "Unknown key 'online.pixel.blurr'"),
    ({"geometry": {"scale": [1.2, 0.8]}},
     "online.geometry.scale must have low <= high. Received: online.geometry.scale=[1.2, 0.8]"),
    ({"mix": {"lambda_mode": "elem"}}, "Unknown lambda_mode 'elem'"),
    ({"enable_rate": 1.5}, "Value out of range for online.enable_rate. Expected a number in "
                           "[0.0, 1.0]. Received: online.enable_rate=1.5"),
    ({"pixel": {"hue": 0.7}}, "Value out of range for online.pixel.hue"),
    ({"image_size": [16]}, "online.image_size must be an int or a pair"),
    ({"normalize": {"std": [0.2, 0.0, 0.2]}}, "online.normalize.std\\[1\\]"),
])
def test_online_config_errors_name_key_allowed_values_and_received(section, expected):
    with pytest.raises(ConfigError, match=re.escape(expected) if "\\" not in expected
                       else expected):
        config_from_dict({"online": section})


def test_image_size_int_becomes_a_square():
    assert config_from_dict({"online": {"image_size": 64}}).online.image_size == (64, 64)


def test_base_yaml_online_section_equals_the_dataclass_defaults():
    assert load_config().online == OnlineConfig()


@pytest.mark.parametrize("preset,op_names", [
    ("medical_ultrasound", ["color", "gamma", "blur", "speckle_noise"]),
    ("satellite", ["geometry", "color", "gaussian_noise", "mix"]),
    ("retail", ["geometry", "color", "jpeg", "mix"]),
])
def test_presets_load_and_build_their_domain_ops(preset, op_names):
    config = load_config(os.path.join(ROOT, "configs", f"{preset}.yaml"))
    assert augment.build_batch_augmenter(config.online, CLASSES).op_names == op_names
    assert config.output == load_config().output  # presets only override `online:`


def test_medical_preset_has_no_geometry_and_satellite_no_saturation_or_hue():
    medical = load_config(os.path.join(ROOT, "configs", "medical_ultrasound.yaml")).online
    satellite = load_config(os.path.join(ROOT, "configs", "satellite.yaml")).online
    assert medical.geometry.is_identity and medical.pixel.speckle_noise_std > 0
    assert satellite.geometry.rot90 and satellite.pixel.saturation == satellite.pixel.hue == 0


_ONLINE_MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "transforms",
                                                                      "online"))
                         if name.endswith(".py") and name != "__init__.py")
_STATEFUL = re.compile(r"tf\.random\.(uniform|normal|gamma|shuffle|set_seed)\(|"
                       r"tf\.image\.random_|np\.random\.(?!default_rng)\w+\(|"
                       r"random\.(random|randint|choice|seed)\(")


@pytest.mark.parametrize("module", _ONLINE_MODULES)
def test_online_modules_use_no_stateful_rng(module):
    with open(os.path.join(ROOT, "transforms", "online", f"{module}.py"),
              encoding="utf-8") as handle:
        source = handle.read()
    assert _STATEFUL.findall(source) == []


def test_augment_layer_runs_inside_model_fit_and_counts_its_steps():
    config = _config(geometry={"rotation_degrees": 20.0}, pixel={"brightness": 0.3})
    layer = augment.AugmentLayer(config, CLASSES, global_seed=1)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), layer, keras.layers.Flatten(),
                              keras.layers.Dense(CLASSES, activation="softmax")])
    model.compile("adam", "categorical_crossentropy")
    rng = np.random.default_rng(0)
    images = rng.random((16, SIZE, SIZE, 3)).astype(np.float32)
    labels = np.eye(CLASSES, dtype=np.float32)[np.arange(16) % CLASSES]
    history = model.fit(images, labels, batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert int(layer.step.numpy()) == 4  # 2 epochs x 2 batches, one seed each
