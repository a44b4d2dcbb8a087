"""Every documented value of every `online:` key builds a real `make_dataset` and yields a batch.

One table, `SETTINGS`: for each key of the online dataclasses (`configs/online.py`), the values
its documentation names (every choice of a closed set, both booleans, 0 where 0 switches an op
off, a value that switches it on, range ends) and the companions a value needs to matter (a
crop area needs a crop). Tests check that the table covers every dataclass field and every
choice of the closed sets, and that `configs/base.yaml` documents the same choices; so a new
key or choice cannot be documented without being built here. Each case reads one shared
synthetic snapshot (with boxes, read with and without them where boxes matter) with only its
section's ops on, uncompiled, unshuffled, in batches whose size is unknown to the graph (the
last partial batch's case), and its id names the key and value. The quick tier builds the
closed sets' choices, the switches and the presets; the slow tier adds every magnitude
(`_cases`).
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import glob
import os
import re

import numpy as np
import pytest
import yaml

from configs import online as online_schema
from configs.schema import config_from_dict, default_config_path, load_config
from configs.yaml_files import read_yaml
from pipelines import training_input
from tests.fake_snapshot import write_synthetic_snapshot

SECTIONS = {"": online_schema.OnlineConfig, "geometry": online_schema.GeometryConfig,
            "pixel": online_schema.PixelConfig, "mix": online_schema.MixConfig,
            "normalize": online_schema.NormalizeConfig}
CHOICES = {"geometry.fill_mode": online_schema.FILL_MODES,
           "geometry.interpolation": online_schema.INTERPOLATIONS,
           "mix.lambda_mode": online_schema.LAMBDA_MODES,
           "normalize.mode": online_schema.NORMALIZE_MODES}
BOOL = (True, False)
CONSTANT = {"geometry.fill_mode": "constant"}
CROP, ELASTIC = {"geometry.crop_probability": 1.0}, {"geometry.elastic_alpha": 4.0}
FIXED = {"normalize.mode": "fixed"}

# key (relative to `online`) -> (documented values, companion settings the values need)
SETTINGS = {
    "image_size": ((16, (12, 20)), {}),
    "seed": ((0, -7), {}),
    "enable_rate": ((0.0, 0.5, 1.0), {}),
    "label_smoothing": ((0.0, 0.1), {}),
    "geometry.enabled": (BOOL, {}),
    "geometry.horizontal_flip": ((0.0, 1.0), {}),
    "geometry.vertical_flip": ((0.0, 1.0), {}),
    "geometry.rot90": (BOOL, {}),
    "geometry.rotation_degrees": ((0.0, 180.0), {}),
    "geometry.scale": (((1.0, 1.0), (0.5, 2.0)), {}),
    "geometry.translate": ((0.0, 0.5), {}),
    "geometry.shear_degrees": ((0.0, 30.0), {}),
    "geometry.crop_probability": ((0.0, 1.0), {}),
    "geometry.crop_area": (((0.2, 0.5),), CROP),
    "geometry.crop_aspect_ratio": (((0.5, 2.0),), CROP),
    "geometry.interpolation": (CHOICES["geometry.interpolation"], {}),
    "geometry.fill_mode": (CHOICES["geometry.fill_mode"], {}),
    "geometry.fill_value": ((0.0, 1.0), CONSTANT),
    "geometry.min_box_area": ((0.0, 1.0), {}),
    "geometry.elastic_alpha": ((0.0, 4.0), {}),
    "geometry.elastic_grid": ((2, 8), ELASTIC),
    "pixel.enabled": (BOOL, {}),
    "pixel.brightness": ((0.0, 1.0), {}),
    "pixel.contrast": ((0.0, 1.0), {}),
    "pixel.saturation": ((0.0, 1.0), {}),
    "pixel.hue": ((0.0, 0.5), {}),
    "pixel.gamma": (((1.0, 1.0), (0.5, 2.0)), {}),
    "pixel.grayscale_probability": ((0.0, 1.0), {}),
    "pixel.blur_probability": ((0.0, 1.0), {}),
    "pixel.blur_sigma": (((0.5, 3.0),), {"pixel.blur_probability": 1.0}),
    "pixel.jpeg_probability": ((0.0, 1.0), {}),
    "pixel.jpeg_quality": (((1, 100),), {"pixel.jpeg_probability": 1.0}),
    "pixel.gaussian_noise_std": ((0.0, 0.2), {}),
    "pixel.speckle_noise_std": ((0.0, 0.2), {}),
    "mix.enabled": (BOOL, {}),
    "mix.probability": ((0.0, 0.5, 1.0), {}),
    "mix.mixup_alpha": ((0.0, 0.2), {}),
    "mix.cutmix_alpha": ((0.0, 1.0), {}),
    "mix.switch_probability": ((0.0, 1.0), {}),
    "mix.lambda_mode": (CHOICES["mix.lambda_mode"], {}),
    "normalize.mode": (CHOICES["normalize.mode"], {}),
    "normalize.mean": (((0.5, 0.5, 0.5),), FIXED),
    "normalize.std": (((0.25, 0.25, 0.25),), FIXED),
}
# Every case reads boxes (their path runs every op's image code too); where boxes change what
# a setting does to the images, it is also read without them.
BOXES_MATTER = ("geometry.fill_mode",)
# Only the case's own section runs (the rest off), so each case traces little.
ONLY = {"geometry": ("pixel", "mix"), "pixel": ("geometry", "mix"), "mix": ("geometry", "pixel"),
        "normalize": ("geometry", "pixel", "mix"), "": ("pixel",)}


def _fields() -> set[str]:
    """Every key of the online dataclasses, dotted below `online` (sections excluded)."""
    return {f"{section}.{field.name}" if section else field.name
            for section, schema in SECTIONS.items() for field in dataclasses.fields(schema)
            if not (section == "" and field.name in SECTIONS)}


def _online(data: dict, key: str, value) -> None:
    *sections, name = key.split(".")
    node = data["online"]
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = list(value) if isinstance(value, tuple) else value


@functools.cache
def _base_yaml() -> dict:
    """base.yaml as a mapping, parsed once: every case (~90, in every test process at
    collection) starts from a copy, instead of parsing it again (~30 ms each)."""
    return read_yaml(default_config_path())


def _config(key: str, value, companions: dict):
    """base.yaml with only the key's section on, its companions and the value, validated as a
    user's YAML is."""
    data = copy.deepcopy(_base_yaml())
    for off in ONLY[key.split(".")[0] if "." in key else ""]:
        data["online"][off]["enabled"] = False
    for other, other_value in {**companions, key: value}.items():
        _online(data, other, other_value)
    return config_from_dict(data)


