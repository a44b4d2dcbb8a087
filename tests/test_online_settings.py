"""Every documented value of every `online:` key builds a real `make_dataset` and yields a batch.

One table, `SETTINGS`: for each key of the online dataclasses (`configs/online.py`), the values
its documentation names (every choice of a closed set, both booleans, 0 where 0 switches an op
off, a value that switches it on, range ends) and the companions a value needs to matter (a
crop area needs a crop). Tests check that the table covers every dataclass field and every
choice of the closed sets, and that `configs/base.yaml` documents the same choices; so a new
key or choice cannot be documented without being built here.

The values are read in packs (`_packs`): one config sets many keys at once, so 91 values cost
15 traced pipelines instead of 79 (each costs ~0.5-1 s of tracing and function instantiation,
little of it for what it holds). A pack never holds two values of one key (companions included)
nor a value with one it makes moot (`MASKS`: a section switched off, no image mixed, no warp
left to expose the padding), so every value's ops are built and run as when it was read alone;
the top-level keys pack apart (`enable_rate` gates every section). A failing pack reads its
values one by one and names those that fail on their own. Each pack reads one shared synthetic
snapshot (with boxes, and without them where boxes matter) with only its values' sections on,
uncompiled, unshuffled, in batches whose size is unknown to the graph (the last partial batch's
case). The quick tier reads the packs that hold a closed set's choice or a switch (they take
magnitudes along); the slow tier the packs of magnitudes alone.
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
# The sections a pack can switch off: only those its values are in run, so it traces little.
SWITCHED = ("geometry", "pixel", "mix")
# A value (key, value) -> what it makes moot in a pack: a key (any value of it) or one
# (key, value). Checked both ways round.
SECTION_KEYS = {section: tuple(f"{section}.{field.name}" for field in dataclasses.fields(schema))
                for section, schema in SECTIONS.items() if section}
WARPS_OFF = (("geometry.rotation_degrees", 0.0), ("geometry.translate", 0.0),
             ("geometry.scale", (1.0, 1.0)))  # together: no padding for fill_mode to fill
MASKS = {
    ("geometry.enabled", False): SECTION_KEYS["geometry"],
    ("pixel.enabled", False): SECTION_KEYS["pixel"],
    ("mix.enabled", False): SECTION_KEYS["mix"],
    ("mix.probability", 0.0): SECTION_KEYS["mix"],
    ("mix.mixup_alpha", 0.0): ("mix.switch_probability", ("mix.cutmix_alpha", 0.0)),
    ("mix.cutmix_alpha", 0.0): ("mix.switch_probability",),
    ("enable_rate", 0.0): ("seed",),  # no batch augmented: no seed drawn
    **{warp: WARPS_OFF for warp in WARPS_OFF},
}


def _fields() -> set[str]:
    """Every key of the online dataclasses, dotted below `online` (sections excluded)."""
    top = {field.name for field in dataclasses.fields(SECTIONS[""])} - set(SECTIONS)
    return top.union(*SECTION_KEYS.values())


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


def _config(sections: set, settings: dict):
    """base.yaml with the settings (dotted keys below `online`), validated as a user's YAML is.
    Of the switched sections only those in `sections` run; the top-level keys' values (section
    "") run with geometry and mix, as a user's defaults do."""
    data = copy.deepcopy(_base_yaml())
    for off in ("pixel",) if sections == {""} else set(SWITCHED) - sections:
        data["online"][off]["enabled"] = False
    for key, value in settings.items():
        _online(data, key, value)
    return config_from_dict(data)


@dataclasses.dataclass(frozen=True)
class Value:
    """One documented value of one key, with the companions it needs and its box mode."""
    key: str
    value: object
    companions: tuple
    with_boxes: bool
    quick: bool  # a closed set's choice or a switch: read by the quick tier too

    @property
    def settings(self) -> dict:
        return {**dict(self.companions), self.key: self.value}

    @property
    def section(self) -> str:
        return self.key.split(".")[0] if "." in self.key else ""

    @property
    def group(self) -> str:
        """The top-level keys pack apart (`enable_rate` gates every section); the sections'
        keys pack together (no section's value moots another section's)."""
        return "online" if self.section == "" else "sections"

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}" + ("" if self.with_boxes else "-no_boxes")


