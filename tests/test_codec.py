"""The record codec writes the protobuf wire format itself: it must be byte for byte what
tf.train.Example's deterministic serialization gives, and its feature values what a parser
reads back."""
from __future__ import annotations

import hashlib
import math

import pytest
import tensorflow as tf

from transforms import codec
from transforms.reporting.feature_stats import record_features, summarize_features


def _proto_example(fields: dict) -> bytes:
    """The Example of `fields` built with the protobuf classes (the reference)."""
    def values(kind, items):
        return tf.train.Feature(**{kind: {"bytes_list": tf.train.BytesList,
                                          "float_list": tf.train.FloatList,
                                          "int64_list": tf.train.Int64List}[kind](value=items)})

    feature = {key: values(kind, list(items))
               for key, kind, items in codec.example_features(**fields)}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
        deterministic=True)


def _fields(**changes) -> dict:
    data = b"\xff\xd8" + bytes(range(256)) * 3
    fields = dict(encoded=data, image_format="jpeg", height=300, width=200,
                  filename="cat/a.jpg", sha256=hashlib.sha256(data).hexdigest(), label=2,
                  label_text="cat", quality={"blur": 0.1, "brightness_mean": 123.456789},
                  meta={"source": "web", "zone": ""})
    fields.update(changes)
    return fields


CASES = {
    "plain": _fields(),
    "boxes and an offset": _fields(boxes=[(0.1, 0.2, 0.3, 0.4), (0.0, 0.5, 1.0, 1.0)],
                                   box_labels=[2, 300], box_texts=["cat", "dög"],
                                   label_offset=1, orientation=6),
    "empty and large values": _fields(encoded=b"", image_format="", label_text="",
                                      filename="x" * 200, height=2 ** 40, label=-3,
                                      meta={"ß/ü": "€" * 100, "n": 7}),
    "floats beyond float32": _fields(quality={"a": 1e300, "b": -1e300, "c": float("nan"),
                                              "d": 1e-50, "e": float("inf"), "f": -0.0}),
}


# Image bytes around the size from which `serialized_parts` keeps them uncopied.
LARGE = {f"image of {size} bytes": _fields(encoded=bytes(range(256)) * (size // 256)
                                           + b"\x01" * (size % 256))
         for size in (codec.LARGE_VALUE - 1, codec.LARGE_VALUE, 3 * codec.LARGE_VALUE + 7)}


@pytest.mark.parametrize("name", sorted({**CASES, **LARGE}))
def test_parts_join_to_the_serialization_with_large_image_bytes_uncopied(name):
    fields = {**CASES, **LARGE}[name]
    parts = codec.serialized_parts(codec.example_features(**fields))
    assert b"".join(parts) == _proto_example(fields)
    if len(fields["encoded"]) >= codec.LARGE_VALUE:  # before it, itself, the keys after it
        assert len(parts) == 3 and parts[1] is fields["encoded"]
    else:
        assert len(parts) == 1


def test_large_values_are_kept_apart_only_as_a_features_one_value():
    big = b"\xab" * codec.LARGE_VALUE
    features = [("a", "bytes_list", (big, big)), ("b", "bytes_list", (big,)),
                ("c", "int64_list", (1,)), ("d", "bytes_list", (big,))]
    parts = codec.serialized_parts(features)
    assert [part is big for part in parts] == [False, True, False, True]  # a's two: joined
    reference = tf.train.Example()
    for key, _kind, values in features:
        if key == "c":
            reference.features.feature[key].int64_list.value.extend(values)
        else:
            reference.features.feature[key].bytes_list.value.extend(values)
    assert b"".join(parts) == codec.serialize_features(features) == (
        reference.SerializeToString(deterministic=True))


@pytest.mark.parametrize("name", sorted(CASES))
def test_encoded_bytes_are_the_deterministic_proto_serialization(name):
    fields = CASES[name]
    assert codec.encode_example(**fields) == _proto_example(fields)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_features_are_what_a_parser_reads_back(name):
    fields = CASES[name]

    def comparable(features):
        return [(key, kind, ["nan" if isinstance(v, float) and math.isnan(v) else v
                             for v in values]) for key, kind, values in features]

    assert comparable(summarize_features(codec.example_features(**fields))) == comparable(
        record_features(codec.encode_example(**fields)))


def test_remembered_entries_give_the_same_bytes_and_stay_bounded(monkeypatch):
    """Entries of recurring small values (a format, a size, a class, empty box lists) are made
    once and then found: every case serialized again, from them, is still the protobuf
    serialization; past the bound the remembered entries start afresh."""
    monkeypatch.setattr(codec, "_ENTRIES", {})
    for _ in range(2):
        for name in sorted(CASES):
            assert codec.encode_example(**CASES[name]) == _proto_example(CASES[name]), name
    assert ("image/format", "bytes_list", (b"jpeg",)) in codec._ENTRIES
    assert not any(kind == "float_list" for _key, kind, _values in codec._ENTRIES)
    monkeypatch.setattr(codec, "_ENTRIES", {})
    monkeypatch.setattr(codec, "_MAX_ENTRIES", 3)
    assert codec.encode_example(**CASES["plain"]) == _proto_example(CASES["plain"])
    assert 0 < len(codec._ENTRIES) <= 3


def test_values_given_as_lists_or_bytearrays_serialize_as_tuples_of_bytes_do():
    as_tuples = [("a", "bytes_list", (b"jpeg",)), ("b", "int64_list", (3,)),
                 ("c", "bytes_list", ())]
    given = [("a", "bytes_list", [bytearray(b"jpeg")]), ("b", "int64_list", [3]),
             ("c", "bytes_list", [])]
    assert codec.serialize_features(given) == codec.serialize_features(as_tuples)
