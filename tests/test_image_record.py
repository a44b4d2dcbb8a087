"""ImageRecord's pickled form: what Beam's fallback coder writes at every shuffle."""
from __future__ import annotations

import dataclasses
import pickle

import pytest
from apache_beam.internal import pickler

from transforms.offline import quality_rules
from transforms.offline.image_record import ImageRecord

NAMES = tuple(sorted(quality_rules.metric_names()))


def _inspected(**changes) -> ImageRecord:
    values = dict(uri="/data/cat/img_000123.jpg", path="cat/img_000123.jpg", file_bytes=123456,
                  mtime=1.7e9, label_key="cat", sha256="ab" * 32, format="jpeg", width=640,
                  height=480, phash="0123456789abcdef", label="cat", label_id=0, split="train",
                  metrics=tuple((name, 0.25 * i) for i, name in enumerate(NAMES)),
                  moments=(0.1,) * 6, boxes=((0.1, 0.2, 0.3, 0.4, "cat"),),
                  meta=(("source", "cam1"),))
    values.update(changes)
    return ImageRecord(**values)


def test_a_record_with_the_contract_metrics_round_trips_without_their_names():
    record = _inspected()
    data = pickle.dumps(record)
    assert pickle.loads(data) == record
    assert pickler.loads(pickler.dumps(record)) == record
    assert b"brightness_p01" not in data and b"blur_fine_share" not in data


def test_other_metrics_round_trip_with_their_names():
    for metrics in ((), (("blur_fine_share", 0.5),), tuple((n, 1.0) for n in reversed(NAMES)),
                    (("custom", 2.0),)):
        record = _inspected(metrics=metrics)
        assert pickle.loads(pickle.dumps(record)) == record


def test_a_rejected_record_round_trips():
    record = _inspected().rejected("blurry", "blur_fine_share 0.01 < 0.05")
    assert pickle.loads(pickle.dumps(record)) == record


def test_the_names_were_a_quarter_of_a_typical_record():
    record = _inspected()
    named = pickle.dumps((ImageRecord, tuple(getattr(record, name) for name in
                                             ImageRecord.__dataclass_fields__)))
    assert len(pickle.dumps(record)) < 0.8 * len(named)


def test_an_unpickled_record_is_a_whole_frozen_record():
    for record in (_inspected(), _inspected(metrics=())):
        loaded = pickle.loads(pickle.dumps(record))
        assert loaded == record and hash(loaded) == hash(record)
        assert dataclasses.replace(loaded, split="test") == dataclasses.replace(record,
                                                                                split="test")
        with pytest.raises(dataclasses.FrozenInstanceError):
            loaded.split = "test"


def test_replace_is_dataclasses_replace():
    record = _inspected()
    assert record.replace(split="test", label_id=3) == dataclasses.replace(
        record, split="test", label_id=3)
    assert record.split == "train"
    with pytest.raises(TypeError, match="splt"):
        record.replace(splt="test")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.replace(split="test").split = "train"
