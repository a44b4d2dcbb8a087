"""Config loading and validation: non-finite numbers, `extends:` chains, strict JSON outputs."""
import dataclasses
import json
import math
import os
import re
import typing

import pytest

from configs import checks, yaml_files
from configs.online import OnlineConfig
from configs.schema import (
    Config,
    ConfigError,
    QualityConfig,
    config_from_dict,
    config_to_dict,
    load_config,
)
from transforms.offline import quality_rules


def _float_keys(cls=Config, prefix=""):
    """Dotted keys of every scalar float field of the config, nested sections included."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(annotation):
            yield from _float_keys(annotation, key + ".")
        elif float in (typing.get_args(annotation) or (annotation,)):
            yield key


# Pair and triple fields: a NaN inside them must fail the same way.
_SEQUENCE_KEYS = {
    "online.geometry.scale": [math.nan, 1.0],
    "online.geometry.crop_area": [0.5, math.nan],
    "online.pixel.gamma": [math.nan, 1.0],
    "online.pixel.jpeg_quality": [40, math.inf],
    "online.normalize.mean": [0.5, math.nan, 0.5],
    "online.normalize.std": [0.2, 0.2, math.inf],
}


def _nested(key: str, value) -> dict:
    data: dict = {}
    node = data
    *sections, name = key.split(".")
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = value
    return data


def test_every_float_key_is_found():
    keys = set(_float_keys())
    assert {"split.train", "quality.blur_fine_min", "decode.timeout_s",
            "online.geometry.rotation_degrees"} <= keys


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", sorted(_float_keys()))
def test_a_non_finite_number_is_a_config_error_naming_key_range_and_value(key, value):
    with pytest.raises(ConfigError) as info:
        config_from_dict(_nested(key, value))
    message = str(info.value)
    assert f"Received: {key}={value!r}" in message, message
    assert re.search(r"Expected a (finite )?number in [\[(]", message), message


@pytest.mark.parametrize("key", sorted(_SEQUENCE_KEYS))
def test_a_non_finite_number_inside_a_range_is_a_config_error(key):
    with pytest.raises(ConfigError, match=re.escape(key) + r"\[\d\]"):
        config_from_dict(_nested(key, _SEQUENCE_KEYS[key]))


def test_nan_split_from_the_command_line_is_refused():
    # YAML's .nan used to pass every range check and send 8 of 10 images to `test`.
    with pytest.raises(ConfigError, match=re.escape(
            "Value out of range for split.train. Expected a finite number in [0.0, 1.0]. "
            "Received: split.train=nan")):
        load_config(overrides=["split.train=.nan"])


def test_nan_quality_threshold_does_not_switch_the_rule_off():
    with pytest.raises(ConfigError,
                       match=r"quality\.blur_fine_min.*Received: quality\.blur_fine_min=nan"):
        load_config(overrides=["quality.blur_fine_min=.nan"])


def test_infinite_decode_timeout_is_refused():
    # An infinite timeout made every image decoder_crash.
    with pytest.raises(ConfigError, match=re.escape(
            "Expected a finite number in (0.0, inf]. Received: decode.timeout_s=inf")):
        load_config(overrides=["decode.timeout_s=.inf"])


def test_check_range_accepts_big_ints_and_finite_bounds():
    assert checks.check_range("k", 2 ** 63 - 1, -(2 ** 63), 2 ** 63 - 1) is None  # no error
    assert checks.check_range("k", 0.5, 0.0, 1.0) is None
    assert checks.check_range("k", 0.0, 0.0, 1.0) is None  # both bounds are inclusive
    assert checks.check_range("k", 1.0, 0.0, 1.0) is None
    with pytest.raises(ConfigError, match=re.escape(f"Received: k={2 ** 63}")):
        checks.check_range("k", 2 ** 63, -(2 ** 63), 2 ** 63 - 1)  # one past the bound
    with pytest.raises(ConfigError, match=re.escape("in (0.0, 1.0]. Received: k=0.0")):
        checks.check_range("k", 0.0, 0.0, 1.0, low_open=True)


def test_quality_threshold_fields_are_the_rule_table():
    """QualityConfig declares one field per quality rule, in verdict order, with the rule's
    default: the explicit fields and `quality_rules.RULES` stay equal."""
    fields = {field.name: field.default for field in dataclasses.fields(QualityConfig)}
    assert list(fields)[:2] == ["enabled", "analysis_size"]
    assert dict(list(fields.items())[2:]) == quality_rules.threshold_defaults()
    assert list(fields)[2:] == [rule.config_key for rule in quality_rules.RULES]


def test_config_to_dict_is_strict_json():
    text = json.dumps(config_to_dict(load_config()), allow_nan=False)
    assert json.loads(text)["online"]["image_size"] == [224, 224]


def _write(path, text: str | bytes) -> str:
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(path, mode) as handle:
        handle.write(text)
    return str(path)


def test_extends_loop_is_a_config_error_naming_the_chain(tmp_path):
    first = _write(tmp_path / "a.yaml", "extends: b.yaml\nsplit: {train: 0.8}\n")
    _write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"extends loop: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        load_config(first)


def test_a_config_extending_itself_is_a_loop(tmp_path):
    path = _write(tmp_path / "self.yaml", "extends: ./self.yaml\n")
    with pytest.raises(ConfigError, match="extends loop"):
        load_config(path)


def test_extends_chain_of_presets_still_merges(tmp_path):
    _write(tmp_path / "mid.yaml", f"extends: {os.path.abspath('configs/base.yaml')}\n"
                                  "quality: {blur_fine_min: 0.2}\n")
    child = _write(tmp_path / "child.yaml", "extends: mid.yaml\ndedup: {max_hamming: 2}\n")
    config = load_config(child)
    assert config.quality.blur_fine_min == 0.2 and config.dedup.max_hamming == 2
    assert config.online == OnlineConfig()


def test_a_config_edited_between_loads_is_read_anew_and_a_loaded_one_is_the_callers(tmp_path):
    """Parses are remembered by the file's text (`yaml_files._parsed`): the same-size edit of a
    file gives its new values, and what one load returns is a copy nobody else sees."""
    path = _write(tmp_path / "a.yaml", f"extends: {os.path.abspath('configs/base.yaml')}\n"
                                       "dedup: {max_hamming: 2}\n")
    first = yaml_files.read_yaml(path)
    assert first["dedup"]["max_hamming"] == 2
    first["dedup"]["max_hamming"] = 9
    first["quality"].clear()
    again = yaml_files.read_yaml(path)
    assert again["dedup"]["max_hamming"] == 2 and again["quality"]
    assert again == yaml_files.read_yaml(path) and again is not yaml_files.read_yaml(path)
    _write(path, open(path).read().replace("max_hamming: 2", "max_hamming: 3"))
    assert load_config(path).dedup.max_hamming == 3


@pytest.mark.parametrize("content", [
    "root:x:0:0:SECRET-LINE:/root:/bin/bash\ndaemon:x:1:1:SECRET-LINE:/usr/sbin\n",  # a scalar
    "SECRET-LINE: [unclosed\n  - SECRET-LINE\n",                                   # bad YAML
    "- SECRET-LINE\n- SECRET-LINE\n",                                               # a list
    b"\x89PNG\r\n\x1a\nSECRET-LINE\xff\xfe",                                         # binary
], ids=["passwd-like", "invalid-yaml", "list", "binary"])
def test_extends_to_a_non_yaml_file_does_not_echo_its_contents(tmp_path, content):
    target = _write(tmp_path / "not_a_config", content)
    child = _write(tmp_path / "child.yaml", f"extends: {target}\n")
    with pytest.raises(ConfigError) as info:
        load_config(child)
    message = str(info.value)
    assert "SECRET" not in message, message
    assert "not_a_config" in message, message


def test_extends_to_a_missing_file_names_it(tmp_path):
    child = _write(tmp_path / "child.yaml", "extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"Cannot read config file .*nowhere\.yaml"):
        load_config(child)


@pytest.mark.parametrize("value", ["[a.yaml, b.yaml]", "''", "3"])
def test_extends_must_name_one_file(tmp_path, value):
    child = _write(tmp_path / "child.yaml", f"extends: {value}\n")
    with pytest.raises(ConfigError, match=r"extends in .*child\.yaml must name one YAML file"):
        load_config(child)


def test_an_oversized_config_file_is_refused_without_reading_it_all(tmp_path):
    big = _write(tmp_path / "big.yaml", "# " + "x" * (yaml_files.MAX_CONFIG_BYTES + 10) + "\n")
    with pytest.raises(ConfigError, match="is larger than"):
        load_config(big)



def test_an_override_that_is_not_yaml_is_a_config_error():
    with pytest.raises(ConfigError, match=r"Override value is not valid YAML\. Received: "
                                          r"'quality\.blur_fine_min=\['"):
        load_config(overrides=["quality.blur_fine_min=["])