def _values() -> list[Value]:
    """Every key's documented values (the values where boxes matter twice), key by key in table
    order; the n-th key's values turned by n, so that a pack (first fit) mixes the values that
    switch ops off with those that switch them on, as the defaults do, rather than holding all
    the zeros of a section."""
    return [Value(key, value, tuple(companions.items()), with_boxes,
                  key in CHOICES or values == BOOL)
            for turn, (key, (values, companions)) in enumerate(SETTINGS.items())
            for value in values[turn % len(values):] + values[:turn % len(values)]
            for with_boxes in ((True, False) if key.startswith(BOXES_MATTER) else (True,))]


def _moots(first: Value, second: Value) -> bool:
    """True when `first`'s value leaves `second`'s without an effect (`MASKS`)."""
    masked = MASKS.get((first.key, first.value), ())
    return any(key in masked or (key, value) in masked for key, value in second.settings.items())


def _settings(pack: list[Value]) -> dict:
    """The pack's keys and companions, dotted below `online`."""
    return {key: value for member in pack for key, value in member.settings.items()}


def _fits(candidate: Value, pack: list[Value]) -> bool:
    """True when the candidate sets no key of the pack otherwise and moots no member (nor is
    mooted by one)."""
    settings = _settings(pack)
    return (all(settings.get(key, value) == value for key, value in candidate.settings.items())
            and not any(_moots(candidate, member) or _moots(member, candidate)
                        for member in pack))


def _packs() -> list[list[Value]]:
    """The values packed first fit, per group and box mode: the quick tier's values first, so
    that every pack holding one of them is a quick pack and the magnitudes fill them."""
    packs: list[list[Value]] = []
    values = _values()
    for value in [v for v in values if v.quick] + [v for v in values if not v.quick]:
        pack = next((pack for pack in packs if pack[0].group == value.group
                     and pack[0].with_boxes == value.with_boxes and _fits(value, pack)), None)
        if pack is None:
            packs.append([value])
        else:
            pack.append(value)
    return packs


def _pack_config(pack: list[Value]):
    return _config({member.section for member in pack}, _settings(pack))


def _pack_params():
    for pack in _packs():
        yield pytest.param(pack, marks=[] if any(member.quick for member in pack)
                           else [pytest.mark.slow], id=",".join(map(str, pack)))


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


@pytest.mark.parametrize("pack", list(_pack_params()))
def test_every_documented_value_builds_and_reads(snapshot, pack):
    config, with_boxes = _pack_config(pack), pack[0].with_boxes
    try:
        _check(_first_batch(snapshot, config, with_boxes), config, with_boxes)
    except Exception as error:
        alone = []
        for member in pack:
            single = _config({member.section}, member.settings)
            try:
                _check(_first_batch(snapshot, single, with_boxes), single, with_boxes)
            except Exception:  # each value's own failure is what is reported
                alone.append(str(member))
        reason = (f"read alone, these fail too: {alone}" if alone
                  else "read alone, each value builds and reads: their combination fails")
        raise AssertionError(f"the pack failed; {reason}") from error


def test_every_value_is_in_one_pack_and_no_pack_moots_its_own():
    packs = _packs()
    assert sorted(map(str, _values())) == sorted(str(member) for pack in packs
                                                 for member in pack)
    for pack in packs:
        assert len({member.group for member in pack}) == 1
        assert len({member.with_boxes for member in pack}) == 1
        for index, member in enumerate(pack):
            assert _fits(member, pack[:index] + pack[index + 1:]), (member, pack)
        online = _pack_config(pack).online
        for member in pack:  # each value as the pack reads it: as given, or as read alone
            for key, value in member.settings.items():
                path = key.split(".")
                read = functools.reduce(getattr, path, online)
                assert read == value or read == functools.reduce(
                    getattr, path, _config({member.section}, member.settings).online), key


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
