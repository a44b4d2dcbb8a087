"""`transforms.json_text`: `pretty` writes what `json.dumps(indent=2, sort_keys=True,
allow_nan=False)` writes, with its errors; `loads` is `json.loads` with the collector paused."""
from __future__ import annotations

import gc
import json

import pytest

from transforms import json_text

VALUES = [
    0, -3, 2**70, 0.1, -0.0, 1e-7, 1e300, 12345.678, True, False, None, "", "plain",
    "quote \" backslash \\ slash / tab \t newline \n nul \x00", "é ü 漢字 😀 \u2028",
    [], {}, (), [[]], [{}], {"a": {}}, {"a": []}, [1, "two", 3.0, None, True],
    (1, (2, (3,))), {"b": 1, "a": 2, "c": {"z": [1, {"y": []}], "x": "é"}},
    {1: "int", -4: "negative"}, {2.5: "float", 0.5: "half"}, {True: "true", False: "false"},
    {None: "null"},
    {"classes": [{"name": f"class_{i:05d}", "id": i, "count": i % 3, "weight": 1.0 / (i + 1)}
                 for i in range(50)],
     "by_split": {"train": {"class_00001": 2, "class_00000": 1}, "test": {}},
     "nested": [[1, [2, [3, [4, []]]]], {"k": ({"deep": (1, 2)},)}]},
    # lists of flat dicts, made in one piece: separators inside strings, keys out of order,
    # and the lists that must not be (an empty dict, a container inside, a non-dict item)
    [{"b": "},\n    {", "a": "}, {"}, {"c": None, "1": 2.5}, {"": ""}, {3: None, 1: 2.5}],
    {"k": [[{"z": 1}], ({"y": "x"}, {"x": "y"})]},
    [{"a": 1}, {}], [{"a": 1}, {"b": [1]}], [{"a": {"b": 1}}, {"a": 2}], [{"a": 1}, [1]],
    [{"a": 1}, 2],
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_pretty_writes_what_json_dumps_writes_indented_and_sorted(value):
    assert json_text.pretty(value) == json.dumps(value, indent=2, sort_keys=True,
                                                 allow_nan=False)


@pytest.mark.parametrize("value", [float("nan"), [1, float("inf")], {"a": {"b": -float("inf")}},
                                   {float("nan"): 1}, [[{"x": float("nan")}]]])
def test_pretty_refuses_what_is_not_strict_json(value):
    with pytest.raises(ValueError, match="not JSON compliant"):
        json_text.pretty(value)


@pytest.mark.parametrize("value", [object(), [1, {2, 3}], {"a": [b"bytes"]}, {(1, 2): "key"}])
def test_pretty_refuses_what_json_cannot_encode(value):
    with pytest.raises(TypeError):
        json.dumps(value, indent=2, sort_keys=True, allow_nan=False)
    with pytest.raises(TypeError):
        json_text.pretty(value)


def test_pretty_refuses_a_circular_structure():
    loop: list = [1]
    loop.append([loop])
    with pytest.raises(ValueError, match="Circular reference"):
        json_text.pretty(loop)


def test_loads_is_json_loads_with_the_collector_paused_and_restored():
    text = json.dumps(VALUES[-1])
    states = []
    real_loads = json.loads

    def loads(*args, **kwargs):
        states.append(gc.isenabled())
        return real_loads(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json, "loads", loads)
        assert gc.isenabled()
        assert json_text.loads(text) == real_loads(text)
        assert gc.isenabled()
        with pytest.raises(json.JSONDecodeError):
            json_text.loads("{")
        assert gc.isenabled()
        gc.disable()
        try:
            json_text.loads(text)
            assert not gc.isenabled()
        finally:
            gc.enable()
    assert states == [False, False, False]