def _cases():
    """One case per key, value and box mode. The quick tier builds every choice of the closed
    sets and both values of every switch (where a branch is picked); `make test` every value
    (magnitudes too). A config equal to an earlier case's is read once (`_READ`)."""
    for key, (values, companions) in SETTINGS.items():
        marks = [] if key in CHOICES or values == BOOL else [pytest.mark.slow]
        for value in values:
            boxes = (True, False) if key.startswith(BOXES_MATTER) else (True,)
            for with_boxes in boxes:
                yield pytest.param(_config(key, value, companions), with_boxes, marks=marks,
                                   id=f"{key}={value!r}" + ("" if with_boxes else "-no_boxes"))


_READ: set = set()  # (online config, with boxes) read and checked by an earlier case


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    """One snapshot for every case: 8 train images of 24 px with 1-3 boxes each."""
    root = str(tmp_path_factory.mktemp("settings"))
    write_synthetic_snapshot(root, counts={"train": 8}, image_size=24, num_classes=3,
                             num_shards=2, max_boxes=3, seed=6)
    return root


def _first_batch(root: str, config, with_boxes: bool):
    """The first batch, read in file order: no online setting acts on the record order, and
    the block shuffle's functions were ~7% of a case's time (tests/test_reader_sharding.py
    reads shuffled)."""
    dataset = training_input.make_dataset(
        root, batch_size=3, config=config, seed=1, with_boxes=with_boxes, max_boxes=3,
        drop_remainder=False, jit_compile=False, shuffle=False)
    return next(iter(dataset))


def _check(batch, config, with_boxes: bool) -> None:
    images, labels = (batch["images"], batch["labels"]) if with_boxes else batch
    height, width = config.online.image_size
    assert images.shape == (3, height, width, 3) and images.dtype.name == "float32"
    assert np.isfinite(images.numpy()).all()
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, atol=1e-5)
    if with_boxes:
        boxes, count = batch["boxes"].numpy(), batch["num_boxes"].numpy()
        assert ((boxes >= 0.0) & (boxes <= 1.0)).all()
        assert (count <= boxes.shape[1]).all()
        assert batch["matrix"].shape == (3, 3, 3)


@pytest.mark.parametrize("config,with_boxes", list(_cases()))
def test_every_documented_value_builds_and_reads(snapshot, config, with_boxes):
    # A value equal to the default of its section gives a config an earlier case read already.
    if (config.online, with_boxes) not in _READ:
        _check(_first_batch(snapshot, config, with_boxes), config, with_boxes)
        _READ.add((config.online, with_boxes))


@pytest.mark.parametrize("preset", sorted(glob.glob(os.path.join(
    os.path.dirname(default_config_path()), "*.yaml"))), ids=os.path.basename)
def test_every_preset_builds_and_reads_with_boxes(snapshot, preset):
    config = load_config(preset, overrides=["online.image_size=16"])
    _check(_first_batch(snapshot, config, True), config, True)


def test_the_table_covers_every_online_key():
    assert set(SETTINGS) == _fields()


def test_the_table_covers_every_choice_of_the_closed_sets():
    for key, choices in CHOICES.items():
        assert set(SETTINGS[key][0]) == set(choices), key


def test_base_yaml_documents_the_same_choices():
    """The comment of a closed-set key in base.yaml lists its choices (`a | b | c`)."""
    with open(default_config_path()) as handle:
        text = handle.read()
    for key, choices in CHOICES.items():
        name = key.split(".")[-1]
        (comment,) = re.findall(rf"^\s+{name}: \S+\s+# (.*)$", text, flags=re.MULTILINE)
        documented = tuple(part.split()[0].strip(";,") for part in comment.split("|"))
        assert documented == choices, key
    online = yaml.safe_load(text)["online"]
    documented_keys = {f"{section}.{key}" if isinstance(body, dict) else section
                       for section, body in online.items()
                       for key in (body if isinstance(body, dict) else [None])}
    assert documented_keys == _fields()
